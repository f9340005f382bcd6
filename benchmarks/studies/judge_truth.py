"""The free judges against the truth, with no model: Table 3's hit rates on groups a behaviour policy plays.

A judge is scored where it is asked in training: the first success of a group that holds a success and a
failure. The groups here are played by the env's observing expert with a share ``--random-share`` of its
turns replaced by a uniformly random admissible action (the warm start's behaviour policy, not a trained
one), so thousands of judged groups cost seconds and every judge sees the same groups. A proposal is a hit
when its segment holds a pivotal turn (``env.pivotal_turns``; prover/episodes/truth.py); the pivotal share is the
hit rate of a random one-turn segment, and "chance at its length" the hit rate of a random window as long as
each proposal (a long segment hits more often for its length alone); "hit - chance" is their per-proposal
difference with a t interval.

    python -m benchmarks.studies.judge_truth                        # the settings of configs/judge_truth.yaml
    python -m benchmarks.studies.judge_truth --sets tuning --paths  # the tuning rows only, text-contrast by rule path
    # LLM judges served on 127.0.0.1 (`prover serve-judge`), both modes, on the first 4 judged groups per seed,
    # the free judges scored on the same groups
    python -m benchmarks.studies.judge_truth --sets defaults webshop --groups 4 \
        --llm qwen=openai/qwen2.5-coder-1.5b-instruct@http://127.0.0.1:8081/v1 \
        --local smollm2=$HOME/.cache/prover/models/smollm2-135m-instruct --answers llm.jsonl --pool
    # --answers keeps every answer (keyed setting/seed/group/judge) and reuses it, so a stopped row resumes;
    # --pool adds one table of all chosen settings; --skip JUDGE leaves a judge out

The settings (which seeds tune and which report, which env configurations are held out) are fixed in
``judge_truth.yaml`` before the held-out rows are looked at. CIs are Wilson intervals on pooled proposals
(proposals of one seed are nearly independent: each is a different task), beside the spread of the
per-seed hit rates.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from functools import partial
from pathlib import Path

import yaml
from scipy import stats

from prover.envs import make_env
from prover.episodes.truth import segment_hits
from prover.judges.base import JudgeSettings
from prover.judges.contrast import ContrastJudge, ContrastSettings, TextContrastJudge, TextContrastSettings
from prover.judges.random_judge import RandomJudge
from prover.types import Group, JudgeRequest, Trajectory, Turn

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
JUDGES = {
    "contrast": lambda: ContrastJudge(ContrastSettings()),
    "text-contrast": lambda: TextContrastJudge(TextContrastSettings()),
    "text-contrast (break-away, before)": lambda: TextContrastJudge(TextContrastSettings(rule="break-away")),
    "random": lambda: RandomJudge(JudgeSettings()),
}
FREE_JUDGES = frozenset(JUDGES)  # seeded and deterministic: answered afresh each run, never cached


def play(env, task_seed: int, split: str, random_share: float, rng: random.Random, traj_id: str) -> Trajectory:
    """One episode of the noisy expert; turns carry what a judge reads (no token ids: no model played it)."""
    obs, info = env.reset(seed=task_seed, options={"split": split})
    traj = Trajectory(traj_id, f"{split}/{task_seed}", "task", turns=[])
    history: list[tuple[str, str]] = []
    done = False
    while not done:
        admissible = tuple(info.get("admissible_actions", ()))
        expert = env.expert_action()
        action = rng.choice(admissible) if (rng.random() < random_share or expert is None) else expert
        key = env.state_key()
        nxt, reward, terminated, truncated, info = env.step(action)
        traj.turns.append(Turn([], [], [], obs, "", action, True, bool(info.get("is_action_valid", True)),
                               float(reward), key, history=tuple(history), admissible=admissible))
        history.append((obs, action))
        obs, done = nxt, terminated or truncated
    traj.won = bool(info.get("won"))
    return traj


def judged_groups(env_kwargs: dict, seed: int, tasks: int, group_size: int, random_share: float):
    """(group, target, env) for every group of ``tasks`` with a success and a failure; tasks differ per seed."""
    env = make_env(env_kwargs.get("env", "pivot-sim"), **{k: v for k, v in env_kwargs.items() if k != "env"})
    rng = random.Random(f"judge-truth/{seed}")
    for i in range(tasks):
        task_seed = seed * 100_000 + i
        trajs = [play(env, task_seed, "train", random_share, rng, f"t{j}") for j in range(group_size)]
        group = Group(f"train/{task_seed}", trajs)
        if 0 < group.n_won < group_size:
            yield group, next(j for j, t in enumerate(trajs) if t.won), env


def llm_judges(specs: list[str], local: list[str]) -> dict:
    """``label=model@api_base`` -> the litellm judge in tools mode (with either repair rule) and in
    answer-only mode (structured);
    ``label=folder`` -> the local judge on that checkpoint in answer-only mode (structured, xgrammar)."""
    from prover.judges.agentic import LiteLLMJudge, LiteLLMJudgeConfig, LocalJudge, LocalJudgeConfig

    out = {}
    for spec in local:
        label, _, folder = spec.partition("=")
        settings = LocalJudgeConfig(model_path=folder, mode="answer-only", structured=True, dtype="float32",
                                    max_new_tokens=256)
        judge = LocalJudge(settings)  # one model, loaded at the first request and kept
        out[f"{label} local answer-only"] = lambda j=judge: j
    for spec in specs:
        label, _, rest = spec.partition("=")
        model, _, base = rest.partition("@")
        common = dict(model=model, api_base=base, timeout_s=600.0, cache=False, concurrency=1, max_tokens=256)
        # 'tools' is the row as first reported (a repair offered the research tools again); 'tools,
        # submit repair' is today's default, whose repair turn offers submit_segment alone
        out[f"{label} tools"] = lambda c=common: LiteLLMJudge(LiteLLMJudgeConfig(**c, repair_tools="all"))
        out[f"{label} tools, submit repair"] = lambda c=common: LiteLLMJudge(
            LiteLLMJudgeConfig(**c, repair_tools="submit"))
        # the same, structured: every answer once the research is over is decoded under the answer schema
        out[f"{label} tools, structured repair"] = lambda c=common: LiteLLMJudge(
            LiteLLMJudgeConfig(**c, repair_tools="submit", structured=True))
        out[f"{label} answer-only"] = lambda c=common: LiteLLMJudge(
            LiteLLMJudgeConfig(**c, mode="answer-only", structured=True))
    return out


def new_row() -> dict:
    return {"hits": 0, "n": 0, "turns": 0, "asked": 0, "paths": {}, "seeds": {}, "precision": 0.0, "recall": 0.0,
            "seconds": 0.0, "calls": 0, "failures": {}, "chance": 0.0, "excess": []}


def chance_at_length(pivotal: set[int], length: int, n_turns: int) -> float:
    """The hit rate of a uniformly random window of ``length`` turns ending at turn n-2 or earlier (a
    judge's own length, so a long segment gets no credit for its length alone)."""
    starts = range(0, max(1, n_turns - length))
    return sum(segment_hits(pivotal, s, s + length - 1) for s in starts) / len(starts)


def timed_answer(ask) -> dict:
    """What the tables need from one judge's answer (``ask()``), as a line of the answers cache (JSON)."""
    start = time.perf_counter()
    result = ask()
    seconds = time.perf_counter() - start
    seg = result.proposal.segment if result.proposal is not None else None
    return {"seconds": seconds, "calls": result.usage.calls,
            "segment": None if seg is None else [seg.start_turn, seg.end_turn],
            "path": "" if seg is None else result.proposal.rationale.split(":", 1)[0],
            "failure": "" if seg is not None else (result.error or result.failure.split(":", 1)[0] or "none"),
            "why": result.failure, "last_reply": result.transcript[-1] if result.transcript else ""}


def count(row: dict, answered: dict, pivotal: set[int], seed: tuple[str, int], n_turns: int) -> None:
    """One judge's answer to one request, into its row."""
    row["asked"] += 1
    row["seconds"] += answered["seconds"]
    row["calls"] += answered["calls"]
    if answered["segment"] is None:
        kind = answered["failure"]
        row["failures"][kind] = row["failures"].get(kind, 0) + 1
        return
    start, end = answered["segment"]
    turns = set(range(start, end + 1))
    hit = segment_hits(pivotal, start, end)
    row["hits"] += hit
    row["n"] += 1
    row["turns"] += len(turns)
    chance = chance_at_length(pivotal, len(turns), n_turns)
    row["chance"] += chance
    row["excess"].append(hit - chance)  # this proposal's hit against a random window of its length
    row["precision"] += len(turns & pivotal) / len(turns)  # the share of the segment that is pivotal
    row["recall"] += len(turns & pivotal) / max(1, len(pivotal))  # the share of the pivotal turns it holds
    for key, bucket in (("paths", answered["path"]), ("seeds", seed)):
        h, n = row[key].get(bucket, (0, 0))
        row[key][bucket] = (h + hit, n + 1)


TRANSIENT = ("connection", "timeout")  # a server that was down or slow says nothing about the judge


class Answers:
    """LLM judges' answers kept in a JSONL file, so that a slow row resumes where it stopped."""

    def __init__(self, path: Path | None):
        self.path, self.known = path, {}
        if path is not None and path.exists():
            for number, line in enumerate(path.read_text().splitlines(), 1):
                try:
                    record = json.loads(line) if line.strip() else None
                    if record is not None:
                        self.known[record["key"]] = record["answer"]
                except (ValueError, KeyError, TypeError):
                    raise SystemExit(f"--answers {path}: line {number} is not an answer record") from None

    def get(self, key: str, ask) -> dict:
        if key in self.known:
            return self.known[key]
        answered = timed_answer(ask)
        print(f"  {key}: {answered['segment'] or answered['failure']} ({answered['seconds']:.0f} s)",
              file=sys.stderr, flush=True)
        if answered["failure"] in TRANSIENT:  # asked again on the next run
            return answered
        self.known[key] = answered
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps({"key": key, "answer": answered}) + "\n")
        return answered


