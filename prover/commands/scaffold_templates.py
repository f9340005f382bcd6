"""What ``prover new`` writes, code and test per kind (``string.Template``: name, module, cls, title).
Each is a working plugin, not a stub: tests/test_scaffold.py installs, tests and trains with what they
make, and keeps examples/plugins/ (names dial, loo, recent) identical to their output."""

ENV_CODE = '''\
"""${title}: a dial shows 0 to 9; turn it to the task's number, then press the button.

Made by `prover new env ${name}`: a small env that keeps the whole env contract (prover/envs/base.py),
with a native snapshot, a state key, an expert for the warm start and a training recipe. Replace the dial
with your task and keep `pytest tests` passing; docs/plugins.md in prover explains each part.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, ClassVar

from prover.envs import AgentSpec, TextEnv
from prover.errors import ConfigError, ContractError

SPLITS = ("train", "test")
ACTIONS = ("press button", "turn left", "turn right")  # sorted, as info["admissible_actions"] must be


@dataclass(frozen=True)
class ${title}Snapshot:
    """Every field the state is made of, and the replay record (so that a restored env can snapshot again)."""

    split: str
    seed: int
    target: int
    dial: int
    steps: int
    done: bool
    record: tuple


class ${cls}(TextEnv):
    """A dial shows 0 to 9 and starts at 0; turning wraps around. Reward 1.0 and ``terminated`` when the
    button is pressed with the dial at the task's number; ``truncated`` after ``max_steps``. A press at
    another number is valid and changes nothing; any other text is an invalid no-op that uses a step."""

    native_snapshot = True  # snapshot() copies a few fields instead of replaying every action
    # Settings with which the tiny policy learns this env: `prover train env.name=${name}` applies each one
    # that the user's config leaves unset (only with model.path=tiny).
    train_recipe: ClassVar[dict[str, Any]] = {"rollout.max_turns": 12, "warmstart.episodes": 300}
    # The agent's prompt, as data. Short: a tiny model reads every token of it on every turn.
    agent_spec = AgentSpec(
        first_template="Task: {task}\\nObservation: {observation}\\nActions: {actions}",
        later_template=("Task: {task}\\nHistory:\\n{history}\\nObservation: {observation}\\n"
                        "Actions: {actions}"),
        history_entry="{observation} > {action}",
    )
    dial: int | None = None  # None until the first reset

    def __init__(self, max_steps: int = 12) -> None:
        if max_steps < 1:
            raise ConfigError(f"${name} max_steps must be >= 1, got {max_steps}")
        self.max_steps = max_steps

    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        split = options.get("split", "train")
        if split not in SPLITS:
            raise ConfigError(f"${name} split must be one of {SPLITS}, got {split!r}")
        # The task follows from the seed and split alone: the replay record and check_env rely on it.
        self.split, self.seed = split, seed
        self.target = random.Random(f"{split}/{seed}").randint(1, 9)
        self.dial, self.steps, self.done = 0, 0, False
        return f"{self._task()} The dial shows 0.", self._info(valid=True, won=False)

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.done:
            raise ContractError("${cls}.step() after the episode ended; call reset() first")
        self.steps += 1
        act = " ".join(action.lower().split())
        won = act == "press button" and self.dial == self.target
        if act in ("turn left", "turn right"):
            self.dial = (self.dial + (1 if act == "turn right" else -1)) % 10
            obs = f"The dial shows {self.dial}."
        elif act == "press button":
            obs = "The lock opens. You win!" if won else f"Nothing happens. The dial shows {self.dial}."
        else:  # an invalid action is a no-op, never an exception
            obs = f"You can't do that. The dial shows {self.dial}."
        truncated = not won and self.steps >= self.max_steps
        self.done = won or truncated
        return obs, float(won), won, truncated, self._info(valid=act in ACTIONS, won=won)

    def state_key(self) -> Hashable:
        """(target, dial): all that decides what the same actions do from here. The seed only picks the
        target, and the step count is left out so that GiGPO groups the same state across turns."""
        return (self.target, self.dial)

    def snapshot(self) -> ${title}Snapshot:
        if self.dial is None:
            raise ContractError("${cls}.snapshot() called before reset()")
        return ${title}Snapshot(
            self.split, self.seed, self.target, self.dial, self.steps, self.done, self.replay_record())

    def restore(self, snapshot: ${title}Snapshot) -> None:
        if not isinstance(snapshot, ${title}Snapshot):
            got = type(snapshot).__name__
            raise ContractError(f"${cls}.restore() got {got}, expected a ${title}Snapshot")
        s = snapshot
        self.split, self.seed, self.target, self.dial, self.steps, self.done = (
            s.split, s.seed, s.target, s.dial, s.steps, s.done)
        self.set_replay_record(s.record)

    def expert_action(self) -> str | None:
        """The shortest way to the number, then the button: what the warm start clones."""
        if self.dial is None or self.done:
            return None
        if self.dial == self.target:
            return "press button"
        return "turn right" if (self.target - self.dial) % 10 <= 5 else "turn left"

    def _task(self) -> str:
        return f"Turn the dial to {self.target} and press the button."

    def _info(self, valid: bool, won: bool) -> dict:
        actions = [] if self.done else list(ACTIONS)
        return {"task": self._task(), "admissible_actions": actions, "won": won, "is_action_valid": valid}
'''

