"""The step line's warnings: a step that trained no rows says so instead of printing ``loss +0.0000``."""

from __future__ import annotations

import io

from rich.console import Console

from prover.progress import Reporter, no_rows_warning

RECORD = {"step": 3, "rollout/success": 1.0, "rollout/turns": 4.0, "learner/pg_loss": 0.0,
          "cost/rollout_tokens": 100.0, "time/rollout": 0.1, "time/credit": 0.0, "time/learner": 0.0,
          "time/sync": 0.0}


def _printed(record: dict) -> str:
    out = io.StringIO()
    Reporter(Console(file=out, width=400)).step_line(record, 5)
    return out.getvalue()


def test_a_step_with_no_rows_warns_and_one_with_rows_does_not():
    assert "trained no rows" in no_rows_warning({**RECORD, "learner/rows": 0.0})
    assert no_rows_warning({**RECORD, "learner/rows": 7.0}) == ""
    assert no_rows_warning(RECORD) == ""  # a record without a learner (eval-only runs) is not a warning
    assert "step 3 trained no rows" in _printed({**RECORD, "learner/rows": 0.0})
    assert "no rows" not in _printed({**RECORD, "learner/rows": 2.0})


def test_nearly_all_singleton_anchor_groups_warn_once_per_run():
    out = io.StringIO()
    report = Reporter(Console(file=out, width=400))
    report.step_line({**RECORD, "credit/singleton_anchor_share": 0.89}, 5)  # under 90%: no line
    assert "anchor groups" not in out.getvalue()
    for step, share in ((4, 0.9), (5, 0.97)):  # 90% warns; the next step, higher still, does not again
        report.step_line({**RECORD, "step": step, "credit/singleton_anchor_share": share}, 5)
    lines = [line for line in out.getvalue().splitlines() if "anchor groups" in line]
    assert len(lines) == 1 and lines[0].startswith("credit: 90% of step 4's GiGPO anchor groups are single turns")
    assert "credit.anchor=observation" in lines[0]
    assert "anchor groups" not in _printed(RECORD)  # methods other than GiGPO report no share


def _final_line(warm_started: bool) -> str:
    out = io.StringIO()
    history = [{"step": 0, "phase": "eval", "eval/success": 0.25}, {"step": 2, "phase": "eval", "eval/success": 0.5}]
    Reporter(Console(file=out, width=400)).summary(history, None, warm_started=warm_started)
    return out.getvalue().strip()


def test_the_final_line_names_the_warm_start_only_when_there_was_one():
    assert _final_line(True) == "held-out success: after warm start 0.250 -> after RL 0.500 (step 2)"
    assert _final_line(False) == "held-out success: before RL 0.250 -> after RL 0.500 (step 2)"
