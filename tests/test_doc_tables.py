"""The documentation's tables against the code: every metric a built-in credit method logs has a row in
the metrics table (docs/metrics.md), and the credit-methods table (docs/credit.md) lists every field of
every built-in method.

For the metrics, each method assigns one small batch with stand-ins for what it reaches through its
context (a Brancher whose success rate grows with the branch turn, a judge that proposes turns 0-1 of the
success, a critic that labels every turn Good), so that the metrics logged only on some paths (ProVer's
Delta and acceptance rate) are produced too. The trainer's own metrics are checked by
``test_e2e.py::test_every_logged_metric_is_documented``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from prover.chat import ChatModel, ChatReply
from prover.config import TrainConfig
from prover.credit.base import CreditContext
from prover.episodes.branching import BranchResult
from prover.judges.base import Judge
from prover.registry import CREDIT
from prover.types import JudgeResult, JudgeUsage, Proposal, Segment, Trajectory

BUILT_IN = [e.name for e in CREDIT.entries() if e.origin == "code"]


DOCS = Path(__file__).resolve().parents[1] / "docs"


def page_section(page: str, heading: str) -> str:
    """The text of ``docs/<page>`` under ``heading``, up to the next second-level heading."""
    return (DOCS / page).read_text().split(heading + "\n", 1)[1].split("\n## ", 1)[0]


def metrics_table() -> str:
    return page_section("metrics.md", "# Metrics")


class RisingValues:
    """The Brancher's interface: from before turn t, the first min(n, t + 1) continuations win; every
    continuation is one finished turn longer than the state it starts from."""

    def continue_from(self, requests, seed=0, **_):
        out = []
        for r in requests:
            won = np.array([k < min(r.n, r.turn + 1) for k in range(r.n)])
            prefix = r.trajectory.turns[:r.turn + 1]
            conts = [Trajectory(f"{r.trajectory.traj_id}@{r.turn}/{k}", r.trajectory.task_id, "",
                                turns=list(prefix), won=bool(won[k])) for k in range(r.n)]
            out.append(BranchResult(r, won, 3 * r.n, conts))
        return out


class FirstTwoTurns(Judge):
    """Proposes turns 0-1 of the success, with a cost, as an LLM judge would report it."""

    def propose(self, request):
        usage = JudgeUsage(calls=1, prompt_tokens=10, completion_tokens=5, dollars=0.001)
        segment = Segment(request.success.traj_id, 0, 1)
        return JudgeResult(Proposal(segment, "it picks up the mug"), usage=usage)


class AllGood(ChatModel):
    """A critic that labels every turn of the trajectory in its prompt Good."""

    def chat(self, messages, tools=None):
        n = int(re.search(r"Label all (\d+) turns", messages[-1]["content"]).group(1))
        return ChatReply(json.dumps({"labels": ["Good"] * n}), prompt_tokens=20, completion_tokens=4)


class EveryRole(ChatModel):
    """A TRIAGE judge that gives the turns of the trajectory in its prompt the four roles in turn."""

    def chat(self, messages, tools=None):
        n = int(re.search(r"Label all (\d+) turns", messages[-1]["content"]).group(1))
        roles = ["decisive_progress", "useful_exploration", "no_progress", "regression"]
        return ChatReply(json.dumps({"labels": [roles[t % 4] for t in range(n)]}), prompt_tokens=20,
                         completion_tokens=4)


def make_method(name: str):
    cls = CREDIT.get(name)
    critic = {"criticsearch": AllGood, "triage": EveryRole}.get(name)
    return cls(critic=critic()) if critic else cls()


def test_every_built_in_method_is_checked():
    want = {"grpo", "budget-matched-grpo", "gigpo", "spo-chain", "spo-tree", "tree-grpo", "criticsearch", "prover"}
    assert want <= set(BUILT_IN)


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_credit_metric_is_documented(name, make_batch):
    # One group of 8 with 2 wins (eligible for every method's win range), 3 turns per trajectory.
    batch = make_batch([[(True, 3, None), (True, 3, None)] + [(False, 3, None)] * 6])
    ctx = CreditContext(TrainConfig(), brancher=RisingValues(), judge=FirstTwoTurns(), step=1)
    metrics = make_method(name).assign(batch, ctx).metrics
    if name == "prover":  # the stand-ins reach the metrics logged only with a verified proposal
        assert {"credit/delta", "credit/acceptance_rate"} <= set(metrics)
    table = metrics_table()
    missing = sorted(m for m in metrics if f"`{m}`" not in table)
    assert not missing, f"{name}: metrics not documented in docs/metrics.md's table: {missing}"


def credit_table() -> list[str]:
    """The first table of docs/credit.md: its lines up to the first non-table line."""
    lines = page_section("credit.md", "# Credit methods").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


@pytest.mark.parametrize("name", BUILT_IN)
def test_the_credit_table_lists_every_field_of_the_method(name):
    rows = [line for line in credit_table() if line.startswith(f"| `{name}` |")]
    assert len(rows) == 1, f"docs/credit.md's credit-methods table (one table) needs exactly one row for {name!r}"
    fields = rows[0].split(" | ")[2]
    missing = [f for f in CREDIT.get(name).Config.model_fields
               if f"`{f}`" not in fields and f"`{f}.*`" not in fields]
    assert not missing, f"{name}: fields not listed in docs/credit.md's credit-methods table: {missing}"
    notes = DOCS / "methods" / f"{name}.md"
    assert notes.is_file() and f"(methods/{name}.md)" in rows[0], f"{name}: no note linked from the row"
