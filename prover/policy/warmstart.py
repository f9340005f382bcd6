"""SFT warm start: behaviour cloning of expert episodes with a share of random actions mixed in.

A randomly initialised tiny model would never succeed, and RL on zero successes learns nothing (every
GRPO group has zero variance). So before RL the policy clones an expert whose action, on a
``random_action_share`` of turns, is a random admissible one instead: the clone then plays like a
noisy expert and starts from a middling success rate that RL can improve on.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prover.envs.base import TextEnv
from prover.envs.text import text_problem, unencodable
from prover.episodes.episode_chat import EpisodeChat
from prover.episodes.turn_prompts import agent_spec_for, bounded_text, encode_completion, fit_prompt
from prover.errors import CapabilityError, EnvTextError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from prover.envs.agent_spec import AgentSpec


@dataclass
class _Cloner:
    """What every expert episode of a warm start shares."""

    tokenizer: PreTrainedTokenizerBase
    spec: AgentSpec
    chat: EpisodeChat | None
    rng: random.Random
    random_share: float
    max_turns: int
    chat_kwargs: dict | None
    max_prompt_tokens: int | None

    def episode(self, env: TextEnv, obs: str, info: dict, rows: list) -> bool:
        """Append one noisy-expert episode's rows; True when it ended because the expert could not go on
        from where a random action took it (off its plan)."""
        task, history = bounded_text(str(info.get("task", obs)), self.max_prompt_tokens), []
        obs, spec, chat = bounded_text(obs, self.max_prompt_tokens), self.spec, self.chat
        prompt: list[int] | None = None
        strayed = False  # a random action other than the expert's was taken
        for step in range(self.max_turns):
            if text_problem(obs, info):  # text no tokenizer can take (a lone surrogate): the rollout ends
                break                    # such an episode as an env error; nothing of it is cloned from here
            expert = env.expert_action()
            if expert is None:
                if strayed:
                    return True
                raise CapabilityError(f"env {type(env).__name__} has no expert (expert_action() returned None); "
                                      "turn the warm start off with warmstart.enabled=false")
            actions = [a for a in (info.get("admissible_actions") or []) if a not in spec.hidden_actions]
            action = self.rng.choice(actions) if actions and self.rng.random() < self.random_share else expert
            strayed = strayed or action != expert
            if unencodable(action) >= 0:
                break
            try:
                if chat is None:
                    prompt, _ = fit_prompt(self.tokenizer, spec, task, obs, info.get("admissible_actions"), history,
                                           step, self.max_prompt_tokens, self.chat_kwargs)
                elif prompt is None:
                    prompt = chat.opening(spec.chat_opening(task, obs, info.get("admissible_actions")))
            except EnvTextError:  # text that cannot be kept literal: the rollout ends such an episode too
                break
            if chat is not None and self.max_prompt_tokens is not None and len(prompt) > self.max_prompt_tokens:
                break  # the chat outgrew the budget: the rollout truncates such an episode here too
            completion = encode_completion(self.tokenizer, *spec.format_action_marked(action))
            if prompt is not None:  # bounded as the rollout bounds it; a turn that cannot fit is not cloned
                rows.append((prompt, completion))
            history.append((obs, action))
            obs, _, term, trunc, info = env.step(action)
            obs = bounded_text(obs, self.max_prompt_tokens)
            if term or trunc:
                break
            if chat is not None:
                reply = spec.chat_reply(obs, info.get("admissible_actions"), len(history))
                try:
                    prompt = chat.next_prompt(prompt, completion, reply)
                except EnvTextError:  # the rollout ends such an episode as an env error: nothing more is cloned
                    break
        return False


def off_plan_line(env: TextEnv, ended: int, episodes: int, random_share: float) -> str:
    """The line saying that (and why) ``ended`` expert episodes stopped at a random action."""
    why = ("its expert follows a fixed plan (expert_follows_plan)" if env.expert_follows_plan else
           "its expert returned None after a random action (declare expert_follows_plan = True if it follows a "
           "fixed plan)")
    return (f"warm start: env {type(env).__name__}: {why}, so {ended} of {episodes} expert episodes ended at the "
            f"random action that left the plan (warmstart.random_action_share={random_share:g}); their turns up "
            "to it are kept")


def expert_rows(make_env: Callable[[], TextEnv], tokenizer: PreTrainedTokenizerBase, *, episodes: int,
                random_share: float,
                seed: int, max_turns: int, history_window: int | None = None,
                chat_kwargs: dict | None = None, max_prompt_tokens: int | None = None,
                on_episode: Callable[[], None] | None = None,
                context: str = "window",
                note: Callable[[str], None] | None = None) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids) for every turn of noisy-expert episodes on the train split;
    ``on_episode`` is called after each episode (progress: a real engine takes seconds per episode).
    ``context`` is ``rollout.context``: with "chat" each prompt is the episode's chat so far, grown as the
    rollout grows it (prover/episodes/episode_chat.py), and an episode whose chat outgrows the budget stops there.

    The episode follows the recorded action, so states after a random action (and the expert's
    recovery from them) are in the data, as they will be in the policy's own rollouts. An expert that
    cannot recover (one that follows a fixed plan, ``TextEnv.expert_follows_plan``, returns None off it)
    ends its episode there; ``note`` gets one line saying how many ended so. An expert that returns None
    before any random action is no expert: CapabilityError.
    """
    env = make_env()
    cloner = _Cloner(tokenizer, agent_spec_for(env, history_window),
                     EpisodeChat(tokenizer, chat_kwargs) if context == "chat" else None, random.Random(seed),
                     random_share, max_turns, chat_kwargs, max_prompt_tokens)
    rows: list[tuple[list[int], list[int]]] = []
    ended = 0
    for ep in range(episodes):
        obs, info = env.reset(seed=10_000_000 + seed * 100_003 + ep, options={"split": "train"})
        ended += cloner.episode(env, obs, info, rows)
        if on_episode is not None:
            on_episode()
    if ended and note is not None:
        note(off_plan_line(env, ended, episodes, random_share))
    return rows
