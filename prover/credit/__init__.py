"""Credit assigners: the contract (``base``) and one file per method, each named in ``CREDIT``'s built-ins
(prover/registry.py) and imported only when asked for by name."""

from __future__ import annotations

from prover.credit.base import CreditAssigner, CreditContext
from prover.registry import CREDIT


def make_credit(train_cfg) -> CreditAssigner:
    """The configured credit assigner, its own fields validated."""
    return CREDIT.get(train_cfg.credit.name).from_train_config(train_cfg)


__all__ = ["CreditAssigner", "CreditContext", "make_credit"]
