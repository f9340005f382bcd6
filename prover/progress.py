"""What a run shows a person: rich progress bars and one line per step, eval and summary."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def judge_warning(r: dict[str, Any]) -> str:
    """One line when every judge request of the step failed (errors, and no reply at all), else "".
    Such a step trains as plain GRPO and still ends well, so without this line nothing would show it."""
    errors = r.get("judge/errors", 0.0)
    answered = r.get("judge/calls", 0.0) - r.get("judge/failed_calls", 0.0) + r.get("judge/cached_calls", 0.0)
    if not errors or answered > 0:
        return ""
    kinds = sorted(((k.split("/", 2)[2], v) for k, v in r.items() if k.startswith("judge/errors/") and v),
                   key=lambda kv: (-kv[1], kv[0]))
    detail = ", ".join(f"{kind} x{int(n)}" for kind, n in kinds)
    return (f"judge: all {int(errors)} calls of step {r['step']} failed" + (f" ({detail})" if detail else "")
            + "; these groups trained as plain GRPO")


def no_rows_warning(r: dict[str, Any]) -> str:
    """One line when a step trained no row: every return of every group was equal (all won or all lost),
    so every advantage was 0 and the update changed nothing, which ``loss +0.0000`` alone does not say."""
    if r.get("learner/rows", 1.0) > 0:
        return ""
    return (f"learner: step {r['step']} trained no rows (every advantage was 0: each group's episodes all "
            "won or all failed); nothing changed")


# GiGPO's step level is silent on a singleton anchor group (A^S = 0), so at this share of singletons it
# reaches at most a tenth of the groups and trains nearly as GRPO. With a random policy prover's own envs
# stay below it (singleton share of alfworld-sim 0.29, webshop-sim 0.09, pivot-sim 0.79; docs/metrics.md),
# while a key that is the episode's history, once episodes part, passes it at 8 episodes of 3 turns or more.
SINGLETON_ANCHOR_WARN = 0.9


def singleton_anchors_warning(r: dict[str, Any]) -> str:
    """One line when nearly all of a step's anchor groups (GiGPO) are single turns, else ""."""
    share = r.get("credit/singleton_anchor_share")
    if share is None or share < SINGLETON_ANCHOR_WARN:
        return ""
    return (f"credit: {share:.0%} of step {r['step']}'s GiGPO anchor groups are single turns (warned at "
            f"{SINGLETON_ANCHOR_WARN:.0%}), whose step advantage is 0, so it trains almost as GRPO; a state_key "
            "that is the episode's history (env 'gymnasium') seldom repeats: try credit.anchor=observation "
            "(shown once per run)")


class Reporter:
    def __init__(self, console: Console | None = None, quiet: bool = False) -> None:
        self.console = console or Console(highlight=False, soft_wrap=True)
        self.quiet = quiet
        self._warned_once = False  # singleton_anchors_warning: a property of the run's env, not of one step

    def _progress(self) -> Progress:
        return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=self.console, transient=True, disable=self.quiet)

    @contextmanager
    def task(self, description: str, total: int) -> Iterator[Callable[[], None]]:
        if not self.quiet and not self.console.is_terminal:
            yield self._log_ticker(description, total)  # a log file gets no live bar, so print lines
            return
        with self._progress() as bar:
            tid = bar.add_task(description, total=total)
            yield lambda: bar.advance(tid)

    def _log_ticker(self, description: str, total: int, every_s: float = 30.0) -> Callable[[], None]:
        """Progress for output that is not a terminal (nohup, CI): a line at most every ``every_s``."""
        start, state = time.monotonic(), {"done": 0, "last": time.monotonic()}

        def tick() -> None:
            state["done"] += 1
            now = time.monotonic()
            if now - state["last"] >= every_s or state["done"] == total:
                state["last"] = now
                self.console.print(f"{description}: {state['done']}/{total} ({now - start:.0f} s)")
        return tick

    @contextmanager
    def steps(self, total: int, start: int = 0) -> Iterator[Callable[[], None]]:
        with self._progress() as bar:
            tid = bar.add_task("RL steps", total=total, completed=start)
            yield lambda: bar.advance(tid)

    def note(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text)

    def step_line(self, r: dict[str, Any], total: int) -> None:
        self.note(
            f"step {r['step']}/{total} | success {r['rollout/success']:.2f} | turns {r['rollout/turns']:.1f} | "
            f"loss {r.get('learner/pg_loss', 0.0):+.4f} | tokens {r['cost/rollout_tokens'] / 1000:.1f}k "
            f"+ branch {r.get('cost/branch_tokens', 0.0) / 1000:.1f}k | "
            f"time rollout {r['time/rollout']:.1f}s credit {r['time/credit']:.2f}s "
            f"learner {r['time/learner']:.1f}s sync {r['time/sync']:.2f}s")
        for warning in (judge_warning(r), no_rows_warning(r)):
            if warning:
                self.note(warning)
        once = "" if self._warned_once else singleton_anchors_warning(r)
        if once:
            self._warned_once = True
            self.note(once)

    def eval_line(self, r: dict[str, Any]) -> None:
        kept = ", read from eval.cache_dir" if r.get("eval/cached") else ""
        fmt = f", {r['eval/format_valid']:.0%} of turns in the action format" if "eval/format_valid" in r else ""
        self.note(f"eval at step {r['step']}: held-out success {r['eval/success']:.3f} "
                  f"({int(r['eval/episodes'])} episodes{kept}{fmt})")

    def summary(self, history: list[dict[str, Any]], final: dict[str, Any] | None,
                warm_started: bool = True) -> dict[str, Any]:
        """The run's result; its line names what the first evaluation followed: the warm start when it was
        on (``warm_started``), else nothing but the base policy, "before RL"."""
        evals = [r for r in history if r["phase"] == "eval"]
        first, last = evals[0] if evals else None, evals[-1] if evals else None
        out = {"success_before_rl": first["eval/success"] if first else None,
               "success_after_rl": last["eval/success"] if last else None,
               "steps": max((r["step"] for r in history), default=0)}
        if first and last:
            start = "after warm start" if warm_started else "before RL"
            self.note(f"held-out success: {start} {out['success_before_rl']:.3f} -> "
                      f"after RL {out['success_after_rl']:.3f} (step {last['step']})")
        return out
