"""Optimizer and RNG state on disk as data only: tensors in safetensors, everything else in JSON.

A run folder is something users hand each other, so nothing in it may run code when it is read. Pickle
(``torch.save``/``torch.load(weights_only=False)``) can: a crafted ``rng.pt`` ran code on ``--resume``. So a
checkpoint's state is a tree of dicts, lists, tuples, strings, numbers, None and tensors, written as

    <stem>.json          the tree, each tensor replaced by {"tensor": "<key>"}
    <stem>.safetensors   the tensors by key

JSON has only string keys and no tuples, and an optimizer's state is keyed by parameter index and Python's
RNG state is a tuple, so a dict with a non-string key is written {"items": [[key, value], ...]} and a tuple
{"tuple": [...]}; no other one-key dict with those names is written, so reading back is unambiguous.

Checkpoints of earlier versions hold ``optimizer.pt`` and ``rng.pt`` (pickles). They are never read by
``--resume``; ``prover convert-checkpoint`` rewrites them, reading each with torch's restricted unpickler
(``weights_only=True``), which loads tensors and plain values and refuses anything that would run code.

Every checkpoint folder ends with ``manifest.json``: the size and SHA-256 of each file beside it, written
last but one (``state.json`` marks it whole). A checkpoint without one is damaged; ``checkpoint_problem``
says why a folder does not match its own, and ``--resume`` skips to an older checkpoint that does.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import warnings
from pathlib import Path
from typing import Any, Protocol

from prover.errors import CheckpointError
from prover.system.files import sha256_of


class CheckpointSource(Protocol):
    """What a checkpoint saves of a learner and restores into it (``prover.learning.learner.Learner`` is
    one): its weights, its optimizer's state and its shuffling generator."""

    rng: random.Random

    def save_checkpoint_weights(self, path: Path, state: dict | None = None) -> None:
        """The policy's weights (a LoRA adapter alone, or the whole model) into the folder ``path``."""
        ...

    def optimizer_state(self) -> dict:
        """The optimizer's state, as ``load_optimizer_state`` takes it back."""
        ...

    def load_optimizer_state(self, state: dict) -> None:
        """Restore what ``optimizer_state`` gave."""
        ...

OLD_FILES = ("optimizer.pt", "rng.pt")
MANIFEST = "manifest.json"


def _encode(obj: object, tensors: dict[str, Any]) -> object:
    import torch  # torch is heavy: readers of a run folder never load it

    if isinstance(obj, torch.Tensor):
        key = f"t{len(tensors)}"
        tensors[key] = obj.detach().cpu().contiguous().clone()  # clone: safetensors refuses shared storage
        return {"tensor": key}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, tuple):
        return {"tuple": [_encode(v, tensors) for v in obj]}
    if isinstance(obj, list):
        return [_encode(v, tensors) for v in obj]
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj) and not _looks_encoded(obj):
            return {k: _encode(v, tensors) for k, v in obj.items()}
        return {"items": [[_encode(k, tensors), _encode(v, tensors)] for k, v in obj.items()]}
    raise TypeError(f"cannot store a {type(obj).__name__} in a checkpoint (only tensors and plain values)")


def _looks_encoded(d: dict) -> bool:
    return len(d) == 1 and next(iter(d)) in ("tensor", "tuple", "items")


