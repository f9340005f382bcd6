"""prover-recent: a judge for prover, found through the prover.judges entry point 'recent'."""

from prover_recent.judge import RecentJudge

__all__ = ["RecentJudge"]
