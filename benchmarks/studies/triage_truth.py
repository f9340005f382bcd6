"""TRIAGE's roles against the truth: how often each role the judge gives lands on a pivotal turn.

TRIAGE (prover/credit/triage.py) asks a frozen judge for one role per turn (decisive_progress,
useful_exploration, no_progress, regression). Here it labels pivot-sim groups played by the noisy expert of
``judge_truth.py`` (its ``judged_groups``, the settings of ``judge_truth.yaml``: a group with a success and a
failure, the first ``--groups`` of each seed), each group passed alone to ``TRIAGE.assign`` with
``groups=mixed`` so every one is labelled. The labels TRIAGE kept (``last_labels``) are scored against
``env.pivotal_turns`` (``label_truth``): per role, the turns given it, their share of all labelled turns, how
many are pivotal, the precision (pivotal share among them, Wilson 95% interval) beside the base rate (the
pivotal share of all labelled turns: a role no better than chance has precision near it), and the share of
all pivotal turns it took; for all runs, the successes and the failures. Also: how many trajectories' labels
parsed (structured output should give 100%), the critic failures (no reply, or a reply that is not one role
per turn; a failed call leaves its whole group at GRPO, so its other runs' labels are not scored), and the
seconds per critic call. Like the training path, each run carries the task text and ``env.gold()``.

    # the local SmolLM2 judge (structured, xgrammar, float32), defaults setting, seeds 0-4, 2 groups per seed
    python -m benchmarks.studies.triage_truth --local ~/.cache/prover/models/smollm2-135m-instruct \\
        --out benchmarks/results/triage_truth.md
    # a served model (litellm, structured output; llama.cpp's server falls back to json_object by itself)
    python -m benchmarks.studies.triage_truth --llm openai/qwen2.5-coder-1.5b-instruct@http://127.0.0.1:8081/v1
    # no model: a fake judge cycling the four roles (checks the plumbing in seconds; its table is chance)
    python -m benchmarks.studies.triage_truth --fake --groups 1 --seeds 0

The judge's reply budget is 16 tokens per turn of the longest run + 32 (one role per turn, under the schema).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path

import yaml

from benchmarks.studies.judge_truth import judged_groups, wilson
from prover.chat import ChatModel, ChatReply, LiteLLMSettings, LocalSettings
from prover.config import TrainConfig
from prover.credit.base import CreditContext
from prover.credit.criticsearch import CriticSettings
from prover.credit.triage import ROLES, TRIAGE, TriageConfig, label_truth
from prover.types import Batch, Group, JudgeUsage, Trajectory

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SUBSETS = {"all runs": lambda tr: True, "successes": lambda tr: tr.won, "failures": lambda tr: not tr.won}


class CyclingJudge(ChatModel):
    """No model: the four roles in turn, one per turn (the count read from the schema), for ``--fake``."""

    name, structured = "fake", True

    def __init__(self) -> None:
        self.roles = itertools.cycle(ROLES)

    def chat(self, messages, tools=None, schema=None) -> ChatReply:
        n = schema["properties"]["labels"]["minItems"]
        labels = ", ".join(f'"{next(self.roles)}"' for _ in range(n))
        return ChatReply(f'{{"labels": [{labels}]}}', prompt_tokens=1, completion_tokens=n)


class RecordingTriage(TRIAGE):
    """TRIAGE, each trajectory's critic conversation recorded: how it ended and how long it took."""

    def __init__(self, config: TriageConfig, critic: ChatModel | None = None) -> None:
        super().__init__(config, critic)
        self.outcomes: dict[str, str] = {}  # trajectory id -> parsed | unusable | no reply
        self.seconds: list[float] = []  # one per conversation (one call each, max_repairs = 0)

    def label(self, traj: Trajectory, group: Group) -> tuple[list | None, JudgeUsage]:
        start = time.perf_counter()
        labels, usage = super().label(traj, group)
        self.seconds.append(time.perf_counter() - start)
        self.outcomes[traj.traj_id] = ("parsed" if labels is not None
                                       else "no reply" if usage.failed_calls else "unusable")
        return labels, usage