ENV_TEST = '''\
"""The ${name} env keeps the env contract, found by name as `prover train` finds it (the package must be
installed: `pip install -e .`). Every test reads only the contract (actions from `admissible_actions` or the
expert, the class's own `train_recipe`), so they still hold once your env replaces the example's."""

from __future__ import annotations

import pytest

from prover.config_load import load_config
from prover.envs import check_env, make_env
from prover.envs.checker import check_gymnasium

from ${module} import ${cls}


def an_action(env: ${cls}, info: dict) -> str:
    """A legal action from here: the first admissible one, else the expert's."""
    action = (info.get("admissible_actions") or [None])[0] or env.expert_action()
    if action is None:
        pytest.skip("the env lists no admissible actions and has no expert")
    return action


def test_check_env_passes_on_the_env_found_by_name() -> None:
    env = make_env("${name}")
    assert isinstance(env, ${cls})
    assert check_env(env, seeds=tuple(range(5))) > 0  # a broken rule raises, naming it
    assert check_gymnasium(env) == 1


def test_the_expert_wins_every_task_of_both_splits() -> None:
    env = ${cls}()
    for split in ("train", "test"):
        for seed in range(20):
            env.reset(seed=seed, options={"split": split})
            if env.expert_action() is None:
                pytest.skip("the env has no expert (the warm start needs one)")
            done = truncated = False
            while not (done or truncated):
                _, _, done, truncated, info = env.step(env.expert_action())
            assert info["won"] and not truncated, f"the expert lost task {seed} of {split}"


def test_restore_goes_back_to_the_snapshot() -> None:
    env = ${cls}()
    for seed in range(10):  # a task whose first action leaves the episode running
        _, info = env.reset(seed=seed)
        _, _, done, truncated, info = env.step(an_action(env, info))
        if not (done or truncated):
            break
    else:
        pytest.skip("every episode ended at its first action")
    snap, key, action = env.snapshot(), env.state_key(), an_action(env, info)
    first = env.step(action)
    env.restore(snap)
    assert env.state_key() == key
    assert env.step(action)[:4] == first[:4]


def test_the_recipe_sets_what_the_config_leaves_unset() -> None:
    for key, value in ${cls}.train_recipe.items():
        section, field = key.rsplit(".", 1)
        loaded = load_config(None, ["env.name=${name}"])
        for part in section.split("."):
            loaded = getattr(loaded, part)
        assert getattr(loaded, field) == value, key
'''

