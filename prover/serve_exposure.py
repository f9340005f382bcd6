"""Whether ``prover serve`` may listen where it was asked to: an SGLang server takes weight updates from
whoever can reach it, so one on an address beyond this machine without ``PROVER_SGLANG_API_KEY`` lets anyone
on that network replace the policy's weights. That is refused unless the user names the risk with
``--insecure-allow-anyone-to-replace-weights``."""

from __future__ import annotations

import ipaddress
import socket
import sys

from prover.errors import ConfigError

RISK_FLAG = "--insecure-allow-anyone-to-replace-weights"


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
    """Refuse (ConfigError) servers on a non-loopback ``host`` without a key, unless ``risk_taken``; then
    say on stderr what the user accepted."""
    if key or is_loopback(host):
        return
    what = (f"--host {host} without {env_name}: anyone who can reach {host} could replace the policy's weights "
            "(SGLang takes weight updates from any client)")
    if not risk_taken:
        raise ConfigError(f"{what}; export {env_name}=<a secret> (the engine sends it), use --host 127.0.0.1, "
                          f"or accept the risk with {RISK_FLAG}")
    print(f"prover serve: warning: {what}; {RISK_FLAG} was given", file=sys.stderr)
