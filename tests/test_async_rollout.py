"""Asynchronous rollouts (rollout.max_off_policy_steps = k): the version rule, checked on the rows and on
the worker's actual weights; the PPO ratio from the recorded sampling log-probs; which version verifies
ProVer's segments; the worker's failures as one line, never a hang; the settings that are refused.

The rule (prover/episodes/async_rollout.py): step s's rows are sampled by version max(t0, s-1-k), a version being
the number of learner updates behind the weights; branching in step s's credit uses version s-1.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import prover.learning.learner
import prover.learning.learner_loss
from prover.config import LearnerConfig, TrainConfig
from prover.config_load import load_config
from prover.credit.base import CreditContext
from prover.credit.prover import ProVer, ProVerConfig
from prover.engines.hf import HFEngine
from prover.envs import make_env
from prover.envs.alfworld_sim.env import AlfworldSimEnv
from prover.episodes.async_rollout import AheadBatches, StepBatches, WorkerSpec, make_batches
from prover.episodes.branching import Brancher, BranchRequest, BranchResult
from prover.errors import ConfigError, EngineError, WorkerError
from prover.registry import CREDIT
from prover.rollout import Rollout
from prover.trainer import Trainer
from prover.types import Advantages, RolloutRequest, SamplingParams, Segment

NOISE = 0.02  # per version: as large as the tiny model's init scale, so versions sample visibly apart


def rule(step: int, k: int, start: int = 0) -> int:
    """The version that samples step ``step``'s rows."""
    return max(start, step - 1 - k)


class VersionedLearner:
    """A learner stand-in whose weights are version ``version``: the tiny policy's, shifted by seeded noise
    of scale NOISE * version, so each version samples differently and its log-probs identify it."""

    def __init__(self, policy_dir: Path) -> None:
        self.base = HFEngine(policy_dir).model.state_dict()
        self.version = 0

    def policy_state_dict(self) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(self.version)
        return {k: v + NOISE * self.version * torch.randn(v.shape, generator=g) if v.is_floating_point() else v
                for k, v in self.base.items()}


def small_cfg(k: int, steps: int = 4, **rollout) -> TrainConfig:
    cfg = TrainConfig(steps=steps)
    cfg.rollout.max_off_policy_steps, cfg.rollout.max_turns = k, 3
    cfg.rollout.sampling.max_new_tokens = 8
    for name, value in rollout.items():
        setattr(cfg.rollout, name, value)
    return cfg


def plan(step: int) -> RolloutRequest:
    return RolloutRequest(step, [step, 100 + step], [2, 2], seed=step)


def main_rollout(policy_dir: Path, engine: HFEngine | None = None) -> Rollout:
    return Rollout(lambda: make_env("alfworld-sim"), engine or HFEngine(policy_dir), max_turns=3,
                   sampling=SamplingParams(max_new_tokens=8))


STARTED: list[AheadBatches] = []  # closed after each test, whatever it asserted


@pytest.fixture(autouse=True)
def _close_workers():
    yield
    while STARTED:
        STARTED.pop().close()


def ahead(policy_dir: Path, cfg: TrainConfig, engine_cls: type = HFEngine) -> AheadBatches:
    spec = WorkerSpec(cfg, str(policy_dir), AlfworldSimEnv, engine_cls, 0)
    STARTED.append(AheadBatches(main_rollout(policy_dir), plan, 0, spec, last_step=cfg.steps))
    return STARTED[-1]


# -- the default is today's loop --------------------------------------------------------------------

def test_k_zero_is_the_synchronous_loop_and_starts_no_process(tiny_policy_dir):
    rollout = main_rollout(tiny_policy_dir)
    batches = make_batches(small_cfg(0), rollout, plan, version=0, policy_dir=tiny_policy_dir)
    assert type(batches) is StepBatches
    batch, metrics = batches.next_batch(1)
    # exactly the call the loop made before batch sources existed
    direct = rollout.run(plan(1).tasks, plan(1).sizes, split="train", seed=plan(1).seed)
    assert [t.completion_ids for t in batch.turns()] == [t.completion_ids for t in direct.turns()]
    assert metrics["rollout/policy_version"] == 0 and metrics["rollout/policy_lag"] == 0
    learner = VersionedLearner(tiny_policy_dir)
    learner.version = 1
    batches.sync(learner, 1)
    batch, metrics = batches.next_batch(2)
    assert {t.policy_version for t in batch.turns()} == {1} and metrics["rollout/policy_lag"] == 0


