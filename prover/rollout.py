"""Rollout: many episodes in lockstep, one batched ``generate`` per turn across all live episodes.

Each turn's prompt is the task plus the last few (observation, action) pairs, rendered by the env's
``AgentSpec`` and encoded once through the tokenizer's chat template; the ids the engine saw and
produced are what the ``Turn`` keeps (nothing is re-tokenized later). Groups share a task seed, so
their G episodes start from the same state.

Every prompt fits a budget (``prompt_budget``: ``rollout.max_prompt_tokens``, else the model's positions
less ``max_new_tokens``). The policy, in ``fit_prompt``: the oldest history entries are dropped first,
then the observation's end is cut, the cut marked in the text; a prompt that still cannot fit ends its
episode as an env error naming the sizes. Text entering the rollout (observations, the task) is first cut
to ``CHARS_PER_TOKEN`` characters per budget token, so a huge observation costs neither memory nor
tokenizer time. All of it is deterministic, so a branch replaying turn t sees the prompt turn t saw.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prover.envs.agent_spec import AgentSpec
from prover.envs.base import TextEnv
from prover.envs.text import text_problem
from prover.errors import ConfigError, EnvFaultError, ProverError
from prover.seeding import derive_seed
from prover.types import Batch, Generation, Group, ResumePoint, SamplingParams, Trajectory, Turn

if TYPE_CHECKING:
    from prover.config import TrainConfig


def agent_spec_for(env: TextEnv, history_window: int | None = None) -> AgentSpec:
    """The env's agent spec, with the history window overridden when the config asks."""
    spec = env.agent_spec
    return spec if history_window is None else dataclasses.replace(spec, history_window=history_window)


def encode_prompt(tokenizer: Any, text: str, chat_kwargs: dict | None = None) -> list[int]:
    """Prompt ids: one user message through the chat template, ready for the assistant's answer."""
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        tokenize=True, **(chat_kwargs or {}))
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # newer transformers return a BatchEncoding
        ids = ids["input_ids"]
    return list(ids)


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


def fit_prompt(tok: Any, spec: AgentSpec, task: str, obs: str, actions: list[str] | None,
               history: list[tuple[str, str]], step: int, budget: int | None,
               chat_kwargs: dict | None = None) -> tuple[list[int] | None, str]:
    """The prompt ids of one turn within ``budget`` tokens and '', or (None, why none fits): the spec's
    window, then fewer history entries (oldest out first), then none and the observation's end cut."""
    def encode(window: int, observation: str) -> list[int]:
        shown = spec if window == spec.history_window else dataclasses.replace(spec, history_window=window)
        return encode_prompt(tok, shown.render(task, observation, actions, history, step), chat_kwargs)

    ids = encode(spec.history_window, obs)
    if budget is None or len(ids) <= budget:
        return ids, ""
    for window in range(min(spec.history_window, len(history)) - 1, -1, -1):
        if len(ids := encode(window, obs)) <= budget:
            return ids, ""
    bare = len(encode(0, cut_for_prompt("", 0)))
    room, obs_ids = budget - bare, tok.encode(obs, add_special_tokens=False)
    for _ in range(4):  # a cut can merge tokens differently at its edge: shrink by the overshoot
        if room <= 0:
            break
        if len(ids := encode(0, cut_for_prompt(obs, len(tok.decode(obs_ids[:room]))))) <= budget:
            return ids, ""
        room -= len(ids) - budget
    return None, (f"the prompt cannot fit rollout.max_prompt_tokens={budget}: {bare} tokens with no history and "
                  f"no observation ({len(task)}-character task, {len(actions or [])} admissible actions; the "
                  f"observation has {len(obs)} characters)")


def encode_completion(tokenizer: Any, text: str) -> list[int]:
    """Completion ids for a known answer (the warm start's targets): its text, then end of turn."""
    return list(tokenizer.encode(text, add_special_tokens=False)) + [tokenizer.eos_token_id]


