"""One batch of the warm start's behaviour cloning (``Learner.sft``): the forward and backward passes of its
micro-batches, one row per turn or each run of chained turns forwarded once as a sequence row
(prover/learning/learner_rows.py). The optimizer step stays with the learner."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from prover.learning.learner_rows import Row, row_logits, sequence_rows
from prover.learning.logprobs import completion_logits, gather_logprobs
from prover.learning.padding import micro_batch_order, padding_counts, turn_batches


@dataclass
class SftPass:
    """The model, how to run a backward pass (accelerate's), the pad id, the turns a micro-batch holds, and the
    token counts that every micro-batch adds to (``tokens``, ``padded_tokens``)."""

    model: torch.nn.Module
    backward: Callable[[torch.Tensor], None]
    pad_id: int
    micro_rows: int
    counts: dict[str, float]

    def turns(self, chunk: list[tuple[list[int], list[int]]], prompt_weight: float) -> tuple[float, float]:
        """Backward of one SFT batch, one row per turn; the sum of its completion tokens' NLL, and their
        count."""
        total = float(sum(len(c) + prompt_weight * (len(p) - 1) for p, c in chunk))
        nll_sum, n = 0.0, 0.0
        for m in range(0, len(chunk), self.micro_rows):
            micro = chunk[m:m + self.micro_rows]
            for k, v in padding_counts([len(p) + len(c) for p, c in micro]).items():
                self.counts[k] += v
            if prompt_weight > 0:
                prompts, completions = [p[:1] for p, _ in micro], [p[1:] + c for p, c in micro]
            else:
                prompts, completions = [p for p, _ in micro], [c for _, c in micro]
            logits, targets, mask = completion_logits(self.model, prompts, completions, self.pad_id)
            nll = -gather_logprobs(logits, targets)
            weight = mask.float()
            if prompt_weight > 0:  # completions are the last len(c) columns of each row
                is_completion = torch.zeros_like(mask)
                for i, (_, c) in enumerate(micro):
                    is_completion[i, mask.shape[1] - len(c):] = True
                weight = weight * torch.where(is_completion, 1.0, prompt_weight)
            else:
                is_completion = mask
            loss = torch.where(mask, nll * weight, torch.zeros_like(nll)).sum() / total
            self.backward(loss)
            with torch.no_grad():
                nll_sum += float(torch.where(is_completion & mask, nll, 0.0).sum())
                n += float((is_completion & mask).sum())
        return nll_sum, n

    def sequences(self, chunk: list[Row]) -> tuple[float, float]:
        """Backward of one SFT batch of completion-only turn rows, each run of chained ones forwarded once,
        in micro-batches of ``micro_rows`` turns; what ``turns`` returns."""
        units = sequence_rows(chunk)
        total = float(sum(len(r.completion_ids) for r in chunk))
        order = [units[k] for k in micro_batch_order([len(u.ids) for u in units])]
        nll_sum = 0.0
        for indices in turn_batches([len(u.turn_rows) for u in order], self.micro_rows):
            micro = [order[i] for i in indices]
            for k, v in padding_counts([len(u.ids) for u in micro]).items():
                self.counts[k] += v
            logits, targets, mask = row_logits(self.model, micro, self.pad_id)
            nll = torch.where(mask, -gather_logprobs(logits, targets), 0.0)
            self.backward(nll.sum() / total)
            nll_sum += float(nll.detach().sum())
        return nll_sum, total
