"""Torch-side helpers every room that touches a policy folder shares: loading a model and its tokenizer,
the tokens that end a completion, and the log-probs of completions given prompts (``completion_logits``
and ``gather_logprobs``), which the learner trains through and the ``hf`` engine samples with, or lying
inside whole sequences (``sequence_logits``: a chat trajectory forwarded once).

torch and transformers are imported inside the functions that need them, so a room that only reads a
tokenizer or checks a folder (the ``sglang`` engine, the config) does not load torch by importing this.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from prover.errors import CheckpointError, ConfigError

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


TINY_POSITIONS = 4096  # max_position_embeddings of the tiny policy (prover/policy/tiny.py)


def model_setting(path: str | Path, name: str) -> int | None:
    """A positive whole number from a checkpoint folder's config.json (``name``), or from its ``text_config``
    for a multimodal checkpoint; None when unstated."""
    try:
        conf = json.loads((check_model_dir(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"config.json in {str(path)!r} does not read: {exc}") from exc
    for part in (conf, conf.get("text_config") if isinstance(conf, dict) else None):
        n = part.get(name) if isinstance(part, dict) else None
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            return n
    return None


def model_positions(path: str | Path) -> int | None:
    """The positions of a policy (``model.path``: ``tiny`` or a checkpoint folder): its config's
    ``max_position_embeddings``; None when unstated."""
    return TINY_POSITIONS if str(path) == "tiny" else model_setting(path, "max_position_embeddings")


# Set by the user, these already fixed torch's threads when it loaded: a run leaves them as they are.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
# Up to this hidden size a model's matrices are too small to split between threads (the tiny policy: 128;
# a 0.5B Qwen: 896): docs/perf.md, "The limit", measures matrix products of both sizes at 1 and 2 threads.
SMALL_WIDTH = 256


def default_threads(threads: int | None, width: int | None, environ: Mapping[str, str] | None = None) -> int | None:
    """The torch CPU threads a run asks for (the config's ``threads``), or None to leave torch's as they are.

    As set; else None when the environment names them (``THREAD_VARIABLES``); else 1 for a model of hidden
    size ``width`` up to ``SMALL_WIDTH``, whose threads would spend their time waiting on each other (and on
    a shared CPU, each for a core); else None: torch's default, one per core, suits large matrices.
    """
    if threads is not None:
        return threads
    environ = os.environ if environ is None else environ
    if any(environ.get(name, "").strip() for name in THREAD_VARIABLES):
        return None
    return 1 if width is not None and width <= SMALL_WIDTH else None


def apply_threads(threads: int | None, model_path: str, tiny_width: int) -> int:
    """Set torch's CPU threads as ``default_threads`` says for the policy at ``model_path`` (``tiny``: a tiny
    model of hidden size ``tiny_width``), at the start of a warm start, a training run or an evaluation;
    returns the threads torch uses now."""
    import torch  # torch is heavy: rooms that never load a model import this module

    width = tiny_width if str(model_path) == "tiny" else model_setting(model_path, "hidden_size")
    wanted = default_threads(threads, width)
    if wanted is not None and torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)
    return torch.get_num_threads()


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer  # lazy: transformers loads torch

    p = check_model_dir(path)
    try:
        tok = AutoTokenizer.from_pretrained(str(p))
    except Exception as exc:  # a broken tokenizer file is the user's folder, not our bug
        raise CheckpointError(f"could not load the tokenizer in {str(p)!r}: {exc}") from exc
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(path: str | Path, dtype: str = "float32", device: str = "cpu") -> torch.nn.Module:
    from transformers import AutoModelForCausalLM  # lazy: transformers loads torch

    quiet_transformers()
    p = check_model_dir(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(p), dtype=_dtypes()[dtype])
    except Exception as exc:
        raise CheckpointError(f"could not load the model in {str(p)!r}: {exc}") from exc
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


def completion_logits(model: torch.nn.Module, prompts: list[list[int]], completions: list[list[int]],
                      pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logits that predict each completion token.

    Rows are left-padded so every completion ends at the last position; only the last
    ``C + 1`` positions go through the LM head (``C`` = longest completion), which keeps memory low on
    large vocabularies.

    Returns logits (B, C, V), targets (B, C) and mask (B, C); row i's completion sits in the last
    ``len(completions[i])`` columns.
    """
    import torch  # torch is heavy: rooms that never load a model import this module

    device = next(model.parameters()).device
    seqs = [p + c for p, c in zip(prompts, completions)]
    length = max(len(s) for s in seqs)
    c_max = max(len(c) for c in completions)
    ids = torch.full((len(seqs), length), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), length), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, length - len(s):] = torch.tensor(s, dtype=torch.long)
        attn[i, length - len(s):] = 1
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids.to(device), attention_mask=attn.to(device), position_ids=pos.to(device),
                logits_to_keep=c_max + 1, use_cache=False)
    logits = _at_least_float32(out.logits[:, :-1])  # (B, C, V): column j predicts position length - C + j
    targets = ids[:, length - c_max:].to(device)
    mask = torch.zeros((len(seqs), c_max), dtype=torch.bool, device=device)
    for i, c in enumerate(completions):
        mask[i, c_max - len(c):] = True
    return logits, targets, mask


