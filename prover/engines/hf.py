"""The ``hf`` engine: transformers ``generate`` on CPU or one GPU, token ids in and out.

Loading the policy folder and the log-probs of completions come from ``prover.modeling``, which the
learner trains through too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from prover.engines.base import Engine
from prover.errors import CapabilityError
from prover.modeling import completion_logits, gather_logprobs, load_model, load_tokenizer, model_positions, stop_ids
from prover.seeding import derive_seed
from prover.types import Generation, SamplingParams


class HFEngine(Engine):
    """Sampling with ``model.generate``; log-probs are of the temperature-scaled distribution.
    ``engine.kwargs`` are the constructor's keyword arguments (``Engine.validate_kwargs``)."""

    name = "hf"
    own_weights = True

    def __init__(self, model_path: str | Path, dtype: str = "float32", device: str | None = None,
                 batch_size: int = 64) -> None:
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = load_tokenizer(model_path)
        self.model = load_model(model_path, dtype, self.device).eval()
        self.context_length = model_positions(model_path)
        self.batch_size = batch_size
        self.stop_ids = stop_ids(self.tokenizer)
        self.pad_id = self.tokenizer.pad_token_id

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int | None = None,
                 logits_processor: Callable[[], list[Any]] | None = None) -> list[Generation]:
        """``logits_processor``: builds fresh transformers logits processors for each chunk (they may hold
        per-sequence state, e.g. a grammar matcher); it may restrict which tokens can be drawn. The
        log-probs returned are still those of the unrestricted, temperature-scaled distribution."""
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # less padding per chunk
        results: list[Generation | None] = [None] * len(prompts)
        for c, start in enumerate(range(0, len(order), self.batch_size)):
            idx = order[start:start + self.batch_size]
            if seed is not None:
                torch.manual_seed(derive_seed(seed, c, "hf-chunk"))
            processors = logits_processor() if logits_processor is not None else None
            for i, gen in zip(idx, self._generate_chunk([prompts[i] for i in idx], params, processors)):
                results[i] = gen
        return results  # type: ignore[return-value]

    def _generate_chunk(self, prompts: list[list[int]], params: SamplingParams,
                        processors: list[Any] | None = None) -> list[Generation]:
        length = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), length), self.pad_id, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, length - len(p):] = torch.tensor(p, dtype=torch.long)
            attn[i, length - len(p):] = 1
        sample = params.temperature > 0
        kwargs: dict[str, Any] = {"do_sample": sample}
        if sample:  # sampling flags only when sampling (transformers warns otherwise)
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or None)
        stops = list(params.stop_token_ids) or self.stop_ids
        if processors:
            from transformers import LogitsProcessorList

            kwargs["logits_processor"] = LogitsProcessorList(processors)
        out = self.model.generate(input_ids=ids.to(self.device), attention_mask=attn.to(self.device),
                                  max_new_tokens=params.max_new_tokens, eos_token_id=stops,
                                  pad_token_id=self.pad_id, output_logits=True, return_dict_in_generate=True,
                                  **kwargs)
        new = out.sequences[:, length:].cpu()
        logits = torch.stack(out.logits, dim=1).float().cpu()  # (B, n_new, V), raw
        if sample:
            logits = logits / params.temperature
        logps = gather_logprobs(logits, new)
        gens = []
        stop_set = set(stops)
        for i in range(len(prompts)):
            toks = new[i].tolist()
            end = next((k for k, t in enumerate(toks) if t in stop_set), None)
            n = len(toks) if end is None else end + 1
            gens.append(Generation(token_ids=toks[:n], logprobs=logps[i, :n].tolist(),
                                   finish_reason="length" if end is None else "stop"))
        return gens

    @torch.no_grad()
    def logprobs(self, prompts: list[list[int]], completions: list[list[int]]) -> list[np.ndarray]:
        logits, targets, mask = completion_logits(self.model, prompts, completions, self.pad_id)
        lp = gather_logprobs(logits, targets)
        return [lp[i][mask[i]].cpu().numpy() for i in range(len(prompts))]

    def update_weights(self, learner: Any) -> None:
        state = learner.policy_state_dict()
        if not state:  # FSDP / ZeRO-3 gather the full weights on the main process only
            raise CapabilityError("the hf engine needs the full weights in every process, but this learner is "
                                  "sharded (FSDP or ZeRO-3); use engine.name=sglang")
        self.model.load_state_dict(state)
