"""pivot-sim: the env contract, its rules, the expert, the splits, bad knobs, and the ground-truth
pivotal turns on trajectories whose answer is worked out by hand in the comments."""

from __future__ import annotations

import random

import pytest

from prover.envs import check_env, make_env
from prover.envs.pivot_sim import PivotSimEnv
from prover.envs.pivot_sim.engine import GATE
from prover.envs.pivot_sim.world import KINDS, corridor_length, in_test_half
from prover.errors import ConfigError, ContractError
from prover.types import Trajectory, Turn


def _turn(action: str) -> Turn:
    return Turn(prompt_ids=[1], completion_ids=[2], logprobs=[0.0], observation="", completion_text=action,
                action=action, format_valid=True, action_valid=True, reward=0.0, state_key=0)


def _traj(task_id: str, actions: list[str]) -> Trajectory:
    return Trajectory(traj_id="t#0", task_id=task_id, task_text="t", turns=[_turn(a) for a in actions])


def _task_with_layout(env: PivotSimEnv, positions: tuple[int, ...]) -> int:
    """The first train seed whose stations stand at ``positions`` (the layout a hand computation assumes)."""
    for seed in range(200):
        env.reset(seed=seed)
        if env.world.positions == positions:
            return seed
    raise AssertionError(f"no seed below 200 has stations at {positions}")


# -- the contract -------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [{}, {"clue": "memory", "prompt": "full"}, {"noise": 0.3, "n_pivots": 3},
                                    {"n_pivots": 1, "delay": 1, "irrelevant_share": 0.0}])
def test_check_env_and_gymnasiums_checker(kwargs):
    # check_env runs gymnasium's own env checker as one of its checks (tests/test_env_checker.py)
    check_env(make_env("pivot-sim", **kwargs))


@pytest.mark.parametrize("bad", [{"n_pivots": 0}, {"n_pivots": 9}, {"n_pivots": 2.0}, {"n_options": 1},
                                 {"n_options": 7}, {"delay": 0}, {"irrelevant_share": 1.0},
                                 {"irrelevant_share": -0.1}, {"noise": 1.0}, {"clue": "hidden"},
                                 {"prompt": "x"}, {"max_steps": 3}, {"n_pivots": True}])
def test_bad_knobs_are_one_line_config_errors(bad):
    with pytest.raises(ConfigError, match="pivot-sim") as err:
        PivotSimEnv(**bad)
    assert "\n" not in str(err.value)


def test_unknown_split_and_calls_before_reset():
    env = PivotSimEnv()
    with pytest.raises(ContractError):
        env.snapshot()
    with pytest.raises(ConfigError, match="split"):
        env.reset(seed=0, options={"split": "valid"})


def test_corridor_length_follows_the_share_of_turns_that_do_not_matter():
    # W = max(delay + n - 1, round_half_up(n * s / (1 - s)))
    assert corridor_length(2, 0.75, 4) == 6      # 2 * 3 = 6 > 5
    assert corridor_length(2, 0.5, 4) == 5       # 2 * 1 = 2 < 5: the floor wins
    assert corridor_length(3, 0.9, 1) == 27      # 3 * 9
    assert corridor_length(1, 0.0, 1) == 1


# -- the rules ----------------------------------------------------------------------------------
def test_the_gate_an_irreversible_take_and_the_vault():
    env = PivotSimEnv(n_pivots=1, delay=2, irrelevant_share=0.75)  # W = max(2, round(3)) = 3; station at 1
    obs, info = env.reset(seed=5)
    assert "A sign reads: The vault takes the" in obs and env.world.positions == (1,)
    assert set(info["admissible_actions"]) == {"go forward", "look", "wait", "check bag"}
    env.step("go forward")
    right = env.world.stations[0].right_item
    obs, *_ = env.step("go forward")
    assert obs == GATE  # refused at an open rack, and the turn is spent
    obs, reward, terminated, truncated, info = env.step(f"take {right}")
    assert "The rack closes." in obs and not info["admissible_actions"].count(f"take {right}")
    env.step("go forward")
    obs, reward, terminated, truncated, info = env.step("go forward")
    assert (reward, terminated, truncated, info["won"]) == (1.0, True, False, True) and "You win!" in obs