def score(config: dict, seeds: list[int], judges: list[str], max_groups: int | None = None,
          answers: Answers | None = None, setting: str = "") -> dict:
    """Per judge: hits, proposals, segment turns, precision, recall, seconds, failures, per path and seed
    counts; with ``max_groups``, on the first that many judged groups of each seed."""
    answers = answers or Answers(None)
    made = {name: JUDGES[name]() for name in judges}  # one judge per setting: a server fallback is learnt once
    out = {name: new_row() for name in judges}
    share = []
    for seed in seeds:
        groups = judged_groups(config.get("env_kwargs", {}), seed, config["tasks"], config["group_size"],
                               config["random_share"])
        for k, (group, target, env) in enumerate(groups):
            if max_groups is not None and k >= max_groups:
                break
            pivotal = set(env.pivotal_turns(group.trajectories[target]))
            share.append(len(pivotal) / len(group.trajectories[target].turns))
            request = JudgeRequest(group, target, max_turns=config.get("max_turns", 4), seed=seed)
            for name in judges:
                ask = partial(made[name].propose, request)
                answered = (timed_answer(ask) if name in FREE_JUDGES
                            else answers.get(f"{setting}/{seed}/{k}/{name}", ask))
                count(out[name], answered, pivotal, (setting, seed), len(group.trajectories[target].turns))
    return {"rows": out, "pivotal_share": sum(share) / max(1, len(share)), "groups": len(share)}


