"""Gymnasium interop (prover/envs/gym.py): prover envs under ``prover/...`` in Gymnasium's registry, and any
Gymnasium text env as a prover env through ``GymnasiumTextEnv``.

The class-level Gymnasium checker run on every built-in is in tests/test_rollout.py; here the built-ins go
through ``gymnasium.make``. The two Gymnasium envs below are small enough to check by hand.
"""

from __future__ import annotations

import json
import string
import subprocess
import sys
import warnings
from typing import ClassVar

import gymnasium
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env as gymnasium_check_env

from conftest import TINY_RUN
from prover.cli import main
from prover.config_load import check_parts_fit, load_config
from prover.envs import check_env, make_env
from prover.envs.gym import GymnasiumTextEnv, gymnasium_ids, register_gymnasium_envs
from prover.errors import CapabilityError, ConfigError, ContractError
from prover.registry import ENVS

CHARSET = string.ascii_letters + string.digits + " .,'-"


class WindyLine(gymnasium.Env):
    """Rooms 0..4, the walker starts in room 0 and the goal is room 2 + seed % 3. Each move ("left",
    "right") fails with probability 1/4, drawn from the env's seeded RNG, so replay must restore the RNG.
    Reaching the goal: reward 1, terminated, info is_success (Gymnasium's usual key). 8 steps: truncated."""

    metadata: ClassVar[dict] = {"render_modes": []}
    observation_space = spaces.Text(max_length=200, charset=CHARSET)

    def __init__(self, action_kind: str = "names", max_steps: int = 8) -> None:
        self.action_space = spaces.Box(-1, 1, (1,)) if action_kind == "box" else spaces.Discrete(3)
        if action_kind == "names":
            self.action_names = ["left", "right", "stay"]
        self.max_steps = max_steps

    def _obs(self, note: str = "") -> str:
        return f"Room {self.pos} of 0-4, the goal is room {self.goal}.{note}"

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        self.pos, self.steps, self.goal = 0, 0, 2 + (seed or 0) % 3
        return self._obs(), {}

    def expert_action(self) -> int:
        return 1 if self.pos < self.goal else 0  # the action's index, as a Gymnasium env would give it

    def step(self, action: int) -> tuple[str, float, bool, bool, dict]:
        self.steps += 1
        blown = action != 2 and self.np_random.random() < 0.25
        if not blown:
            self.pos = min(4, max(0, self.pos + (-1, 1, 0)[action]))
        won = self.pos == self.goal
        note = " The wind holds you back." if blown else ""
        return self._obs(note), float(won), won, self.steps >= self.max_steps, {"is_success": won}


class CodeLock(gymnasium.Env):
    """A lock whose code is WORDS[seed % 4]. "try <word>" with the code opens it (reward 1, terminated,
    won); another word gives "Wrong code."; any other text is invalid. After 5 steps: truncated."""

    metadata: ClassVar[dict] = {"render_modes": []}
    WORDS = ("apple", "birch", "cedar", "delta")
    observation_space = spaces.Text(max_length=200, charset=CHARSET)
    action_space = spaces.Text(max_length=20, charset=string.ascii_lowercase + " ")

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        self.code, self.steps = self.WORDS[(seed or 0) % 4], 0
        return "A lock with a word code.", self._info(True, False)

    def _info(self, valid: bool, won: bool) -> dict:
        return {"is_action_valid": valid, "won": won, "admissible_actions": [f"try {w}" for w in self.WORDS]}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        self.steps += 1
        valid = action in {f"try {w}" for w in self.WORDS}
        won = action == f"try {self.code}"
        obs = "It opens." if won else ("Wrong code." if valid else "Nothing happens.")
        return obs, float(won), won, self.steps >= 5, self._info(valid, won)


WINDY, TEXT = "prover-test/WindyLine-v0", "prover-test/CodeLock-v0"
gymnasium.register(WINDY, entry_point=WindyLine)
gymnasium.register(TEXT, entry_point=CodeLock)
BUILTIN_IDS = {"alfworld-sim": "prover/alfworld-sim-v2", "alfworld-sim-v1": "prover/alfworld-sim-v1",
               "webshop-sim": "prover/webshop-sim-v0", "searchqa-sim": "prover/searchqa-sim-v0",
               "pivot-sim": "prover/pivot-sim-v0"}


