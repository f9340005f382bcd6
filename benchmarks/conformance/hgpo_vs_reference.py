"""Our HGPO advantages against the reference's ``compute_hgpo_outcome_advantage``, in float64, on three batches.

    python -m benchmarks.conformance.hgpo_vs_reference [--reference PATH] [--no-fetch]

The reference is ``recipe/hgpo/core_hgpo.py`` of ``OliverLeeXZ/SERL`` (the HGPO authors' recipe) at the
pinned commit below. It is never committed here: ``--reference PATH`` names a SERL checkout, a folder holding
``core_hgpo.py``, or a git directory (e.g. a bare mirror) that has the pinned commit; otherwise the file is
fetched into ``~/.cache/prover/reference/SERL-<commit>`` (``PROVER_CACHE`` moves it). Without it (offline,
``--no-fetch``) the script prints the commands that get it and stops.

How the reference is run:
- ``verl`` is replaced by a stub module (the file uses only the name ``verl.DataProto``);
- its float32 casts are turned into float64 on load (the text ``float32`` becomes ``float64``), so that
  both sides compute in float64; nothing else in the file is changed;
- its inputs are built as SERL's trainer builds them: ``compute_step_discounted_returns`` (the reference's
  own, on a stand-in batch) gives the step returns of ``scale * env reward`` at gamma; the invalid-format
  penalty is then subtracted from the returns and from the score at each row's last token
  (``apply_invalid_action_penalty``); ``index`` is the task, ``traj_index`` the trajectory's place in the
  batch, and ``anchor_obs`` the turn's state_key (or observation text), each distinct one as a small int
  (the reference's ``to_hashable`` takes no arbitrary objects; equality is all it uses).

Batches: (1) "walk": 8 groups x 8 trajectories x 5-50 turns of benchmarks/conformance/credit_vs_reference.py's
synthetic random walk over 30 states (deep contexts are rarely shared); (2) "few-states": 6 groups x 8 x
3-20 turns walking over 3 states, so contexts of every depth are shared, 10% format-invalid turns, wins at
any length, plus an all-failed group and a task with a single one-turn episode; (3) "alfworld-sim":
recorded from alfworld-sim with a noisy expert (benchmarks/perf/credit_speed.py's recorder), compared with
state_key anchors and with observation-text anchors. Each is run in 6 settings (mode x base_group at
history_length 2, and two at history_length 4 with alpha 0.5). Our side is the float64 per-row value before
the float32 token broadcast; the reference's is its output at each row's first token.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import sys
import types
from pathlib import Path

import numpy as np

from benchmarks.conformance.credit_vs_reference import synthetic_batch
from benchmarks.conformance.reference_files import PinnedFiles, setting_label, side_by_side
from benchmarks.perf.credit_speed import record_batch
from prover.config import TrainConfig
from prover.credit.base import CreditContext
from prover.credit.hgpo import HGPOConfig, hgpo_row_advantages
from prover.types import Batch, Group, Trajectory, Turn

REF_REPO, REF_COMMIT = "OliverLeeXZ/SERL", "5a2a85b171c634bfed25687167d1347ca4474dc4"  # as docs/methods/hgpo.md
REF_PATH = "recipe/hgpo/core_hgpo.py"
REFERENCE = PinnedFiles(REF_REPO, REF_COMMIT, {"core_hgpo.py": REF_PATH})
TOLERANCE = 1e-6
SETTINGS = [dict(mode=m, base_group=b) for m in ("mean_std_norm", "mean_norm") for b in (False, True)] + [
    dict(mode="mean_std_norm", base_group=True, history_length=4, length_weight_alpha=0.5),
    dict(mode="mean_norm", base_group=False, history_length=4, length_weight_alpha=0.5)]


def load_reference(file: Path) -> types.ModuleType:
    """Import the file with ``verl`` stubbed and its float32 casts made float64."""
    stub = types.ModuleType("verl")
    stub.DataProto = object
    saved = sys.modules.get("verl")
    sys.modules["verl"] = stub
    try:
        mod = types.ModuleType("_reference_core_hgpo")
        source = file.read_text().replace("float32", "float64")
        exec(compile(source, str(file), "exec"), mod.__dict__)
    finally:
        sys.modules.pop("verl") if saved is None else sys.modules.__setitem__("verl", saved)
    return mod


def walk_batch(seed: int = 7) -> Batch:
    return synthetic_batch(seed, groups=8)


def few_states_batch(seed: int = 3) -> Batch:
    rng, out = random.Random(seed), []
    for g in range(6):
        trajs = []
        for i in range(8):
            n, won, state = rng.randint(3, 20), rng.random() < 0.45, 0
            tr = Trajectory(f"{g}#{i}", f"task{g}", "", won=won)
            for t in range(n):
                k = rng.randint(1, 4)
                tr.turns.append(Turn(prompt_ids=[1], completion_ids=[2] * k, logprobs=[-1.0] * k,
                                     observation=f"room {state}", completion_text="", action="a",
                                     format_valid=rng.random() >= 0.1, action_valid=True,
                                     reward=1.0 if won and t == n - 1 else 0.0, state_key=("s", g, state)))
                state = rng.randrange(3)
            trajs.append(tr)
        out.append(Group(f"task{g}", trajs))
    failed = [Trajectory(f"f#{i}", "failed", "", won=False, turns=[
        Turn([1], [2, 2], [-1.0, -1.0], f"o{t % 2}", "", "a", True, True, 0.0, t % 2) for t in range(4)])
        for i in range(4)]
    single = Trajectory("one#0", "single", "", won=True,
                        turns=[Turn([1], [2], [-1.0], "o", "", "a", True, True, 1.0, "x")])
    return Batch([*out, Group("failed", failed), Group("single", [single])])


def alfworld_batch() -> Batch:
    return record_batch(6, 8, 30, noise=0.6)


def reference_rows(ref: types.ModuleType, batch: Batch, cfg: TrainConfig, hgpo: HGPOConfig) -> np.ndarray:
    """The reference's advantage at each row's first token, from inputs built as SERL's trainer builds them."""
    import torch

    reward = cfg.reward
    rows = [(g, k, t) for g in batch.groups for k, tr in enumerate(g.trajectories) for t in tr.turns]
    traj_of = {id(tr): n for n, tr in enumerate(tr for g in batch.groups for tr in g.trajectories)}
    traj_index = np.array([traj_of[id(tr)] for g in batch.groups for tr in g.trajectories for _ in tr.turns])
    width = max(t.n_tokens for _, _, t in rows)
    mask, scores = np.zeros((len(rows), width)), np.zeros((len(rows), width))
    invalid = np.array([not t.format_valid for _, _, t in rows], dtype=np.float64)
    for r, (g, k, t) in enumerate(rows):
        mask[r, :t.n_tokens] = 1.0
        scores[r, t.n_tokens - 1] = reward.scale * g.trajectories[k].env_return - reward.invalid_penalty * invalid[r]
    stand_in = types.SimpleNamespace(batch={"input_ids": torch.zeros(1)}, non_tensor_batch={
        "rewards": np.array([reward.scale * t.reward for _, _, t in rows]), "traj_uid": traj_index,
        "active_masks": np.ones(len(rows))})
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its name on every call
        step_rewards = ref.compute_step_discounted_returns(stand_in, gamma=hgpo.gamma)
    step_rewards = step_rewards - reward.invalid_penalty * torch.from_numpy(invalid)
    ids: dict = {}
    anchors = np.array([ids.setdefault(getattr(t, hgpo.anchor), len(ids)) for _, _, t in rows], dtype=object)
    out, _ = ref.compute_hgpo_outcome_advantage(
        token_level_rewards=torch.tensor(scores), step_rewards=step_rewards, response_mask=torch.tensor(mask),
        anchor_obs=anchors, index=np.array([g.task_id for g, _, _ in rows], dtype=object), traj_index=traj_index,
        history_length=hgpo.history_length, epsilon=hgpo.eps, mode=hgpo.mode,
        length_weight_alpha=hgpo.length_weight_alpha, base_group=hgpo.base_group)
    return out[:, 0].numpy()


