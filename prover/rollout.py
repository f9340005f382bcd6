"""Rollout: many episodes in lockstep, one batched ``generate`` per turn across all live episodes.

With ``rollout.context=window`` each turn's prompt is the task plus the last few (observation, action)
pairs, rendered by the env's ``AgentSpec`` and encoded once through the tokenizer's chat template; with
``chat`` the episode is one growing chat (``prover/episodes/episode_chat.py``). Either way the ids the engine saw and
produced are what the ``Turn`` keeps (nothing is re-tokenized later). Groups share a task seed, so their G
episodes start from the same state. How a prompt fits its budget: ``prover/episodes/turn_prompts.py``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prover.engines.base import EngineContract
from prover.envs.agent_spec import AgentSpec
from prover.envs.base import TextEnv
from prover.envs.pool import EnvPool
from prover.envs.text import text_problem
from prover.episodes.episode_chat import EpisodeChat, chat_budget_reason
from prover.episodes.turn_prompts import agent_spec_for, bounded_text, completion_of, fit_prompt, prompt_budget
from prover.errors import CapabilityError, EnvFaultError, EnvTextError, ProverError
from prover.seeding import derive_seed
from prover.types import Batch, Group, ResumePoint, SamplingParams, Trajectory, Turn

if TYPE_CHECKING:
    from prover.config import TrainConfig


@dataclass
class _Episode:
    env: TextEnv
    traj: Trajectory
    obs: str
    info: dict
    history: list[tuple[str, str]] = field(default_factory=list)
    done: bool = False
    limit: int = 1 << 30  # stop once the history is this long (bounded continuations)
    prompt: list[int] | None = None  # chat context: the next turn's prompt, grown by each turn
    saved: object = None  # an episode's state while another one holds its env (prover/envs/pool.py)


@dataclass(frozen=True)
class _Prompted:
    """A live episode whose turn prompt fits the budget: what the engine is asked, and how to read its answer."""

    episode: _Episode
    spec: AgentSpec
    prompt: list[int]


def one_line(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:limit]


def contract_problem(obs: object, reward: object, info: object) -> str:
    """Why an env's answer breaks the contract (text observation, finite reward, info dict, valid Unicode), or
    ''."""
    if not isinstance(obs, str):
        return f"observation is {type(obs).__name__}, not text"
    if not isinstance(info, dict):
        return f"info is {type(info).__name__}, not a dict"
    try:
        if not math.isfinite(float(reward)):  # type: ignore[arg-type]  # any object; float() says which
            return f"reward is {reward}"
    except (TypeError, ValueError):
        return f"reward is {type(reward).__name__}, not a number"
    return text_problem(obs, info)  # text no tokenizer can take (a lone surrogate) ends the episode, not the run


def env_step(env: TextEnv, action: str) -> tuple[tuple | None, str]:
    """``env.step(action)``, or (None, one line saying why) when the env raised or broke its contract."""
    try:
        answer = env.step(action)
        obs, reward, _, _, info = answer
    except Exception as exc:  # noqa: BLE001  (any env bug ends this episode, not the run)
        return None, one_line(exc)
    problem = contract_problem(obs, reward, info)
    return (None, problem) if problem else (answer, "")


def env_text_line(env: TextEnv, exc: EnvTextError) -> str:
    """The one line an episode ends with when its env's text cannot go into the prompt literally."""
    return f"env {type(env).__name__}: {exc}"


def check_env_errors(batch: Batch, max_share: float, env_name: str) -> None:
    """Stop the run when more than ``max_share`` of a step's episodes ended by an env fault."""
    trajs = [t for g in batch.groups for t in g.trajectories]
    failed = [t for t in trajs if t.env_error]
    if trajs and len(failed) / len(trajs) > max_share:
        raise EnvFaultError(f"env {env_name!r} failed in {len(failed)} of {len(trajs)} episodes this step (first: "
                            f"{failed[0].env_error}); see groups.jsonl, or raise rollout.max_env_error_share")