CREDIT_CODE = '''\
"""${title}: a leave-one-out outcome baseline (RLOO) on every token of a trajectory.

    A_i       = R_i - mean_{j != i} R_j          baseline = "loo"  (RLOO, Ahmadian et al., arXiv 2402.14740)
    A_i       = R_i - mean_j R_j                 baseline = "mean"
    A_{i,t,k} = A_i                              every token k of every turn t of trajectory i

R_i is the trajectory's score, reward.scale times its env return (prover.credit.base.trajectory_score).
A group of one has no baseline and gets 0. Made by `prover new credit ${name}`; docs/plugins.md in prover
explains each part.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from prover.credit.base import CreditAssigner, CreditContext, MethodConfig, broadcast, trajectory_score
from prover.types import Advantages, Batch


class ${cls}Config(MethodConfig):
    baseline: Literal["loo", "mean"] = Field(
        "loo", description="The baseline R_i is compared with: the mean of the group's other trajectories "
        "(loo) or of all of them (mean).")


def baseline_advantages(scores: np.ndarray, baseline: str) -> np.ndarray:
    """(G,) advantages of one group from its (G,) scores; zeros for a group of fewer than two."""
    n = len(scores)
    if n < 2:
        return np.zeros(n)
    if baseline == "loo":
        return scores - (scores.sum() - scores) / (n - 1)
    return scores - scores.mean()


class ${cls}(CreditAssigner):
    Config = ${cls}Config
    needs_groups = True  # compares a group's trajectories: refused at rollout.group_size=1
    needs_snapshots = False  # never branches, so it runs on envs that cannot snapshot

    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
        per_turn = []
        for group in batch.groups:
            scores = np.array([trajectory_score(tr, ctx.config.reward) for tr in group.trajectories])
            advantages = baseline_advantages(scores, self.config.baseline)
            per_turn.append([np.full(len(tr.turns), a) for tr, a in zip(group.trajectories, advantages)])
        values = broadcast(batch, per_turn)  # one value per completion token of every turn
        flat = [a for g in values for tr in g for a in tr]
        mean_abs = float(np.mean(np.abs(np.concatenate(flat)))) if flat else 0.0
        return Advantages(values=values, metrics={"credit/mean_abs_advantage": mean_abs})
'''

CREDIT_TEST = '''\
"""The ${name} credit method keeps the credit contract (prover's tests/test_credit_contract.py) and matches
its formula on a group worked by hand. Found by name, so the package must be installed
(`pip install -e .`)."""

from __future__ import annotations

import numpy as np
import pytest

from prover.config import TrainConfig
from prover.config_load import load_config
from prover.credit import CreditContext
from prover.errors import ConfigError
from prover.registry import CREDIT
from prover.types import Batch, Group, Trajectory, Turn

from ${module} import ${cls}


def trajectory(traj_id: str, won: bool, n_turns: int, tokens: int = 2) -> Trajectory:
    """A won trajectory has reward 1.0 on its last turn, so its score R_i is reward.scale (10) times 1."""
    turns = [Turn(prompt_ids=[1], completion_ids=[5] * tokens, logprobs=[-0.5] * tokens, observation="o",
                  completion_text="", action="a", format_valid=True, action_valid=True,
                  reward=1.0 if won and t == n_turns - 1 else 0.0, state_key=t) for t in range(n_turns)]
    return Trajectory(traj_id, "task", "", turns=turns, won=won)


def assign(batch: Batch, **fields) -> list[np.ndarray]:
    method = CREDIT.get("${name}")(${cls}.Config(**fields))
    advantages = method.assign(batch, CreditContext(TrainConfig()))  # reward.scale = 10
    values = advantages.flat()
    turns = batch.turns()
    assert [len(v) for v in values] == [t.n_tokens for t in turns]  # one value per completion token
    return values


def test_found_by_name() -> None:
    assert CREDIT.get("${name}") is ${cls}


def test_empty_and_all_failed_groups_give_zeros() -> None:
    failed = Group("failed", [trajectory("A", False, 3), trajectory("B", False, 2)])
    batch = Batch([Group("empty", []), failed])
    assert all(np.all(v == 0.0) for v in assign(batch))


@pytest.mark.parametrize("baseline, expected", [
    ("loo", [10.0, -5.0, -5.0]),  # scores 10, 0, 0: 10 - (0+0)/2, 0 - (10+0)/2, 0 - (10+0)/2
    ("mean", [20 / 3, -10 / 3, -10 / 3]),  # mean 10/3
])
def test_a_group_worked_by_hand(baseline: str, expected: list[float]) -> None:
    group = Group("g", [trajectory("win", True, 2), trajectory("lose", False, 1), trajectory("x", False, 3)])
    batch = Batch([group])
    values = assign(batch, baseline=baseline)
    per_turn = [expected[0]] * 2 + [expected[1]] + [expected[2]] * 3
    for v, want in zip(values, per_turn):
        np.testing.assert_allclose(v, want, rtol=1e-6)
    assert abs(sum(expected)) < 1e-9  # both baselines sum to zero over a group


def test_bad_settings_fail_when_the_config_loads() -> None:
    with pytest.raises(ConfigError, match="group_size"):
        load_config(None, ["credit.name=${name}", "rollout.group_size=1"])
    with pytest.raises(ConfigError, match="credit.baseline"):
        load_config(None, ["credit.name=${name}", "credit.baseline=median"])
'''

