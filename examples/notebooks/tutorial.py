# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # prover in a few minutes, on a CPU
#
# This notebook trains an LLM agent with RL on a laptop CPU, looks at what the ProVer credit method did,
# and plugs in a credit method of your own. Run it top to bottom: it takes a minute or two on one CPU core.
# Nothing is downloaded; the policy is a tiny Qwen3-architecture model built from a config.
#
# 1. Train a short run: pivot-sim, ProVer with the `contrast` judge.
# 2. Plot its learning curves.
# 3. Read the segments the judge proposed, and which were accepted, beside the true pivotal turns.
# 4. Swap the judge for `random` and rerun.
# 5. Write a credit method in a cell, register it, train with it by name.
# 6. Compare two methods over seeds with the bench's statistics.
#
# **Files.** `examples/notebooks/tutorial.py` (jupytext's "percent" format) is the source of truth;
# `tutorial.ipynb` is the same notebook, paired by jupytext and committed without outputs so that it
# renders on GitHub. After editing either one, `jupytext --sync examples/notebooks/tutorial.py` brings the
# other in line (in Jupyter with jupytext installed, saving does it); if the `.ipynb` was saved with
# outputs, `jupytext --to ipynb examples/notebooks/tutorial.py` rewrites it from the `.py` without them.
# CI runs the notebook and checks that the two files agree and the `.ipynb` has no outputs
# (`tests/test_notebook.py`).
#
# **Setup.** From a checkout: `pip install -c constraints/cpu.txt -e '.[dev]'` (or `-e .` plus
# `matplotlib jupyter`). Runs go to `$PROVER_TUTORIAL_DIR`, or a fresh temporary folder.

# %%
import json
import os
import tempfile
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import matplotlib.pyplot as plt

from prover import CREDIT, Trainer, make_env
from prover.config_load import load_config
from prover.errors import ConfigError
from prover.progress import Reporter

# without ipywidgets, rich and tqdm each warn once that they print plain lines instead of live bars
warnings.filterwarnings("ignore", message=r'install "ipywidgets"|IProgress not found')
RUNS = Path(os.environ.get("PROVER_TUTORIAL_DIR") or tempfile.mkdtemp(prefix="prover-tutorial-"))
print("runs go to", RUNS)
START = time.monotonic()

# %% [markdown]
# ## The settings
#
# Every run below is `prover train` with dotted overrides, as on the command line
# (`prover train env.name=pivot-sim steps=8 ...`); `prover train --help` lists every field.
#
# **pivot-sim** is a corridor with two racks; at each the agent must take the item the sign names, and the
# vault at the end opens only if both were right. The decisive turns, the *pivotal turns*, are known
# exactly, which is what makes it a testbed for credit assignment. The settings shrink everything for a
# CPU: a short corridor (the expert needs 5 turns), a very small model, groups of 4 episodes of 4 tasks per
# step, and 32 evaluation episodes on train-split tasks the run never trains on (`eval.split=train`, as the
# bench does: the test split asks for items no train task asks for, out of reach of a model this small).

# %%
COMMON = [
    "env.name=pivot-sim", "env.kwargs.delay=2", "env.kwargs.irrelevant_share=0.5",
    "model.tiny.vocab_size=512", "model.tiny.hidden_size=64", "model.tiny.num_layers=2",
    "model.tiny.num_heads=2", "model.tiny.intermediate_size=128", "model.tiny.corpus_episodes=50",
    # the warm start: behaviour-clone the expert, with 30% of its moves random, so RL starts at middling success
    "warmstart.episodes=600", "warmstart.epochs=2", "warmstart.random_action_share=0.3",
    "rollout.groups_per_step=4", "rollout.group_size=4", "rollout.max_turns=10",
    "rollout.sampling.max_new_tokens=10", "learner.lr=2e-5",
    "eval.episodes=32", "eval.split=train",
]
PROVER = ["credit.name=prover", "credit.samples=4"]  # K = 4 continuations from each end of a proposed segment
# CI runs this notebook in a small setting (PROVER_TUTORIAL_SMALL=1): the same cells, shorter runs
SMALL = ["warmstart.episodes=300", "steps=2", "eval.episodes=8"]