class Rollout:
    """Collects groups of episodes with an engine; owns a pool of envs reused across calls. Branching
    continuations, and a batch of more episodes than the bound (an evaluation), share at most
    ``max_branch_envs`` instances (None: continuations share as many as the pool holds, episodes get one each)."""

    def __init__(self, make_env: Callable[[], TextEnv], engine: EngineContract, *, max_turns: int,
                 sampling: SamplingParams, history_window: int | None = None,
                 chat_kwargs: dict | None = None, max_prompt_tokens: int | None = None,
                 context: str = "window", max_branch_envs: int | None = None) -> None:
        self.make_env = make_env
        self.pool = EnvPool(make_env, max_branch_envs)
        self.engine = engine
        self.max_turns = max_turns
        self.sampling = sampling
        self.history_window = history_window
        self.chat_kwargs = chat_kwargs or {}
        self.max_prompt_tokens = max_prompt_tokens  # prompt_budget's answer; None: unbounded
        # "chat": one growing chat per episode (prover/episodes/episode_chat.py); "window": a prompt per turn
        self.chat = EpisodeChat(engine.tokenizer, self.chat_kwargs) if context == "chat" else None
        self.policy_version = 0  # the engine's weights, counted in learner updates; every Turn records it

    def close(self) -> None:
        """Close the pooled envs (``gymnasium.Env.close``; the ``gymnasium`` adapter closes the env it wraps)."""
        self.pool.close()

    def run(self, task_seeds: list[int], group_size: int | list[int], *, split: str = "train", seed: int = 0,
            record_snapshots: bool = False, sampling: SamplingParams | None = None,
            on_turn: Callable[[int, int], None] | None = None) -> Batch:
        """Play ``group_size`` episodes of every task (or ``group_size[i]`` of task i); returns them as
        groups, in task order."""
        sizes = group_size if isinstance(group_size, list) else [group_size] * len(task_seeds)
        members = [(s, g) for s, n in zip(task_seeds, sizes) for g in range(n)]
        envs, shared = self._instances(len(members))
        episodes = []
        for k, (task_seed, g) in enumerate(members):
            env, task_id, saved = envs[k % len(envs)], f"{split}/{task_seed}", None
            try:
                obs, info = env.reset(seed=task_seed, options={"split": split})
                problem = contract_problem(obs, 0.0, info)
                # a shared instance is reset for the next episode at once: keep this one's start
                saved = env.snapshot() if shared and not problem else None
            except ProverError:
                raise  # a bad setting (an unknown split) is the user's to fix, not an env fault
            except Exception as exc:  # noqa: BLE001  (any env bug ends this episode, not the run)
                obs, info, problem = "", {}, one_line(exc)
            if problem:
                obs, info = (obs if isinstance(obs, str) else ""), (info if isinstance(info, dict) else {})
            task = bounded_text(str(info.get("task", obs)), self.max_prompt_tokens)
            obs = bounded_text(obs, self.max_prompt_tokens)
            traj = Trajectory(traj_id=f"{task_id}#{g}", task_id=task_id, task_text=task,
                              gold=env.gold() if not problem else "", env_error=problem)
            episodes.append(_Episode(env, traj, obs, info, done=bool(problem), saved=saved))
        try:
            self._play(episodes, seed, record_snapshots, sampling or self.sampling, on_turn)
        finally:
            if shared:
                self.pool.release()
        ends = list(itertools.accumulate(sizes))
        groups = [Group(f"{split}/{s}", [e.traj for e in episodes[end - n:end]])
                  for s, n, end in zip(task_seeds, sizes, ends)]
        return Batch(groups)

    def _instances(self, n: int) -> tuple[list[TextEnv], bool]:
        """Instances for ``n`` episodes from their reset: one each, or, past the pool's bound for an env
        that can snapshot (an evaluation of 128 episodes on a JVM-backed env), the bound's instances,
        taken in turns as continuations take theirs (``EnvPool.shared``); True in that case."""
        bound = self.pool.max_shared
        if bound is not None and n > bound and getattr(self.pool.take(1)[0], "can_snapshot", False):
            return self.pool.shared(n), True
        return self.pool.take(n), False

    def continue_from(self, starts: list[tuple[Trajectory, int]], *, seed: int = 0,
                      max_new_turns: int | None = None, record_snapshots: bool = False) -> list[Trajectory]:
        """One continuation of the current policy from the state before turn t of each trajectory.

        The env is restored from the turn's snapshot (or, for t == len(turns), from where a bounded
        continuation stopped) and the agent gets the same history, so the continuation sees exactly the
        prompt the original turn saw. Every start is played in the same lockstep batch. With
        ``max_new_turns`` a continuation stops after that many turns and, if unfinished, keeps a
        ``resume`` point to continue from. The returned trajectories hold the prefix's turns (shared,
        not copied) followed by the continuation's own.
        """
        episodes = []
        envs = self.pool.shared(len(starts))  # restored before each turn (EnvPool.hold), shared if fewer
        for k, (traj, t) in enumerate(starts):
            env = envs[k % len(envs)]
            obs, admissible, snapshot = self._branch_point(traj, t)
            branch = Trajectory(traj_id=f"{traj.traj_id}@{t}", task_id=traj.task_id, task_text=traj.task_text,
                                gold=traj.gold, turns=list(traj.turns[:t]))
            history = [(turn.observation, turn.action) for turn in traj.turns[:t]]
            limit = self.max_turns if max_new_turns is None else min(self.max_turns, t + max_new_turns)
            episodes.append(_Episode(env, branch, obs, {"admissible_actions": list(admissible)}, history=history,
                                     limit=limit, prompt=self._chat_at(traj, t, env, obs, admissible),
                                     saved=snapshot))
        try:
            self._play(episodes, seed, record_snapshots, self.sampling, None)
        finally:
            self.pool.release()
        return [e.traj for e in episodes]

    def _chat_at(self, traj: Trajectory, t: int, env: TextEnv, obs: str,
                 admissible: tuple[str, ...]) -> list[int] | None:
        """In a chat context, the prompt turn ``t`` saw (or, past the last turn, the one it would see)."""
        if self.chat is None or t == 0:
            return None
        if t < len(traj.turns):
            return list(traj.turns[t].prompt_ids)
        last = traj.turns[-1]
        return self.chat.next_prompt(last.prompt_ids, last.completion_ids,
                                     agent_spec_for(env, self.history_window).chat_reply(obs, list(admissible), t))

    @staticmethod
    def _branch_point(traj: Trajectory, t: int) -> tuple[str, tuple[str, ...], Any]:
        if t == len(traj.turns) and traj.resume is not None:
            if traj.resume.snapshot is None:
                raise CapabilityError(f"trajectory {traj.traj_id} stopped without a snapshot; continue it with "
                                      "record_snapshots=True to branch from where it stopped")
            return traj.resume.observation, traj.resume.admissible, traj.resume.snapshot
        if not 0 <= t < len(traj.turns):
            raise IndexError(f"trajectory {traj.traj_id} has {len(traj.turns)} turns; cannot branch before turn {t}")
        turn = traj.turns[t]
        if turn.snapshot is None:
            raise CapabilityError(f"trajectory {traj.traj_id} was recorded without snapshots; a credit method "
                                  "that branches must set needs_snapshots = True")
        return turn.observation, turn.admissible, turn.snapshot

    def _prompts(self, live: list[_Episode]) -> list[_Prompted]:
        """The live episodes whose prompt fits the budget, each with its spec and prompt, in order; the others
        end here: as env errors saying why when no first prompt fits, as truncated when a chat outgrows it."""
        kept: list[_Prompted] = []
        for e in live:
            spec = agent_spec_for(e.env, self.history_window)
            try:
                prompt, problem = self._prompt(e, spec)
            except EnvTextError as exc:  # this env's text cannot be kept literal: this episode ends
                prompt, problem = None, env_text_line(e.env, exc)
            if prompt is None:
                e.done, e.traj.env_error = True, problem
                continue
            if self.max_prompt_tokens is not None and len(prompt) > self.max_prompt_tokens:  # a chat outgrew it
                e.done, e.traj.truncated = True, True
                e.traj.truncation = chat_budget_reason(len(prompt), self.max_prompt_tokens)
                continue
            kept.append(_Prompted(e, spec, prompt))
        return kept

    def _prompt(self, e: _Episode, spec: AgentSpec) -> tuple[list[int] | None, str]:
        """This turn's prompt ids and '', or (None, why no first prompt fits)."""
        actions = e.info.get("admissible_actions")
        if self.chat is None:
            return fit_prompt(self.engine.tokenizer, spec, e.traj.task_text, e.obs, actions, e.history,
                              len(e.history), self.max_prompt_tokens, self.chat_kwargs)
        if e.prompt is None:  # turn 0: every later turn's prompt was grown from the one before
            e.prompt = self.chat.opening(spec.chat_opening(e.traj.task_text, e.obs, actions))
            if self.max_prompt_tokens is not None and len(e.prompt) > self.max_prompt_tokens:
                return None, (f"the chat's opening messages take {len(e.prompt)} tokens, more than "
                              f"rollout.max_prompt_tokens={self.max_prompt_tokens} ({len(e.traj.task_text)}-"
                              f"character task, {len(actions or [])} admissible actions; the observation has "
                              f"{len(e.obs)} characters)")
        return e.prompt, ""

    def _play(self, episodes: list[_Episode], seed: int, record_snapshots: bool, sampling: SamplingParams,
              on_turn: Callable[[int, int], None] | None) -> None:
        tok = self.engine.tokenizer
        for turn in itertools.count():
            # the turn cap counts the episode's whole history, so a branch resumed at turn t has
            # max_turns - t turns left
            live = [e for e in episodes if not e.done and len(e.history) < min(e.limit, self.max_turns)]
            if not live:
                break
            ready = self._prompts(live)
            live = [asked.episode for asked in ready]
            self.pool.assign(live)
            gens = self.engine.generate([asked.prompt for asked in ready], sampling,
                                        seed=derive_seed(seed, turn, "turn")) if ready else []
            for asked, gen in zip(ready, gens):
                e, spec, prompt = asked.episode, asked.spec, asked.prompt
                completion_ids, logprobs, text = completion_of(tok, gen, spec.stop)
                parsed = spec.parse(text)
                self.pool.hold(e)
                state_key = e.env.state_key()
                snapshot = e.env.snapshot() if record_snapshots else None
                answer, fault = env_step(e.env, parsed.action)
                if answer is None:  # the env failed: the episode ends as failed, the run goes on
                    e.done, e.traj.env_error = True, fault
                    answer = (e.obs, 0.0, True, False, {"is_action_valid": False})
                obs, reward, term, trunc, info = answer
                e.traj.turns.append(Turn(
                    prompt_ids=prompt, completion_ids=completion_ids, logprobs=logprobs,
                    observation=e.obs, completion_text=text, action=parsed.action,
                    format_valid=parsed.format_valid, action_valid=bool(info.get("is_action_valid", True)),
                    reward=float(reward), state_key=state_key, snapshot=snapshot, history=tuple(e.history),
                    admissible=tuple(e.info.get("admissible_actions") or ()), policy_version=self.policy_version))
                e.history.append((e.obs, parsed.action))
                e.obs, e.info = bounded_text(obs, self.max_prompt_tokens), info
                if self.chat is not None and not e.done and not (term or trunc):
                    reply = spec.chat_reply(e.obs, info.get("admissible_actions"), len(e.history))
                    try:
                        e.prompt = self.chat.next_prompt(prompt, completion_ids, reply)
                    except EnvTextError as exc:  # this env's reply breaks the chat: this episode ends
                        e.done, e.traj.env_error = True, env_text_line(e.env, exc)
                if term or trunc:
                    e.done = True
                    e.traj.won = bool(info.get("won", False))
                    e.traj.truncated = bool(trunc and not term)
                    e.traj.truncation = "env" if e.traj.truncated else ""
            if on_turn is not None:
                on_turn(turn, len(live))
        self._stop(episodes, record_snapshots)

    def _stop(self, episodes: list[_Episode], record_snapshots: bool) -> None:
        """Mark the episodes still running: truncated at the turn cap, or resumable where a bounded
        continuation stopped."""
        for e in episodes:
            if e.done:
                continue
            if len(e.history) >= self.max_turns:
                e.done, e.traj.truncated, e.traj.truncation = True, True, "max_turns"
            else:  # stopped by a bounded continuation: keep where, to go on from it later
                if record_snapshots:
                    self.pool.hold(e)
                e.done = True
                e.traj.resume = ResumePoint(e.env.snapshot() if record_snapshots else None, e.obs,
                                            tuple(e.info.get("admissible_actions") or ()))


def build_rollout(cfg: TrainConfig, engine: EngineContract, make_env_fn: Callable[[], TextEnv]) -> Rollout:
    """The rollout of a run: the training run's and `prover eval`'s, so both sample the same way."""
    s = cfg.rollout.sampling
    budget = prompt_budget(cfg.rollout.max_prompt_tokens, s.max_new_tokens, engine.context_length)
    branch_envs = cfg.rollout.max_branch_envs or cfg.rollout.groups_per_step * cfg.rollout.group_size
    return Rollout(make_env_fn, engine, max_turns=cfg.rollout.max_turns,
                   sampling=SamplingParams(s.max_new_tokens, s.temperature, s.top_p, s.top_k),
                   history_window=cfg.rollout.history_window, chat_kwargs=cfg.model.chat_template_kwargs,
                   max_prompt_tokens=budget, context=cfg.rollout.context,
                   max_branch_envs=branch_envs)


def engine_counts(engine: EngineContract, phase: str) -> dict[str, float]:
    """The engine's request counts since the last call, named by phase (``cost/branch_cached_tokens``);
    none for engines that keep no counts (``hf``)."""
    return {k.replace("/", f"/{phase}_", 1): v for k, v in engine.take_counts().items()}
