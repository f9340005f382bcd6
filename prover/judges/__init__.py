"""Judges: the contract (``base``), the tools every judge shares, and one file per judge, each named in
``JUDGES``'s built-ins (prover/registry.py) and imported only when asked for by name. LLM judges import
their heavy dependencies only when built."""

from __future__ import annotations

from prover.judges.base import Judge, can_yield_segment, valid_segments, validate_segment
from prover.registry import JUDGES


def make_judge(train_cfg) -> Judge | None:
    """The configured judge, its own fields validated; None when ``judge.name`` is unset."""
    if train_cfg.judge.name is None:
        return None
    return JUDGES.get(train_cfg.judge.name).from_train_config(train_cfg)


def check_judge_ready(train_cfg) -> None:
    """The configured judge built once and asked whether it can judge (credentials, a model, a server),
    then closed: a run whose method will call it checks it before any work."""
    judge = make_judge(train_cfg)
    if judge is None:
        return
    try:
        judge.check_ready()
    finally:
        judge.close()


__all__ = ["Judge", "can_yield_segment", "check_judge_ready", "make_judge", "valid_segments", "validate_segment"]