# -- the version rule, on the rows and on the weights that sampled them --------------------------

@pytest.mark.parametrize("k", [1, 2])
def test_rows_carry_the_version_that_sampled_them_and_lag_at_most_k(k, tiny_policy_dir):
    cfg = small_cfg(k, steps=4)
    learner = VersionedLearner(tiny_policy_dir)
    batches = ahead(tiny_policy_dir, cfg)
    got = {}
    try:
        for step in range(1, cfg.steps + 1):  # as the trainer drives it: batch, (credit, update), sync
            got[step] = batches.next_batch(step)
            learner.version = step
            batches.sync(learner, step)
    finally:
        batches.close()
    assert batches.pipe.incoming.qsize() <= 1  # nothing left unread but the worker's EOF
    for step, (batch, metrics) in got.items():
        want = rule(step, k)
        assert {t.policy_version for t in batch.turns()} == {want}, step
        assert metrics["rollout/policy_version"] == want and metrics["rollout/policy_lag"] == step - 1 - want <= k
    # the label is the truth: each row's recorded log-probs are those of its version's weights, not another's
    judge = HFEngine(tiny_policy_dir)
    for step, (batch, _) in got.items():
        turns = batch.turns()[:4]
        distances = {}
        for version in sorted({rule(s, k) for s in got}):
            learner.version = version
            judge.update_weights(learner)
            lps = judge.logprobs([t.prompt_ids for t in turns], [t.completion_ids for t in turns])
            distances[version] = max(float(np.abs(lp - np.array(t.logprobs)).max()) for lp, t in zip(lps, turns))
        want = rule(step, k)
        assert distances[want] < 1e-3, (step, distances)
        assert all(d > 1e-2 for v, d in distances.items() if v != want), (step, distances)


# -- PPO under staleness -----------------------------------------------------------------------------

def test_the_ppo_ratio_is_taken_against_the_recorded_sampling_logprobs(tiny_policy_dir, monkeypatch):
    """Hand check: a row whose recorded log-probs sit d below the current policy's has ratio exp(d)."""
    engine = HFEngine(tiny_policy_dir)
    batch = main_rollout(tiny_policy_dir, engine).run([3], 1, seed=1)
    turn = batch.turns()[0]
    [now] = engine.logprobs([turn.prompt_ids], [turn.completion_ids])
    offsets = np.linspace(-0.3, 0.4, turn.n_tokens)  # the sampling policy's log-probs: a stale version's
    turn.logprobs = list(now - offsets)
    batch.groups[0].trajectories[0].turns = [turn]  # one row
    seen = []
    real = prover.learning.learner_loss.ppo_token_loss

    def spy(logp, old, adv, cfg):
        seen.append((logp.detach().clone(), old.detach().clone()))
        return real(logp, old, adv, cfg)

    monkeypatch.setattr(prover.learning.learner_loss, "ppo_token_loss", spy)
    learner = prover.learning.learner.Learner(tiny_policy_dir, LearnerConfig(lr=1e-6), max_completion_tokens=8)
    adv = Advantages([[[np.ones(turn.n_tokens, np.float32)]]])
    learner.update(batch, adv)
    logp, old = seen[0][0][0], seen[0][1][0]  # the first mini-batch, its one row
    assert torch.allclose(old, torch.tensor(turn.logprobs, dtype=torch.float32))
    ratio = torch.exp(logp - old)
    assert torch.allclose(ratio, torch.exp(torch.tensor(offsets, dtype=torch.float32)), atol=1e-4)


# -- ProVer under staleness: which version verifies which segment ---------------------------------

class VersionedValues:
    """The Brancher's interface, as played by policy version ``version``: every continuation wins after the
    segment (turn >= 1), none before it."""

    def __init__(self, version: int) -> None:
        self.version = version

    def continue_from(self, requests, seed=0):
        return [BranchResult(r, np.array([r.turn >= 1] * r.n), 0, [], policy_version=self.version)
                for r in requests]


class FirstTurns:
    """A judge proposing turns 0..0 of the target (valid: it ends before the last turn)."""

    def propose_all(self, requests):
        from prover.types import JudgeResult, Proposal

        return [JudgeResult(Proposal(Segment(r.success.traj_id, 0, 0))) for r in requests]