def train(name: str, *overrides: str, quiet: bool = False) -> Path:
    """Train one run in RUNS/<name> (a fresh folder each time) and return its folder."""
    run_dir = RUNS / name
    small = SMALL if os.environ.get("PROVER_TUTORIAL_SMALL") == "1" else []
    cfg = load_config(None, [*COMMON, *overrides, *small, f"run.dir={run_dir}"])
    Trainer(cfg, reporter=Reporter(quiet=True) if quiet else None).train()
    return run_dir


def history(run_dir: Path) -> list[dict]:
    """The run's metrics.jsonl: one record per training step (phase "train") and per evaluation ("eval")."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


# %% [markdown]
# ## 1. Train: ProVer with the `contrast` judge
#
# First the warm start (the slow part, about half a minute), then 8 RL steps. In each step, for every
# group with one win among its 4 episodes, the judge proposes the segment of the successful episode that
# most likely made the difference; ProVer verifies it by sampling continuations from the states before and
# after it, and adds a verified gain to the GRPO advantage of the segment's turns. `contrast` is a free
# judge that lines the success up with the failed runs (it reads the simulator's hidden state).

# %%
run = train("prover-contrast", *PROVER, "judge.name=contrast", "steps=8", "eval.every=4")

# %% [markdown]
# The run folder holds everything: `config.yaml`, `metrics.jsonl`, `groups.jsonl`, checkpoints and the
# built models (`models/`). `prover view <run folder>` renders it as one HTML page.

# %%
print(sorted(p.name for p in run.iterdir()))
WARM = next((run / "models").glob("warmstart-*"))  # the warm-started policy, reused by every run below
SHARED = [f"model.path={WARM}", "warmstart.enabled=false"]

# %% [markdown]
# ## 2. Learning curves
#
# `rollout/success` is the share of the step's training episodes that won; `eval/success` is held-out
# success, measured after the warm start, every `eval.every` steps and at the end. Eight steps of a tiny
# model move little: this shows where the numbers are, not that RL works.

# %%
hist = history(run)
train_rows = [r for r in hist if r["phase"] == "train"]
eval_rows = [r for r in hist if r["phase"] == "eval"]
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot([r["step"] for r in train_rows], [r["rollout/success"] for r in train_rows], "o-", label="rollout/success")
ax.plot([r["step"] for r in eval_rows], [r["eval/success"] for r in eval_rows], "s--", label="eval/success")
ax.set(xlabel="RL step", ylabel="success", ylim=(0, 1), title="ProVer + contrast on pivot-sim")
ax.legend()
plt.show()
print("judge proposals per step:", [int(r["credit/proposals"]) for r in train_rows])
print("accepted per step:       ", [int(r["credit/accepted"]) for r in train_rows])

# %% [markdown]
# ## 3. What the judge proposed, beside the truth
#
# `groups.jsonl` keeps a few rollout groups per step as text (`run.save_groups`, those the judge was asked
# about first): every episode turn by turn, and the judge's proposals as ProVer checked them (`start_turn`,
# `end_turn`, the verified gain `delta`, `accepted` when it was positive). pivot-sim knows which turns were
# pivotal (the env's `pivotal_turns`, computed from the exact optimal values; for diagnostics only, it
# never reaches a judge or an advantage). Below, `>` marks the proposed segment and `*` the pivotal turns;
# each turn shows the action taken and the start of the observation the agent saw before it.

# %%
env = make_env("pivot-sim", delay=2, irrelevant_share=0.5)  # the run's env settings, to compute the truth


def replay(task_id: str, record: dict) -> SimpleNamespace:
    """The fields of a trajectory that ``pivotal_turns`` reads (task, id, actions), from a groups.jsonl record."""
    return SimpleNamespace(task_id=task_id, traj_id=record["traj_id"],
                           turns=[SimpleNamespace(action=t["action"]) for t in record["turns"]])


def show_group(group: dict) -> None:
    wins = sum(t["won"] for t in group["trajectories"])
    print(f"step {group['step']}, task {group['task_id']}: {wins} of {len(group['trajectories'])} episodes won")
    for seg in group["segments"]:
        traj = next(t for t in group["trajectories"] if t["traj_id"] == seg["traj_id"])
        pivotal = env.pivotal_turns(replay(group["task_id"], traj))
        verdict = "accepted" if seg["accepted"] else "rejected" if seg["delta"] is not None else "dropped"
        delta = "n/a" if seg["delta"] is None else f"{seg['delta']:+.2f}"
        print(f"  proposal: turns {seg['start_turn']}-{seg['end_turn']} of {seg['traj_id']}, delta {delta}, {verdict}")
        print(f"  rationale: {seg['rationale']}")
        for t, turn in enumerate(traj["turns"]):
            mark = ">" if seg["start_turn"] <= t <= seg["end_turn"] else " "
            star = "*" if t in pivotal else " "
            action = " ".join(turn["action"].split())[:22]  # an untrained policy may write anything
            if not turn["action_valid"]:
                action = f"({action})"  # refused by the env
            print(f"   {mark}{star} {t:2d}  {action:<24} | {turn['observation'][:60]}")
    print()


groups = [json.loads(line) for line in (run / "groups.jsonl").read_text().splitlines()]
judged = [g for g in groups if g["segments"]]
print(f"{len(judged)} judged groups kept; the first three:\n")
for group in judged[:3]:
    show_group(group)
assert judged, "the judge proposed no segment in this run: no group had exactly one win?"

# %% [markdown]
# The run also scores every verified proposal against the truth itself (`truth/*` in metrics.jsonl):
# a *hit* is a proposal that contains a pivotal turn. Chance is high on so short a corridor: a random
# one-turn segment lands on a pivotal turn as often as pivotal turns make up the judged episodes.


# %%
def truth(run_dir: Path) -> str:
    rows = [r for r in history(run_dir) if r["phase"] == "train"]
    total = {k: sum(r.get(f"truth/{k}", 0) for r in rows) for k in ("proposals", "hits", "accepted", "accepted_hits")}
    shares = [r["truth/target_pivotal_share"] for r in rows if "truth/target_pivotal_share" in r]
    chance = sum(shares) / max(1, len(shares))
    return (f"{total['proposals']:.0f} verified proposals, {total['hits']:.0f} hit a pivotal turn "
            f"(chance for one turn: {chance:.0%}); {total['accepted']:.0f} accepted, of which "
            f"{total['accepted_hits']:.0f} hits")


print("contrast:", truth(run))

# %% [markdown]
# ## 4. Swap the judge
#
# The judge is one setting, `judge.name`. `random` proposes a uniformly random valid segment: the base rate
# a judge must beat. This run starts from the same warm-started policy (`model.path` names its folder and
# `warmstart.enabled=false`), so it skips the warm start. With the same seed it sees the same first batch.
# A handful of proposals cannot rank judges; [docs/bench/judges.md](../../docs/bench/judges.md) does, over
# thousands.

# %%
run_random = train("prover-random", *SHARED, *PROVER, "judge.name=random", "steps=8")
print("contrast:", truth(run))
print("random:  ", truth(run_random))

# %% [markdown]
# ## 5. A credit method of your own
#
# A credit method turns a batch of rollout groups into per-token advantages: subclass
# `prover.credit.base.CreditAssigner`, give it a pydantic `Config` (its fields are read from the
# `credit.` section of the run config), and implement `assign(batch, ctx) -> Advantages`.
# This one is GRPO's group-centred outcome, but only the last `last_k` turns of each episode get it.
# Registering it in code makes its name usable like a built-in one (`prover list` shows it as
# "registered in code"); as a package you would declare a `prover.credit` entry point
# ([docs/plugins.md](../../docs/plugins.md)).

# %%
import numpy as np
from pydantic import Field

from prover.credit.base import CreditAssigner, MethodConfig, trajectory_score
from prover.types import Advantages


class LastTurnsConfig(MethodConfig):
    last_k: int = Field(1, ge=1, description="How many final turns of each episode get the advantage.")


class LastTurnsGRPO(CreditAssigner):
    """GRPO's advantage R_i - mean_g R on the last ``last_k`` turns of each episode; 0 on the others."""

    Config = LastTurnsConfig
    needs_groups = True  # compares the episodes of a group: refused at rollout.group_size=1

    def assign(self, batch, ctx):
        values = []  # values[g][i][t]: one float32 per completion token of turn t of episode i of group g
        for group in batch.groups:
            scores = np.array([trajectory_score(tr, ctx.config.reward) for tr in group.trajectories])
            adv = scores - scores.mean()
            values.append([[np.full(turn.n_tokens, adv[i] if t >= len(tr.turns) - self.config.last_k else 0.0,
                                    dtype=np.float32) for t, turn in enumerate(tr.turns)]
                           for i, tr in enumerate(group.trajectories)])
        return Advantages(values=values)


