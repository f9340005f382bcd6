"""What a policy's checkpoint folder says, read without loading torch: that it is a Hugging Face checkpoint
(``check_model_dir``), the numbers of its config.json (``model_setting``, ``model_positions``), and, once per
run, the whole folder checked and its facts kept in a ``ModelSpec`` (``model_spec``) that the trainer hands
to the rooms that need them (the thread default, the tiny builder, the warm start's prompt budget).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from prover.config import ModelConfig
from prover.errors import CheckpointError

TINY_POSITIONS = 4096  # max_position_embeddings of the tiny policy (prover/policy/tiny.py)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def check_model_dir(path: str | Path) -> Path:
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise CheckpointError(f"model folder {str(p)!r} is a file; give the folder that holds config.json and "
                              "the weights")
    if not p.is_dir():
        raise CheckpointError(f"model folder {str(p)!r} does not exist (give a local Hugging Face checkpoint "
                              "folder, or model.path=tiny)")
    if not (p / "config.json").is_file():
        raise CheckpointError(f"model folder {str(p)!r} has no config.json; it is not a Hugging Face checkpoint")
    return p


def model_setting(path: str | Path, name: str) -> int | None:
    """A positive whole number from a checkpoint folder's config.json (``name``), or from its ``text_config``
    for a multimodal checkpoint; None when unstated."""
    return _setting(_config(path), name)


def _config(path: str | Path) -> object:
    try:
        return json.loads((check_model_dir(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"config.json in {str(path)!r} does not read: {exc}") from exc


def _setting(conf: object, name: str) -> int | None:
    for part in (conf, conf.get("text_config") if isinstance(conf, dict) else None):
        n = part.get(name) if isinstance(part, dict) else None
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            return n
    return None


def model_positions(path: str | Path) -> int | None:
    """The positions of a policy (``model.path``: ``tiny`` or a checkpoint folder): its config's
    ``max_position_embeddings``; None when unstated."""
    return TINY_POSITIONS if str(path) == "tiny" else model_setting(path, "max_position_embeddings")


@dataclass(frozen=True)
class ModelSpec:
    """The policy a run starts from (``model``), checked once before the run folder is touched.

    ``folder`` is None for the tiny model, which the run builds from the env's text (``prover.policy.tiny``).
    ``hidden_size`` sets the default torch threads (``prover.system.threads``); ``positions`` bounds the
    prompts (``max_position_embeddings``; None when the checkpoint does not say)."""

    folder: Path | None
    hidden_size: int | None
    positions: int | None

    @property
    def tiny(self) -> bool:
        return self.folder is None

    @property
    def path(self) -> str:
        """``model.path`` as the config spells it: ``tiny`` or the folder."""
        return "tiny" if self.folder is None else str(self.folder)


def model_spec(model: ModelConfig, whole_folder: bool = True) -> ModelSpec:
    """``model``'s spec. A folder is a Hugging Face checkpoint whose config.json reads; with ``whole_folder``
    (every run but the resume of a full fine-tune, which loads its own checkpoint) its weights' header reads
    and its tokenizer loads with a chat template too. Each failure is a one-line CheckpointError."""
    if model.path == "tiny":
        return ModelSpec(None, model.tiny.hidden_size, TINY_POSITIONS)
    folder = check_model_dir(model.path)
    if whole_folder:
        check_weights(folder)
        check_chat_template(folder)
    conf = _config(folder)  # read once for both numbers
    return ModelSpec(folder, _setting(conf, "hidden_size"), _setting(conf, "max_position_embeddings"))


def check_weights(folder: Path) -> None:
    weights = [folder / w for w in WEIGHT_FILES if (folder / w).is_file()]
    if not weights:
        raise CheckpointError(f"model.path {str(folder)!r} has no weights ({', '.join(WEIGHT_FILES)})")
    if weights[0].name == "model.safetensors":
        try:
            from safetensors import safe_open  # lazy: only a safetensors file is opened

            with safe_open(str(weights[0]), framework="np") as f:
                f.keys()
        except Exception as exc:  # a truncated or foreign file
            raise CheckpointError(f"weights {str(weights[0])!r} are unreadable: {str(exc).splitlines()[0]}") from exc


def check_chat_template(folder: Path) -> None:
    from transformers import AutoTokenizer  # lazy: transformers loads torch; only a model folder's check needs it

    try:
        tok = AutoTokenizer.from_pretrained(str(folder))
    except Exception as exc:
        raise CheckpointError(f"tokenizer in {str(folder)!r} does not load: {str(exc).splitlines()[0]}") from exc
    if not getattr(tok, "chat_template", None):
        raise CheckpointError(f"tokenizer in {str(folder)!r} has no chat template; prover builds every prompt with "
                              "it (set tokenizer.chat_template, e.g. from the instruct model it came from)")