def _make(gym_id: str) -> gymnasium.Env:
    """``gymnasium.make``, quiet about ``prover/alfworld-sim-v1`` having a newer version (v2, tested below)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is out of date", category=DeprecationWarning)
        return gymnasium.make(gym_id)


def _gymnasium_checker(env: gymnasium.Env) -> None:
    """Gymnasium's checker, its warnings as failures, except its advice to check the unwrapped env (we
    check what ``gymnasium.make`` returns on purpose)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=".*is different from the unwrapped version")
        gymnasium_check_env(env, skip_render_check=True)


# -- prover envs in Gymnasium ---------------------------------------------------------------------
def test_id_mapping():
    names = ["alfworld-sim", "alfworld-sim-v1", "webshop-sim", "foo-v0", "foo", "bar-v3", "bar", "bar-v1",
             "a/b", "m:x", "two words"]
    assert gymnasium_ids(names) == {
        "alfworld-sim": "prover/alfworld-sim-v2", "alfworld-sim-v1": "prover/alfworld-sim-v1",
        "webshop-sim": "prover/webshop-sim-v0", "foo-v0": "prover/foo-v0", "foo": "prover/foo-v1",
        "bar-v3": "prover/bar-v3", "bar": "prover/bar-v4", "bar-v1": "prover/bar-v1"}


def test_every_prover_name_is_registered_in_gymnasium():
    ids = register_gymnasium_envs()
    assert {k: ids[k] for k in BUILTIN_IDS} == BUILTIN_IDS
    # plugins found by entry point too; the adapters themselves are not wrapped back into Gymnasium, nor are
    # names Gymnasium cannot spell (a 'module:Class' name other tests looked up stays cached in the registry)
    spellable = {n for n in ENVS.names() if not set(n) & set("/: ")}
    assert set(ids) == spellable - {"gymnasium", "gymnasium-deterministic"}
    assert register_gymnasium_envs() == ids  # idempotent
    for name, gym_id in BUILTIN_IDS.items():
        assert type(_make(gym_id).unwrapped) is ENVS.get(name)
    # prover's alfworld-sim follows newer tables than alfworld-sim-v1, and Gymnasium agrees
    with pytest.warns(DeprecationWarning, match="upgrading to version `v2`"):
        gymnasium.make("prover/alfworld-sim-v1")


def test_a_name_registered_later_is_picked_up():
    ENVS.register("test-maze-v3", "prover.envs.pivot_sim:PivotSimEnv")
    ENVS.register("test-maze", "prover.envs.alfworld_sim:AlfworldSimEnv")
    try:
        ids = register_gymnasium_envs()
        assert (ids["test-maze-v3"], ids["test-maze"]) == ("prover/test-maze-v3", "prover/test-maze-v4")
        with pytest.warns(UserWarning, match="latest versioned environment `prover/test-maze-v4`"):
            assert type(gymnasium.make("prover/test-maze").unwrapped).__name__ == "AlfworldSimEnv"
    finally:
        for name in ("test-maze-v3", "test-maze"):
            ENVS.unregister(name)
        for gym_id in ("prover/test-maze-v3", "prover/test-maze-v4"):
            gymnasium.registry.pop(gym_id, None)


@pytest.mark.parametrize("name", sorted(BUILTIN_IDS))
def test_gymnasium_make_passes_gymnasiums_checker(name):
    _gymnasium_checker(_make(BUILTIN_IDS[name]))


@pytest.mark.slow
def test_gymnasium_make_with_no_prover_import():
    code = ("import gymnasium; env = gymnasium.make('prover.envs.gym:prover/alfworld-sim-v1'); "
            "print(type(env.unwrapped).__name__)")
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "AlfworldSimV1Env", out.stderr[-500:]


# -- Gymnasium envs in prover ---------------------------------------------------------------------
def test_discrete_adapter_passes_check_env():
    env = make_env("gymnasium", id=WINDY, deterministic=True)
    assert env.can_snapshot and env.deterministic
    assert check_env(env) == 16  # 1 + 3 seeds x (reset, step types, determinism, snapshot, state key)


