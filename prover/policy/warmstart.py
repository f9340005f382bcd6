"""SFT warm start: behaviour cloning of expert episodes with a share of random actions mixed in.

A randomly initialised tiny model would never succeed, and RL on zero successes learns nothing (every
GRPO group has zero variance). So before RL the policy clones an expert whose action, on a
``random_action_share`` of turns, is a random admissible one instead: the clone then plays like a
noisy expert and starts from a middling success rate that RL can improve on.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from prover.envs.base import TextEnv
from prover.envs.text import text_problem, unencodable
from prover.episode_chat import EpisodeChat
from prover.errors import CapabilityError
from prover.turn_prompts import agent_spec_for, bounded_text, encode_completion, fit_prompt


def expert_rows(make_env: Callable[[], TextEnv], tokenizer: Any, *, episodes: int, random_share: float,
                seed: int, max_turns: int, history_window: int | None = None,
                chat_kwargs: dict | None = None, max_prompt_tokens: int | None = None,
                on_episode: Callable[[], None] | None = None,
                context: str = "window") -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids) for every turn of noisy-expert episodes on the train split;
    ``on_episode`` is called after each episode (progress: a real engine takes seconds per episode).
    ``context`` is ``rollout.context``: with "chat" each prompt is the episode's chat so far, grown as the
    rollout grows it (prover/episode_chat.py), and an episode whose chat outgrows the budget stops there.

    The episode follows the recorded action, so states after a random action (and the expert's
    recovery from them) are in the data, as they will be in the policy's own rollouts.
    """
    rng = random.Random(seed)
    env = make_env()
    spec = agent_spec_for(env, history_window)
    chat = EpisodeChat(tokenizer, chat_kwargs) if context == "chat" else None
    rows = []
    for ep in range(episodes):
        obs, info = env.reset(seed=10_000_000 + seed * 100_003 + ep, options={"split": "train"})
        task, history = bounded_text(str(info.get("task", obs)), max_prompt_tokens), []
        obs = bounded_text(obs, max_prompt_tokens)
        prompt: list[int] | None = None
        for step in range(max_turns):
            if text_problem(obs, info):  # text no tokenizer can take (a lone surrogate): the rollout ends
                break                    # such an episode as an env error; nothing of it is cloned from here
            expert = env.expert_action()
            if expert is None:
                raise CapabilityError(f"env {type(env).__name__} has no expert (expert_action() returned None); "
                                      "turn the warm start off with warmstart.enabled=false")
            actions = [a for a in (info.get("admissible_actions") or []) if a not in spec.hidden_actions]
            action = rng.choice(actions) if actions and rng.random() < random_share else expert
            if unencodable(action) >= 0:
                break
            if chat is None:
                prompt, _ = fit_prompt(tokenizer, spec, task, obs, info.get("admissible_actions"), history, step,
                                       max_prompt_tokens, chat_kwargs)
            elif prompt is None:
                prompt = chat.opening(spec.chat_opening(task, obs, info.get("admissible_actions")))
            if chat is not None and max_prompt_tokens is not None and len(prompt) > max_prompt_tokens:
                break  # the chat outgrew the budget: the rollout truncates such an episode here too
            completion = encode_completion(tokenizer, spec.format_action(action))
            if prompt is not None:  # bounded as the rollout bounds it; a turn that cannot fit is not cloned
                rows.append((prompt, completion))
            history.append((obs, action))
            obs, _, term, trunc, info = env.step(action)
            obs = bounded_text(obs, max_prompt_tokens)
            if term or trunc:
                break
            if chat is not None:
                prompt = chat.next_prompt(prompt, completion, spec.chat_reply(obs, info.get("admissible_actions"),
                                                                              len(history)))
        if on_episode is not None:
            on_episode()
    return rows