JUDGE_CODE = '''\
"""${title}: proposes the last turns before the success's final turn (a recency heuristic).

Free and deterministic: it reads nothing but the segment bounds, so it is a baseline an informed judge must
beat. A judge proposes and never writes advantages; ProVer validates the proposal and verifies it by
branching. Made by `prover new judge ${name}`; docs/plugins.md in prover explains each part.
"""

from __future__ import annotations

from pydantic import Field

from prover.judges.base import Judge, JudgeSettings, valid_segments
from prover.types import JudgeRequest, JudgeResult, JudgeUsage, Proposal


class ${cls}Config(JudgeSettings):
    turns: int = Field(1, ge=1, description="Turns of the proposed segment, at most (and at most the "
                       "request's max_turns).")


class ${cls}(Judge):
    """Free, deterministic: the valid segment of at most judge.turns turns that ends latest before the
    success's final turn. It reads nothing but the segment bounds."""

    Config = ${cls}Config

    def propose(self, request: JudgeRequest) -> JudgeResult:
        longest = min(self.config.turns, request.max_turns)
        candidates = [s for s in valid_segments(request) if s.end_turn - s.start_turn + 1 <= longest]
        if not candidates:  # e.g. a one-turn success: there is no state after a segment to branch from
            return JudgeResult(None, failure="no valid segment in the successful trajectory")
        best = max(candidates, key=lambda s: (s.end_turn, s.end_turn - s.start_turn))
        n = best.end_turn - best.start_turn + 1
        # A free judge costs nothing; an LLM judge fills calls, tokens and dollars here.
        proposal = Proposal(best, rationale=f"the {n} turn(s) before the last one")
        return JudgeResult(proposal, usage=JudgeUsage())
'''

JUDGE_TEST = '''\
"""The ${name} judge returns proposals that pass prover's validation, worked out by hand on small groups.
Found by name, so the package must be installed (`pip install -e .`)."""

from __future__ import annotations

import pytest

from prover.config_load import load_config
from prover.errors import ConfigError
from prover.judges import validate_segment
from prover.registry import JUDGES
from prover.types import Group, JudgeRequest, Segment, Trajectory, Turn

from ${module} import ${cls}


def trajectory(traj_id: str, won: bool, n_turns: int, rejected: tuple[int, ...] = ()) -> Trajectory:
    turns = [Turn(prompt_ids=[1], completion_ids=[5], logprobs=[-0.5], observation=f"o{t}",
                  completion_text="", action=f"a{t}", format_valid=True, action_valid=t not in rejected,
                  reward=1.0 if won and t == n_turns - 1 else 0.0, state_key=t) for t in range(n_turns)]
    return Trajectory(traj_id, "task", "", turns=turns, won=won)


def request(n_turns: int, rejected: tuple[int, ...] = ()) -> JudgeRequest:
    group = Group("task", [trajectory("lose", False, 6), trajectory("win", True, n_turns, rejected)])
    return JudgeRequest(group, target=1, max_turns=4)


def propose(req: JudgeRequest, **fields) -> Segment | None:
    judge = JUDGES.get("${name}")(${cls}.Config(**fields))
    result = judge.propose(req)
    assert result.usage.calls == 0 and result.usage.dollars == 0.0  # free
    if result.proposal is None:
        assert result.failure  # no proposal always says why
        return None
    assert validate_segment(req, result.proposal.segment) is None
    return result.proposal.segment


def test_found_by_name() -> None:
    assert JUDGES.get("${name}") is ${cls}


@pytest.mark.parametrize("turns, rejected, expected", [
    (1, (), (3, 3)),  # turns 0..4: the last turn before the final one
    (3, (), (1, 3)),
    (9, (), (0, 3)),  # cut to the request's max_turns (4)
    (1, (3,), (2, 2)),  # a rejected action is never inside a segment
    (2, (3,), (1, 2)),
])
def test_segments_worked_by_hand(turns: int, rejected: tuple[int, ...], expected: tuple[int, int]) -> None:
    assert propose(request(5, rejected), turns=turns) == Segment("win", *expected)


def test_a_one_turn_success_gets_no_proposal() -> None:
    assert propose(request(1)) is None


def test_bad_settings_fail_when_the_config_loads() -> None:
    with pytest.raises(ConfigError, match="judge.turns"):
        load_config(None, ["credit.name=prover", "judge.name=${name}", "judge.turns=0"])
'''
