"""docs/perf.md from the saved sections of benchmarks/perf.py (see its docstring for what each measures)."""

from __future__ import annotations

HEAD = """# Performance

Written by `python benchmarks/perf.py` (all sections; `--sections main,verify` reruns some, `--render`
rewrites this page from `benchmarks/results/perf/*.json`); the section on asynchronous rollouts comes from
`benchmarks/async_rollout.py` (`benchmarks/results/async_rollout.json`). The machine is a shared 2-core CPU box, so each
number is best read as a ratio within its own section: the sections were measured at different times
under different loads (the load average is printed with each).
"""


def when(result: dict, key: str = "measured") -> str:
    m = result.get(key, {})
    return (f"_{key.capitalize()} {m.get('date', '?')}, {m.get('seconds', 0):.0f} s, load average "
            f"{m.get('load_avg_1m', 0):.1f} on {m.get('cpus', '?')} CPUs._")


def adaptive_rule(verify: dict) -> dict | None:
    """The verify table's row for the default adaptive rule (the first adaptive rule on the same draws
    whose settings match ProVer's defaults)."""
    from prover.credit.prover import ProVerConfig

    d = ProVerConfig()
    for row in verify.get("table", []):
        s = row["settings"]
        defaults = ("samples", "round_size", "free_samples", "saturation", "confidence")
        if (row["draws"] == "same draws" and s.get("verify") == "adaptive"
                and all(s.get(name, getattr(d, name)) == getattr(d, name) for name in defaults)):
            return row
    return None


def summary(r: dict) -> list[str]:
    lines = ["## Summary", "", "| quantity | value |", "|---|---|"]
    if "main" in r:
        runs = r["main"]["runs"]
        for run in runs:
            lines.append(f"| main job, {run['label']}: wall time; CPU time (one thread) | {run['wall_s']:.0f} s; "
                         f"{run['cpu_s']:.0f} s (held-out success {run['eval_before']:.3f} -> "
                         f"{run['eval_after']:.3f}) |")
        if len(runs) > 1:
            lines.append(f"| main job, after / before: wall time; CPU time | "
                         f"{runs[-1]['wall_s'] / runs[0]['wall_s']:.2f}x; "
                         f"{runs[-1]['cpu_s'] / runs[0]['cpu_s']:.2f}x |")
        last = runs[-1]
        ratio = (last["rollout_tokens"] + last["branch_tokens"]) / last["rollout_tokens"]
        lines.append(f"| main job (default: ProVer, its default verify rule): (rollout + branch) / rollout tokens "
                     f"| {ratio:.3f} |")
    if "overhead" in r:
        arms = r["overhead"]["arms"]
        grpo = arms["GRPO"]
        for name, a in arms.items():
            if name == "GRPO":
                continue
            tok = (a["cost/rollout_tokens"] + a["cost/branch_tokens"]) / a["cost/rollout_tokens"]
            lines.append(f"| {name}: (rollout + branch) / rollout tokens; step time / GRPO's | {tok:.3f}; "
                         f"{a['time/step'] / grpo['time/step']:.2f}x |")
    if "verify" in r:
        row = adaptive_rule(r["verify"])
        if row is not None:
            lines.append(f"| default adaptive rule ({row['rule']}): decisions agreeing with fixed K=32 on the same "
                         f"draws | {100 * row['agreement']:.1f}% of {r['verify']['proposals']} proposals |")
    return lines


def section_main(res: dict) -> list[str]:
    lines = ["## The main job, phase by phase", "", when(res), "",
             "`prover train` with no overrides (build the tiny policy, warm start, evaluate, 12 ProVer steps, "
             "evaluate), run in-process with clocks around each phase; install time is not included.", ""]
    runs = res["runs"]
    names = list(runs[-1]["phases"])
    lines += ["| phase | " + " | ".join(f"{r['label']} s | share" for r in runs) + " |",
              "|---|" + "---|---|" * len(runs)]
    for name in names:
        cells = []
        for r in runs:
            s = r["phases"].get(name, 0.0)
            cells += [f"{s:.1f}", f"{s / r['wall_s']:.1%}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| **total** | " + " | ".join(f"**{r['wall_s']:.0f}** | 100%" for r in runs) + " |")
    lines.append("| CPU seconds (one thread) | " + " | ".join(f"{r['cpu_s']:.0f} | " for r in runs) + " |")
    lines.append("| held-out success, warm start -> after RL | " + " | ".join(
        f"{r['eval_before']:.3f} -> {r['eval_after']:.3f} | " for r in runs) + " |")
    return lines