def triage_config(local: str | None, llm: str | None, max_tokens: int) -> TriageConfig:
    """TRIAGE labelling every judged group (groups=mixed), its critic the local folder or the served model."""
    if local:
        critic = CriticSettings(backend="local", concurrency=1, local=LocalSettings(
            model_path=local, structured=True, dtype="float32", max_new_tokens=max_tokens))
    elif llm:
        model, _, base = llm.partition("@")
        critic = CriticSettings(backend="litellm", concurrency=1, litellm=LiteLLMSettings(
            model=model, api_base=base or None, structured=True, structured_format="auto", cache=False,
            timeout_s=600.0, max_tokens=max_tokens))
    else:  # --fake: the judge is handed in, these settings are never used
        critic = CriticSettings(concurrency=1)
    return TriageConfig(groups="mixed", critic=critic)


def with_task(group: Group, env) -> Group:
    """The group's runs with the task text and ``env.gold()`` the training rollout gives them."""
    split, _, seed = group.task_id.partition("/")
    obs, info = env.reset(seed=int(seed), options={"split": split})
    for tr in group.trajectories:
        tr.task_text, tr.gold = str(info.get("task", obs)), env.gold()
    return group


def setting_groups(config: dict, seeds: list[int], per_seed: int) -> list[tuple[int, Group, object]]:
    """(seed, group, env): the first ``per_seed`` judged groups of each seed, as judge_truth.py plays them."""
    out = []
    for seed in seeds:
        made = judged_groups(config.get("env_kwargs", {}), seed, config["tasks"], config["group_size"],
                             config["random_share"])
        out += [(seed, with_task(group, env), env) for group, _, env in itertools.islice(made, per_seed)]
    return out


def new_tally() -> dict:
    return {"subsets": {name: {r: {"turns": 0, "pivotal": 0} for r in ROLES} for name in SUBSETS},
            "outcomes": {"parsed": 0, "unusable": 0, "no reply": 0}, "groups": 0, "failed_groups": 0,
            "calls": 0}


def score_group(method: RecordingTriage, group: Group, env, ctx: CreditContext, tally: dict) -> dict:
    """Label one group with TRIAGE and add its roles against the truth to ``tally``; its metrics."""
    metrics = method.assign(Batch([group]), ctx).metrics
    tally["groups"] += 1
    tally["failed_groups"] += int(metrics["credit/critic_failures"])
    tally["calls"] += int(metrics["credit/critic_calls"])
    for tr in group.trajectories:
        if tr.turns:
            tally["outcomes"][method.outcomes.get(tr.traj_id, "no reply")] += 1
    for name, keep in SUBSETS.items():
        labels = {tr.traj_id: method.last_labels[tr.traj_id] for tr in group.trajectories
                  if keep(tr) and tr.traj_id in method.last_labels}
        for role, counts in label_truth(Batch([group]), labels, env.pivotal_turns).items():
            for key, n in counts.items():
                tally["subsets"][name][role][key] += n
    return metrics


def percent_ci(hits: int, n: int) -> str:
    if n == 0:
        return "-"
    lo, hi = wilson(hits, n)
    return f"{100 * hits / n:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"


def subset_table(name: str, rows: dict) -> list[str]:
    """One markdown table: per role, turns, share, pivotal, precision [Wilson], share of pivotal turns."""
    turns = sum(r["turns"] for r in rows.values())
    pivotal = sum(r["pivotal"] for r in rows.values())
    lines = [f"**{name}**: {turns} labelled turns, {pivotal} pivotal (base rate "
             f"{percent_ci(pivotal, turns)})", "",
             "| role | turns | share of turns | on a pivotal turn | precision [95% Wilson] | base rate "
             "| share of pivotal turns |", "|---|---|---|---|---|---|---|"]
    base = f"{100 * pivotal / turns:.1f}%" if turns else "-"
    for role, r in rows.items():
        share = f"{100 * r['turns'] / turns:.1f}%" if turns else "-"
        took = f"{100 * r['pivotal'] / pivotal:.1f}%" if pivotal else "-"
        lines.append(f"| {role} | {r['turns']} | {share} | {r['pivotal']} | {percent_ci(r['pivotal'], r['turns'])} "
                     f"| {base} | {took} |")
    return [*lines, ""]


