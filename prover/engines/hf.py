"""The ``hf`` engine: transformers ``generate`` on CPU or one GPU, token ids in and out.

Loading the policy folder and the log-probs of completions come from ``prover.learning.modeling``, which the
learner trains through too. A prompt's KV is computed once: prompts of one call that share a prefix
(duplicates, a common header) have it prefilled once, and the engine keeps each row's prompt and completion
KV across calls in a bounded prefix cache, so a chat's next turn, a group's episodes and a branch point's
continuations prefill only their new tokens (``prover.engines.prefix``, ``prover.engines.kv_cache``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
import torch
from pydantic import Field, PlainValidator
from transformers import LogitsProcessorList

from prover.engines import decode_kernels as kernels
from prover.engines.base import Engine, WeightSource
from prover.engines.decode import decode, empty_reserved_cache
from prover.engines.fused_step import FusedStep, supports
from prover.engines.kv_cache import PrefixCache, auto_cache_bytes, row_columns
from prover.engines.prefix import (
    cache_kwarg,
    cache_layers,
    cache_of,
    layout,
    plan_duplicates,
    prefill_duplicates,
    prefill_from,
    sharing_mode,
)
from prover.errors import CapabilityError
from prover.learning.logprobs import completion_logits, gather_logprobs
from prover.learning.model_folder import model_positions
from prover.learning.modeling import load_model, load_tokenizer, stop_ids
from prover.seeding import derive_seed
from prover.types import Generation, SamplingParams

if TYPE_CHECKING:
    from transformers import DynamicCache, LogitsProcessor


def _cache_mib(value: object) -> int | str:
    """``prefix_cache_mb`` as written: ``auto`` or a whole number of MiB, 0 or more (one message for both,
    where pydantic's union would report each member's error under its own tag)."""
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value  # type: ignore[return-value]
    raise ValueError("must be 'auto' or a whole number of MiB, 0 or more")


CacheMiB = Annotated[int | Literal["auto"], PlainValidator(_cache_mib)]

PREFIX_CACHE_MB = ("Most MiB of KV the engine keeps across generate calls, to serve later prompts' prefixes "
                   "(a chat's next turn, a group's episodes, a branch point's continuations); 'auto': a third of "
                   "the memory free on its device when the engine starts. Entries that no prompt of the running "
                   "call uses go first, least recently used first; 0 keeps none. Full-attention models only.")

DECODE_LOOP = ("Decode with prover's own loop (prover.engines.decode: KV reserved once, only the sampled tokens' "
               "log-probs kept, sampling exactly as rollout.sampling says) on full-attention models; false "
               "uses transformers' generate, as other models always do. Greedy outputs are the same either way.")


CPU_KERNELS = ("On CPU, decode with prover's own kernels (prover.engines.decode_kernels, AVX-512 or AVX2, built "
               "with the machine's C compiler on first use): linear layers of steps with few rows read their weights "
               "at close to the memory's bandwidth, and the fused step's norms, rotations, cache writes and "
               "attention run in C; false keeps torch's operations. Without a compiler, or without AVX-512 and "
               "AVX2, the engine keeps torch's and says so once. Greedy outputs equal torch's up to float rounding.")


FUSED_DECODE_STEP = ("Decode steps of Llama, Qwen2 and Qwen3 models run as prover.engines.fused_step: the query, "
                     "key and value projections as one product, the gate and up projections as another, and "
                     "each norm as one operation, instead of transformers' module-by-module forward; false "
                     "keeps the forward. The logits are the same up to float rounding.")

HUGE_PAGES = ("On CPU with the kernels, move the weights a decode step reads into one buffer in the order it reads "
              "them, which Linux is asked to back with 2 MiB pages (prover.engines.weight_arena): a one-row step "
              "streams every weight from memory, and huge pages spare it a TLB miss every 4 KiB. The model's "
              "parameters become views of the buffer; the arithmetic is unchanged.")


class HFEngine(Engine):
    """Sampling with prover's own decode loop (or ``model.generate``); log-probs are of the temperature-scaled
    distribution.
    ``engine.kwargs`` are the constructor's keyword arguments (``Engine.validate_kwargs``).

    ``share_prefixes``: prefill a prefix that several prompts of a chunk share once (``prover.engines.prefix``);
    false turns every reuse of KV off, the prefix cache's too.
    ``decode_loop``: decode with ``prover.engines.decode`` (full-attention models), else ``model.generate``.
    ``cpu_kernels``: decode steps through ``prover.engines.decode_kernels`` (CPU).
    ``fused_decode_step``: the decode loop's one-token steps through ``prover.engines.fused_step``.
    ``huge_pages``: the fused step's weights in one huge-page buffer (``prover.engines.weight_arena``).
    ``prefix_cache_mb``: the bound on the prefix cache, which keeps every row's prompt and completion KV
    across calls (``prover.engines.kv_cache``) and serves the longest prefix it holds of a later prompt;
    ``"auto"`` (the default) bounds it by a third of the memory free on the engine's device when it starts (a
    64-row chat of 2,000 tokens a row is ~6 GB of float32 KV for SmolLM2-135M); a full cache keeps what the
    running call's prompts use and declines new entries before it evicts those (``PrefixCache``); cleared by
    ``update_weights``; 0 keeps nothing across calls. Only
    models whose every layer is full attention keep one: on sliding-window or recurrent (linear-attention)
    models, e.g. Qwen3.5, only exact duplicates within a chunk are shared.

    Greedy outputs are the same with and without either, up to float rounding in the prefill; sampled ones
    are equal in distribution. With a seed, a chunk draws the same random numbers either way, but which
    prompts share a chunk differs (sharing sorts equal prompts together), and rounding can flip a draw at a
    near-tie."""

    name = "hf"
    own_weights = True

    def __init__(self, model_path: str | Path, dtype: str = "float32", device: str | None = None,
                 batch_size: int = 64, share_prefixes: bool = True,
                 prefix_cache_mb: Annotated[CacheMiB, Field(description=PREFIX_CACHE_MB)] = "auto",
                 decode_loop: Annotated[bool, Field(description=DECODE_LOOP)] = True,
                 cpu_kernels: Annotated[bool, Field(description=CPU_KERNELS)] = True,
                 fused_decode_step: Annotated[bool, Field(description=FUSED_DECODE_STEP)] = True,
                 huge_pages: Annotated[bool, Field(description=HUGE_PAGES)] = True) -> None:
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = load_tokenizer(model_path)
        self.model = load_model(model_path, dtype, self.device).eval()
        self.context_length = model_positions(model_path)
        self.batch_size = batch_size
        self.stop_ids = stop_ids(self.tokenizer)
        self.pad_id = self.tokenizer.pad_token_id
        self.sharing = sharing_mode(self.model, self.device) if share_prefixes else "none"
        self.cache_kwarg = cache_kwarg(self.model)
        bound = auto_cache_bytes(self.device) if prefix_cache_mb == "auto" else prefix_cache_mb * 2**20
        self.prefix_cache = PrefixCache(bound) if self.sharing == "prefix" and bound > 0 else None
        self.decode_loop = decode_loop
        self.counts = {"prompt_tokens": 0.0, "computed_tokens": 0.0, "prefill_s": 0.0, "decode_s": 0.0}
        use_kernels = cpu_kernels and self.device == "cpu"
        if use_kernels:
            library, why = kernels.load()
            if library is None:
                use_kernels = False
                warnings.warn(f"engine.kwargs.cpu_kernels: {why}; decoding with torch's operations", stacklevel=2)
            else:
                kernels.install(self.model)
        fuse = fused_decode_step and decode_loop and supports(self.model) is None
        self.fused_step = FusedStep(self.model, use_kernels=use_kernels, huge_pages=huge_pages) if fuse else None

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int | None = None,
                 logits_processor: Callable[[], list[LogitsProcessor]] | None = None) -> list[Generation]:
        """``logits_processor``: builds fresh transformers logits processors for each chunk (they may hold
        per-sequence state, e.g. a grammar matcher); it may restrict which tokens can be drawn. The
        log-probs returned are still those of the unrestricted, temperature-scaled distribution."""
        # by length: less padding per chunk; with sharing, equal prompts next to each other, so a chunk
        # boundary splits as few of them as it can
        key = (lambda i: (len(prompts[i]), prompts[i])) if self.sharing != "none" else (lambda i: len(prompts[i]))
        order = sorted(range(len(prompts)), key=key)
        if self.prefix_cache is not None:
            self.prefix_cache.begin_call(prompts)  # later chunks' entries stay while earlier chunks store theirs
        results: list[Generation | None] = [None] * len(prompts)
        for c, start in enumerate(range(0, len(order), self.batch_size)):
            idx = order[start:start + self.batch_size]
            if seed is not None:
                torch.manual_seed(derive_seed(seed, c, "hf-chunk"))
            processors = logits_processor() if logits_processor is not None else None
            for i, gen in zip(idx, self._generate_chunk([prompts[i] for i in idx], params, processors)):
                results[i] = gen
        return results  # type: ignore[return-value]

    def _prefill(self, prompts: list[list[int]], capacity: int | None = None) -> tuple[dict[str, Any], list[int]]:
        """``generate``'s cache keyword (empty when nothing is prefilled) and the prompt tokens run for each
        row; the rows are laid out left padded either way. With ``capacity`` (the decode loop's), the cache
        reserves that many columns."""
        if self.sharing == "prefix":
            store = self.prefix_cache or PrefixCache(None)  # without a kept cache, a scratch one for the chunk
            done = prefill_from(self.model, prompts, store, self.cache_kwarg, capacity)
            return ({self.cache_kwarg: done.cache} if done.cache is not None else {}), done.computed
        plan = plan_duplicates(prompts) if self.sharing == "duplicates" else None
        if plan is None:
            return {}, [len(p) for p in prompts]
        ids, attn = (t.to(self.device) for t in layout(prompts, self.pad_id))
        return {self.cache_kwarg: prefill_duplicates(self.model, ids, attn, plan, self.cache_kwarg)}, plan.computed

    def _generate_chunk(self, prompts: list[list[int]], params: SamplingParams,
                        processors: list[LogitsProcessor] | None = None) -> list[Generation]:
        ids, attn = layout(prompts, self.pad_id)
        ids, attn, length = ids.to(self.device), attn.to(self.device), ids.shape[1]
        own_loop = self.decode_loop and self.sharing == "prefix"
        capacity = length + params.max_new_tokens - 1
        started = time.perf_counter()
        cache, computed = self._prefill(prompts, capacity if own_loop else None)  # all but each row's last token
        prefilled = time.perf_counter()
        self.counts["prompt_tokens"] += sum(len(p) for p in prompts)
        self.counts["computed_tokens"] += sum(computed)
        self.counts["prefill_s"] += prefilled - started
        stops = list(params.stop_token_ids) or self.stop_ids
        if own_loop:
            layers = self.model.config.get_text_config().num_hidden_layers  # a multimodal config nests the text's
            start = cache.get(self.cache_kwarg) or empty_reserved_cache(layers, capacity)
            done = decode(self.model, ids, attn, start, self.cache_kwarg, params, stops, self.pad_id, processors,
                          self.fused_step)
            new, logps, kv = done.tokens.cpu(), done.logprobs.cpu(), done.cache
        else:
            new, logps, kv = self._transformers_generate(ids, attn, cache, params, stops, processors)
        self.counts["decode_s"] += time.perf_counter() - prefilled
        gens = []
        stop_set = set(stops)
        for i in range(len(prompts)):
            toks = new[i].tolist()
            end = next((k for k, t in enumerate(toks) if t in stop_set), None)
            n = len(toks) if end is None else end + 1
            gens.append(Generation(token_ids=toks[:n], logprobs=logps[i, :n].tolist(),
                                   finish_reason="length" if end is None else "stop",
                                   cached_tokens=len(prompts[i]) - computed[i]))
        if self.prefix_cache is not None:
            self._keep(prompts, gens, kv, length, new.shape[1])
        return gens

    def _transformers_generate(self, ids: torch.Tensor, attn: torch.Tensor, cache: dict[str, Any],
                               params: SamplingParams, stops: list[int],
                               processors: list[LogitsProcessor] | None
                               ) -> tuple[torch.Tensor, torch.Tensor, DynamicCache]:
        """``model.generate`` continuing ``cache``: the new tokens, their log-probs and the grown cache."""
        sample = params.temperature > 0
        kwargs: dict[str, Any] = {"do_sample": sample, **cache}
        if sample:  # sampling flags only when sampling (transformers warns otherwise)
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or None)
        if processors:
            kwargs["logits_processor"] = LogitsProcessorList(processors)
        out = self.model.generate(input_ids=ids, attention_mask=attn,
                                  max_new_tokens=params.max_new_tokens, eos_token_id=stops,
                                  pad_token_id=self.pad_id, output_logits=True, return_dict_in_generate=True,
                                  **kwargs)
        new = out.sequences[:, ids.shape[1]:].cpu()
        logits = torch.stack(out.logits, dim=1).float().cpu()  # (B, n_new, V), raw
        if sample:
            logits = logits / params.temperature
        return new, gather_logprobs(logits, new), cache_of(out)

    def _keep(self, prompts: list[list[int]], gens: list[Generation], cache: DynamicCache, length: int,
              steps: int) -> None:
        """Put each row's prompt and completion columns in the prefix cache: all that generate ran, which
        is every token but the last one it sampled (never fed back), and nothing after a row stopped."""
        layers = cache_layers(cache)
        for i, (prompt, gen) in enumerate(zip(prompts, gens)):
            fed = min(len(gen.token_ids), steps - 1)
            start = length - len(prompt)
            self.prefix_cache.put(prompt + gen.token_ids[:fed],  # type: ignore[union-attr]
                                  lambda i=i, start=start, fed=fed: row_columns(layers, i, start, length + fed))

    @torch.no_grad()
    def logprobs(self, prompts: list[list[int]], completions: list[list[int]]) -> list[np.ndarray]:
        logits, targets, mask = completion_logits(self.model, prompts, completions, self.pad_id)
        lp = gather_logprobs(logits, targets)
        return [lp[i][mask[i]].cpu().numpy() for i in range(len(prompts))]

    def take_counts(self) -> dict[str, float]:
        """Prompt tokens since the last call: requested, prefilled (run by the model) and served from KV
        computed before (the prefix cache, or another row of the call), under the names the ``sglang``
        engine gives its servers' prefix-cache hits; and the wall seconds spent prefilling prompts and
        decoding (sampling included)."""
        counts, self.counts = self.counts, dict.fromkeys(self.counts, 0.0)
        prompt, computed = counts["prompt_tokens"], counts["computed_tokens"]
        return {"cost/prompt_tokens": prompt, "cost/prefill_tokens": computed, "cost/cached_tokens": prompt - computed,
                "engine/cached_ratio": (prompt - computed) / prompt if prompt else 0.0,
                "time/prefill": counts["prefill_s"], "time/decode": counts["decode_s"]}

    def update_weights(self, learner: WeightSource) -> None:
        """Load the learner's full weights; with LoRA they come merged, under the base model's names."""
        state = learner.policy_state_dict()
        if not state:  # FSDP / ZeRO-3 gather the full weights on the main process only
            raise CapabilityError("the hf engine needs the full weights in every process, but this learner is "
                                  "sharded (FSDP or ZeRO-3); use engine.name=sglang")
        self.model.load_state_dict(state)
        if self.prefix_cache is not None:
            self.prefix_cache.clear()  # every kept column was computed by the old weights