def compare(ref: types.ModuleType, name: str, batch: Batch, anchor: str) -> float:
    ctx, worst = CreditContext(TrainConfig()), 0.0
    for setting in SETTINGS:
        hgpo = HGPOConfig(anchor=anchor, **setting)
        ours, diff, ours_ms, ref_ms = side_by_side(lambda c=hgpo: hgpo_row_advantages(batch, ctx, c),
                                                   lambda c=hgpo: reference_rows(ref, batch, ctx.config, c))
        worst = max(worst, float(diff.max()))
        print(f"| {name} | {anchor} | {setting_label(setting)} | {len(ours)} | {diff.max():.1e} | "
              f"{int((diff > TOLERANCE).sum())} | {int((diff == 0).sum())} | {ours_ms:.0f} / {ref_ms:.0f} |")
    return worst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    REFERENCE.add_arguments(ap, "SERL checkout or git directory, or a folder with core_hgpo.py")
    args = ap.parse_args()
    folder = REFERENCE.found(args)
    if folder is None:
        return 2
    file = folder / "core_hgpo.py"
    ref = load_reference(file)
    print(f"reference: {REF_REPO}@{REF_COMMIT[:12]}:{REF_PATH} ({file}), float32 casts made float64\n")
    print("| batch | anchor | setting | rows | max abs diff | rows > 1e-6 | rows equal | ours / ref ms |")
    print("|---|---|---|---|---|---|---|---|")
    worst = {}
    for name, batch, anchors in [("walk", walk_batch(), ["state_key"]),
                                 ("few-states", few_states_batch(), ["state_key", "observation"]),
                                 ("alfworld-sim", alfworld_batch(), ["state_key", "observation"])]:
        worst[name] = max(compare(ref, name, batch, a) for a in anchors)
    print("\nmax abs difference per batch: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))
    ok = all(v <= TOLERANCE for v in worst.values())
    print(f"within {TOLERANCE:g}: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
