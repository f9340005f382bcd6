"""docs/perf.md: the only module that writes it, from the JSON every measuring module of benchmarks.perf keeps
(benchmarks.perf.results names the files; benchmarks.perf.run's docstring says what each section measures).

    python -m benchmarks.perf.page --render      # rewrite docs/perf.md from benchmarks/results/, measure nothing
    python -m benchmarks.perf.page --check       # exit 1 when docs/perf.md or its figure (docs/img/perf-phases.svg,
                                                 # benchmarks.perf.phases) is not what the results render to
"""

from __future__ import annotations

import sys

from benchmarks.figures import render_or_check
from benchmarks.perf import phases
from benchmarks.perf.page_decode import section as decode_section
from benchmarks.perf.page_decode import summary_rows
from benchmarks.perf.page_limits import limits_summary, section_limits
from benchmarks.perf.results import ROOT, saved_results, today_command, when

PAGE = ROOT / "docs" / "perf.md"
HEAD = """# Performance

Written by `python -m benchmarks.perf.run` (all sections; `--sections main,verify` reruns some), and only
rewritten, measuring nothing, by `python -m benchmarks.perf.page --render` from `benchmarks/results/perf/*.json`
and the other results `benchmarks/README.md` lists (the section on asynchronous rollouts comes from
`python -m benchmarks.perf.async_rollout`, `benchmarks/results/async_rollout.json`). The machine is a shared
2-core CPU box, so each number is best read as a ratio within its own section: the sections were measured at
different times under different loads (the load average is printed with each), and on more than one CPU model
(an Intel Xeon with AVX-512 and AMX, an AMD Zen 4 without AMX): a section that names its CPU was measured on
that one; the older ones did not record it.
"""


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
        last = r["main"]["runs"][-1]  # earlier runs are revisions the page no longer describes
        lines.append(f"| main job: wall time; CPU time (one thread) | {last['wall_s']:.0f} s; {last['cpu_s']:.0f} s "
                     f"(held-out success {last['eval_before']:.3f} -> {last['eval_after']:.3f}) |")
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
    if "limits" in r:
        lines += limits_summary(r["limits"])
    lines += summary_rows(r)
    for key, which in (("cell", "a pivot-sim bench cell"), ("later-cell", "a matrix's later cell of a seed")):
        if key in r:
            lines.append(f"| {which}, {lever(r[key])} (threads {r[key]['threads']}, {len(r[key]['seeds'])} seeds "
                         f"side by side): wall time; CPU time | {after_over_before(r[key], 'wall_s'):.2f}x; "
                         f"{after_over_before(r[key], 'cpu_s'):.2f}x |")
    if "async" in r:
        ratios = [x for s in r["async"]["summary"].values() for x in s["async_over_sync_steps_per_hour"]]
        lines.append(f"| asynchronous / synchronous RL steps per hour (rollout.max_off_policy_steps=1) | "
                     f"{min(ratios):.2f}x-{max(ratios):.2f}x |")
    return lines


def lever(res: dict) -> str:
    """What a side-by-side measurement's two trees differ in: its ``lever`` when it names one, else the revisions."""
    return res.get("lever") or f"{res['after']} / {res['before']}"