CREDIT.unregister("last-turns-grpo")  # so that rerunning this cell registers the new class
CREDIT.register("last-turns-grpo", LastTurnsGRPO)
for entry in CREDIT.entries():  # what `prover list` says of the two
    if entry.name in ("grpo", "last-turns-grpo"):
        builtin = CREDIT.builtins.get(entry.name) == entry.target
        print(f"{entry.name:<16}", "built-in" if builtin else "registered in code")
try:  # its Config checks the credit.* settings before any work starts
    load_config(None, [*COMMON, "credit.name=last-turns-grpo", "credit.last_k=0"])
except ConfigError as exc:
    print(exc)

# %%
run_mine = train("last-turns-grpo", *SHARED, "credit.name=last-turns-grpo", "credit.last_k=2", "steps=4")
print([round(r["rollout/success"], 2) for r in history(run_mine) if r["phase"] == "train"])

# %% [markdown]
# ## 6. Compare two methods over seeds
#
# `prover.bench.stats.paired(method_by_seed, base_by_seed)` is what `prover bench` reports: per seed, the
# method's final held-out success minus the baseline's on the same seed, with a bootstrap CI, a paired t
# interval (its verdict), a sign-flip permutation p-value and the probability of improvement. Here: ProVer
# with `contrast` against plain GRPO, 3 seeds each, 4 steps, from the shared warm start.

