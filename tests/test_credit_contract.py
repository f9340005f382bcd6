"""Every registered credit method on the corner cases: an empty group and an all-failed group give
zeros and no crash; SPO-tree's sibling edges average to zero (V(parent) is the mean of its children)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prover.config import TrainConfig
from prover.credit.base import CreditContext
from prover.credit.spo_tree import Node, _values, edges
from prover.episodes.branching import BranchResult
from prover.registry import CREDIT
from prover.types import Batch, Group, Trajectory, Turn


def failed(name: str, n_turns: int) -> Trajectory:
    turns = [Turn(prompt_ids=[1], completion_ids=[5, 6], logprobs=[-0.5, -0.5], observation="o", completion_text="",
                  action="a", format_valid=True, action_valid=True, reward=0.0, state_key=t, snapshot=object())
             for t in range(n_turns)]
    return Trajectory(name, "t", "", turns=turns, won=False)


class AlwaysFails:
    """Continuations that all fail and finish: the only outcome an all-failed group's tasks allow here."""

    def continue_from(self, requests, seed=0, **_):
        out = []
        for r in requests:
            conts = [Trajectory(f"{r.trajectory.traj_id}@{r.turn}", "t", "", turns=list(r.trajectory.turns))
                     for _ in range(r.n)]
            out.append(BranchResult(r, np.zeros(r.n, bool), 0, conts))
        return out


@pytest.mark.parametrize("name", [n for n in CREDIT.names() if CREDIT._entries[n].origin == "code"])
def test_empty_and_all_failed_groups_give_zeros(name):
    batch = Batch([Group("empty", []), Group("failed", [failed("A", 3), failed("B", 2)])])
    adv = CREDIT.get(name)().assign(batch, CreditContext(TrainConfig(), brancher=AlwaysFails()))
    values = adv.flat()
    assert all(np.all(v == 0.0) for v in values), name
    train = adv.train_batch or batch
    assert len(values) == len(train.turns())


@settings(max_examples=80, deadline=None)
@given(st.recursive(st.booleans(), lambda kids: st.lists(kids, min_size=1, max_size=3), max_leaves=12))
def test_spo_tree_sibling_advantages_average_to_zero(shape):
    def build(spec) -> Node:
        node = Node(failed("n", 1), 0)
        if isinstance(spec, bool):
            node.value = float(spec)
        else:
            node.children = [build(s) for s in spec]
        return node

    root = build(shape if isinstance(shape, list) else [shape])
    _values(root)

    def check(node: Node) -> None:
        if node.children:
            advs = [c.value - node.value for c in node.children]
            assert abs(sum(advs)) < 1e-9
            kept = {id(tr) for tr, _, _ in edges(node, "rloo")}
            assert all((id(c.traj) in kept) == (a != 0.0) for c, a in zip(node.children, advs))
            for c in node.children:
                check(c)

    check(root)
