"""docs/perf.md's figure: where the time goes, as one stacked bar per measured run, each phase's share of its
wall time, from the saved results (``page`` draws it with the page, ``--check`` compares it too):

- the main job (``main.json``, its latest run): the whole `prover train` with no overrides, warm start included;
- one RL step of each real-model case (``step-ratio-<case>.json`` and ``chat-step.json``, the current tree's
  run, ``after``), from the phase clocks the trainer logs (``time/rollout``, ``time/credit``,
  ``time/learner``, ``time/sync``); "other" is the step's wall time less those."""

from __future__ import annotations

from benchmarks.perf.page_decode import STEP_CASES
from benchmarks.perf.results import ROOT
from prover.commands.svgchart import StackedBar, stacked_bars, standalone

FIGURE = ROOT / "docs" / "img" / "perf-phases.svg"
PARTS = ["build the policy", "warm start: expert episodes", "warm start: SFT", "held-out evaluation", "rollout",
         "credit", "learner", "sync", "other"]
MAIN_PHASES = {"build tiny policy": "build the policy", "warm start: expert episodes": "warm start: expert episodes",
               "warm start: SFT": "warm start: SFT", "held-out evaluations": "held-out evaluation",
               "RL: rollout": "rollout", "RL: credit": "credit", "RL: learner": "learner", "RL: sync": "sync"}
STEP_PHASES = ("rollout", "credit", "learner", "sync")


def main_bar(res: dict) -> StackedBar:
    """The main job's latest run: each phase it timed, and what the phases leave of its wall time as "other"."""
    run = res["runs"][-1]
    parts = {PARTS[-1]: 0.0}
    for name, seconds in run["phases"].items():
        part = MAIN_PHASES.get(name, PARTS[-1])
        parts[part] = parts.get(part, 0.0) + seconds
    parts[PARTS[-1]] += max(0.0, run["wall_s"] - sum(run["phases"].values()))
    return StackedBar("main job (tiny model), whole run", parts, f"{run['wall_s']:.0f} s")


def step_bar(label: str, seconds: dict, steps: int) -> StackedBar:
    """One RL step's phases (``seconds`` summed over ``steps`` steps), "other" the step's time less them."""
    parts = {p: seconds.get(p, 0.0) / steps for p in STEP_PHASES}
    parts[PARTS[-1]] = max(0.0, seconds["step"] / steps - sum(parts.values()))
    return StackedBar(label, parts, f"{seconds['step'] / steps:.0f} s")


def bars(results: dict) -> list[StackedBar]:
    out = [main_bar(results["main"])] if "main" in results else []
    for case, label in STEP_CASES.items():
        if (res := results.get(f"step-ratio-{case}")) is not None:
            out.append(step_bar(f"{label.replace('-Instruct', '')}: an RL step", res["runs"]["after"]["seconds"],
                                res["runs"]["after"]["steps"]))
    if (res := results.get("chat-step")) is not None:
        out.append(step_bar("SmolLM2-135M on pivot-sim, chat: an RL step", res["runs"]["after"]["seconds"],
                            res["runs"]["after"]["steps"]))
    return out


def figure(results: dict) -> str | None:
    """The figure's SVG text; None when no result it reads is saved."""
    drawn = bars(results)
    if not drawn:
        return None
    return standalone(stacked_bars("Where the time goes: each phase's share of the wall time", drawn, PARTS,
                                   "share of the run's (or the step's) wall time; seconds at the right", width=900))


def lines() -> list[str]:
    """The figure and its caption, for the page under the main job's table."""
    return ["", f"![Each phase's share of the wall time]({FIGURE.relative_to(ROOT / 'docs').as_posix()})", "",
            "Each bar is one measured run split by the trainer's phase clocks, as shares of its wall time (its "
            "seconds at the right): the main job's latest run above (`benchmarks/results/perf/main.json`), and one "
            "RL step of the real-model cases below (`step-ratio-alfworld.json`, `step-ratio-pivot2.json`, "
            "`chat-step.json`, the current tree's run; *other* is the step's time outside the four RL phases)."]
