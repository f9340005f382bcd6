"""Our GiGPO and GRPO advantages against verl-agent's reference functions: speed ratio and float64 equality.

    python -m benchmarks.conformance.credit_vs_reference [--reference PATH] [--no-fetch] [--repeats 5] [--seed N]

The batch is synthetic and fixed: 16 groups x 8 trajectories x 5-50 turns (3,547 rows with the default seed),
4-8 completion tokens a turn, 40% of episodes won (reward 1 at the last turn, scale 10), 5% of turns
format-invalid (penalty 0.1), states a random walk over 30 states per group that starts at one shared
state, so anchor groups of every size occur.

The reference is ``compute_gigpo_outcome_advantage`` (verl-agent ``gigpo/core_gigpo.py``) and
``compute_grpo_outcome_advantage`` (``verl/trainer/ppo/core_algos.py``) at commit d0b97244c50f of
``vanzll/verl-agent``, the fork of ``langfengQ/verl-agent`` that docs/methods/gigpo.md and grpo.md were
checked against. It is never committed here: ``--reference PATH`` names a verl-agent checkout (any
commit), a git directory that has the pinned commit, or a folder holding the two files, which are copied
into ``~/.cache/prover/reference/verl-agent-<commit>`` (``PROVER_CACHE`` moves it); otherwise they are
fetched into it (``reference_files.PinnedFiles``, as for every conformance script). Without them (offline,
``--no-fetch``) only our timings are printed, with the commands that get the files. Loading needs torch
only: ``verl`` is replaced by a stub module.

What each clock sees (median of ``--repeats`` interleaved runs after one warm-up each, the garbage
collector paused during each run as timeit does):
- ours: the public ``assign(batch, ctx)``, from the Batch to per-token float32 arrays, returns included;
- reference: only its function, on ready float64 (bs, L) tensors; building them, and the discounted step
  returns the trainer computes before calling it, are outside its clock. The ratio is therefore
  conservative for us.
Equality: our float64 value per turn (before the float32 token broadcast) against the reference's
float64 output at each row's first token, ``np.array_equal``, in the configurations where the two
define the same thing: GiGPO mean_std_norm and mean_norm (state_key anchors handed to the reference as
its ``anchor_obs``), GRPO stats=step with norm=std and norm=mean (the reference's
``compute_mean_std_cross_steps=True``).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import io
import random
import statistics
import sys
import time
import types
from pathlib import Path

import numpy as np

from benchmarks.conformance.reference_files import PinnedFiles
from prover.config import TrainConfig
from prover.credit.base import CreditContext
from prover.credit.gigpo import GiGPO, GiGPOConfig, gigpo_row_advantages
from prover.credit.grpo import GRPO, GRPOConfig, grpo_row_advantages
from prover.types import Batch, Group, Trajectory, Turn

REF_REPO, REF_COMMIT = "vanzll/verl-agent", "d0b97244c50f17fb43a6ef0a15bca0e95a044ff7"  # as docs/methods/*.md
REF_FILES = {"core_gigpo.py": "gigpo/core_gigpo.py", "core_algos.py": "verl/trainer/ppo/core_algos.py"}
REFERENCE = PinnedFiles(REF_REPO, REF_COMMIT, REF_FILES)


SEED = 569  # the first seed whose 128 lengths sum to 3,547 rows, the batch the reference was first compared on


def synthetic_batch(seed: int = SEED, groups: int = 16, size: int = 8,
                    turns: tuple[int, int] = (5, 50)) -> Batch:
    rng = random.Random(seed)
    lengths = [rng.randint(*turns) for _ in range(groups * size)]  # drawn first: they alone fix the shape
    out = []
    for g in range(groups):
        trajs = []
        for i in range(size):
            won, n, state = rng.random() < 0.4, lengths[g * size + i], 0
            tr = Trajectory(f"{g}#{i}", f"task{g}", "", won=won)
            for t in range(n):
                k = rng.randint(4, 8)
                tr.turns.append(Turn(prompt_ids=[1], completion_ids=[2] * k, logprobs=[-1.0] * k,
                                     observation=f"obs {state}", completion_text="", action="a",
                                     format_valid=rng.random() >= 0.05, action_valid=True,
                                     reward=1.0 if won and t == n - 1 else 0.0, state_key=f"g{g}/s{state}"))
                state = (state + rng.choice([-1, 1, 2])) % 30  # a walk: revisits make anchor groups
            trajs.append(tr)
        out.append(Group(f"task{g}", trajs))
    return Batch(out)


def reference_inputs(batch: Batch, cfg: TrainConfig, gamma: float) -> dict:
    """The reference's arguments in float64, built as verl-agent's trainer builds them (outside the clock)."""
    import torch

    reward, rows = cfg.reward, [(g, tr, t) for g in batch.groups for tr in g.trajectories for t in tr.turns]
    width = max(t.n_tokens for _, _, t in rows)
    mask, scores = np.zeros((len(rows), width)), np.zeros((len(rows), width))
    returns = []
    for g in batch.groups:
        for tr in g.trajectories:
            running, back = 0.0, []
            for t in reversed(tr.turns):  # the reference's recurrence, in float64 (its own casts to float32)
                running = reward.scale * t.reward + gamma * running
                back.append(running - reward.invalid_penalty * (not t.format_valid))
            returns.extend(reversed(back))
    for r, (_g, tr, t) in enumerate(rows):
        mask[r, :t.n_tokens] = 1.0
        scores[r, t.n_tokens - 1] = reward.scale * tr.env_return - reward.invalid_penalty * (not t.format_valid)
    obj = lambda xs: np.array(xs, dtype=object)  # noqa: E731
    return {"token_level_rewards": torch.tensor(scores), "response_mask": torch.tensor(mask),
            "step_rewards": torch.tensor(returns, dtype=torch.float64),
            "anchor_obs": obj([t.state_key for _, _, t in rows]), "index": obj([g.task_id for g, _, _ in rows]),
            "traj_index": obj([tr.traj_id for _, tr, _ in rows])}


def load_reference(files: dict[str, Path]) -> tuple:
    """Import the two files with ``verl`` stubbed (all they use of it: DataProto, torch_functional)."""
    stubs = {"verl": types.ModuleType("verl"), "verl.utils": types.ModuleType("verl.utils"),
             "verl.utils.torch_functional": types.ModuleType("verl.utils.torch_functional")}
    stubs["verl"].DataProto, stubs["verl"].utils = object, stubs["verl.utils"]
    stubs["verl.utils"].torch_functional = stubs["verl.utils.torch_functional"]
    saved = {k: sys.modules.get(k) for k in stubs}
    sys.modules.update(stubs)
    try:
        mods = {}
        for name, file in files.items():
            spec = importlib.util.spec_from_file_location(f"_reference_{name[:-3]}", file)
            mods[name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mods[name])
    finally:
        for k, v in saved.items():
            sys.modules.pop(k) if v is None else sys.modules.__setitem__(k, v)
    gigpo, algos = mods["core_gigpo.py"], mods["core_algos.py"]
    return gigpo.compute_gigpo_outcome_advantage, algos.compute_grpo_outcome_advantage


def clock_ms(fn) -> float:
    gc.disable()  # as timeit does: neither side pays for collecting the other's garbage
    try:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    finally:
        gc.enable()


def quiet(fn):
    """The reference prints a line per call (build_step_group); keep it off the table, not off the clock."""
    def run():
        with contextlib.redirect_stdout(io.StringIO()):
            return fn()
    return run


def cases(batch: Batch, ctx: CreditContext, ref: tuple | None):
    """(name, ours timed, reference timed, [(setting, ours float64 per row, reference float64 per row)])."""
    ref_gigpo, ref_grpo = ref or (None, None)
    inp = reference_inputs(batch, ctx.config, GiGPOConfig().gamma)
    gi = {k: inp[k] for k in ("token_level_rewards", "step_rewards", "response_mask", "anchor_obs", "index",
                              "traj_index")}
    gr = {k: inp[k] for k in ("token_level_rewards", "response_mask", "index", "traj_index")}
    first = lambda f: lambda: quiet(f)()[0][:, 0].numpy()  # noqa: E731 - a row's value is on every token
    gigpo_checks = [(mode, lambda m=mode: gigpo_row_advantages(batch, ctx, GiGPOConfig(mode=m)),
                     first(lambda m=mode: ref_gigpo(**gi, mode=m))) for mode in ("mean_std_norm", "mean_norm")]
    grpo_checks = [(f"norm={n}", lambda n=n: grpo_row_advantages(batch, ctx, GRPOConfig(norm=n, stats="step")),
                    first(lambda n=n: ref_grpo(**gr, norm_adv_by_std_in_grpo=n == "std")))
                   for n in ("std", "mean")]
    yield ("gigpo (mean_std_norm)", lambda: GiGPO(GiGPOConfig()).assign(batch, ctx),
           ref_gigpo and quiet(lambda: ref_gigpo(**gi, mode="mean_std_norm")), gigpo_checks)
    yield ("grpo (norm=std, stats=step)", lambda: GRPO(GRPOConfig(norm="std", stats="step")).assign(batch, ctx),
           ref_grpo and quiet(lambda: ref_grpo(**gr)), grpo_checks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    REFERENCE.add_arguments(ap, "verl-agent checkout, or a folder with the two files")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args()
    folder = REFERENCE.found(args, say_how=False)  # said below, after the batch line
    files = {name: folder / name for name in REF_FILES} if folder else None
    ref = load_reference(files) if files else None
    batch, ctx = synthetic_batch(args.seed), CreditContext(TrainConfig())
    print(f"batch: {len(batch.groups)} groups x {len(batch.groups[0].trajectories)} trajectories x 5-50 turns, "
          f"{len(batch.turns())} rows; median of {args.repeats}; reference: "
          f"{', '.join(str(p) for p in files.values()) if files else 'absent'}\n")
    if ref is None:
        print(REFERENCE.how_to_get() + "\nOnly our timings follow.\n")
    print("| method | ours ms | reference ms | reference / ours | float64 equal (max abs diff) |")
    print("|---|---|---|---|---|")
    for name, ours, theirs, checks in cases(batch, ctx, ref):
        sides = [ours, theirs] if theirs else [ours]
        for fn in sides:
            fn()  # warm-up: first-call costs (imports, allocator) belong to neither side
        # interleaved, so drift in the machine's load hits both sides alike
        ms = [[clock_ms(fn) for fn in sides] for _ in range(args.repeats)]
        ours_ms, ref_ms = [m[0] for m in ms], [m[-1] for m in ms]
        a = statistics.median(ours_ms)
        if not theirs:
            print(f"| {name} | {a:.2f} | - | - | - |")
            continue
        b, eq = statistics.median(ref_ms), []
        for setting, mine, their in checks:
            x, y = mine(), their()
            eq.append(f"{setting}: {np.array_equal(x, y)} ({np.max(np.abs(x - y)):.1e})")
        print(f"| {name} | {a:.2f} | {b:.2f} | {b / a:.1f}x | {'; '.join(eq)} |")


if __name__ == "__main__":
    main()
