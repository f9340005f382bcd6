"""The training loop, top to bottom as in docs/architecture.md ("One step of training"):

    rollout -> credit (judge, brancher) -> learner update -> weight sync -> metrics, checkpoint

Everything that varies (env, engine, credit method, judge) comes from a registry by name; this file
never asks which one it is running.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import numpy as np

from prover import policy
from prover.config import LearnerConfig, TrainConfig, engine_dtype
from prover.credit import CreditContext, make_credit
from prover.credit.base import CreditContract
from prover.engines import make_engine
from prover.envs import make_configured_env
from prover.episodes.async_rollout import make_batches
from prover.episodes.branching import Brancher
from prover.episodes.truth import TruthScorer
from prover.errors import EnvFaultError, NonFiniteError
from prover.judges import make_judge
from prover.progress import Reporter
from prover.rollout import Rollout, build_rollout, check_env_errors, engine_counts
from prover.rundir.eval_cache import EvalCache
from prover.rundir.preflight import precision_note, preflight
from prover.rundir.run import RunDir, RunLock, load_checkpoint_state
from prover.rundir.samples import saved_groups
from prover.rundir.trackers import Trackers
from prover.seeding import derive_seed, eval_seed
from prover.system.distributed import Ranks
from prover.system.environment import cpu, torch_side
from prover.system.threads import apply_threads
from prover.types import Advantages, Batch, MetricsRow, RolloutRequest, SamplingParams

T = TypeVar("T")
P = ParamSpec("P")

TRAIN_SEED_RANGE = 1_000_000


@dataclass
class Phases:
    """Wall time per phase of one step (the "time/..." metrics)."""

    seconds: dict[str, float] = field(default_factory=dict)

    def timed(self, name: str, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
        return out


def task_seeds(cfg: TrainConfig, step: int) -> list[int]:
    """The train tasks of one step: a pure function of (seed, step), so a resumed step repeats exactly."""
    rng = random.Random(derive_seed(cfg.seed, step, "tasks"))
    return rng.sample(range(TRAIN_SEED_RANGE), cfg.rollout.groups_per_step)


def rollout_request(cfg: TrainConfig, credit: CreditContract, ranks: Ranks, step: int) -> RolloutRequest:
    """What step ``step`` rolls out: this process's share of its tasks, G episodes of each (or the method's
    sizes), snapshots when the method branches."""
    all_tasks = task_seeds(cfg, step)
    sizes = ranks.share(credit.group_sizes(step, len(all_tasks), cfg.rollout.group_size))
    return RolloutRequest(step, ranks.share(all_tasks), sizes, derive_seed(cfg.seed, step, "rollout"),
                          credit.needs_snapshots)


def batch_metrics(batch: Batch) -> dict[str, float]:
    trajs = [t for g in batch.groups for t in g.trajectories]
    turns = batch.turns()
    return {
        "rollout/success": float(np.mean([t.won for t in trajs])),
        "rollout/turns": float(np.mean([len(t.turns) for t in trajs])),
        "rollout/format_valid": float(np.mean([t.format_valid for t in turns])) if turns else 0.0,
        "rollout/action_valid": float(np.mean([t.action_valid for t in turns])) if turns else 0.0,
        "rollout/mixed_groups": float(np.mean([0 < g.n_won < len(g.trajectories) for g in batch.groups])),
        "rollout/group_size": float(np.mean([len(g.trajectories) for g in batch.groups])),
        "cost/rollout_tokens": float(sum(t.n_tokens for t in turns)),
        "cost/rollout_unique_tokens": float(sum(t.unique_tokens for t in trajs)),
        "rollout/env_errors": float(sum(bool(t.env_error) for t in trajs)),
    }


def evaluate_policy(cfg: TrainConfig, rollout: Rollout, step: int = 0, ranks: Ranks | None = None,
                    on_turn: Callable[[int, int], None] | None = None) -> tuple[MetricsRow, Batch]:
    """Held-out success, the one evaluation of the trainer and `prover eval`: one episode per task of the
    eval split, the same tasks every time, at ``eval.temperature``; with ``ranks`` each process plays its
    share. Returns the metrics record (the same on every process) and this process's episodes."""
    e, s = cfg.eval, rollout.sampling
    tasks = list(range(e.episodes))
    batch = rollout.run(ranks.share(tasks) if ranks else tasks, 1, split=e.split, seed=eval_seed(cfg.seed),
                        sampling=SamplingParams(s.max_new_tokens, e.temperature, s.top_p, s.top_k), on_turn=on_turn)
    mine = [t.won for g in batch.groups for t in g.trajectories]
    won = [w for part in ranks.gather(mine) for w in part] if ranks else mine
    # a pretrained policy that writes free text fails on the format before it can fail on the task
    formats = [tn.format_valid for g in batch.groups for t in g.trajectories for tn in t.turns]
    valid = [v for part in ranks.gather(formats) for v in part] if ranks else formats
    record: MetricsRow = {"step": step, "phase": "eval", "eval/success": float(np.mean(won)),
                                                                               "eval/episodes": float(e.episodes),
              "eval/format_valid": float(np.mean(valid)) if valid else 0.0}
    counts = engine_counts(rollout.engine, "eval")  # cost/eval_prompt_tokens, its prefilled and cached shares
    return record | (ranks.merged(counts) if ranks else counts), batch


