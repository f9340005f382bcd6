"""What a run's numbers depend on besides its config: prover's version and commit, Python, every installed
package's version, the CPU's model and the instruction sets its kernels pick from, torch's threads, the GPUs.
A run folder keeps it as ``environment.json`` beside ``config.yaml``; ``prover env`` prints it and
``prover view`` shows it. A ground-floor room: it imports nothing of prover's but ``files``."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from prover.system.files import write_atomic

ENVIRONMENT_FILE = "environment.json"
DISTRIBUTION = "prover-rl"  # prover's name on PyPI (the import name `prover` is another project's there)
# the /proc/cpuinfo flags that decide which matmul kernels torch runs (AMX and AVX512-BF16 for bf16 above all),
# and so the last digits of a CPU run's numbers
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
GIT_TIMEOUT_S = 5


def prover_version() -> str:
    """The installed distribution's version ("unknown (not installed)" for a checkout that is only on
    PYTHONPATH)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def git_commit(source: Path | None = None) -> dict[str, Any] | None:
    """The commit of the checkout that holds prover's source, and whether it has uncommitted changes; None
    when the source is no git checkout (an installed wheel) or git does not answer within GIT_TIMEOUT_S."""
    root = (source or Path(__file__).resolve().parents[1]).parent
    if not (root / ".git").exists():  # a worktree's .git is a file, a clone's a folder
        return None
    try:
        commit = _git(root, "rev-parse", "HEAD")
        dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": dirty}


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                          check=True)
    return done.stdout.strip()


def cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """The CPU's model name, the CPU_FLAGS it has, and how many cores this process may use. Where there is
    no /proc/cpuinfo (not Linux), the model is the platform's word and ``flags`` is None: unknown, not absent."""
    model, flags = platform.processor() or platform.machine(), None
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        text = ""
    fields = dict(cpuinfo_fields(text))
    if "flags" in fields:
        present = set(fields["flags"].split())
        flags = {flag: flag in present for flag in CPU_FLAGS}
    model = fields.get("model name", model)
    # a VM's model name can be generic ("Intel Xeon Processor"); family/model/stepping still tell the CPU
    stepping = "/".join(fields[k] for k in ("cpu family", "model", "stepping") if k in fields) or None
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"model": model, "family_model_stepping": stepping, "machine": platform.machine(), "flags": flags,
            "cores": os.cpu_count(), "usable_cores": usable}


def native_bfloat16(flags: dict[str, bool] | None) -> bool | None:
    """Whether the CPU multiplies bfloat16 in hardware (AVX512-BF16 or AMX), from ``cpu()["flags"]``; None when
    the flags are unknown. Without either, torch converts bfloat16 in software and its products run slower than
    float32's, several times so for a step's batched products (docs/perf.md, the kernels against torch's by rows)."""
    if flags is None:
        return None
    return bool(flags.get("avx512_bf16") or flags.get("amx_bf16"))


def cpuinfo_fields(text: str) -> list[tuple[str, str]]:
    """The ``key: value`` lines of the first processor in /proc/cpuinfo's text."""
    fields = []
    for line in text.split("\n\n")[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.append((key.strip(), value.strip()))
    return fields


def torch_side() -> dict[str, Any]:
    """torch's version, its intra-op threads (what ``threads`` set, or its default) and the GPUs it sees;
    ``{"torch": None}`` where torch is not installed."""
    try:
        import torch  # here: torch takes seconds to import, and `prover env` on a bare install has none
    except ImportError:
        return {"torch": None}
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    return {"torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "cuda": torch.version.cuda, "gpus": gpus}


def packages() -> dict[str, str]:
    """Every installed distribution's version, by name, sorted; the first one found wins where two copies of
    one name are on the path (as ``import`` would take)."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name and name not in found:
            found[name] = dist.version
    return dict(sorted(found.items(), key=lambda item: item[0].lower()))


def describe_environment() -> dict[str, Any]:
    """The whole record, as ``environment.json`` holds it."""
    return {"prover": {"version": prover_version(), "git": git_commit()},
            "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                       "executable": sys.executable},
            "platform": platform.platform(),
            "cpu": cpu(),
            "threads_env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if k in os.environ},
            **torch_side(),
            "packages": packages()}


def write_environment(folder: Path) -> Path:
    """``environment.json`` in ``folder``, written whole or not at all."""
    path = Path(folder) / ENVIRONMENT_FILE
    write_atomic(path, json.dumps(describe_environment(), indent=1) + "\n")
    return path


def version_line() -> str:
    """``prover --version``: the version, and the commit where prover runs from a checkout."""
    git = git_commit()
    where = "" if git is None else f" (commit {git['commit'][:12]}{', uncommitted changes' if git['dirty'] else ''})"
    return f"prover {prover_version()}{where}"


def summary_lines(env: dict[str, Any]) -> list[str]:
    """The record as ``name: value`` lines, packages last: what ``prover env`` prints and ``prover view`` shows.
    A record written by another prover version reads too: a field it lacks shows as ``?``."""
    prover, python, cpu_ = env.get("prover") or {}, env.get("python") or {}, env.get("cpu") or {}
    git, flags = prover.get("git"), cpu_.get("flags")
    commit = "" if not git else f" (commit {git['commit']}{', uncommitted changes' if git.get('dirty') else ''})"
    if flags is None:
        shown_flags = "unknown"
    else:
        shown_flags = " ".join(f for f, on in flags.items() if on) or f"none of {' '.join(CPU_FLAGS)}"
    threads_env = "".join(f", {k}={v}" for k, v in (env.get("threads_env") or {}).items())
    packages_ = env.get("packages") or {}
    return [f"prover: {prover.get('version', '?')}{commit}",
            f"python: {python.get('version', '?')} ({python.get('executable', '?')})",
            f"platform: {env.get('platform', '?')}",
            f"cpu: {cpu_.get('model', '?')}, family/model/stepping {cpu_.get('family_model_stepping') or '?'} "
            f"({cpu_.get('usable_cores', '?')} of {cpu_.get('cores', '?')} cores usable)",
            f"cpu flags: {shown_flags}",
            f"torch: {env.get('torch') or 'not installed'}, {env.get('torch_threads', '?')} threads{threads_env}",
            f"gpus: {', '.join(env.get('gpus') or []) or 'none'}",
            f"packages ({len(packages_)}):",
            *(f"  {name}=={version}" for name, version in packages_.items())]


def cmd_env(args: argparse.Namespace) -> int:
    env = describe_environment()
    print(json.dumps(env, indent=1) if args.json else "\n".join(summary_lines(env)))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("env", help="print what a run's numbers depend on besides its config (versions, CPU, "
                       "threads, GPUs), as each run folder keeps it in environment.json")
    p.add_argument("--json", action="store_true", help="print environment.json's JSON instead of lines")
    p.set_defaults(fn=cmd_env)