def _decode(obj: object, tensors: dict[str, Any]) -> object:
    if isinstance(obj, list):
        return [_decode(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if _looks_encoded(obj):
        (kind, value), = obj.items()
        if kind == "tensor":
            return tensors[value]
        if kind == "tuple":
            return tuple(_decode(v, tensors) for v in value)
        return {_decode(k, tensors): _decode(v, tensors) for k, v in value}
    return {k: _decode(v, tensors) for k, v in obj.items()}


def save_state(obj: object, folder: Path, stem: str) -> None:
    from safetensors.torch import save_file  # safetensors.torch loads torch: only a checkpoint's writer needs it

    tensors: dict[str, Any] = {}
    tree = _encode(obj, tensors)
    try:
        save_file(tensors, str(folder / f"{stem}.safetensors"))
    except Exception as exc:  # SafetensorError (a full disk, ...): as torch.save reported it, a RuntimeError
        raise RuntimeError(" ".join(str(exc).split())) from exc
    (folder / f"{stem}.json").write_text(json.dumps(tree))


def refuse_old_format(folder: Path) -> None:
    """One line for a checkpoint of an earlier prover, whose state is a pickle (see the module)."""
    old = [name for name in OLD_FILES if (folder / name).is_file()]
    if old and not all((folder / f"{name.removesuffix('.pt')}.json").is_file() for name in OLD_FILES):
        raise CheckpointError(
            f"checkpoint {str(folder)!r} holds {old[0]}, a pickle from an earlier prover, which is never read "
            f"because pickle can run code; if you trust where it came from, convert it with `prover "
            f"convert-checkpoint {folder}`, or start the run afresh without --resume")


def load_state(folder: Path, stem: str) -> Any:
    """The tree ``save_state`` wrote; raises CheckpointError for an old pickle checkpoint (see the module)."""
    from safetensors.torch import load_file  # safetensors.torch loads torch: only resuming needs it

    refuse_old_format(folder)
    tensors = load_file(str(folder / f"{stem}.safetensors"))
    return _decode(json.loads((folder / f"{stem}.json").read_text()), tensors)


def convert_old_checkpoint(folder: Path) -> list[str]:
    """Rewrite an earlier version's optimizer.pt and rng.pt as data files and refresh the manifest; returns
    the files written. torch's restricted unpickler refuses any pickle that would run code."""
    # only converting an old checkpoint reads a pickle, with torch's restricted unpickler
    import pickle

    import torch

    missing = [name for name in OLD_FILES if not (folder / name).is_file()]
    if missing:
        raise CheckpointError(f"{str(folder)!r} is not a checkpoint of an earlier prover: no {missing[0]}")
    states = {}
    for name in OLD_FILES:  # both read before anything is written: a refused file leaves the folder as it was
        try:
            with warnings.catch_warnings():  # torch warns about the pickle protocol of files it then reads
                warnings.simplefilter("ignore")
                states[name.removesuffix(".pt")] = torch.load(folder / name, weights_only=True, map_location="cpu")
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as exc:
            # torch's own text goes on to suggest weights_only=False: only the reason is kept
            found = re.search(r"^(Unsupported .*|Trying to load unsupported .*)$", str(exc), re.M)
            reason = found.group(1).rstrip(".") if found else "torch's restricted unpickler refused it"
            raise CheckpointError(f"{str(folder / name)!r} is not plain tensors and values, so it is not "
                                  f"converted ({reason})") from exc
    for stem, state in states.items():
        save_state(state, folder, stem)
    for name in OLD_FILES:
        (folder / name).unlink()
    write_manifest(folder)
    return [f"{stem}.{ext}" for stem in states for ext in ("json", "safetensors")] + [MANIFEST]


def write_manifest(folder: Path) -> None:
    """Size and SHA-256 of every file of a checkpoint, so a truncated or altered file is found on resume."""
    files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256_of(p)}
             for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST}
    (folder / MANIFEST).write_text(json.dumps(files, indent=1))


def checkpoint_problem(folder: Path, verify_hashes: bool) -> str:
    """Why a checkpoint does not match its manifest, or ''. One without a manifest is damaged: every
    checkpoint prover writes has one, and the manifest is what vouches for the files beside it."""
    try:
        files = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        return f"{MANIFEST} is missing"
    except ValueError:
        return f"{MANIFEST} is unreadable"
    if not isinstance(files, dict) or not all(isinstance(w, dict) and {"bytes", "sha256"} <= w.keys()
                                              for w in files.values()):
        return f"{MANIFEST} is unreadable"
    for name, want in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != want["bytes"]:
            return f"{name} has {path.stat().st_size} bytes, its manifest says {want['bytes']}"
        if verify_hashes and sha256_of(path) != want["sha256"]:
            return f"{name} differs from its manifest's SHA-256"
    return ""


def add_parser(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("convert-checkpoint", help="rewrite a checkpoint of an earlier prover (optimizer.pt, "
                       "rng.pt) in the data-only format that --resume reads")
    c.add_argument("checkpoint", nargs="+", help="checkpoint folders (<run.dir>/checkpoints/step-N)")
    c.set_defaults(fn=cmd_convert_checkpoint)


def cmd_convert_checkpoint(args: argparse.Namespace) -> int:
    for folder in map(Path, args.checkpoint):
        if not folder.is_dir():
            raise CheckpointError(f"{str(folder)!r} is not a checkpoint folder")
        written = convert_old_checkpoint(folder)
        print(f"{folder}: wrote {', '.join(written)}")
    return 0
