"""The ``hf`` engine: transformers ``generate`` on CPU or one GPU, token ids in and out.

Also home of the two helpers every torch-side room shares: loading a policy folder, and the
log-probs of completions given prompts (``completion_logprobs``), which the learner trains through.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from prover.errors import CapabilityError, CheckpointError
from prover.seeding import derive_seed
from prover.types import Generation, SamplingParams

def quiet_transformers() -> None:
    """Keep per-file load/save progress bars and info logs out of the run's one-line-per-step output."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


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


def load_tokenizer(path: str | Path) -> Any:
    from transformers import AutoTokenizer

    p = check_model_dir(path)
    try:
        tok = AutoTokenizer.from_pretrained(str(p))
    except Exception as exc:  # a broken tokenizer file is the user's folder, not our bug
        raise CheckpointError(f"could not load the tokenizer in {str(p)!r}: {exc}") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(path: str | Path, dtype: str = "float32", device: str = "cpu") -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    quiet_transformers()
    p = check_model_dir(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(p), dtype=DTYPES[dtype])
    except Exception as exc:
        raise CheckpointError(f"could not load the model in {str(p)!r}: {exc}") from None
    return model.to(device)


def stop_ids(tokenizer: Any) -> list[int]:
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
    logits = out.logits[:, :-1].float()  # (B, C, V): column j predicts position length - C + j
    targets = ids[:, length - c_max:].to(device)
    mask = torch.zeros((len(seqs), c_max), dtype=torch.bool, device=device)
    for i, c in enumerate(completions):
        mask[i, c_max - len(c):] = True
    return logits, targets, mask


def gather_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def _kwargs_model(engine_cls: type) -> type:
    """A pydantic model of the constructor's keyword arguments (less the run's own), built from its
    signature so the check can never drift from what the constructor takes."""
    import inspect
    import typing

    from pydantic import ConfigDict, create_model

    hints = typing.get_type_hints(engine_cls.__init__)
    fields = {name: (hints.get(name, Any), p.default)
              for name, p in inspect.signature(engine_cls.__init__).parameters.items()
              if name != "self" and name not in engine_cls.RUN_ARGS and p.default is not p.empty}
    return create_model(f"{engine_cls.__name__}Kwargs", __config__=ConfigDict(extra="forbid"), **fields)


class HFEngine:
    """Sampling with ``model.generate``; log-probs are of the temperature-scaled distribution."""

    def __init__(self, model_path: str | Path, dtype: str = "float32", device: str | None = None,
                 batch_size: int = 64) -> None:
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = load_tokenizer(model_path)
        self.model = load_model(model_path, dtype, self.device).eval()
        self.batch_size = batch_size
        self.stop_ids = stop_ids(self.tokenizer)
        self.pad_id = self.tokenizer.pad_token_id

    # set by the run from model.path / model.dtype, never through engine.kwargs
    RUN_ARGS = {"model_path": "model.path", "dtype": "model.dtype"}

    @classmethod
    def validate_kwargs(cls, kwargs: dict[str, Any]) -> Any:
        """``engine.kwargs`` checked against the constructor's own arguments when the config loads, so a
        typo is one ConfigError naming the field, not a TypeError after the warm start."""
        from prover.config import parse_plugin_config
        from prover.errors import ConfigError

        for key, where in cls.RUN_ARGS.items():
            if key in kwargs:
                raise ConfigError(f"engine.kwargs.{key} is set by the run; use {where} instead")
        return parse_plugin_config(_kwargs_model(cls), dict(kwargs), "engine.kwargs", "hf")

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