def sequence_logits(model: torch.nn.Module, sequences: list[list[int]], spans: list[tuple[int, int, int]],
                    pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logits that predict completions lying inside whole sequences, each sequence forwarded once.

    ``spans[k] = (i, start, end)``: completion k is ``sequences[i][start:end]`` (``start`` >= 1). Returns
    what ``completion_logits`` does, one row per span: logits (K, C, V), targets and mask (K, C), row k's
    completion in its last ``end - start`` columns. Rows are right-padded, so a token's position is its
    index; the LM head runs only at the positions that predict a completion token (``logits_to_keep`` as
    a boolean mask), which keeps memory low on large vocabularies.

    No attention mask goes to the model, only causality: a real token never sees the padding after it, so its
    logits and gradients are what a padding mask gives, bit for bit, while attention takes the causal kernel,
    which reads no mask and skips the blocks above the diagonal. Padding positions attend to real tokens
    instead of nothing; nothing reads them.
    """
    import torch  # torch is heavy: rooms that never load a model import this module

    device = next(model.parameters()).device
    length = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    keep = torch.zeros((len(sequences), length), dtype=torch.bool)
    for i, s in enumerate(sequences):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
    for i, start, end in spans:
        if not 1 <= start < end <= len(sequences[i]):
            raise ValueError(f"span {(start, end)} is not a completion inside a sequence of {len(sequences[i])}")
        keep[i, start - 1:end - 1] = True
    flat = keep.flatten().cumsum(0).reshape(keep.shape) - 1  # a kept position's row in the kept logits
    c_max = max(end - start for _, start, end in spans)
    where = torch.zeros((len(spans), c_max), dtype=torch.long)
    targets = torch.full((len(spans), c_max), pad_id, dtype=torch.long)
    mask = torch.zeros((len(spans), c_max), dtype=torch.bool)
    for k, (i, start, end) in enumerate(spans):
        where[k, c_max - (end - start):] = flat[i, start - 1:end - 1]
        targets[k, c_max - (end - start):] = ids[i, start:end]
        mask[k, c_max - (end - start):] = True
    positions = torch.arange(length).expand(len(sequences), -1)
    out = model(input_ids=ids.to(device), attention_mask=None, position_ids=positions.to(device),
                logits_to_keep=keep.to(device), use_cache=False)
    if out.logits.dim() != 2 or out.logits.shape[0] != int(keep.sum()):  # a model that ignores the mask
        raise ValueError(f"{type(model).__name__} does not take logits_to_keep as a boolean mask (transformers "
                         "5.25 does); turn learner.sequence_rows off")
    logits = _at_least_float32(out.logits[where.to(device)])  # (N, V) kept -> (K, C, V)
    return logits, targets.to(device), mask.to(device)


def _at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """Log-probs in float32 from a bf16 or fp16 model; a float64 model (the equivalence tests) stays float64."""
    import torch  # torch is heavy: rooms that never load a model import this module

    return x if x.dtype == torch.float64 else x.float()


def gather_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    import torch  # torch is heavy: rooms that never load a model import this module

    return torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
