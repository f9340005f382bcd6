"""Whether a judge is answering at all: its failures as metrics, as reasons in saved groups, and a stop.

A judge that fails every request (a wrong key answers HTTP 401 each time) still lets a step finish: its
groups get no proposal and train as plain GRPO. Nothing would show it, so the failures are counted by
kind (``judge/errors/<kind>``, ``judge/retries``), each lost proposal keeps its reason (key-free, cut to
``REASON_CHARS``) for ``groups.jsonl``, the step line warns (``prover.progress``), and ``FailureWatch``
stops the run with a ``JudgeError`` after ``judge.max_failed_steps`` such steps in a row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prover.chat import cut_text, redact_keys
from prover.errors import JudgeError
from prover.types import JudgeResult, JudgeUsage

if TYPE_CHECKING:
    from prover.judges.base import JudgeContract

REASON_CHARS = 500  # what a saved group keeps of why its judge gave no proposal


def usage_metrics(usage: JudgeUsage, counts: str) -> dict[str, float]:
    """What a step's judge or critic requests cost: its requests, failures and cached replies under ``counts``
    ("judge/" for ProVer's judge, "credit/critic_" for a critic), its tokens and dollars under "cost/"."""
    return {f"{counts}calls": float(usage.calls), f"{counts}errors": float(usage.errors),
            "cost/judge_tokens": float(usage.prompt_tokens + usage.completion_tokens),
            "cost/judge_dollars": float(usage.dollars),
            f"{counts}cached_calls": float(usage.cached_calls),  # from the reply cache, not paid
            "cost/judge_cached_dollars": float(usage.cached_dollars)}  # what cached replies cost when first paid


def judge_metrics(usage: JudgeUsage) -> dict[str, float]:
    """A proposing judge's ``usage_metrics`` under "judge/", with its failed calls, repairs, tool calls,
    retries and one ``judge/errors/<kind>`` per kind that occurred (numbers only)."""
    out = {**usage_metrics(usage, "judge/"), "judge/failed_calls": float(usage.failed_calls),
           "judge/repairs": float(usage.repairs), "judge/tool_calls": float(usage.tool_calls),
           "judge/retries": float(usage.retries)}
    out.update({f"judge/errors/{kind}": float(n) for kind, n in sorted(usage.errors_by_kind.items())})
    return out


def all_failed(usage: JudgeUsage) -> bool:
    """Every request failed: errors, and not one reply (paid or cached) came back."""
    return usage.errors > 0 and usage.calls - usage.failed_calls + usage.cached_calls == 0


def kinds_text(errors_by_kind: dict[str, int | float]) -> str:
    """``{"http_401": 6}`` -> ``"http_401 x6"``, most frequent first."""
    ranked = sorted(errors_by_kind.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{kind} x{int(n)}" for kind, n in ranked)


def reason_text(text: str) -> str:
    """A failure reason fit to save: one line, nothing that looks like a key, at most REASON_CHARS."""
    return cut_text(redact_keys(" ".join(text.split())), REASON_CHARS)


class FailureWatch:
    """Counts the steps in a row in which every judge request failed. A step that asked the judge
    nothing (no eligible group) neither extends nor breaks the streak: it says nothing of the judge."""

    def __init__(self) -> None:
        self.streak = 0

    def observe(self, usage: JudgeUsage, results: list[JudgeResult], judge: JudgeContract | None, step: int) -> None:
        """Raise ``JudgeError`` when this step makes ``judge.max_failed_steps`` (> 0; a setting of every
        judge) all-failed steps in a row."""
        if not results:
            return
        self.streak = self.streak + 1 if all_failed(usage) else 0
        max_failed_steps = getattr(getattr(judge, "config", None), "max_failed_steps", 0)
        if max_failed_steps <= 0 or self.streak < max_failed_steps:
            return
        first = next((r.failure for r in results if r.error), "")
        raise JudgeError(
            f"judge: every request failed in {self.streak} steps in a row (step {step}: "
            f"{kinds_text(usage.errors_by_kind)}; first: {cut_text(reason_text(first), 200)}); stopping "
            f"(judge.max_failed_steps={max_failed_steps}; 0 never stops): check the judge's model, server "
            "and API key")
