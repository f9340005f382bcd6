"""Credit assigners: the contract (``base``) and one file per method, each registered by name."""

from __future__ import annotations

from prover.credit.base import CreditAssigner, CreditContext
from prover.credit import budget_matched_grpo, gigpo, grpo, spo_chain, spo_tree  # noqa: F401  (each registers its name)
from prover.credit import prover  # noqa: F401
from prover.credit import criticsearch  # noqa: F401  (registers its name)
from prover.registry import CREDIT


def make_credit(train_cfg) -> CreditAssigner:
    """The configured credit assigner, its own fields validated."""
    return CREDIT.get(train_cfg.credit.name).from_train_config(train_cfg)


__all__ = ["CreditAssigner", "CreditContext", "make_credit"]