def test_text_adapter_passes_check_env_and_plays_by_hand():
    env = make_env("gymnasium-deterministic", id=TEXT)
    assert check_env(env) == 16
    obs, info = env.reset(seed=6)  # code: WORDS[6 % 4] = "cedar"
    assert (obs, info["task"], info["won"]) == ("A lock with a word code.", obs, False)
    assert info["admissible_actions"] == ["try apple", "try birch", "try cedar", "try delta"]
    assert env.step("try apple")[0] == "Wrong code."
    # outside the Text space (a digit): a no-op that the Gymnasium env never sees
    obs, reward, terminated, truncated, info = env.step("try 42")
    assert (obs, reward, terminated, truncated, info["is_action_valid"]) == ("Wrong code.", 0.0, False, False, False)
    assert env.gym_env.unwrapped.steps == 1
    assert env.step("sing")[4]["is_action_valid"] is False  # in the space, refused by the env itself
    assert env.step("try cedar")[:4] == ("It opens.", 1.0, True, False)


def test_discrete_names_by_hand():
    env = GymnasiumTextEnv(id=WINDY)
    obs, info = env.reset(seed=4)  # goal 2 + 4 % 3 = 3
    assert obs == "Room 0 of 0-4, the goal is room 3." and info["admissible_actions"] == ["left", "right", "stay"]
    obs, reward, *_, info = env.step("  RIGHT ")  # agents' text is matched case- and space-insensitively
    assert info["is_action_valid"] and obs.startswith(("Room 1 ", "Room 0 ")) and reward == 0.0
    assert env.step("1")[4]["is_action_valid"] is False  # named actions are not also numbers
    plain = GymnasiumTextEnv(id=WINDY, action_kind="ints")
    _, info = plain.reset(seed=4)
    assert info["admissible_actions"] == ["0", "1", "2"]
    assert plain.step("2")[0] == "Room 0 of 0-4, the goal is room 3."  # 2 = stay: no wind, no move


def test_replay_restore_matches_the_raw_env():
    actions = [1, 1, 2, 0, 1, 1, 1]  # right, right, stay, left, right, right, right
    raw = gymnasium.make(WINDY)
    seen = [raw.reset(seed=2)[0]] + [raw.step(a)[0] for a in actions]  # goal 4: no step ends the episode
    env = GymnasiumTextEnv(id=WINDY, deterministic=True)
    assert env.reset(seed=2)[0] == seen[0]
    names = ["left", "right", "stay"]
    for a in actions[:3]:
        env.step(names[a])
    snap, pos_then, made_before = env.snapshot(), env.gym_env.unwrapped.pos, env.gym_env
    assert [env.step(names[a])[0] for a in actions[3:]] == seen[4:]
    env.reset(seed=99)
    env.restore(snap)
    assert env.gym_env is not made_before and env.gym_env.unwrapped.pos == pos_then
    # the RNG is back too: the same actions meet the same gusts as the first time
    assert [env.step(names[a])[0] for a in actions[3:]] == seen[4:]


def test_expert_is_named():
    env = GymnasiumTextEnv(id=WINDY)
    env.reset(seed=0)  # goal 2, walker in room 0
    assert env.expert_action() == "right"


@pytest.mark.slow
def test_prover_train_runs_one_step_with_a_branching_method(tmp_path, capsys):
    run = tmp_path / "run"
    args = ["train", *TINY_RUN, "steps=1", "env.name=gymnasium-deterministic", f"env.kwargs.id={WINDY}",
            "credit.name=prover", f"run.dir={run}"]
    assert main(args) == 0, capsys.readouterr().err
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert ("train", 1) in [(r["phase"], r["step"]) for r in steps]


def test_non_deterministic_adapter_claims_no_snapshots():
    env = make_env("gymnasium", id=WINDY)
    assert not env.can_snapshot and not env.deterministic
    assert check_env(env) == 10  # 1 + 3 seeds x 3: the snapshot checks are skipped
    with pytest.raises(CapabilityError):
        env.snapshot()


def test_branching_credit_needs_the_deterministic_name():
    ok = load_config(None, ["env.name=gymnasium-deterministic", f"env.kwargs.id={WINDY}", "credit.name=prover"])
    check_parts_fit(ok)
    with pytest.raises(CapabilityError, match="cannot snapshot"):
        check_parts_fit(load_config(None, ["env.name=gymnasium", f"env.kwargs.id={WINDY}", "credit.name=prover"]))


