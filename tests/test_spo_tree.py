"""SPO-tree: recursive values, edge advantages (rloo and grpo), dropped zero edges, training rows."""

from __future__ import annotations

import pytest

from prover.credit.spo_tree import Node, _values, edges
from prover.types import Trajectory, Turn


def path(name: str, n_turns: int) -> Trajectory:
    turns = [Turn(prompt_ids=[1], completion_ids=[5], logprobs=[-1.0], observation="o", completion_text="",
                  action="a", format_valid=True, action_valid=True, reward=0.0, state_key=t) for t in range(n_turns)]
    return Trajectory(name, "t", "", turns=turns)


def tree() -> Node:
    # root -> A (3 turns) -> A1 (won), A2 (lost);  root -> B (leaf, won)
    a = Node(path("A", 3), 0, [Node(path("A1", 5), 3, value=1.0), Node(path("A2", 4), 3, value=0.0)])
    b = Node(path("B", 2), 0, value=1.0)
    return Node(path("root", 0), 0, [a, b])


def test_values_are_recursive_means_of_children():
    root = tree()
    _values(root)
    # V(A) = mean(1, 0) = 0.5; V(root) = mean(V(A), V(B)) = mean(0.5, 1) = 0.75 (not the leaf mean 2/3)
    assert root.children[0].value == 0.5 and root.value == 0.75


def test_rloo_edges():
    root = tree()
    _values(root)
    got = {tr.traj_id: (start, adv) for tr, start, adv in edges(root, "rloo")}
    assert got == {"A": (0, pytest.approx(-0.25)), "B": (0, pytest.approx(0.25)),
                   "A1": (3, pytest.approx(0.5)), "A2": (3, pytest.approx(-0.5))}


def test_grpo_edges_divide_by_the_population_std_of_siblings():
    root = tree()
    _values(root)
    got = {tr.traj_id: adv for tr, _, adv in edges(root, "grpo")}
    # siblings (0.5, 1): population std 0.25; siblings (1, 0): population std 0.5
    assert got == {"A": pytest.approx(-1.0), "B": pytest.approx(1.0), "A1": pytest.approx(1.0),
                   "A2": pytest.approx(-1.0)}


def test_zero_advantage_edges_are_dropped():
    root = Node(path("root", 0), 0, [Node(path("X", 2), 0, value=1.0), Node(path("Y", 2), 0, value=1.0)])
    _values(root)
    assert edges(root, "rloo") == []  # both children equal the parent's value
