"""benchmarks/studies/verify_agreement.py replays recorded draws: each rule sees the reference's continuations in
order, and its row is worked out here by hand from a two-proposal record."""

from __future__ import annotations

import json
import sys

import pytest

from benchmarks.studies import verify_agreement


def draws(wins: list[int]) -> list[list[int]]:
    return [[w, 10] for w in wins]  # every continuation generated 10 tokens


# A: the reference (K = 32) has 16/32 before and 12/32 after, so Delta = -0.125 and it rejects; the first 8
# draws say 0/8 before and 4/8 after, so fixed K = 8 accepts with Delta = 0.5.
A_PRE = [0] * 8 + [1] * 16 + [0] * 8
A_POST = [1, 0] * 4 + [1] * 8 + [0] * 16
# B: 0/32 before, 32/32 after: every rule accepts, with Delta = 1.
B_PRE, B_POST = [0] * 32, [1] * 32
GROUP = [{"won": True, "keys": ["s0", "s1", "s2", "s3"]}, {"won": False, "keys": ["s0", "x1", "x2"]}]
RECORD = {"ref_k": 32, "overrides": [], "new_draws": {},
          "credit": {"samples": 8, "verify": "fixed", "round_size": 2, "confidence": 0.95, "free_samples": False},
          "batches": [{"rollout_tokens": 1000, "proposals": [
              {"target": 0, "turns": [1, 2], "group": GROUP, "draws": [draws(A_PRE), draws(A_POST)]},
              {"target": 0, "turns": [1, 3], "group": GROUP, "draws": [draws(B_PRE), draws(B_POST)]}]}]}


def test_rules_replayed_on_recorded_draws(tmp_path, capsys):
    rules = {"fixed K=8": {"verify": "fixed", "samples": 8},
             "fixed K=8 free": {"verify": "fixed", "samples": 8, "free_samples": True}}
    result = verify_agreement.tabulate(json.loads(json.dumps(RECORD)), rules)
    ref, k8, free = result["table"]
    assert (result["proposals"], result["decisive"]) == (2, 1)  # A is a near-tie for the reference, B is not
    assert ref["agreement"] == 1.0 and ref["delta_error"] == 0.0
    assert ref["continuations_per_proposal"] == 64 and ref["branch_over_rollout_tokens"] == pytest.approx(1.28)
    # fixed K = 8: A flips, B agrees; |0.5 - (-0.125)| and 0 average to 0.3125
    assert k8["agreement"] == 0.5 and k8["agreement_decisive"] == 1.0
    assert k8["delta_error"] == pytest.approx(0.3125)
    assert k8["continuations_per_proposal"] == 16 and k8["branch_over_rollout_tokens"] == pytest.approx(0.32)
    # free samples: only the target stood in s1 and s2 (the failed run went to x1), so each boundary of A
    # takes the target's win and 7 draws: 1/8 before, (1 + 4)/8 after (draws 1,0,1,0,1,0,1), Delta = 0.5;
    # B: 1/8 before (the target, then 7 losses), 8/8 after
    assert free["continuations_per_proposal"] == 14 and free["agreement"] == 0.5
    assert free["delta_error"] == pytest.approx((abs(0.5 + 0.125) + abs(7 / 8 - 1)) / 2)
    path = tmp_path / "draws.json"
    path.write_text(json.dumps(RECORD))
    sys.argv = ["verify_agreement.py", "--replay", str(path)]
    verify_agreement.main()
    assert "2 proposals on 1 batches" in capsys.readouterr().out