def test_check_env_command(capsys):
    assert main(["check-env", "gymnasium-deterministic", f"id={TEXT}"]) == 0
    assert capsys.readouterr().out.strip() == "gymnasium-deterministic: passes the env contract (17 checks)"


# -- observations that are not text, envs registered on import ----------------------------------------
def test_an_id_registered_on_import_is_found_as_module_colon_id():
    """As MiniGrid's: ``prover-test/DictCorridor-v0`` exists once ``gym_obs_envs`` is imported. Unregistered
    and unimported here, the bare id fails with the hint; ``module:id`` imports the module and works."""
    sys.modules.pop("gym_obs_envs", None)
    gymnasium.registry.pop("prover-test/DictCorridor-v0", None)
    with pytest.raises(ConfigError) as err:
        make_env("gymnasium", id="prover-test/DictCorridor-v0")
    line = str(err.value)
    assert "env.kwargs.id=<module>:prover-test/DictCorridor-v0" in line and "\n" not in line
    assert "gym_obs_envs" not in sys.modules  # (importing the obs_to_text module would register the id too)
    env = make_env("gymnasium-deterministic", id="gym_obs_envs:prover-test/DictCorridor-v0",
                   obs_to_text="gym_obs_envs:corridor_text")
    obs, info = env.reset(seed=4)  # goal 3 + 4 % 3 = 4
    assert obs == "You are in cell 0 of 0-5; reach the goal cell: cell 4."
    assert (info["task"], info["admissible_actions"]) == (obs, ["back", "forward"])
    assert env.step("forward")[:4] == ("You are in cell 1 of 0-5; reach the goal cell: cell 4.", 0.0, False, False)
    for _ in range(2):
        env.step("forward")
    assert env.step("forward")[1:3] == (1.0, True)
    assert check_env(env) == 16  # the contract holds on the text the hook writes, snapshots included


def test_an_array_observation_through_obs_to_text_matches_the_raw_env():
    from gym_obs_envs import cartpole_text

    raw = gymnasium.make("CartPole-v1")
    first = raw.reset(seed=3)[0]
    seen = [raw.step(a)[0] for a in (0, 1, 1)]
    env = make_env("gymnasium", id="CartPole-v1", obs_to_text="gym_obs_envs:cartpole_text")
    obs, info = env.reset(seed=3)
    assert obs == cartpole_text(first, raw) and info["admissible_actions"] == ["0", "1"]
    assert obs.startswith("cart ") and obs.count("+") + obs.count("-") == 4  # four signed numbers, not repr
    assert [env.step(a)[0] for a in ("0", "1", "1")] == [cartpole_text(o, raw) for o in seen]


@pytest.mark.parametrize("hook, words", [
    ("gym_obs_envs", "is not of the form module:function"),
    ("gym_obs_envs:no_such_function", "does not load: AttributeError"),
    ("no_such_module_here:f", "does not load: ModuleNotFoundError"),
    ("gym_obs_envs:NOT_A_FUNCTION", "is a int, not a function"),
])
def test_a_bad_obs_to_text_is_one_line(hook, words):
    with pytest.raises(ConfigError) as err:
        make_env("gymnasium", id="CartPole-v1", obs_to_text=hook)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_obs_to_text_must_return_text():
    env = make_env("gymnasium", id="CartPole-v1", obs_to_text="gym_obs_envs:not_text")
    with pytest.raises(ContractError, match="returned a list .* it must return a str"):
        env.reset(seed=0)


@pytest.mark.parametrize("kwargs, words", [
    ({"id": "NoSuchEnv-v0"}, "cannot make Gymnasium env 'NoSuchEnv-v0'"),
    ({"id": "NoSuchEnv-v0"}, "name the package too: env.kwargs.id=<module>:NoSuchEnv-v0"),
    ({"id": "no_such_module:Foo-v0"}, "No module named 'no_such_module'"),
    ({}, "id"),
    ({"id": "CartPole-v1"}, "needs text ones (a Text space), or env.kwargs.obs_to_text=<module>:<function>"),
    ({"id": WINDY, "action_kind": "box"}, "only Text and Discrete"),
    ({"id": WINDY, "colour": "red"}, "rejected its arguments ['colour']"),
])
def test_bad_input_is_one_line(kwargs, words):
    with pytest.raises(ConfigError) as err:
        make_env("gymnasium", **kwargs)
    assert words in str(err.value) and "\n" not in str(err.value)