def test_a_wrong_item_loses_at_the_vault_and_turns_run_out():
    env = PivotSimEnv(n_pivots=1, delay=2, irrelevant_share=0.75, max_steps=5)
    env.reset(seed=5)
    wrong = next(o for o in env.world.stations[0].options if o != env.world.stations[0].right_item)
    for a in ("go forward", f"take {wrong}", "go forward"):
        env.step(a)
    obs, reward, terminated, _truncated, info = env.step("go forward")
    assert (reward, terminated, info["won"]) == (0.0, True, False) and "rejects your items" in obs
    env.reset(seed=5)
    for _ in range(4):
        assert env.step("wait")[3] is False
    assert env.step("wait")[3] is True  # the 5th turn of max_steps=5 truncates


def test_noise_jams_about_the_stated_share_of_expert_episodes():
    env = PivotSimEnv(noise=0.3)
    wins = 0
    for seed in range(400):
        env.reset(seed=seed)
        while (a := env.expert_action()) is not None:
            *_, info = env.step(a)
        wins += info["won"]
    assert 0.63 < wins / 400 < 0.77  # 0.7 +- 3.5 standard errors of 400 draws (0.023)


def test_the_expert_always_wins_without_noise_and_seeds_are_deterministic():
    for kwargs in ({}, {"n_pivots": 4, "n_options": 6, "delay": 7, "clue": "memory"}):
        env = PivotSimEnv(**kwargs)
        for seed in range(50):
            _obs, _ = env.reset(seed=seed, options={"split": "test" if seed % 2 else "train"})
            steps = 0
            while (a := env.expert_action()) is not None:
                _obs2, _reward, _terminated, _truncated, info = env.step(a)
                steps += 1
            assert info["won"] and steps == env.expert_steps
    a, b = PivotSimEnv(), PivotSimEnv()
    assert a.reset(seed=11) == b.reset(seed=11) and a.world == b.world


def test_memory_mode_shows_the_clue_only_on_the_sign():
    env = PivotSimEnv(clue="memory")
    obs, _ = env.reset(seed=1)
    clue = env.world.clue
    assert clue in obs
    seen = []
    while (a := env.expert_action()) is not None:
        seen.append(env.step(a)[0])
        if not env.state.done:
            seen.append(env.step("look")[0])  # what the agent sees where it stands, racks included
    assert len(seen) > 10 and not any(clue in o for o in seen)
    visible = PivotSimEnv(clue="visible")
    visible.reset(seed=1)
    while visible.state.pos != visible.world.positions[0]:
        visible.step("go forward")
    assert visible.world.clue in visible.step("look")[0]


def test_train_and_test_tasks_never_share_a_right_item():
    env = PivotSimEnv(n_pivots=3)
    halves = {"train": set(), "test": set()}
    for split in halves:
        for seed in range(300):
            env.reset(seed=seed, options={"split": split})
            for s in env.world.stations:
                word = s.right_item.split()[0]
                assert in_test_half(s.kind, word) == (split == "test")
                halves[split].add(s.right_item)
    assert not halves["train"] & halves["test"]
    assert len(halves["train"]) == len(halves["test"]) == sum(len(w) for w in KINDS.values()) // 2


def test_unseen_items_off_draws_right_items_from_every_word_in_both_splits():
    env = PivotSimEnv(n_pivots=3, unseen_items=False)
    asked = {"train": set(), "test": set()}
    for split in asked:
        for seed in range(300):
            env.reset(seed=seed, options={"split": split})
            asked[split].update(s.right_item for s in env.world.stations)
    every_item = sum(len(w) for w in KINDS.values())
    assert len(asked["train"]) == len(asked["test"]) == every_item  # 900 draws cover all 48 items
    env.reset(seed=5, options={"split": "test"})
    other = PivotSimEnv(n_pivots=3, unseen_items=False)
    other.reset(seed=5, options={"split": "train"})
    assert env.world.stations != other.world.stations  # separate seed streams still


def test_unseen_items_must_be_a_bool():
    with pytest.raises(ConfigError, match="unseen_items"):
        PivotSimEnv(unseen_items="no")


def test_snapshots_restore_the_state_and_the_noise_stream():
    env = PivotSimEnv(noise=0.5)
    env.reset(seed=3)
    for _ in range(3):
        env.step(env.expert_action())
    snap = env.snapshot()
    rest = []
    while (a := env.expert_action()) is not None:
        rest.append(env.step(a))
    env.restore(snap)
    again = []
    while (a := env.expert_action()) is not None:
        again.append(env.step(a))
    assert again == rest
    with pytest.raises(ContractError):
        env.restore("not a snapshot")