def completion_of(tokenizer: Any, gen: Generation,
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


@dataclass
class _Episode:
    env: TextEnv
    traj: Trajectory
    obs: str
    info: dict
    history: list[tuple[str, str]] = field(default_factory=list)
    done: bool = False
    limit: int = 1 << 30  # stop once the history is this long (bounded continuations)


def one_line(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:limit]


def contract_problem(obs: Any, reward: Any, info: Any) -> str:
    """Why an env's answer breaks the contract (text observation, finite reward, info dict, valid Unicode), or
    ''."""
    if not isinstance(obs, str):
        return f"observation is {type(obs).__name__}, not text"
    if not isinstance(info, dict):
        return f"info is {type(info).__name__}, not a dict"
    try:
        if not math.isfinite(float(reward)):
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


def check_env_errors(batch: Batch, max_share: float, env_name: str) -> None:
    """Stop the run when more than ``max_share`` of a step's episodes ended by an env fault."""
    trajs = [t for g in batch.groups for t in g.trajectories]
    failed = [t for t in trajs if t.env_error]
    if trajs and len(failed) / len(trajs) > max_share:
        raise EnvFaultError(f"env {env_name!r} failed in {len(failed)} of {len(trajs)} episodes this step (first: "
                            f"{failed[0].env_error}); see groups.jsonl, or raise rollout.max_env_error_share")


class Rollout:
    """Collects groups of episodes with an engine; owns a pool of envs reused across calls."""

    def __init__(self, make_env: Callable[[], TextEnv], engine: Any, *, max_turns: int,
                 sampling: SamplingParams, history_window: int | None = None,
                 chat_kwargs: dict | None = None, max_prompt_tokens: int | None = None) -> None:
        self.make_env = make_env
        self.engine = engine
        self.max_turns = max_turns
        self.sampling = sampling
        self.history_window = history_window
        self.chat_kwargs = chat_kwargs or {}
        self.max_prompt_tokens = max_prompt_tokens  # prompt_budget's answer; None: unbounded
        self.policy_version = 0  # the engine's weights, counted in learner updates; every Turn records it
        self._pool: list[TextEnv] = []

    def _envs(self, n: int) -> list[TextEnv]:
        while len(self._pool) < n:
            self._pool.append(self.make_env())
        return self._pool[:n]

    def close(self) -> None:
        """Close the pooled envs (``gymnasium.Env.close``; the ``gymnasium`` adapter closes the env it wraps)."""
        pool, self._pool = self._pool, []
        for env in pool:
            env.close()

    def run(self, task_seeds: list[int], group_size: int | list[int], *, split: str = "train", seed: int = 0,
            record_snapshots: bool = False, sampling: SamplingParams | None = None,
            on_turn: Callable[[int, int], None] | None = None) -> Batch:
        """Play ``group_size`` episodes of every task (or ``group_size[i]`` of task i); returns them as
        groups, in task order."""
        sizes = group_size if isinstance(group_size, list) else [group_size] * len(task_seeds)
        members = [(s, g) for s, n in zip(task_seeds, sizes) for g in range(n)]
        episodes = []
        for env, (task_seed, g) in zip(self._envs(len(members)), members):
            task_id = f"{split}/{task_seed}"
            try:
                obs, info = env.reset(seed=task_seed, options={"split": split})
                problem = contract_problem(obs, 0.0, info)
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
            episodes.append(_Episode(env, traj, obs, info, done=bool(problem)))
        self._play(episodes, seed, record_snapshots, sampling or self.sampling, on_turn)
        ends = list(itertools.accumulate(sizes))
        groups = [Group(f"{split}/{s}", [e.traj for e in episodes[end - n:end]])
                  for s, n, end in zip(task_seeds, sizes, ends)]
        return Batch(groups)

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
        for env, (traj, t) in zip(self._envs(len(starts)), starts):
            obs, admissible, snapshot = self._branch_point(traj, t)
            env.restore(snapshot)
            branch = Trajectory(traj_id=f"{traj.traj_id}@{t}", task_id=traj.task_id, task_text=traj.task_text,
                                gold=traj.gold, turns=list(traj.turns[:t]))
            history = [(turn.observation, turn.action) for turn in traj.turns[:t]]
            limit = self.max_turns if max_new_turns is None else min(self.max_turns, t + max_new_turns)
            episodes.append(_Episode(env, branch, obs, {"admissible_actions": list(admissible)}, history=history,
                                     limit=limit))
        self._play(episodes, seed, record_snapshots, self.sampling, None)
        return [e.traj for e in episodes]

    @staticmethod
    def _branch_point(traj: Trajectory, t: int) -> tuple[str, tuple[str, ...], Any]:
        from prover.errors import CapabilityError

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

    def _prompts(self, live: list[_Episode]) -> tuple[list[_Episode], list[AgentSpec], list[list[int]]]:
        """The live episodes whose prompt fits the budget, their specs and prompts; the others end here
        as env errors, saying why."""
        kept: tuple[list, list, list] = ([], [], [])
        for e in live:
            spec = agent_spec_for(e.env, self.history_window)
            prompt, problem = fit_prompt(self.engine.tokenizer, spec, e.traj.task_text, e.obs,
                                         e.info.get("admissible_actions"), e.history, len(e.history),
                                         self.max_prompt_tokens, self.chat_kwargs)
            if prompt is None:
                e.done, e.traj.env_error = True, problem
                continue
            for part, item in zip(kept, (e, spec, prompt)):
                part.append(item)
        return kept

    def _play(self, episodes: list[_Episode], seed: int, record_snapshots: bool, sampling: SamplingParams,
              on_turn: Callable[[int, int], None] | None) -> None:
        tok = self.engine.tokenizer
        for turn in itertools.count():
            # the turn cap counts the episode's whole history, so a branch resumed at turn t has
            # max_turns - t turns left
            live = [e for e in episodes if not e.done and len(e.history) < min(e.limit, self.max_turns)]
            if not live:
                break
            live, specs, prompts = self._prompts(live)
            gens = self.engine.generate(prompts, sampling, seed=derive_seed(seed, turn, "turn")) if live else []
            for spec, e, prompt, gen in zip(specs, live, prompts, gens):
                completion_ids, logprobs, text = completion_of(tok, gen, spec.stop)
                parsed = spec.parse(text)
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
                if term or trunc:
                    e.done = True
                    e.traj.won = bool(info.get("won", False))
                    e.traj.truncated = bool(trunc and not term)
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
                e.done, e.traj.truncated = True, True
            else:  # stopped by a bounded continuation: keep where, to go on from it later
                e.done = True
                e.traj.resume = ResumePoint(e.env.snapshot() if record_snapshots else None, e.obs,
                                            tuple(e.info.get("admissible_actions") or ()))


def build_rollout(cfg: TrainConfig, engine: Any, make_env_fn: Any) -> Rollout:
    """The rollout of a run: the training run's and `prover eval`'s, so both sample the same way."""
    s = cfg.rollout.sampling
    budget = prompt_budget(cfg.rollout.max_prompt_tokens, s.max_new_tokens, engine.context_length)
    return Rollout(make_env_fn, engine, max_turns=cfg.rollout.max_turns,
                   sampling=SamplingParams(s.max_new_tokens, s.temperature, s.top_p, s.top_k),
                   history_window=cfg.rollout.history_window, chat_kwargs=cfg.model.chat_template_kwargs,
                   max_prompt_tokens=budget)


def engine_counts(engine: Any, phase: str) -> dict[str, float]:
    """The engine's request counts since the last call, named by phase (``cost/branch_cached_tokens``);
    none for engines that keep no counts (``hf``)."""
    return {k.replace("/", f"/{phase}_", 1): v for k, v in engine.take_counts().items()}
