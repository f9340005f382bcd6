"""The text an env hands the agent must be valid Unicode: any character ('√', accented titles,
emoji) is accepted; a lone surrogate (what surrogateescape decoding leaves) in a task, an observation or an
admissible action ends that episode as an env error naming the text, never the run, and ``check_env``
refuses such an env."""

from __future__ import annotations

import json

import pytest
from odd_text_envs import SURROGATE, VALID, ManyActionsEnv, SurrogateActionEnv, SurrogateTaskEnv, UnicodeTaskEnv

from conftest import TINY_RUN
from prover.envs import check_env
from prover.envs.text import MAX_ADMISSIBLE_ACTIONS, MAX_ADMISSIBLE_CHARS, text_problem
from prover.errors import ContractError


def test_valid_unicode_passes_and_a_lone_surrogate_is_named_with_its_place():
    assert text_problem(f"Sokoban: √ {VALID}", {"task": VALID, "admissible_actions": ["Crème", "√"]}) == ""
    problem = text_problem("fine", {"task": "fine", "admissible_actions": ["go", f"look at {SURROGATE}"]})
    assert problem.startswith("admissible action 1 is not valid Unicode") and "'\\udcff' at character 11" in problem
    assert text_problem(SURROGATE, {}).startswith("observation is not valid Unicode")
    assert text_problem("ok", {"task": SURROGATE}).startswith("info['task'] is not valid Unicode")


def test_admissible_actions_past_the_bound_are_one_line_before_any_is_looked_at():
    """The count is read first: a list of 900 000 costs no pass over it (its last item would break it)."""
    assert (MAX_ADMISSIBLE_ACTIONS, MAX_ADMISSIBLE_CHARS) == (10_000, 1_000_000)  # docs/envs.md states them
    at_bound = ["go"] * MAX_ADMISSIBLE_ACTIONS
    assert text_problem("ok", {"admissible_actions": at_bound}) == ""
    problem = text_problem("ok", {"admissible_actions": ["go"] * 899_999 + [SURROGATE]})
    assert problem == ("info['admissible_actions'] lists 900000 actions, more than the 10000 a prompt may show "
                       "(every prompt lists them all)")
    long = ["x" * 500_000, "y" * 500_000]  # two actions, 1 000 000 characters: the bound itself
    assert text_problem("ok", {"admissible_actions": long}) == ""
    problem = text_problem("ok", {"admissible_actions": long + ["z"]})
    assert problem.startswith("info['admissible_actions'] holds more than 1000000 characters (action 2 passes it)")


@pytest.mark.parametrize("env_cls, where", [(SurrogateTaskEnv, "reset(seed=0)"),
                                            (SurrogateActionEnv, "step 1 of seed 0")])
def test_check_env_refuses_an_env_whose_text_holds_a_lone_surrogate(env_cls, where):
    with pytest.raises(ContractError, match=r"check_env \[text\]: " + where.replace("(", r"\(").replace(")", r"\)")):
        check_env(env_cls(), seeds=(0,), n_steps=3)


def test_check_env_refuses_an_env_that_lists_too_many_actions():
    with pytest.raises(ContractError, match=r"check_env \[text\]: step 1 of seed \d+: "
                                            r"info\['admissible_actions'\] lists 900000 actions"):
        check_env(ManyActionsEnv(), seeds=(0, 1, 2, 3), n_steps=3)


def test_check_env_accepts_valid_non_ascii_text():
    assert check_env(UnicodeTaskEnv(), seeds=(0,), n_steps=3) > 0


@pytest.mark.slow
@pytest.mark.parametrize("credit", ["grpo", "prover"])
@pytest.mark.parametrize("env_cls", ["SurrogateTaskEnv", "SurrogateActionEnv", "UnicodeTaskEnv"])
def test_training_on_odd_text_ends_only_the_episodes_that_hold_a_surrogate(tmp_path, capsys, env_cls, credit):
    from prover.cli import main

    run = tmp_path / "run"
    rc = main(["train", *TINY_RUN, f"run.dir={run}", f"env.name=odd_text_envs:{env_cls}", f"credit.name={credit}",
               "steps=1", "rollout.max_env_error_share=1.0"])
    err = capsys.readouterr().err
    assert rc == 0 and "Traceback" not in err, err
    trajs = [t for line in (run / "groups.jsonl").read_text().splitlines() for t in json.loads(line)["trajectories"]]
    errors = [t["env_error"] for t in trajs if t["env_error"]]
    if env_cls == "UnicodeTaskEnv":
        assert errors == []
    else:  # about every other task holds the surrogate
        assert errors and len(errors) < len(trajs)
        assert all("is not valid Unicode: it holds the lone surrogate '\\udcff'" in e for e in errors)


@pytest.mark.slow
def test_training_on_too_many_actions_ends_those_episodes_at_once(tmp_path, capsys):
    """900 000 admissible actions after a step: those episodes end as env errors, the others train."""
    import time

    from prover.cli import main

    run, start = tmp_path / "run", time.monotonic()
    rc = main(["train", *TINY_RUN, f"run.dir={run}", "env.name=odd_text_envs:ManyActionsEnv", "credit.name=grpo",
               "steps=1", "rollout.max_env_error_share=1.0"])
    err = capsys.readouterr().err
    assert rc == 0 and "Traceback" not in err, err
    trajs = [t for line in (run / "groups.jsonl").read_text().splitlines() for t in json.loads(line)["trajectories"]]
    errors = [t["env_error"] for t in trajs if t["env_error"]]
    assert errors and len(errors) < len(trajs)
    assert all(e.startswith("info['admissible_actions'] lists 900000 actions") for e in errors)
    assert time.monotonic() - start < 300  # seen: hours of tokenizing a 16 MB prompt per such turn before
