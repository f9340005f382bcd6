"""What ``prover serve`` checks before it starts a server.

- Where it may listen: an SGLang server takes weight updates from whoever can reach it, so one on an address
  beyond this machine without ``PROVER_SGLANG_API_KEY`` lets anyone on that network replace the policy's
  weights. That is refused unless the user names the risk with ``--insecure-allow-anyone-to-replace-weights``,
  and so is a key there of fewer than 16 characters (spaces aside), which anyone could find by trying.
- Whether SGLang can lay out the folder's layers (``check_layer_layout``).
"""

from __future__ import annotations

import ipaddress
import json
import socket
import sys
from pathlib import Path

from prover.errors import ConfigError

RISK_FLAG = "--insecure-allow-anyone-to-replace-weights"
MIN_KEY_CHARS = 16  # an open server's key: one of a few characters is found by trying them all
MAKE_KEY = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is this machine's loopback (127.0.0.0/8, ::1); 0.0.0.0 and ::
    (every interface) are not, and neither is a name that does not resolve."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)


def check_exposure(host: str, key: str | None, env_name: str, risk_taken: bool) -> None:
    """Refuse (ConfigError) servers on a non-loopback ``host`` without a key, unless ``risk_taken``, or with
    a key anyone could guess (``MIN_KEY_CHARS``); then say on stderr what the user accepted."""
    if is_loopback(host):
        return
    if key and len(key.strip()) < MIN_KEY_CHARS:
        raise ConfigError(f"--host {host}: {env_name} must hold at least {MIN_KEY_CHARS} characters other than "
                          f"spaces, or anyone who can reach {host} could guess it and replace the policy's weights; "
                          f"make one with: export {env_name}=$({MAKE_KEY})")
    if key:
        return
    what = (f"--host {host} without {env_name}: anyone who can reach {host} could replace the policy's weights "
            "(SGLang takes weight updates from any client)")
    if not risk_taken:
        raise ConfigError(f"{what}; export {env_name}=<a secret> (the engine sends it), use --host 127.0.0.1, "
                          f"or accept the risk with {RISK_FLAG}")
    print(f"prover serve: warning: {what}; {RISK_FLAG} was given", file=sys.stderr)


def check_layer_layout(config_json: Path, flag: str) -> None:
    """A Qwen3.5 text model needs ``full_attention_interval`` in its config.json: SGLang 0.5.23 lays out its
    layers by it alone (its own Qwen3_5TextConfig, srt/configs/qwen3_next.py:260-269), while transformers 5
    saves ``layer_types`` only, so a folder prover wrote lacks it and the server would fail to start."""
    try:
        cfg = json.loads(config_json.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{flag}: {config_json} is not readable JSON ({exc})") from exc
    if not isinstance(cfg, dict) or cfg.get("model_type") != "qwen3_5_text" or "full_attention_interval" in cfg:
        return
    kinds = cfg.get("layer_types") or []
    full = [i for i, k in enumerate(kinds) if k == "full_attention"]
    every = full[0] + 1 if full else None
    if every and kinds == ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(len(kinds))]:
        fix = f'add "full_attention_interval": {every} to it (what its layer_types say)'
    else:
        fix = "SGLang 0.5.23 serves only layouts with a full-attention layer every N layers"
    raise ConfigError(f"{flag}: {config_json} has no full_attention_interval, by which SGLang lays out a Qwen3.5 "
                      f"model's layers; {fix}")