def report(name: str, config: dict, tally: dict, seconds: list[float], judge: str) -> str:
    """The markdown of one setting: the parse line, the cost line and one table per subset of runs."""
    out = tally["outcomes"]
    asked = sum(out.values())
    per_call = (f"{sum(seconds) / len(seconds):.2f} s mean, {statistics.median(seconds):.2f} s median"
                if seconds else "-")
    lines = [f"### {name}: {config.get('note', '')}", "", f"judge: {judge}; {tally['groups']} judged groups", "",
             f"labels parsed: {out['parsed']} of {asked} trajectories ({asked - out['parsed']} critic failures: "
             f"{out['unusable']} unusable replies, {out['no reply']} without a reply; {tally['failed_groups']} "
             "groups left at GRPO, their runs not scored)", "",
             f"seconds per critic call: {per_call} ({tally['calls']} calls, {len(seconds)} conversations)", ""]
    for subset, rows in tally["subsets"].items():
        lines += subset_table(subset, rows)
    return "\n".join(lines)


def run_setting(name: str, groups: list, method: RecordingTriage, ctx: CreditContext) -> tuple[dict, list[float]]:
    """Every chosen group of one setting through TRIAGE, with a progress line per group on stderr."""
    tally, first = new_tally(), len(method.seconds)
    for k, (seed, group, env) in enumerate(groups, 1):
        start = time.perf_counter()
        metrics = score_group(method, group, env, ctx, tally)
        parsed = sum(method.outcomes.get(tr.traj_id) == "parsed" for tr in group.trajectories)
        print(f"  {name} seed {seed} group {k}/{len(groups)} {group.task_id}: {parsed} of "
              f"{len(group.trajectories)} runs parsed, {int(metrics['credit/critic_failures'])} group failures, "
              f"{time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return tally, method.seconds[first:]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIGS / "judge_truth.yaml")
    parser.add_argument("--sets", nargs="*", default=["defaults"], help="settings of the file (default: defaults)")
    parser.add_argument("--seeds", nargs="*", type=int, default=None,
                        help="seeds to play (default: the setting's own, 0-4 for every reported setting)")
    parser.add_argument("--groups", type=int, default=2, help="judged groups per seed (default 2)")
    judge = parser.add_mutually_exclusive_group(required=True)
    judge.add_argument("--local", metavar="FOLDER", help="the local judge on this checkpoint folder")
    judge.add_argument("--llm", metavar="MODEL@API_BASE", help="a litellm judge, e.g. openai/name@http://host/v1")
    judge.add_argument("--fake", "--dry-run", action="store_true", help="no model: a judge cycling the roles")
    parser.add_argument("--out", type=Path, default=None, help="also write the tables to this markdown file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spec = yaml.safe_load(args.config.read_text())
    unknown = [s for s in args.sets if s not in spec["settings"]]
    if unknown:
        raise SystemExit(f"--sets: no setting {unknown[0]!r}; the settings are {', '.join(spec['settings'])}")
    configs = {name: {**spec["defaults"], **spec["settings"][name]} for name in args.sets}
    played = {name: setting_groups(c, args.seeds or c["seeds"], args.groups) for name, c in configs.items()}
    longest = max((len(tr.turns) for gs in played.values() for _, g, _ in gs for tr in g.trajectories), default=1)
    config = triage_config(args.local, args.llm, 16 * longest + 32)
    method = RecordingTriage(config, CyclingJudge() if args.fake else None)
    judge = "fake (cycling roles)" if args.fake else (f"local {args.local}" if args.local else f"litellm {args.llm}")
    ctx, chunks = CreditContext(config=TrainConfig()), []
    for name, groups in played.items():
        tally, seconds = run_setting(name, groups, method, ctx)
        chunks.append(report(name, configs[name], tally, seconds, f"{judge}, max {16 * longest + 32} tokens"))
        print(chunks[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(chunks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
