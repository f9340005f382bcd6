"""The env contract checks a training run makes before its first step (``prover.rundir.preflight``):
``check_run_env``, the run's env built from its config section once and thrown away.

Most of the contract shows itself in training: a reset that does not give text, an action that raises, a
bad info dict end an episode or the run with one line. Two rules do not: an env whose instances share
state (the process-wide ``random``, a class attribute) and a snapshot that restores another state train
on other episodes than the ones recorded, with no error anywhere. So before the first step a run plays
the checks of ``prover check-env`` that find them (``prover.envs.checker``), on one seed:

- two instances from a reset, alone and then in lockstep (rules ``global-rng`` and ``lockstep``), for an
  env that says it is deterministic (one that does not is not expected to replay a seed);
- for a credit method that branches, a snapshot restored into one instance and into two in lockstep
  (rule ``snapshot-restore``, and the lockstep rules again).

They take 1-25 ms on the built-in envs and are bounded to ``BUDGET_S`` seconds. A pass is remembered
for the process by the env's class and settings (``check_key``), so a bench that runs many cells of one
env pays it once. A failure is ``check-env``'s one line, naming the rule and the fix. The rest of
``check_env`` (types, invalid actions, state keys, gymnasium's checker) stays ``prover check-env``'s.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prover.envs import make_configured_env
from prover.envs.base import TextEnv
from prover.envs.checker import _fail, _random_picker, _step, check_snapshot_restore
from prover.envs.checker_lockstep import check_reset_lockstep
from prover.errors import ConfigError, ContractError, ProverError

if TYPE_CHECKING:
    from prover.config import EnvConfig

SEED = 0  # the lockstep check plays this seed and the next one
MAX_STEPS = 30  # as check-env: long enough for a shared RNG to have been drawn from
SILENT_RULES = ("global-rng", "lockstep", "snapshot-restore")  # broken, they leave no error in training
RULE = re.compile(r"^check_env \[([\w-]+)\]")  # how ``checker._fail`` names the rule
BUDGET_S = 1.0  # the built-in envs take 1-25 ms; a step that starts past the budget ends the checks
_PASSED: set[tuple] = set()


class OutOfTime(BaseException):
    """The checks' time is up: they end without a verdict. A BaseException, so that the checker's ``except
    Exception`` around an env's step (which makes any error a broken rule) lets it through."""


def _before(deadline: float, step: Callable) -> Callable:
    """``step`` that first makes sure the checks' time is not up."""
    def bounded(action: str) -> tuple:
        if time.monotonic() > deadline:
            raise OutOfTime
        return step(action)
    return bounded


def rule_of(exc: ContractError) -> str | None:
    """The rule a check-env failure names."""
    match = RULE.match(str(exc))
    return match[1] if match else None


def check_key(cls: type, kwargs: dict[str, Any], isolate_global_rng: bool, branches: bool) -> tuple:
    """What decides the checks' outcome: the class, its settings, the run's RNG isolation, branching."""
    settings = json.dumps(kwargs, sort_keys=True, default=repr)
    return f"{cls.__module__}:{cls.__qualname__}", settings, bool(isolate_global_rng), bool(branches)


def check_for_training(name: str, make: Callable[[], TextEnv], key: tuple, branches: bool,
                       max_turns: int = MAX_STEPS, budget_s: float = BUDGET_S) -> bool:
    """Run the checks above on two instances from ``make`` unless ``key`` passed before in this process;
    returns whether they ran to the end. Episodes are played for the run's ``max_turns`` (at most ``MAX_STEPS``): the
    states training reaches. A broken rule of ``SILENT_RULES`` raises check-env's ``ContractError``, prefixed
    with ``name``; any other failure (a step that raises, text that is no text) ends the checks quietly, as
    the rollout reports those itself, episode by episode, and bounds their share. So does running out of
    ``budget_s`` seconds (an env with huge observations), so that the checks never cost a run more."""
    if key in _PASSED:
        return False
    n_steps = min(max_turns, MAX_STEPS)
    env = twin = None
    deadline = time.monotonic() + budget_s
    try:
        env, twin = make(), make()
        for instance in (env, twin):
            instance.step = _before(deadline, instance.step)  # type: ignore[method-assign]
        if env.deterministic:
            check_reset_lockstep(env, twin, SEED, n_steps, _random_picker, _step, _fail)
        if branches and env.can_snapshot:
            check_snapshot_restore(env, SEED, n_steps, twin)
    except OutOfTime:  # a slow env is checked as far as the budget goes
        return False
    except ContractError as exc:
        if rule_of(exc) not in SILENT_RULES:  # the rest shows in training: an env error, one line
            return False
        raise ContractError(f"env {name!r} fails a contract check before training: {exc}; `prover check-env "
                            f"{name}` runs them all") from exc
    except ProverError:
        raise
    except Exception:  # noqa: BLE001 - an env that raises is the rollout's env error, counted and bounded there
        return False
    finally:
        for instance in (env, twin):
            if instance is not None:
                instance.close()
    _PASSED.add(key)
    return True


def check_run_env(env: EnvConfig, splits: list[str], max_turns: int, branches: bool) -> None:
    """The run's env (``env``: its config section) resets on each of ``splits`` to text and a dict, its
    prompt templates render (every placeholder known), and two fresh instances pass the checks above
    (``check_for_training``, for ``branches`` the snapshot ones too). Each failure is one line."""
    made = make_configured_env(env)
    try:
        for split in dict.fromkeys(splits):
            try:
                obs, info = made.reset(seed=0, options={"split": split})
            except (ValueError, KeyError) as exc:
                raise ConfigError(f"env {env.name!r} cannot reset on split {split!r}: {exc}") from exc
            if not isinstance(obs, str) or not isinstance(info, dict):
                raise ContractError(f"env {env.name!r} reset gave {type(obs).__name__} and "
                                    f"{type(info).__name__}, not text and a dict")
        try:  # the history window changes how much history a prompt shows, not which placeholders it has
            made.agent_spec.render("task", obs, list(info.get("admissible_actions") or []), [("o", "a")] * 3, 3)
            made.agent_spec.render("task", obs, [], [], 0)
        except (KeyError, IndexError, ValueError) as exc:
            raise ContractError(f"env {env.name!r}: its prompt template has an unknown placeholder {exc}; "
                                "templates may use task, observation, actions, history, step, n_history") from exc
        key = check_key(type(made), env.kwargs, env.isolate_global_rng, branches)
    finally:
        made.close()
    check_for_training(env.name, lambda: make_configured_env(env), key, branches, max_turns)