def test_prover_records_the_sampling_and_the_verifying_version_of_each_segment(make_batch):
    batch = make_batch([[(True, 3, None), (False, 3, None), (False, 3, None), (False, 3, None)]])
    for turn in batch.turns():
        turn.policy_version = 5  # sampled by version 5; the learner (and its engine) hold version 6
    ctx = CreditContext(TrainConfig(), brancher=VersionedValues(6), judge=FirstTurns(), step=7)
    adv = ProVer(ProVerConfig(samples=2)).assign(batch, ctx)
    [seg] = adv.segments
    assert seg.accepted and (seg.sampled_version, seg.verify_version) == (5, 6)
    assert adv.metrics["credit/verify_policy_version"] == 6


def test_branches_are_played_and_labelled_by_the_brancher_engines_version(tiny_policy_dir):
    rollout = main_rollout(tiny_policy_dir)
    rollout.policy_version = 4
    batch = rollout.run([7], 1, seed=2, record_snapshots=True)
    traj = batch.groups[0].trajectories[0]
    rollout.policy_version = 5  # the learner updated; the brancher's engine follows it
    [res] = Brancher(rollout).continue_from([BranchRequest(traj, 1, 2)], seed=3)
    assert res.policy_version == 5
    for cont in res.trajectories:
        assert [t.policy_version for t in cont.turns] == [4] + [5] * (len(cont.turns) - 1)


class VersionSpy(ProVer):
    """ProVer, also noting per step the rows' versions and those of one continuation it branches itself."""

    seen: list = []  # noqa: RUF012  (the test reads it back from the class)

    def assign(self, batch, ctx):
        traj = batch.groups[0].trajectories[0]
        [res] = ctx.brancher.continue_from([BranchRequest(traj, 0, 1)], seed=ctx.step)
        type(self).seen.append((ctx.step, {t.policy_version for t in batch.turns()}, res.policy_version,
                                {t.policy_version for tr in res.trajectories for t in tr.turns}))
        return super().assign(batch, ctx)