# -- ground truth ------------------------------------------------------------------------------
# Default knobs: n_pivots=2, delay=4, irrelevant_share=0.75 -> W = 6 walking cells; the last station stands
# at W - delay = 2; the first is drawn from {0, 1}. The tests below pick a task whose first station is at 0,
# so the expert path is: take (turn 0, pos 0), forward, forward (pos 2), take (turn 3), forward x4
# (turns 4-7, the 4th arrives at the vault): 8 turns.
def _expert_actions(env: PivotSimEnv, seed: int, wrong_first: bool = False) -> list[str]:
    env.reset(seed=seed)
    s0, s1 = env.world.stations
    first = next(o for o in s0.options if o != s0.right_item) if wrong_first else s0.right_item
    return [f"take {first}", "go forward", "go forward", f"take {s1.right_item}"] + ["go forward"] * 4


def test_pivotal_turns_of_a_success_with_slack_are_the_two_takes():
    env = PivotSimEnv()  # max_steps = 16: 8 turns of slack, so no walking turn can matter
    seed = _task_with_layout(env, (0, 2))
    traj = _traj(f"train/{seed}", _expert_actions(env, seed))
    assert env.pivotal_turns(traj) == [0, 3]  # a wrong item there gives 0; everything else keeps 1
    assert env.value_trace(traj) == [1.0] * 9


def test_after_a_wrong_item_nothing_is_pivotal():
    env = PivotSimEnv()
    seed = _task_with_layout(env, (0, 2))
    traj = _traj(f"train/{seed}", _expert_actions(env, seed, wrong_first=True))
    assert env.pivotal_turns(traj) == [0]  # every action after it leads to 0
    assert env.value_trace(traj) == [1.0] + [0.0] * 8


def test_a_horizon_with_no_slack_makes_every_turn_pivotal():
    env = PivotSimEnv(max_steps=8)  # exactly the expert's path: any filler loses
    seed = _task_with_layout(env, (0, 2))
    assert env.pivotal_turns(_traj(f"train/{seed}", _expert_actions(env, seed))) == list(range(8))


def test_one_turn_of_slack_spent_on_a_filler_makes_the_rest_pivotal():
    env = PivotSimEnv(max_steps=9)
    seed = _task_with_layout(env, (0, 2))
    s0, s1 = env.world.stations
    actions = [f"take {s0.right_item}", "look", "go forward", "go forward", f"take {s1.right_item}"] + \
        ["go forward"] * 4
    # turn 0: a wrong item gives 0 -> pivotal. Turn 1 (8 turns left, 7 needed): a filler still leaves
    # enough -> not pivotal; the agent looks. From turn 2 on (7 left, 7 needed) a filler loses -> pivotal.
    assert env.pivotal_turns(_traj(f"train/{seed}", actions)) == [0, 2, 3, 4, 5, 6, 7, 8]


def test_noise_lowers_the_values_but_not_the_pivotal_turns():
    env = PivotSimEnv(noise=0.25)
    seed = _task_with_layout(env, (0, 2))
    traj = _traj(f"train/{seed}", _expert_actions(env, seed))
    assert env.pivotal_turns(traj) == [0, 3]
    values = env.value_trace(traj)
    assert values[:8] == [0.75] * 8 and values[8] in (0.0, 1.0)  # the last state is a jam or a win


def test_pivotal_turns_reject_foreign_trajectories_and_leave_the_env_untouched():
    env = PivotSimEnv()
    env.reset(seed=7)
    env.step("look")
    before = env.state_key()
    seed = _task_with_layout(PivotSimEnv(), (0, 2))
    env.pivotal_turns(_traj(f"train/{seed}", _expert_actions(PivotSimEnv(), seed)))
    assert env.state_key() == before
    with pytest.raises(ContractError, match="split/seed"):
        env.pivotal_turns(_traj("alfworld/3", ["look"]))
    with pytest.raises(ContractError, match="after its episode ended"):
        env.pivotal_turns(_traj(f"train/{seed}", _expert_actions(PivotSimEnv(), seed) + ["look"]))


def test_random_play_is_fast_enough_for_rollouts():
    # not a timed assert: this only runs a few thousand random steps to catch exceptions on odd paths
    env, rng = PivotSimEnv(n_pivots=3, noise=0.1), random.Random(0)
    for seed in range(200):
        _, info = env.reset(seed=seed)
        done = False
        while not done:
            _, _, term, trunc, info = env.step(rng.choice(info["admissible_actions"] + ["dance"]))
            done = term or trunc
