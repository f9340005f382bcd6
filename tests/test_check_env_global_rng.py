"""Foreign envs that draw from the process-wide RNGs cannot corrupt an episode.

``check_env`` steps two instances in lockstep, as the rollout does, from a reset and from a snapshot
restored into both, and names a dependence on the global RNGs (rule ``global-rng``); the protection
(``prover.envs.global_rng``), applied where prover makes envs, makes such an env pass.
"""

from __future__ import annotations

import inspect
import random

import numpy as np
import pytest
from global_rng_envs import DeclaredDiceEnv, DiceEnv, NativeDiceEnv, SharedCounterEnv

from prover.config_load import load_config
from prover.envs import check_env, make_configured_env, make_env
from prover.envs.checker import check_snapshot_restore
from prover.envs.global_rng import GlobalRngIsolation, GlobalRngSlot, isolated_class
from prover.episodes.async_rollout import EnvFactory
from prover.errors import ContractError

MODULE = "global_rng_envs"


def _roll_trace(env, seed: int, n: int = 6) -> list:
    out = [env.reset(seed=seed)[0]]
    out += [env.step("roll")[0] for _ in range(n)]
    return out


def test_an_env_on_the_global_rngs_fails_check_env_naming_the_fix():
    with pytest.raises(ContractError) as err:
        check_env(DiceEnv(), seeds=(0,), n_steps=8)
    line = str(err.value)
    assert "check_env [global-rng]" in line and "from reset" in line
    assert "uses_global_rng = True" in line and "env.isolate_global_rng: true" in line
    assert "\n" not in line


def test_the_same_env_protected_passes_check_env():
    assert check_env(isolated_class(DiceEnv)(), seeds=(0, 1), n_steps=8) == 1 + 2 * 5
    assert check_env(make_env(f"{MODULE}:DiceEnv", isolate_global_rng=True), seeds=(0,), n_steps=8) == 6
    declared = make_env(f"{MODULE}:DeclaredDiceEnv")  # the class's flag alone: no setting needed
    assert isinstance(declared, GlobalRngIsolation) and isinstance(declared, DeclaredDiceEnv)
    assert type(declared).__name__ == "DeclaredDiceEnv"
    assert inspect.signature(type(declared)) == inspect.signature(DeclaredDiceEnv)  # settings checks see the same
    assert type(declared).Config is DeclaredDiceEnv.Config
    assert check_env(declared, seeds=(0,), n_steps=8) == 6


def test_a_replay_snapshot_restored_into_two_instances_is_checked_in_lockstep():
    """Alone, the replay snapshot restores exactly (the reset reseeds); in lockstep it does not."""
    check_snapshot_restore(DiceEnv(), 0, 8)
    with pytest.raises(ContractError, match=r"\[global-rng\]: the snapshot taken at step 4 of seed 0, restored "
                                            r"into two instances"):
        check_snapshot_restore(DiceEnv(), 0, 8, DiceEnv())
    check_snapshot_restore(isolated_class(DiceEnv)(), 0, 8, isolated_class(DiceEnv)())


def test_a_native_snapshot_carries_the_instances_rng_state():
    with pytest.raises(ContractError, match=r"\[snapshot-restore\]"):  # even alone: the copy left the RNG out
        check_snapshot_restore(NativeDiceEnv(), 0, 8)
    env = isolated_class(NativeDiceEnv)()
    assert check_env(env, seeds=(0, 1), n_steps=8) == 11
    env.reset(seed=3)
    env.step("roll")
    snap = env.snapshot()
    then = [env.step("roll")[0] for _ in range(3)]
    other = isolated_class(NativeDiceEnv)()
    other.reset(seed=9)
    other.restore(snap)
    assert [other.step("roll")[0] for _ in range(3)] == then


def test_protected_instances_in_lockstep_play_as_alone_and_leave_the_callers_rngs_alone():
    cls = isolated_class(DiceEnv)
    alone = [_roll_trace(cls(), s) for s in (5, 6)]
    a, b = cls(), cls()
    random.seed(123)
    np.random.seed(123)
    expected_py, expected_np = random.Random(123).random(), np.random.RandomState(123).random_sample()
    together = [[a.reset(seed=5)[0]], [b.reset(seed=6)[0]]]
    for _ in range(6):
        together[0].append(a.step("roll")[0])
        together[1].append(b.step("roll")[0])
    assert together == alone
    assert random.random() == expected_py and np.random.random_sample() == expected_np
    unprotected = [DiceEnv(), DiceEnv()]  # the same play without the protection differs: the test can fail
    mixed = [[unprotected[0].reset(seed=5)[0]], [unprotected[1].reset(seed=6)[0]]]
    for _ in range(6):
        mixed[0].append(unprotected[0].step("roll")[0])
        mixed[1].append(unprotected[1].step("roll")[0])
    assert mixed != alone


def test_shared_state_that_is_no_rng_is_rule_lockstep():
    with pytest.raises(ContractError, match=r"\[lockstep\].*class attribute"):
        check_env(isolated_class(SharedCounterEnv)(), seeds=(0,), n_steps=8)


def test_a_reentrant_slot_keeps_its_state():
    slot = GlobalRngSlot(7)
    with slot:
        first = random.random()
        with slot:  # nested: the same stream goes on
            second = random.random()
    random.random()  # the caller's draws do not move the slot's stream
    with slot:
        third = random.random()
    r = random.Random(7)
    assert [first, second, third] == [r.random(), r.random(), r.random()]


def test_the_run_setting_and_the_worker_factory_apply_the_protection():
    cfg = load_config(None, [f"env.name={MODULE}:DiceEnv", "env.isolate_global_rng=true"])
    assert isinstance(make_configured_env(cfg.env), GlobalRngIsolation)
    assert not isinstance(make_configured_env(load_config(None, [f"env.name={MODULE}:DiceEnv"]).env),
                          GlobalRngIsolation)
    assert isinstance(EnvFactory(DiceEnv, {}, True)(), GlobalRngIsolation)
    assert isinstance(EnvFactory(DeclaredDiceEnv, {})(), GlobalRngIsolation)
    assert not isinstance(EnvFactory(DiceEnv, {})(), GlobalRngIsolation)


def test_the_check_env_command_names_the_rule_and_checks_with_the_protection(capsys):
    from prover.cli import main

    assert main(["check-env", f"{MODULE}:DiceEnv"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "check_env [global-rng]" in err
    assert main(["check-env", f"{MODULE}:DiceEnv", "--isolate-global-rng"]) == 0
    assert main(["check-env", f"{MODULE}:DeclaredDiceEnv"]) == 0
    assert capsys.readouterr().out.count("passes the env contract (17 checks)") == 2
