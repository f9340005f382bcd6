"""The ``hf`` engine: transformers ``generate`` on CPU or one GPU, token ids in and out.

Loading the policy folder and the log-probs of completions come from ``prover.modeling``, which the
learner trains through too. Prompts of one call that share a prefix (duplicates, a common header) have it
prefilled once (``prover.engines.prefix``; ``engine.kwargs.share_prefixes=false`` turns it off).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from prover.engines.base import Engine
from prover.engines.prefix import cache_kwarg, layout, plan_sharing, prefill, sharing_mode
from prover.errors import CapabilityError
from prover.modeling import completion_logits, gather_logprobs, load_model, load_tokenizer, model_positions, stop_ids
from prover.seeding import derive_seed
from prover.types import Generation, SamplingParams


class HFEngine(Engine):
    """Sampling with ``model.generate``; log-probs are of the temperature-scaled distribution.
    ``engine.kwargs`` are the constructor's keyword arguments (``Engine.validate_kwargs``).

    ``share_prefixes``: prefill a prefix that several prompts of a chunk share once (``prover.engines.prefix``).
    Greedy outputs are the same either way, up to float rounding in the prefill; sampled ones are equal in
    distribution. With a seed, a chunk draws the same random numbers either way, but which prompts share a
    chunk differs (sharing sorts equal prompts together), and rounding can flip a draw at a near-tie."""

    name = "hf"
    own_weights = True

    def __init__(self, model_path: str | Path, dtype: str = "float32", device: str | None = None,
                 batch_size: int = 64, share_prefixes: bool = True) -> None:
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = load_tokenizer(model_path)
        self.model = load_model(model_path, dtype, self.device).eval()
        self.context_length = model_positions(model_path)
        self.batch_size = batch_size
        self.stop_ids = stop_ids(self.tokenizer)
        self.pad_id = self.tokenizer.pad_token_id
        self.sharing = sharing_mode(self.model, self.device) if share_prefixes else "none"
        self.cache_kwarg = cache_kwarg(self.model)
        self.counts = {"prompt_tokens": 0, "computed_tokens": 0}

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int | None = None,
                 logits_processor: Callable[[], list[Any]] | None = None) -> list[Generation]:
        """``logits_processor``: builds fresh transformers logits processors for each chunk (they may hold
        per-sequence state, e.g. a grammar matcher); it may restrict which tokens can be drawn. The
        log-probs returned are still those of the unrestricted, temperature-scaled distribution."""
        # by length: less padding per chunk; with sharing, equal prompts next to each other, so a chunk
        # boundary splits as few of them as it can
        key = (lambda i: (len(prompts[i]), prompts[i])) if self.sharing != "none" else (lambda i: len(prompts[i]))
        order = sorted(range(len(prompts)), key=key)
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
        # a processor may read the prompt's columns: keep them as they were (left padded) under one
        mode = "duplicates" if processors and self.sharing == "prefix" else self.sharing
        plan = plan_sharing(prompts, mode)
        ids, attn = layout(prompts, plan.lcp if plan else 0, self.pad_id)
        ids, attn, length = ids.to(self.device), attn.to(self.device), ids.shape[1]
        requested = sum(len(p) for p in prompts)
        self.counts["prompt_tokens"] += requested
        self.counts["computed_tokens"] += plan.computed if plan else requested
        sample = params.temperature > 0
        kwargs: dict[str, Any] = {"do_sample": sample}
        if sample:  # sampling flags only when sampling (transformers warns otherwise)
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or None)
        stops = list(params.stop_token_ids) or self.stop_ids
        if processors:
            from transformers import LogitsProcessorList

            kwargs["logits_processor"] = LogitsProcessorList(processors)
        if plan:  # generate continues from the shared cache: it runs only each row's last token
            kwargs[self.cache_kwarg] = prefill(self.model, ids, attn, plan, self.cache_kwarg)
        out = self.model.generate(input_ids=ids, attention_mask=attn,
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

    def take_counts(self) -> dict[str, float]:
        """Prompt tokens since the last call, and those whose prefill another row's served (under the names
        the ``sglang`` engine gives its servers' prefix-cache hits)."""
        prompt, computed = self.counts["prompt_tokens"], self.counts["computed_tokens"]
        self.counts = dict.fromkeys(self.counts, 0)
        return {"cost/prompt_tokens": float(prompt), "cost/cached_tokens": float(prompt - computed),
                "engine/cached_ratio": (prompt - computed) / prompt if prompt else 0.0}

    def update_weights(self, learner: Any) -> None:
        """Load the learner's full weights; with LoRA they come merged, under the base model's names."""
        state = learner.policy_state_dict()
        if not state:  # FSDP / ZeRO-3 gather the full weights on the main process only
            raise CapabilityError("the hf engine needs the full weights in every process, but this learner is "
                                  "sharded (FSDP or ZeRO-3); use engine.name=sglang")
        self.model.load_state_dict(state)