def pooled(results: list[dict]) -> dict:
    """Several settings' results as one: counts, lists and buckets add (a seed's bucket names its setting)."""
    def add(a, b):
        return tuple(x + y for x, y in zip(a, b)) if isinstance(a, tuple) else a + b

    rows = {}
    for result in results:
        for judge, row in result["rows"].items():
            into = rows.setdefault(judge, new_row())
            for key, value in row.items():
                if isinstance(value, dict):
                    for bucket, v in value.items():
                        into[key][bucket] = add(into[key][bucket], v) if bucket in into[key] else v
                else:
                    into[key] += value
    groups = sum(r["groups"] for r in results)
    share = sum(r["pivotal_share"] * r["groups"] for r in results) / max(1, groups)
    return {"rows": rows, "pivotal_share": share, "groups": groups}


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (float("nan"), float("nan"))
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_ci(values: list[float]) -> str:
    """Mean and a t 95% interval (in points) of per-proposal differences."""
    if len(values) < 2:
        return "-"
    n, mean = len(values), sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return f"{100 * mean:+.1f} [{100 * (mean - half):+.1f}, {100 * (mean + half):+.1f}]"


def table(name: str, config: dict, result: dict, show_paths: bool) -> str:
    lines = [f"### {name}: {config.get('note', '')}", "",
             f"{result['groups']} judged groups; pivotal share {100 * result['pivotal_share']:.1f}%", "",
             "| judge | proposals | mean len. | hit rate [95% Wilson] | chance at its length | hit - chance [95% t] "
             "| precision | recall | s per call | per-seed hit rates | no proposal, why |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for judge, row in result["rows"].items():
        n, calls = row["n"], row["calls"]
        lo, hi = wilson(row["hits"], n)
        per_seed = ", ".join(f"{100 * h / k:.0f}" for h, k in row["seeds"].values() if k)
        per_call = f"{row['seconds'] / calls:.1f}" if calls else "-"
        why = ", ".join(f"{kind} {n}" for kind, n in sorted(row["failures"].items()))
        lines.append(f"| {judge} | {n} of {row['asked']} | {row['turns'] / max(1, n):.2f} | "
                     f"{100 * row['hits'] / max(1, n):.1f}% [{100 * lo:.1f}, {100 * hi:.1f}] | "
                     f"{100 * row['chance'] / max(1, n):.1f}% | {mean_ci(row['excess'])} | "
                     f"{100 * row['precision'] / max(1, n):.1f}% | {100 * row['recall'] / max(1, n):.1f}% | "
                     f"{per_call} | {per_seed} | {why or '-'} |")
        if (show_paths and len(row["paths"]) > 1) or (show_paths and judge.startswith("text")):
            for path, (h, k) in sorted(row["paths"].items()):
                lines.append(f"| ↳ {path} | {k} | | {100 * h / max(1, k):.1f}% ({h}/{k}) | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIGS / "judge_truth.yaml")
    parser.add_argument("--sets", nargs="*", default=None, help="which settings of the file (default: all)")
    parser.add_argument("--paths", action="store_true", help="split each judge's hits by its rule path")
    parser.add_argument("--out", type=Path, default=None, help="also write the tables to this markdown file")
    parser.add_argument("--groups", type=int, default=None, help="only the first N judged groups of each seed")
    parser.add_argument("--llm", nargs="*", default=[], metavar="LABEL=MODEL@API_BASE",
                        help="also an LLM judge served there (litellm), in tools and in answer-only mode")
    parser.add_argument("--skip", nargs="*", default=[], metavar="JUDGE",
                        help="leave these judges out (their names as the tables write them)")
    parser.add_argument("--answers", type=Path, default=None,
                        help="keep every judge's answers in this JSONL file and reuse them on a rerun")
    parser.add_argument("--pool", action="store_true", help="also one table of every chosen setting pooled")
    parser.add_argument("--local", nargs="*", default=[], metavar="LABEL=FOLDER",
                        help="also the local judge on that checkpoint folder, answer-only and structured")
    args = parser.parse_args(argv)
    spec = yaml.safe_load(args.config.read_text())
    JUDGES.update(llm_judges(args.llm, args.local))
    unknown = [name for name in args.skip if name not in JUDGES]
    if unknown:
        parser.error(f"--skip: no judge named {unknown[0]!r}; the judges are {', '.join(JUDGES)}")
    judges = [name for name in spec["judges"] + [n for n in JUDGES if n not in spec["judges"]]
              if name not in args.skip]
    chunks, answers, results = [], Answers(args.answers), []
    for name, config in spec["settings"].items():
        if args.sets and name not in args.sets:
            continue
        config = {**spec["defaults"], **config}
        results.append(score(config, config["seeds"], judges, args.groups, answers, name))
        chunks.append(table(name, config, results[-1], args.paths))
        print(chunks[-1], flush=True)
    if args.pool and results:
        chunks.append(table("pooled", {"note": f"{len(results)} settings, each group counted once"},
                            pooled(results), args.paths))
        print(chunks[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(chunks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
