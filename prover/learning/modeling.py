"""Torch-side helpers every room that touches a policy folder shares: loading a model and its tokenizer
from a checkpoint folder (``prover.learning.model_folder`` checks it), activation checkpointing, and the
tokens that end a completion. The log-probs the learner trains through and the ``hf`` engine samples with
are ``prover.learning.logprobs``.

torch and transformers are imported inside the functions that need them, so a room that only reads a
tokenizer or checks a folder (the ``sglang`` engine, the config) does not load torch by importing this.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from prover.errors import CheckpointError, ConfigError
from prover.learning.model_folder import check_model_dir

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase


def quiet_transformers() -> None:
    """Keep per-file load/save progress bars and info logs out of the run's one-line-per-step output."""
    from transformers.utils import logging as hf_logging  # lazy: transformers loads torch

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def _dtypes() -> dict[str, torch.dtype]:
    import torch  # torch is heavy: rooms that never load a model import this module

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def __getattr__(name: str) -> dict[str, torch.dtype]:
    """``DTYPES`` (model.dtype name -> torch dtype) is built when first asked for, since it needs torch."""
    if name == "DTYPES":
        return _dtypes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    return _tokenizer(check_model_dir(path))


def load_model(path: str | Path, dtype: str = "float32", device: str = "cpu") -> torch.nn.Module:
    return _model(check_model_dir(path), dtype, device)


def load_policy(folder: Path, dtype: str, *, checkpointing: bool = False, ref_device: str | None = None,
                ) -> tuple[PreTrainedTokenizerBase, torch.nn.Module, torch.nn.Module | None]:
    """What a learner trains, from a folder ``check_model_dir`` passed: the tokenizer, the model (on the
    CPU; with ``checkpointing``, its layers recomputed in the backward pass) and, given ``ref_device``, a
    frozen copy of the same weights there (a KL term's reference), else None."""
    model = _model(folder, dtype, "cpu")
    if checkpointing:
        enable_checkpointing(model)
    ref = None if ref_device is None else _model(folder, dtype, ref_device).eval().requires_grad_(False)
    return _tokenizer(folder), model, ref


def _tokenizer(folder: Path) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer  # lazy: transformers loads torch

    try:
        tok = AutoTokenizer.from_pretrained(str(folder))
    except Exception as exc:  # a broken tokenizer file is the user's folder, not our bug
        raise CheckpointError(f"could not load the tokenizer in {str(folder)!r}: {exc}") from exc
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def _model(folder: Path, dtype: str, device: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM  # lazy: transformers loads torch

    quiet_transformers()
    try:
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=_dtypes()[dtype])
    except Exception as exc:
        raise CheckpointError(f"could not load the model in {str(folder)!r}: {exc}") from exc
    return model.to(device)


def enable_checkpointing(model: torch.nn.Module) -> None:
    """Recompute each decoder layer in the backward pass instead of keeping its activations
    (``learner.gradient_checkpointing``), non-reentrant, as torch recommends: it needs no input that requires
    a gradient (a LoRA model's frozen embedding gives none) and stops each recompute once it has what the
    backward needs. A model that cannot is a one-line ConfigError."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ConfigError(f"learner.gradient_checkpointing=true: {type(model).__name__} does not support "
                          "activation checkpointing; turn it off")
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers 5's name; 4.x has only the older one
        model.activation_checkpointing_enable(kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def stop_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Token ids that end a completion: eos, plus the chat template's end-of-turn token if any."""
    ids = {tokenizer.eos_token_id}
    for tok in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
        tid = tokenizer.convert_tokens_to_ids(tok)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid >= 0:
            ids.add(tid)
    return sorted(i for i in ids if i is not None)