def section_verify(res: dict) -> list[str]:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from verify_agreement import markdown

    drawn = [when(res, "drawn"), ""] if "drawn" in res else []  # rules replayed on draws kept from then
    return ["## Verification rules against fixed K = 32", "", when(res), "", *drawn,
            f"`python benchmarks/verify_agreement.py --batches {res['batches']} {' '.join(res['overrides'])}`",
            "", markdown(res)]


def section_overhead(res: dict) -> list[str]:
    lines = ["## ProVer's cost over GRPO", "", when(res), "",
             f"{res['steps']} RL steps per arm from the main job's warm-started policy, seed 0, the same tasks.", "",
             "| arm | rollout tokens | branch tokens | (rollout + branch) / rollout | s/step | step time / GRPO's "
             "| valid proposals | accepted |", "|---|---|---|---|---|---|---|---|"]
    grpo_s = res["arms"]["GRPO"]["time/step"]
    for name, a in res["arms"].items():
        tok = (a["cost/rollout_tokens"] + a["cost/branch_tokens"]) / a["cost/rollout_tokens"]
        lines.append(f"| {name} | {a['cost/rollout_tokens']:.0f} | {a['cost/branch_tokens']:.0f} | {tok:.3f} "
                     f"| {a['time/step'] / res['steps']:.1f} | {a['time/step'] / grpo_s:.2f}x "
                     f"| {a['credit/valid_proposals']:.0f} | {a['credit/accepted']:.0f} |")
    return lines


def section_script(title: str, res: dict) -> list[str]:
    return [f"## {title}", "", when(res), "", f"`{res['command']}`", "", res["output"]]


def section_async(res: dict) -> list[str]:
    """benchmarks/async_rollout.py: steps per hour and held-out success, synchronous against asynchronous."""
    lines = ["## Asynchronous rollouts (rollout.max_off_policy_steps)", "", when(res), "", f"`{res['command']}`", "",
             f"{res['steps']} RL steps per cell ({res.get('method', '')}) from one warm start per env; the cells "
             "of a seed ran one after the other. `async` is two processes (learner, rollout worker), one torch "
             "thread each, and samples each step's batch one policy version behind the learner "
             "(prover/async_rollout.py); `sync` is today's loop on one thread"
             + (", `sync-2-threads` the same on two" if any(c["threads"] == 2 for c in res["cells"]) else "")
             + ". Steps per hour exclude step 1 (the worker's start); the load average is at the end of each cell.", "",
             "| env | seed | mode | steps/h | vs sync | s/step: wait for batch | sampling | credit | learner "
             "| held-out start -> end | load |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    sync = {(c["env"], c["seed"]): c["steps_per_hour"] for c in res["cells"] if c["mode"] == "sync"}
    for c in res["cells"]:
        ph = c["phases"]
        lines.append(f"| {c['env']} | {c['seed']} | {c['mode']} | {c['steps_per_hour']:.0f} "
                     f"| {c['steps_per_hour'] / sync[c['env'], c['seed']]:.2f}x | {ph['time/rollout']:.1f} "
                     f"| {ph['time/rollout_sampling']:.1f} | {ph['time/credit']:.1f} | {ph['time/learner']:.1f} "
                     f"| {c['eval_start']:.3f} -> {c['eval_end']:.3f} | {c['load_avg_1m']:.1f} |")
    lines += ["", "| env | async / sync steps per hour, per seed | held-out after the last step: sync; async; "
              "async - sync per seed |", "|---|---|---|"]
    for env, s in res["summary"].items():
        ratios = ", ".join(f"{r:.2f}x" for r in s["async_over_sync_steps_per_hour"])
        diffs = ", ".join(f"{d:+.3f}" for d in s["eval_end_diff"])
        lines.append(f"| {env} | {ratios} | {s['eval_end_sync']:.3f}; {s['eval_end_async']:.3f}; {diffs} |")
    return lines + ([""] + res["notes"] if res.get("notes") else [])


def render(results: dict) -> str:
    parts = [HEAD.strip(), ""] + summary(results)
    if "main" in results:
        parts += [""] + section_main(results["main"])
    if "verify" in results:
        parts += [""] + section_verify(results["verify"])
    if "overhead" in results:
        parts += [""] + section_overhead(results["overhead"])
    if "envs" in results:
        parts += [""] + section_script("Environments: steps/s and snapshots", results["envs"])
    if "credit" in results:
        parts += [""] + section_script("Credit methods: advantage time on one recorded batch", results["credit"])
    if "async" in results:
        parts += [""] + section_async(results["async"])
    return "\n".join(parts) + "\n"