def nonfinite_streak(record: dict[str, float], streak: int, cfg: LearnerConfig, report: Reporter) -> int:
    """Steps in a row that met a non-finite advantage, loss or gradient (each was left out of the
    update); past ``cfg.max_nonfinite_steps`` the run stops with one line."""
    rows, updates = record.get("learner/nonfinite_rows", 0.0), record.get("learner/nonfinite_updates", 0.0)
    if not rows and not updates:
        return 0
    streak += 1
    report.note(f"step {record['step']}: non-finite numbers: {rows:.0f} row(s) dropped, {updates:.0f} optimizer "
                "step(s) skipped; the weights are unchanged by them")
    if streak >= cfg.max_nonfinite_steps:
        raise NonFiniteError(f"{streak} steps in a row met non-finite advantages, losses or gradients (step "
                             f"{record['step']}); check the env's rewards and the learner's settings")
    return streak


def check_env_errors_saved(batch: Batch, cfg: TrainConfig, run: RunDir, step: int, is_main: bool) -> None:
    """``check_env_errors``; when it stops the run, the groups whose env failed are written to groups.jsonl
    first, so that the line's "see groups.jsonl" finds them (the step never reaches its own record)."""
    try:
        check_env_errors(batch, cfg.rollout.max_env_error_share, cfg.env.name)
    except EnvFaultError:
        if is_main:
            failed = Batch([g for g in batch.groups if any(t.env_error for t in g.trajectories)])
            for kept in saved_groups(failed, Advantages(values=[], train_batch=failed), step,
                                     max(1, cfg.run.save_groups)):
                run.log(kept, run.groups_path)
        raise


