"""Rollout records turns token-exactly, and every registered env passes the contract checker."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import numpy as np
import pytest

from prover.engines.hf import HFEngine
from prover.envs import check_env, make_env
from prover.episodes.turn_prompts import agent_spec_for, encode_prompt
from prover.registry import ENVS
from prover.rollout import Rollout
from prover.types import SamplingParams


@pytest.fixture(scope="module")
def tiny_engine(tiny_policy_dir):
    return HFEngine(tiny_policy_dir)


def one_name_per_env() -> list[str]:
    """Registered names, one per env class (aliases such as ``-v0`` would repeat the same checks)."""
    seen, names = set(), []
    for name in ENVS.names():
        cls = ENVS.get(name)
        if cls not in seen:
            seen.add(cls)
            names.append(name)
    return names


def build_or_skip(name: str):
    """Envs that need a user's data folder (the real-benchmark plugins) are checked in their own
    package's tests, on the small data files those tests write."""
    required = [p.name for p in inspect.signature(ENVS.get(name)).parameters.values()
                if p.default is p.empty and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if required:
        pytest.skip(f"{name} needs {required}; its plugin's tests run check_env on their own data")
    return make_env(name)


@pytest.mark.parametrize("name", one_name_per_env())
def test_every_registered_env_passes_check_env(name):
    if not ENVS.get(name).__module__.startswith("prover."):
        pytest.skip(f"{name} comes from a plugin whose own tests run check_env on it")
    check_env(build_or_skip(name))


def test_every_plugins_tests_run_check_env_on_its_env():
    """The skip above holds only while each plugin's test folder (beside its package, in this repository's
    plugins/) runs the checker."""
    for name in one_name_per_env():
        module = ENVS.get(name).__module__
        if not module.startswith("prover."):
            tests = Path(importlib.import_module(module.split(".")[0]).__file__).parents[1] / "tests"
            if tests.is_dir():  # an installed, not editable, plugin ships no tests
                assert any("check_env(" in f.read_text() for f in tests.glob("test_*.py")), (name, tests)


@pytest.mark.parametrize("name", one_name_per_env())
def test_every_registered_env_passes_gymnasiums_checker(name):
    import warnings

    from gymnasium.utils.env_checker import check_env as gymnasium_check_env

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the checker reports most problems as warnings
        gymnasium_check_env(build_or_skip(name), skip_render_check=True)


def test_turns_are_token_exact(tiny_engine):
    rollout = Rollout(lambda: make_env("alfworld-sim"), tiny_engine, max_turns=4,
                      sampling=SamplingParams(max_new_tokens=10, temperature=1.0))
    batch = rollout.run([5, 6], group_size=2, seed=3, record_snapshots=True)
    assert [len(g.trajectories) for g in batch.groups] == [2, 2]
    env = make_env("alfworld-sim")
    tok = tiny_engine.tokenizer
    for group in batch.groups:
        for traj in group.trajectories:
            assert traj.task_id == group.task_id
            for t, turn in enumerate(traj.turns):
                # the prompt ids are exactly the env's prompt text through the chat template
                spec = agent_spec_for(env)
                obs, info = env.reset(seed=int(group.task_id.split("/")[1]), options={"split": "train"})
                for _o, a in turn.history:
                    obs, _, _, _, info = env.step(a)
                assert obs == turn.observation
                text = spec.render(traj.task_text, obs, info["admissible_actions"], list(turn.history), t)
                assert turn.prompt_ids == encode_prompt(tok, text)
                assert len(turn.logprobs) == len(turn.completion_ids) == turn.n_tokens
                assert env.state_key() == turn.state_key
                # the snapshot before the turn restores that exact state
                env.restore(turn.snapshot)
                assert env.state_key() == turn.state_key
    # the sampling log-probs agree with a fresh forward pass of the same weights
    turns = batch.turns()
    again = tiny_engine.logprobs([t.prompt_ids for t in turns], [t.completion_ids for t in turns])
    for turn, lp in zip(turns, again):
        np.testing.assert_allclose(turn.logprobs, lp, atol=1e-4)


def test_rollout_is_deterministic_under_a_seed(tiny_engine):
    rollout = Rollout(lambda: make_env("alfworld-sim"), tiny_engine, max_turns=3,
                      sampling=SamplingParams(max_new_tokens=8, temperature=1.0))
    a = rollout.run([1, 2], group_size=2, seed=11)
    b = rollout.run([1, 2], group_size=2, seed=11)
    assert [t.completion_ids for t in a.turns()] == [t.completion_ids for t in b.turns()]


def test_rollout_plays_each_tasks_own_group_size(tiny_engine):
    # budget-matched GRPO spends a fractional G' as groups of different sizes within one step
    rollout = Rollout(lambda: make_env("alfworld-sim"), tiny_engine, max_turns=2,
                      sampling=SamplingParams(max_new_tokens=8, temperature=1.0))
    batch = rollout.run([5, 6, 7], group_size=[3, 1, 2], seed=3)
    assert [len(g.trajectories) for g in batch.groups] == [3, 1, 2]
    assert [g.task_id for g in batch.groups] == ["train/5", "train/6", "train/7"]
    assert all(t.task_id == g.task_id for g in batch.groups for t in g.trajectories)
    assert [t.traj_id for t in batch.groups[0].trajectories] == ["train/5#0", "train/5#1", "train/5#2"]


def test_brancher_continues_from_the_exact_recorded_state(tiny_engine):
    from prover.episodes.branching import Brancher, BranchRequest
    from prover.errors import CapabilityError

    rollout = Rollout(lambda: make_env("alfworld-sim"), tiny_engine, max_turns=5,
                      sampling=SamplingParams(max_new_tokens=10, temperature=1.0))
    batch = rollout.run([7], group_size=2, seed=5, record_snapshots=True)
    traj = next(tr for tr in batch.groups[0].trajectories if len(tr.turns) >= 3)
    brancher = Brancher(rollout)
    results = brancher.continue_from([BranchRequest(traj, 2, 3), BranchRequest(traj, 0, 2)], seed=1)
    assert [len(r.trajectories) for r in results] == [3, 2]
    for res in results:
        t = res.request.turn
        for cont in res.trajectories:
            assert cont.turns[:t] == traj.turns[:t]  # the prefix is the original's
            # the first continued turn saw exactly the prompt the original turn t saw
            assert cont.turns[t].prompt_ids == traj.turns[t].prompt_ids
            assert cont.turns[t].state_key == traj.turns[t].state_key
            assert len(cont.turns) <= 5  # the turn cap counts the prefix
        assert res.tokens == sum(tu.n_tokens for c in res.trajectories for tu in c.turns[t:])
        assert res.won.shape == (res.request.n,) and 0.0 <= res.value <= 1.0
    counts = brancher.take_counts()
    assert counts == {"cost/branch_tokens": float(sum(r.tokens for r in results)), "cost/branch_continuations": 5.0}
    again = Brancher(rollout).continue_from([BranchRequest(traj, 2, 3), BranchRequest(traj, 0, 2)], seed=1)
    assert [[tu.completion_ids for c in r.trajectories for tu in c.turns] for r in again] == \
        [[tu.completion_ids for c in r.trajectories for tu in c.turns] for r in results]  # same seed, same result
    plain = rollout.run([7], group_size=1, seed=5)
    with pytest.raises(CapabilityError, match="without snapshots"):
        brancher.continue_from([BranchRequest(plain.groups[0].trajectories[0], 0, 1)])


def test_bounded_continuations_stop_and_resume_exactly(tiny_engine):
    from prover.episodes.branching import Brancher, BranchRequest

    rollout = Rollout(lambda: make_env("alfworld-sim"), tiny_engine, max_turns=6,
                      sampling=SamplingParams(max_new_tokens=10, temperature=1.0))
    traj = rollout.run([3], group_size=1, seed=2, record_snapshots=True).groups[0].trajectories[0]
    brancher = Brancher(rollout)
    first = brancher.continue_from([BranchRequest(traj, 0, 2)], seed=4, max_new_turns=2, record_snapshots=True)[0]
    assert any(not p.finished for p in first.trajectories)  # an untrained policy does not win in 2 turns
    for part in first.trajectories:
        assert len(part.turns) <= 2
        if part.finished:
            continue
        assert len(part.turns) == 2 and part.resume is not None
        # going on from where it stopped: the next turn is played from the stopped state and history
        more = brancher.continue_from([BranchRequest(part, 2, 1)], seed=5)[0].trajectories[0]
        assert more.turns[:2] == part.turns and len(more.turns) <= 6
        assert more.turns[2].observation == part.resume.observation
        assert more.turns[2].history == tuple((t.observation, t.action) for t in part.turns)
