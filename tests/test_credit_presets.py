"""Presets that make an existing method another paper's estimator, checked against that paper's own formula.

- ``spo-chain`` with ``preset: vineppo`` is VinePPO (arXiv 2410.01679): a Monte-Carlo value V(s_t) before
  every turn from K continuations, A_t = r_t + V(s_{t+1}) - V(s_t) with gamma 1, V(terminal) = 0, r_t the
  outcome R on the last turn and 0 before it, then whitening over all policy tokens (VinePPO's
  ``whiten_advantages``, unbiased variance). The expected numbers below are worked by hand from that
  formula (McGill-NLP/VinePPO ``_compute_step_advantages``), not from our chain's V(next) - V(prev).
- Tree-GRPO (arXiv 2509.21240) is not a preset of ``spo-tree``: on the same tree, its per-turn credit is
  not even an affine function of SPO-tree's edge advantages, so no mode, whitening or scale reaches it.

The value source is a scripted stand-in with the Brancher's interface, as in tests/test_spo_chain.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from prover.config import TrainConfig
from prover.credit.base import CreditContext
from prover.credit.spo_chain import SPOChain, SPOChainConfig
from prover.credit.spo_tree import Node, SPOTreeConfig, _values, edges
from prover.episodes.branching import BranchResult
from prover.types import Batch, Group, Trajectory, Turn


def traj(name: str, tokens: list[int], won: bool, task: str = "t") -> Trajectory:
    """One turn per entry of ``tokens`` (that many tokens of probability 0.5); actions ``name + turn``."""
    turns = [Turn(prompt_ids=[1], completion_ids=[5] * n, logprobs=[float(np.log(0.5))] * n, observation="o",
                  completion_text="", action=f"{name}{t}", format_valid=True, action_valid=True,
                  reward=1.0 if won and t == len(tokens) - 1 else 0.0, state_key=t, snapshot=object())
             for t, n in enumerate(tokens)]
    return Trajectory(traj_id=name, task_id=task, task_text="", turns=turns, won=won)


class ScriptedValues:
    """Answers each branch request with a fixed success rate per (trajectory, turn)."""

    def __init__(self, values: dict[tuple[str, int], float]) -> None:
        self.values, self.asked = values, []

    def continue_from(self, requests, seed=0):
        self.asked += [(r.trajectory.traj_id, r.turn, r.n) for r in requests]
        return [BranchResult(r, np.array([k < round(self.values[(r.trajectory.traj_id, r.turn)] * r.n)
                                          for k in range(r.n)]), 0, []) for r in requests]


def ctx(values: ScriptedValues) -> CreditContext:
    cfg = TrainConfig()
    cfg.reward.scale = 1.0  # VinePPO's rewards are 0/1
    return CreditContext(cfg, brancher=values)


# -- VinePPO = spo-chain, preset vineppo -------------------------------------------------------------


def test_vineppo_preset_sets_the_fields_of_vineppos_configs_and_the_user_wins():
    cfg = SPOChainConfig(preset="vineppo")
    assert (cfg.interval, cfg.prob_guided, cfg.prob_mask, cfg.eligible, cfg.whiten, cfg.samples) == (
        1, False, False, None, True, 9)
    mine = SPOChainConfig(preset="vineppo", samples=4, whiten=False)
    assert (mine.interval, mine.samples, mine.whiten) == (1, 4, False)
    with pytest.raises(ValidationError):
        SPOTreeConfig(preset="vineppo")  # a chain preset only


def vineppo_batch() -> tuple[Batch, ScriptedValues]:
    # group t: A wins in 3 turns (2, 1, 1 tokens), B loses in 2 turns (1, 1 tokens)
    # group u: C loses in 2 turns (1 token each); a group with no win, which VinePPO still trains on
    batch = Batch([Group("t", [traj("A", [2, 1, 1], True), traj("B", [1, 1], False)]),
                   Group("u", [traj("C", [1, 1], False, task="u")])])
    # K = 9 continuations per state, so every value is a multiple of 1/9:
    # V(t start) = 3/9 (asked from A, shared with B), V(A after 1) = 6/9, V(A after 2) = 7/9, V(B after 1) = 1/9
    # V(u start) = 2/9, V(C after 1) = 4/9
    return batch, ScriptedValues({("A", 0): 3 / 9, ("A", 1): 6 / 9, ("A", 2): 7 / 9, ("B", 1): 1 / 9,
                                  ("C", 0): 2 / 9, ("C", 1): 4 / 9})


def test_vineppo_step_advantages_by_its_own_formula():
    batch, values = vineppo_batch()
    adv = SPOChain(SPOChainConfig(preset="vineppo", whiten=False)).assign(batch, ctx(values))
    # VinePPO: values = [V(s_0), ..., V(s_{T-1}), 0], step_rewards = [0, ..., 0, R], A_t = r_t + V_{t+1} - V_t
    # A: values [3/9, 6/9, 7/9, 0], rewards [0, 0, 1] -> 0 + 6/9 - 3/9 = 3/9, 0 + 7/9 - 6/9 = 1/9, 1 + 0 - 7/9 = 2/9
    # B: values [3/9, 1/9, 0],      rewards [0, 0]    -> 1/9 - 3/9 = -2/9, 0 + 0 - 1/9 = -1/9
    # C: values [2/9, 4/9, 0],      rewards [0, 0]    -> 4/9 - 2/9 = 2/9,  0 + 0 - 4/9 = -4/9
    a0, a1, a2, b0, b1, c0, c1 = adv.flat()
    assert list(a0) == pytest.approx([3 / 9, 3 / 9]) and list(a1) == pytest.approx([1 / 9])
    assert list(a2) == pytest.approx([2 / 9])
    assert list(b0) == pytest.approx([-2 / 9]) and list(b1) == pytest.approx([-1 / 9])
    assert list(c0) == pytest.approx([2 / 9]) and list(c1) == pytest.approx([-4 / 9])
    assert adv.loss_mask is None  # no probability mask: every policy token trains
    # a value before every turn but the terminal one (VinePPO: value_idx 0 .. T-1), 9 rollouts each, the
    # group's start valued once (VinePPO deduplicates identical queries)
    assert values.asked == [("A", 0, 9), ("A", 1, 9), ("A", 2, 9), ("B", 1, 9), ("C", 0, 9), ("C", 1, 9)]


def test_vineppo_whitens_over_every_policy_token_of_the_batch():
    batch, values = vineppo_batch()
    adv = SPOChain(SPOChainConfig(preset="vineppo")).assign(batch, ctx(values))
    # tokens, in ninths: A 3, 3, 1, 2; B -2, -1; C 2, -4  (A's first turn has two tokens)
    # mean = (3 + 3 + 1 + 2 - 2 - 1 + 2 - 4) / 8 = 4/8 = 0.5 ninths
    # deviations (ninths): 2.5, 2.5, 0.5, 1.5, -2.5, -1.5, 1.5, -4.5
    # squares: 6.25 + 6.25 + 0.25 + 2.25 + 6.25 + 2.25 + 2.25 + 20.25 = 46; unbiased var = 46/7 ninths^2
    # masked_whiten: (a - mean) * rsqrt(var + 1e-8) = deviation / sqrt(46/7)  (the ninths cancel)
    s = np.sqrt(46 / 7)
    got = [list(a) for a in adv.flat()]
    want = [[2.5 / s, 2.5 / s], [0.5 / s], [1.5 / s], [-2.5 / s], [-1.5 / s], [1.5 / s], [-4.5 / s]]
    assert [x for row in got for x in row] == pytest.approx([x for row in want for x in row], rel=1e-6)


def test_vineppo_preset_keeps_the_credit_contract():
    # an empty group; an all-failed group whose continuations all fail; a zero-variance group (all won, V = 1)
    batch = Batch([Group("e", []), Group("f", [traj("A", [1, 2], False), traj("B", [1], False)]),
                   Group("w", [traj("C", [1, 1], True, task="w"), traj("D", [2], True, task="w")])])
    values = ScriptedValues({("A", 0): 0.0, ("A", 1): 0.0, ("C", 0): 1.0, ("C", 1): 1.0})
    adv = SPOChain(SPOChainConfig(preset="vineppo")).assign(batch, ctx(values))
    # every A_t is 0 - 0 or 1 - 1; whitening of all zeros: (0 - 0) / sqrt(0 + 1e-8) = 0, never NaN
    assert all(np.all(a == 0.0) for a in adv.flat()) and len(adv.flat()) == len(batch.turns())


# -- Tree-GRPO is not a preset of spo-tree -------------------------------------------------------------


def path(name: str, n_turns: int) -> Trajectory:
    turns = [Turn(prompt_ids=[1], completion_ids=[5], logprobs=[-1.0], observation="o", completion_text="",
                  action="a", format_valid=True, action_valid=True, reward=0.0, state_key=t) for t in range(n_turns)]
    return Trajectory(name, "t", "", turns=turns)


def test_tree_grpo_is_no_affine_function_of_spo_tree_edges():
    with pytest.raises(ValidationError):
        SPOTreeConfig(preset="tree-grpo")
    # one tree: root -> A (3 turns) -> A1 (won), A2 (lost);  root -> B (won, a leaf)
    root = Node(path("root", 0), 0, [Node(path("A", 3), 0, [Node(path("A1", 5), 3, value=1.0),
                                                            Node(path("A2", 4), 3, value=0.0)]),
                                     Node(path("B", 2), 0, value=1.0)])
    _values(root)
    # Tree-GRPO (AMAP-ML/Tree-GRPO compute_advantage, adv_estimator "tree"), with M = 1 tree, leaves R = 1, 0, 1:
    #   inter = intra = (R - 2/3) / (std + 1e-6), unbiased std = sqrt(((1/3)^2 + (2/3)^2 + (1/3)^2) / 2) = sqrt(1/3)
    #   leaf advantage = 2 (R - 2/3) sqrt(3): A1 = B = 2/sqrt(3), A2 = -4/sqrt(3)
    # each leaf is one row from the root, so A's three shared turns are trained by A1's and A2's rows:
    #   per-turn credit: A's turns 2/sqrt(3) - 4/sqrt(3) = -2/sqrt(3); A1's own 2/sqrt(3); A2's own -4/sqrt(3);
    #   B 2/sqrt(3)
    r3 = np.sqrt(3.0)
    tree_grpo = {"A": -2 / r3, "A1": 2 / r3, "A2": -4 / r3, "B": 2 / r3}
    for mode in ("rloo", "grpo"):
        spo = {tr.traj_id: a for tr, _, a in edges(root, mode)}
        # rloo: A -0.25, A1 0.5, A2 -0.5, B 0.25;  grpo: A -1, A1 1, A2 -1, B 1
        names = sorted(spo)
        x = np.array([spo[n] for n in names])
        y = np.array([tree_grpo[n] for n in names])
        design = np.stack([x, np.ones_like(x)], axis=1)
        fit = design @ np.linalg.lstsq(design, y, rcond=None)[0]
        # grpo: A and A2 both have -1 but need -2/sqrt(3) and -4/sqrt(3); rloo: A1 0.5 and B 0.25 both need 2/sqrt(3)
        # (slope 0), yet A -0.25 needs -2/sqrt(3): no scale and shift (whitening) maps one onto the other
        assert np.max(np.abs(fit - y)) > 0.3