class Trainer:
    """Builds the parts from a config and runs the loop. ``Trainer(cfg).train()``."""

    def __init__(self, cfg: TrainConfig, resume: bool = False, reporter: Reporter | None = None) -> None:
        self.cfg, self.resume = cfg, resume
        self.ranks = Ranks()  # one process, or one of several under `accelerate launch`
        self.run = RunDir(cfg)
        self.report = reporter or Reporter(quiet=not self.ranks.is_main)
        # what the parts built so far hold (servers, a worker process, envs, a local model), each part's close
        # entered as it is built: close() releases them, last built first, however far the build got
        self.built = contextlib.ExitStack()
        self.lock = RunLock(self.run.path) if self.ranks.is_main else None  # one writer per run folder
        if self.lock is not None:
            self.lock.refuse_if_held()  # first: a folder in use says so, whatever else is wrong with it
        ckpt = self.run.require_checkpoint() if resume else None  # reads the folder, changes nothing
        # every check that can fail, before the run folder is touched; the model checked once, kept as a spec
        self.model = preflight(cfg, resume)
        self.ranks.check_config(cfg.rollout.groups_per_step, cfg.rollout.max_off_policy_steps)
        apply_threads(cfg.threads, self.model.hidden_size)  # before torch builds or loads anything
        if self.ranks.is_main and (why := precision_note(cfg, bool(torch_side()["gpus"]), cpu()["flags"])):
            self.report.note(why)
        if ckpt is not None:  # a resume: say which damaged checkpoints it passes over
            for line in self.run.damaged:
                self.report.note(f"{line}; resuming from {ckpt.name} instead")
        if self.lock is not None:
            self.lock.acquire()
        try:
            self._build(ckpt)
        except BaseException:
            self.close()
            raise

    def _build(self, ckpt: Path | None) -> None:
        from prover.learning.learner import Learner  # lazy: torch loads when a run is built, not for its checks

        cfg, resume = self.cfg, self.resume
        if self.ranks.is_main:  # only the main process writes the run folder
            moved = self.run.start(fresh=not resume)
            if moved is not None:
                self.report.note(f"starting a new run in {self.run.path}: the old run's metrics and checkpoints "
                                 f"were moved to {moved} (use --resume to continue a run instead)")
        self.ranks.barrier()
        self.make_env = lambda: make_configured_env(cfg.env)
        lora = cfg.model.lora.enabled  # a LoRA checkpoint holds the adapter alone: it goes onto the base
        policy_dir = ckpt if ckpt and not lora else policy.starting_policy(cfg, self.model, self.run, self.make_env,
                                                                                     self.report)
        self.policy_dir = None if ckpt else policy_dir  # the starting policy, whose evaluation may be kept
        self.learner = Learner(policy_dir, cfg.learner, dtype=cfg.model.dtype, seed=cfg.seed,
                               max_completion_tokens=cfg.rollout.sampling.max_new_tokens, lora=cfg.model.lora,
                               adapter=ckpt if lora else None)
        self.ranks.check_learner(cfg.learner.mini_batch_rows, cfg.learner.micro_batch_rows, cfg.model.lora.enabled,
                                 self.learner.accelerator, resume)
        self.start_step = load_checkpoint_state(ckpt, self.learner) if ckpt else 0
        if ckpt and self.ranks.is_main:
            self.run.truncate_history(self.start_step)
        self.ranks.barrier()
        self.credit = make_credit(cfg)
        self.judge = make_judge(cfg)  # None when judge.name is unset
        if self.judge is not None:
            self.built.callback(self.judge.close)
        self.engine = make_engine(cfg.engine.name, str(policy_dir), dtype=engine_dtype(cfg.model), **cfg.engine.kwargs)
        self.built.callback(self.engine.close)  # e.g. the sglang engine's weight-update group
        self.ranks.barrier()  # no process samples before the engine is ready (servers hold the starting policy)
        if ckpt and lora:  # the engine holds the base; the resumed adapter reaches it merged
            self.engine.update_weights(self.learner)
            self.ranks.barrier()
        self.rollout = build_rollout(cfg, self.engine, self.make_env)
        self.built.callback(self.rollout.close)  # its pooled envs (a JVM each for TWX): a bench runs many cells
        # each step's batch: sampled when asked for, or ahead by a worker (rollout.max_off_policy_steps)
        self.batches = make_batches(cfg, self.rollout, lambda step: rollout_request(cfg, self.credit, self.ranks, step),
                                    version=self.start_step, policy_dir=policy_dir)
        self.built.callback(self.batches.close)  # the rollout worker, when there is one
        self.brancher = Brancher(self.rollout)
        self.ctx = CreditContext(config=cfg, brancher=self.brancher, judge=self.judge)
        self.truth = TruthScorer(self.make_env)  # judge diagnostics, for envs that know their pivotal turns

    def evaluate(self, step: int) -> MetricsRow:
        """Held-out success (``evaluate_policy``), logged and reported by the main process; the starting
        policy's is read from ``eval.cache_dir`` when an earlier run kept it (``prover.rundir.eval_cache``)."""
        cache = EvalCache.of(self.cfg, self.policy_dir, self.ranks.world) if step == 0 else None
        record = cache.read() if cache else None
        if record is None:
            with self.report.task(f"eval step {step}", total=self.cfg.rollout.max_turns) as tick:
                record, _ = evaluate_policy(self.cfg, self.rollout, step, self.ranks, on_turn=lambda *_: tick())
            if cache and (why := cache.write(record)):
                self.report.note(why)
        if self.ranks.is_main:
            self.run.log(record)
            self.report.eval_line(record)
        self.ranks.barrier()  # the record is on disk before any process reads the history
        return record

    def sync_weights(self, step: int) -> None:
        """Every process takes part (FSDP gathers the weights from all of them); an engine served from
        shared servers pushes from the main process only. No process rolls out before the push is done."""
        self.batches.sync(self.learner, step)
        self.ranks.barrier()

    def save_checkpoint(self, step: int) -> None:
        if not self.learner.weights_finite():  # never on disk: a resume would start from garbage
            raise NonFiniteError(f"the policy's weights are not finite after step {step}; no checkpoint written, "
                                 "the last one on disk is intact")
        # the weights are gathered by every process (FSDP, ZeRO-3) and written by the main one
        weights = self.learner.gathered_state() if self.ranks.world > 1 else None
        if self.ranks.is_main:
            self.run.save_checkpoint(step, self.learner, weights)
        self.ranks.barrier()

    def close(self) -> None:
        """Release what the judge and engine hold (servers, threads, a local model) and the run folder's
        lock; ``train`` calls it, and so does a failed start."""
        try:
            self.built.close()
        finally:
            if self.lock is not None:
                self.lock.release()

    def evaluation_due(self, step: int) -> bool:
        """Whether the loop owes an evaluation at ``step`` before its next step: always at step 0; at a resumed
        step that is an evaluation step when the history lacks it (the run stopped between the checkpoint and
        the evaluation, which the loop would otherwise skip, leaving a hole in the curve)."""
        if step == 0:
            return True
        return self.evaluates_after(step) and not any(r["phase"] == "eval" and r["step"] == step
                                                      for r in self.run.history())

    def evaluates_after(self, step: int) -> bool:
        """Whether training step ``step`` is followed by an evaluation (every ``eval.every``; the last step's
        is the final evaluation, run after the loop)."""
        every = self.cfg.eval.every
        return bool(every) and step % every == 0 and step < self.cfg.steps

    def train(self) -> dict[str, Any]:
        # the trackers of run.report_to get every metrics row, the final evaluation's too (main process only)
        with Trackers.start(self.cfg, self.report.note, enabled=self.ranks.is_main) as self.run.trackers:
            return self._train()

    def _train(self) -> dict[str, Any]:
        cfg, run, ranks = self.cfg, self.run, self.ranks
        self.nonfinite_streak = 0
        if self.evaluation_due(self.start_step):
            self.evaluate(self.start_step)  # step 0: success after the warm start, before any RL
        # the judge, the rollout worker and the engine are closed when the loop ends, however it ends
        with self.report.steps(cfg.steps, start=self.start_step) as advance, contextlib.closing(self):
            for step in range(self.start_step + 1, cfg.steps + 1):
                phases, self.ctx.step = Phases(), step
                self.learner.rng.seed(derive_seed(cfg.seed, step, "shuffle"))
                # 1. rollout: G episodes of each task (this process's share), sampled now or, with
                #    rollout.max_off_policy_steps, while earlier steps learned; each row keeps its policy version
                batch, counts = phases.timed("rollout", self.batches.next_batch, step)
                check_env_errors_saved(batch, cfg, run, step, ranks.is_main)
                # 2. credit: per-token advantages (judge and brancher are reached through ctx)
                adv = phases.timed("credit", self.credit.assign, batch, self.ctx)
                counts |= engine_counts(self.engine, "branch")  # branching resends cached prefixes
                # 3. learner: PPO-clip update on every turn row (gradients averaged across processes)
                learner_stats = phases.timed("learner", self.learner.update, batch, adv)
                # 4. weight sync: the engines sample from the updated policy (rollouts not yet started)
                phases.timed("sync", self.sync_weights, step)
                # 5. metrics (merged over processes), then checkpoint (a crash between them repeats this step)
                record = ranks.merged({"step": step, "phase": "train", **batch_metrics(batch),
                                       **self.brancher.take_counts(), **self.rollout.pool.take_counts(), **counts,
                                       **adv.metrics, **learner_stats,
                                       **self.truth.metrics(batch, adv.segments),
                                       **{f"time/{k}": v for k, v in phases.seconds.items()},
                                       "time/step": sum(phases.seconds.values())})
                self.nonfinite_streak = nonfinite_streak(record, self.nonfinite_streak, cfg.learner, self.report)
                if ranks.is_main:
                    run.log(record)
                    for kept in saved_groups(batch, adv, step, cfg.run.save_groups):  # for `prover view`
                        run.log(kept, run.groups_path)
                    self.report.step_line(record, cfg.steps)
                if step % cfg.run.checkpoint_every == 0 or step == cfg.steps:
                    self.save_checkpoint(step)
                if self.evaluates_after(step):
                    self.evaluate(step)
                advance()
        try:
            final = self.evaluate(cfg.steps) if not any(
                r["phase"] == "eval" and r["step"] == cfg.steps for r in run.history()) else None
        finally:
            self.rollout.close()  # the final evaluation's envs, made after close() closed the training's
        return self.report.summary(run.history(), final, warm_started=cfg.warmstart.enabled)


def train(cfg: TrainConfig, resume: bool = False) -> dict[str, Any]:
    return Trainer(cfg, resume=resume).train()

