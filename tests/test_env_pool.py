"""Branching continuations share a bounded pool of env instances: more continuations than
``rollout.max_branch_envs`` take turns on the instances, each restored from its own snapshot, and play
exactly what one instance each plays; so do the episodes of a batch larger than the bound (an evaluation)
from their reset; the ``env/*`` counts say how many instances were made."""

from __future__ import annotations

import pytest

from prover.config_load import load_config
from prover.engines.hf import HFEngine
from prover.envs import make_env
from prover.episodes.branching import Brancher, BranchRequest
from prover.rollout import Rollout, build_rollout
from prover.types import SamplingParams


@pytest.fixture(scope="module")
def tiny_engine(tiny_policy_dir):
    return HFEngine(tiny_policy_dir)


def rollout_with(engine, max_branch_envs):
    return Rollout(lambda: make_env("alfworld-sim"), engine, max_turns=5,
                   sampling=SamplingParams(max_new_tokens=10, temperature=1.0), max_branch_envs=max_branch_envs)


def played(results) -> list:
    """Everything a continuation is: per turn the tokens, action, reward, key and observation; its end."""
    return [[(tu.completion_ids, tu.action, tu.reward, tu.state_key, tu.observation) for tu in tr.turns]
            + [(tr.won, tr.truncated, tr.resume.observation if tr.resume else None)]
            for r in results for tr in r.trajectories]


def branch(rollout, **kwargs):
    batch = rollout.run([3, 4], group_size=1, seed=5, record_snapshots=True)  # two tasks: two distinct states
    trajs = [t for g in batch.groups for t in g.trajectories]
    requests = [BranchRequest(t, turn, 2) for t in trajs for turn in range(min(2, len(t.turns)))]
    return Brancher(rollout).continue_from(requests, seed=1, **kwargs), len(requests) * 2


@pytest.mark.parametrize("bound", [None, 3, 1])
def test_shared_instances_play_what_one_instance_each_plays(tiny_engine, bound):
    one_each = rollout_with(tiny_engine, 10_000)
    expected, n = branch(one_each)
    assert one_each.pool.take_counts()["env/instances_created"] == n  # today's pool: one per continuation
    shared = rollout_with(tiny_engine, bound)
    got, _ = branch(shared)
    assert played(got) == played(expected)
    counts = shared.pool.take_counts()
    # None: the 2 the rollout's own episodes made; 3: those 2 and a third for the continuations; 1: the two
    # episodes already took turns on one instance
    made = {None: 2, 3: 3, 1: 1}[bound]
    assert counts["env/instances_created"] == made and counts["env/instances"] == made
    assert counts["env/swaps"] > 0  # n continuations on fewer instances: they took turns


def test_bounded_continuations_resume_from_shared_instances(tiny_engine):
    """A continuation stopped by max_new_turns keeps a snapshot of its own state, not its instance's."""
    results = {}
    for bound in (10_000, 1):
        rollout = rollout_with(tiny_engine, bound)
        parts, _ = branch(rollout, max_new_turns=1, record_snapshots=True)
        rest = [BranchRequest(tr, len(tr.turns), 1) for r in parts for tr in r.trajectories if not tr.finished]
        assert rest
        results[bound] = played(parts) + played(Brancher(rollout).continue_from(rest, seed=2))
    assert results[1] == results[10_000]


def test_the_bound_defaults_to_a_steps_episodes():
    cfg = load_config(None, ["rollout.groups_per_step=3", "rollout.group_size=5"])

    class Engine:
        tokenizer, context_length = None, 4096

    assert build_rollout(cfg, Engine(), lambda: None).pool.max_shared == 15
    cfg = load_config(None, ["rollout.max_branch_envs=2"])
    assert build_rollout(cfg, Engine(), lambda: None).pool.max_shared == 2


def evaluation_like(rollout):
    """Ten episodes from their reset (5 tasks x 2), as an evaluation plays them."""
    return rollout.run([3, 4, 5, 6, 7], group_size=2, split="test", seed=9)


def test_episodes_beyond_the_bound_share_instances_and_play_the_same(tiny_engine):
    expected = evaluation_like(one_each := rollout_with(tiny_engine, 10_000))
    assert one_each.pool.take_counts()["env/instances_created"] == 10
    shared = rollout_with(tiny_engine, 3)
    got = evaluation_like(shared)
    assert played(got.groups) == played(expected.groups)
    assert [t.gold for g in got.groups for t in g.trajectories] == \
        [t.gold for g in expected.groups for t in g.trajectories]
    counts = shared.pool.take_counts()
    assert counts["env/instances_created"] == 3 and counts["env/swaps"] > 0


def test_an_env_that_cannot_snapshot_gets_one_instance_per_episode(tiny_engine):
    def make():
        env = make_env("alfworld-sim")
        env.can_snapshot = False  # restore would be refused: sharing needs it
        return env

    rollout = Rollout(make, tiny_engine, max_turns=5, sampling=SamplingParams(max_new_tokens=10, temperature=1.0),
                      max_branch_envs=3)
    evaluation_like(rollout)
    assert rollout.pool.take_counts()["env/instances_created"] == 10