def section_main(res: dict) -> list[str]:
    lines = ["## The main job, phase by phase", "",
             "`prover train` with no overrides (build the tiny policy, warm start, evaluate, 12 ProVer steps, "
             "evaluate), run in-process with clocks around each phase; install time is not included.", ""]
    runs = res["runs"][-1:]  # the revision measured last; earlier ones are history (CHANGELOG.md)
    names = list(runs[-1]["phases"])
    lines += ["| phase | " + " | ".join("seconds | share" for r in runs) + " |",
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
    revision = runs[-1]["label"].removeprefix("after ").strip("()")
    return [*lines, *phases.lines(), "", f"{when(res)} Revision: {revision}."]


def section_verify(res: dict) -> list[str]:
    from benchmarks.studies.verify_agreement import markdown

    drawn = [when(res, "drawn"), ""] if "drawn" in res else []  # rules replayed on draws kept from then
    return ["## Verification rules against fixed K = 32", "",
            f"`python -m benchmarks.studies.verify_agreement --batches {res['batches']} {' '.join(res['overrides'])}`",
            "", markdown(res), "", when(res), "", *drawn]


def section_overhead(res: dict) -> list[str]:
    lines = ["## ProVer's cost over GRPO", "",
             f"{res['steps']} RL steps per arm from the main job's warm-started policy, seed 0, the same tasks.", "",
             "| arm | rollout tokens | branch tokens | (rollout + branch) / rollout | s/step | step time / GRPO's "
             "| valid proposals | accepted |", "|---|---|---|---|---|---|---|---|"]
    grpo_s = res["arms"]["GRPO"]["time/step"]
    for name, a in res["arms"].items():
        tok = (a["cost/rollout_tokens"] + a["cost/branch_tokens"]) / a["cost/rollout_tokens"]
        lines.append(f"| {name} | {a['cost/rollout_tokens']:.0f} | {a['cost/branch_tokens']:.0f} | {tok:.3f} "
                     f"| {a['time/step'] / res['steps']:.1f} | {a['time/step'] / grpo_s:.2f}x "
                     f"| {a['credit/valid_proposals']:.0f} | {a['credit/accepted']:.0f} |")
    return [*lines, "", when(res)]


def section_cell(res: dict, later: dict | None = None) -> list[str]:
    from benchmarks.perf.cell_speed import table

    lines = [f"## A bench cell: {lever(res)}", "", *table(res), "", when(res)]
    if later:
        lines += ["", f"### A matrix's later cell of a seed: {lever(later)}", "", *table(later), "", when(later), "",
                  cell_reading(res, later)]
    return lines


def after_over_before(res: dict, seconds: str) -> float:
    """A cell measurement's ``seconds`` (wall_s or cpu_s), summed over its seeds, after over before."""
    seeds = res["seeds"].values()
    return sum(r["after"][seconds] for r in seeds) / sum(r["before"][seconds] for r in seeds)


def cell_reading(first: dict, res: dict) -> str:
    """Why half a cell's time is out of reach: its training steps alone are about half of it."""
    seeds = res["seeds"].values()
    wall, steps = sum(r["before"]["wall_s"] for r in seeds), sum(r["before"]["step_s"] for r in seeds)
    first_cpu, cpu = after_over_before(first, "cpu_s"), after_over_before(res, "cpu_s")
    return (f"**Reading.** Reading the step-0 evaluation saves its sampling and nothing else: every seed's "
            f"held-out success is the same to the last episode. The cell's 12 training steps (rollout, ProVer's "
            f"credit, the learner) took {steps:.0f} s of the before tree's {wall:.0f} s ({steps / wall:.0%}); the "
            "rest is the three evaluations and start-up. So a cell at half today's time needs the training steps "
            "themselves faster, not only the evaluations; both are bound by this CPU's arithmetic at one thread "
            "(the limit section: prefill 46-54% of the peak, the SFT and learner 45-48%). The two levers take "
            f"a cell's CPU time to {first_cpu:.2f}x ({lever(first)}) and {cpu:.2f}x ({lever(res)}), about "
            f"{first_cpu * cpu:.2f}x together, measured at different loads.")


def section_script(title: str, res: dict, fenced: bool = False) -> list[str]:
    output = f"```text\n{res['output']}\n```" if fenced else res["output"]
    return [f"## {title}", "", f"`{today_command(res['command'])}`", "", output, "", when(res)]


def render(results: dict) -> str:
    parts = [HEAD.strip(), ""] + summary(results)
    if "main" in results:
        parts += [""] + section_main(results["main"])
    if "limits" in results:
        parts += [""] + section_limits(results["limits"])
    if "verify" in results:
        parts += [""] + section_verify(results["verify"])
    if "overhead" in results:
        parts += [""] + section_overhead(results["overhead"])
    if "envs" in results:
        parts += [""] + section_script("Environments: steps/s and snapshots", results["envs"])
    if "credit" in results:
        parts += [""] + section_script("Credit methods: advantage time on one recorded batch", results["credit"])
    if "prefix" in results:
        parts += [""] + section_script("Lever: shared prompt prefixes", results["prefix"], fenced=True)
    if "cell" in results:
        parts += [""] + section_cell(results["cell"], results.get("later-cell"))
    if "recipes" in results:
        from benchmarks.perf.main_job_recipes import section

        parts += [""] + section(results["recipes"], results.get("sft_levers"))
    if "async" in results:
        from benchmarks.perf.async_rollout import section as async_section

        parts += [""] + async_section(results["async"])
    if {"bandwidth", "decode-vs-llama", "kernel-rows", "step-ratio-alfworld", "step-ratio-pivot2",
            "step-ratio-alfworld-avx2", "step-ratio-alfworld-noamx", "step-ratio-pivot2-noamx", "logprob-match",
            "bandwidth-noamx", "decode-vs-llama-noamx"} & set(results):
        parts += [""] + decode_section(results)
    if {"chat-step", "kv-cache", "learner-sequences", "bf16", "branch-prefill"} & set(results):
        from benchmarks.perf.page_real_model import section as real_model_section

        parts += [""] + real_model_section(results)
    return "\n".join(parts) + "\n"



def write_page() -> None:
    """docs/perf.md and its figure from every saved result (the one place that writes them)."""
    results = saved_results()
    if (figure := phases.figure(results)) is not None:
        phases.FIGURE.parent.mkdir(parents=True, exist_ok=True)
        phases.FIGURE.write_text(figure)
    PAGE.write_text(render(results))


def current(results: dict) -> bool:
    """Whether docs/perf.md and its figure are what ``results`` render to."""
    figure = phases.figure(results)
    drawn = figure is None or (phases.FIGURE.is_file() and phases.FIGURE.read_text() == figure)
    return drawn and PAGE.is_file() and PAGE.read_text() == render(results)


def main(argv: list[str] | None = None) -> int:
    check = render_or_check(__doc__, "rewrite docs/perf.md from the saved results",
                            "only say whether docs/perf.md is what they render to", argv)
    if check:
        same = current(saved_results())
        print(f"{PAGE.relative_to(ROOT)} and its figure {'are' if same else 'are not'} what the saved results "
              "render to")
        return 0 if same else 1
    write_page()
    print(PAGE.read_text().split("\n## ")[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