def _history(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_the_trainer_verifies_with_the_learners_version_and_resumes(tiny_run_overrides, tmp_path):
    CREDIT.register("async-version-spy", VersionSpy)
    VersionSpy.seen = []
    try:
        cfg = load_config(None, tiny_run_overrides + [
            "steps=3", "rollout.max_off_policy_steps=1", "credit.name=async-version-spy", "judge.name=random",
            "credit.samples=2", "credit.eligible_of=null", "credit.eligible=[1,2]", "run.keep_checkpoints=3"])
        Trainer(cfg).train()
        assert VersionSpy.seen == [(1, {0}, 0, {0}), (2, {0}, 1, {1}), (3, {1}, 2, {2})]
        run = tmp_path / "run"
        train = [r for r in _history(run) if r["phase"] == "train"]
        assert [(r["rollout/policy_version"], r["rollout/policy_lag"]) for r in train] == [(0, 0), (0, 1), (1, 1)]
        assert all(r.get("credit/verify_policy_version", r["step"] - 1) == r["step"] - 1 for r in train)
        for rec in map(json.loads, (run / "groups.jsonl").read_text().splitlines()):
            for seg in rec["segments"]:
                if seg["delta"] is not None:
                    assert (seg["sampled_version"], seg["verify_version"]) == (rule(rec["step"], 1), rec["step"] - 1)
        # resume from step 2's checkpoint: step 3 is sampled again, by version 2 (the prefetch is not saved)
        shutil.rmtree(run / "checkpoints" / "step-3")
        VersionSpy.seen = []
        Trainer(cfg, resume=True).train()
    finally:
        CREDIT.unregister("async-version-spy")
    assert VersionSpy.seen == [(3, {2}, 2, {2})]
    hist = _history(run)
    assert [(r["phase"], r["step"]) for r in hist] == [("eval", 0), ("train", 1), ("train", 2), ("train", 3),
                                                       ("eval", 3)]
    assert hist[3]["rollout/policy_lag"] == 0 and all(math.isfinite(v) for v in hist[3].values()
                                                      if isinstance(v, float))


# -- the worker's failures: one line, never a hang ---------------------------------------------------

class FailingEngine(HFEngine):
    def generate(self, *args, **kwargs):
        raise RuntimeError("boom in generate")


class RefusedEngine(HFEngine):
    def generate(self, *args, **kwargs):
        raise EngineError("server http://127.0.0.1:1 refused the request")


class StuckEngine(HFEngine):
    def generate(self, *args, **kwargs):
        time.sleep(600)


def _stopped(batches: AheadBatches, within: float) -> bool:
    proc = batches.proc
    t0 = time.monotonic()
    batches.close()
    return proc.poll() is not None and time.monotonic() - t0 < within


@pytest.mark.parametrize(("engine_cls", "error", "text"), [(FailingEngine, WorkerError, "RuntimeError: boom"),
                                                           (RefusedEngine, EngineError, "refused the request")])
def test_a_failing_worker_is_one_line_in_the_trainer(engine_cls, error, text, tiny_policy_dir):
    batches = ahead(tiny_policy_dir, small_cfg(1), engine_cls)
    with pytest.raises(error, match=text) as caught:
        batches.next_batch(1)
    assert "\n" not in str(caught.value)
    assert _stopped(batches, within=15)


def test_a_worker_that_dies_or_stalls_stops_the_run_and_is_stopped(tiny_policy_dir):
    batches = ahead(tiny_policy_dir, small_cfg(1, worker_timeout_s=60), StuckEngine)
    deadline = time.monotonic() + 60
    while batches.pipe.incoming.empty() and time.monotonic() < deadline and batches.proc.poll() is None:
        time.sleep(0.5)  # let it start; it gets stuck in its first generate
    batches.proc.kill()
    with pytest.raises(WorkerError, match=r"died \(exit code -9\) while sampling step 1"):
        batches.next_batch(1)
    batches.close()
    stalled = ahead(tiny_policy_dir, small_cfg(1, worker_timeout_s=3), StuckEngine)
    with pytest.raises(WorkerError, match="sent nothing for 3 s while sampling step 1"):
        stalled.next_batch(1)
    assert _stopped(stalled, within=15)  # busy with a batch no one will read: terminated, not waited for


def test_the_worker_leaves_when_the_trainer_is_gone(tiny_policy_dir):
    batches = ahead(tiny_policy_dir, small_cfg(1))
    batches.pipe.writer.close()  # what the trainer's death does to the worker's end
    assert batches.proc.wait(60) == 0


def test_an_env_class_that_cannot_travel_is_one_line(tiny_policy_dir):
    class LocalEnv(AlfworldSimEnv):
        pass

    spec = WorkerSpec(small_cfg(1), str(tiny_policy_dir), LocalEnv, HFEngine, 0)
    with pytest.raises(ConfigError, match="cannot be sent to the rollout worker"):
        AheadBatches(main_rollout(tiny_policy_dir), plan, 0, spec, last_step=2)


# -- what is refused -------------------------------------------------------------------------------

def test_an_engine_over_shared_servers_is_refused():
    with pytest.raises(ConfigError, match="does not hold its own weights"):
        load_config(None, ["rollout.max_off_policy_steps=1", "engine.name=sglang",
                           "engine.kwargs.urls=[http://127.0.0.1:1]"])


def test_several_training_processes_are_refused():
    from prover.system.distributed import Ranks

    ranks = Ranks.__new__(Ranks)
    ranks.rank, ranks.world = 0, 2
    cfg = TrainConfig()
    cfg.rollout.max_off_policy_steps = 1
    with pytest.raises(ConfigError, match="one rollout worker beside one learner"):
        ranks.check_config(cfg.rollout.groups_per_step, cfg.rollout.max_off_policy_steps)


def test_budget_matching_to_logged_tokens_is_refused(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("")
    with pytest.raises(ConfigError, match="plans a step before the last one is logged"):
        load_config(None, ["rollout.max_off_policy_steps=1", "credit.name=budget-matched-grpo",
                           f"credit.budget_from={tmp_path / 'metrics.jsonl'}"])


def test_async_with_lora_is_refused_in_one_line(tmp_path, capsys):
    from conftest import TINY_RUN
    from prover.cli import main

    run = tmp_path / "run"
    assert main(["train", *TINY_RUN, "rollout.max_off_policy_steps=1", "model.lora.enabled=true",
                 f"run.dir={run}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rollout.max_off_policy_steps > 0 with model.lora is not supported" in err[0], err
    assert not run.exists()
