"""Prompt and completion ids of one turn: the chat template, the prompt budget and how a prompt is fit to it.

Every prompt fits a budget (``prompt_budget``: ``rollout.max_prompt_tokens``, else the model's positions
less ``max_new_tokens``). The policy, in ``fit_prompt``: the oldest history entries are dropped first,
then the observation's end is cut, the cut marked in the text; a prompt that still cannot fit ends its
episode as an env error naming the sizes. Text entering the rollout (observations, the task) is first cut
to ``CHARS_PER_TOKEN`` characters per budget token, so a huge observation costs neither memory nor
tokenizer time. All of it is deterministic, so a branch replaying turn t sees the prompt turn t saw.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from prover.envs.agent_spec import AgentSpec
from prover.envs.base import TextEnv
from prover.episodes.literal_text import ENV_SPANS, encode_chat, encode_literal
from prover.errors import ConfigError
from prover.types import Generation

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def agent_spec_for(env: TextEnv, history_window: int | None = None) -> AgentSpec:
    """The env's agent spec, with the history window overridden when the config asks."""
    spec = env.agent_spec
    return spec if history_window is None else dataclasses.replace(spec, history_window=history_window)


def encode_prompt(tokenizer: PreTrainedTokenizerBase, text: str, chat_kwargs: dict | None = None,
                  env_spans: list[tuple[int, int]] | None = None) -> list[int]:
    """Prompt ids: one user message through the chat template, ready for the assistant's answer. The message
    produces no special token, and its ``env_spans`` (the env's text in it) no added token at all: env text
    stays literal (prover/episodes/literal_text.py)."""
    return encode_chat(tokenizer, [{"role": "user", "content": text, ENV_SPANS: env_spans or []}], True,
                       **(chat_kwargs or {}))


MIN_PROMPT_TOKENS = 32  # below this no template of ours holds a task and an observation
CHARS_PER_TOKEN = 8  # tokenizers average 3-5 characters per token on text; more than this cannot be shown


def prompt_budget(max_prompt_tokens: int | None, max_new_tokens: int, positions: int | None) -> int | None:
    """Most prompt tokens per turn: ``rollout.max_prompt_tokens``, else the model's ``positions`` less
    ``max_new_tokens`` (None: no bound is known). ConfigError when prompt and completion cannot both fit."""
    if positions is None:
        return max_prompt_tokens
    if max_prompt_tokens is None:
        if positions - max_new_tokens < MIN_PROMPT_TOKENS:
            raise ConfigError(f"rollout.sampling.max_new_tokens={max_new_tokens} leaves no room for a prompt in "
                              f"the model's {positions} positions (a prompt needs {MIN_PROMPT_TOKENS}); lower it")
        return positions - max_new_tokens
    if max_prompt_tokens + max_new_tokens > positions:
        raise ConfigError(f"rollout.max_prompt_tokens={max_prompt_tokens} plus rollout.sampling.max_new_tokens="
                          f"{max_new_tokens} is {max_prompt_tokens + max_new_tokens} tokens, more than the model's "
                          f"{positions} positions; lower one of them")
    return max_prompt_tokens


def cut_for_prompt(text: str, keep: int) -> str:
    """The first ``keep`` characters of ``text`` and a mark saying how much was cut."""
    return f"{text[:keep]} [... cut to fit the prompt: {keep} of {len(text)} characters shown]"


def bounded_text(text: str, budget: int | None) -> str:
    """``text`` cut to ``CHARS_PER_TOKEN`` characters per budget token, where it enters the rollout."""
    limit = None if budget is None else CHARS_PER_TOKEN * budget
    return text if limit is None or len(text) <= limit else cut_for_prompt(text, limit)


def fit_prompt(tok: PreTrainedTokenizerBase, spec: AgentSpec, task: str, obs: str, actions: list[str] | None,
               history: list[tuple[str, str]], step: int, budget: int | None,
               chat_kwargs: dict | None = None) -> tuple[list[int] | None, str]:
    """The prompt ids of one turn within ``budget`` tokens and '', or (None, why none fits): the spec's
    window, then fewer history entries (oldest out first), then none and the observation's end cut."""
    def encode(window: int, observation: str) -> list[int]:
        shown = spec if window == spec.history_window else dataclasses.replace(spec, history_window=window)
        text, spans = shown.render_marked(task, observation, actions, history, step)
        return encode_prompt(tok, text, chat_kwargs, spans)

    ids = encode(spec.history_window, obs)
    if budget is None or len(ids) <= budget:
        return ids, ""
    for window in range(min(spec.history_window, len(history)) - 1, -1, -1):
        if len(ids := encode(window, obs)) <= budget:
            return ids, ""
    bare = len(encode(0, cut_for_prompt("", 0)))
    room, obs_ids = budget - bare, encode_literal(tok, obs, [(0, len(obs), True)])
    for _ in range(4):  # a cut can merge tokens differently at its edge: shrink by the overshoot
        if room <= 0:
            break
        if len(ids := encode(0, cut_for_prompt(obs, len(tok.decode(obs_ids[:room]))))) <= budget:
            return ids, ""
        room -= len(ids) - budget
    return None, (f"the prompt cannot fit rollout.max_prompt_tokens={budget}: {bare} tokens with no history and "
                  f"no observation ({len(task)}-character task, {len(actions or [])} admissible actions; the "
                  f"observation has {len(obs)} characters)")


def encode_completion(tokenizer: PreTrainedTokenizerBase, text: str, env_spans: list[tuple[int,
                      int]] | None = None) -> list[int]:
    """Completion ids for a known answer (the warm start's targets): its text, then end of turn. The text
    produces no special token, and its ``env_spans`` (an env's action in it) no added token at all."""
    spans = [(0, len(text), False)] + [(lo, hi, True) for lo, hi in env_spans or []]
    return encode_literal(tokenizer, text, spans) + [tokenizer.eos_token_id]


def completion_of(tokenizer: PreTrainedTokenizerBase, gen: Generation,
                  stops: tuple[str, ...] = ()) -> tuple[list[int], list[float], str]:
    """The ids, log-probs and text a turn keeps of ``gen``. With ``stops`` (the env's ``AgentSpec.stop``)
    the completion ends just after the first occurrence of the first stop string its text holds: the ids
    kept are the engine's own, up to the one that completes the string, and the text is cut right after
    it, so nothing generated past the stop is trained on or parsed."""
    ids = gen.token_ids[:-1] if gen.finish_reason == "stop" else gen.token_ids  # the end-of-turn id: no text
    text = tokenizer.decode(ids, skip_special_tokens=False)
    stop = next((s for s in stops if s in text), None)
    if stop is None:
        return list(gen.token_ids), list(gen.logprobs), text
    lo, hi = 1, len(ids)  # the fewest ids whose text holds the stop (a longer prefix holds it too)
    while lo < hi:
        mid = (lo + hi) // 2
        holds = stop in tokenizer.decode(ids[:mid], skip_special_tokens=False)
        lo, hi = (lo, mid) if holds else (mid + 1, hi)
    kept = tokenizer.decode(ids[:lo], skip_special_tokens=False)
    return list(ids[:lo]), list(gen.logprobs[:lo]), kept[:kept.index(stop) + len(stop)]
