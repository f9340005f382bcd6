"""The log-probs of completions, which the learner trains through and the ``hf`` engine samples with: given
their prompts (``completion_logits``), or lying inside whole sequences (``sequence_logits``: a chat
trajectory forwarded once), then gathered at the sampled tokens (``gather_logprobs``).

torch is imported inside the functions, as in ``prover.learning.modeling``: importing this loads nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


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