# %%
from prover.bench.stats import paired

final = {}  # (method, seed) -> held-out success after RL
METHODS = {"prover": PROVER, "grpo": ["credit.name=grpo"]}
for method, settings in METHODS.items():
    for seed in (0, 1, 2):
        run_dir = train(f"compare/{method}-seed{seed}", *SHARED, *settings, f"seed={seed}", "steps=4", quiet=True)
        final[method, seed] = [r for r in history(run_dir) if r["phase"] == "eval"][-1]["eval/success"]
        print(f"{method:<7} seed {seed}: eval/success {final[method, seed]:.3f}")

res = paired({s: final["prover", s] for s in (0, 1, 2)}, {s: final["grpo", s] for s in (0, 1, 2)})
print(f"\nprover - grpo over {res.pairs} seeds: {res.diff.mean:+.3f}, bootstrap CI [{res.diff.lo:+.3f}, "
      f"{res.diff.hi:+.3f}], t interval [{res.t.lo:+.3f}, {res.t.hi:+.3f}] -> {res.verdict}")
print(f"sign-flip p = {res.p_value:.3f}, P(improvement) = {res.improvement:.2f}")
print(f"\nthe whole notebook took {time.monotonic() - START:.0f} s")

# %% [markdown]
# **Three seeds of four steps decide nothing.** With 3 pairs the sign-flip p-value cannot go below
# 2 / 2^3 = 0.25, 32 evaluation episodes carry a standard error of up to 9 points each, and four steps at
# this learning rate barely move the policy: whatever the verdict says, it is noise. The powered comparison
# (10 paired seeds, 30 steps, hundreds of evaluation episodes, settings tuned on other seeds) is
# `prover bench --config benchmarks/configs/bench_pivot.yaml`, read in
# [docs/bench/pivot/](../../docs/bench/pivot/README.md).
