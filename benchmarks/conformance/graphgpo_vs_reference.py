"""Our GraphGPO advantages against the reference's ``compute_graphgpo_outcome_advantage``, in float64, on three batches.

    python -m benchmarks.conformance.graphgpo_vs_reference [--reference PATH] [--no-fetch]

The reference is ``recipe/GraphGPO/core_graph.py`` (with the ``gigpo/core_gigpo.py`` it imports) of
``zzj1111/alfworldauto``, a verl-agent fork holding the GraphGPO recipe, at the pinned commit below (the
commit that adds the recipe; both files are unchanged at the fork's head, 37aec781da7f). It is never
committed here: ``--reference PATH`` names a checkout, a folder holding both files, or a git directory (e.g.
a bare mirror) that has the pinned commit; otherwise the files are fetched into
``~/.cache/prover/reference/alfworldauto-<commit>`` (``PROVER_CACHE`` moves it). Without them (offline,
``--no-fetch``) the script prints the commands that get them and stops.

How the reference is run:
- ``verl`` is a stub module (the files use only the name ``verl.DataProto``), and so are ``networkx`` and
  ``matplotlib`` (imported at the top, used only by the plotting functions, which are not called);
- its float32 casts are made float64 on load (the text ``float32`` becomes ``float64``); nothing else changes;
- its inputs are built as its rollout loop and trainer build them, on a stand-in batch: ``anchor_obs`` is
  the turn's state_key (each distinct one a small int) or its observation text; ``next_obs`` is the next
  turn's anchor, and for an episode's last turn ``'success'`` where the episode scored (> 0), else a random
  hex string of its own (prover keeps no observation after the last action: our departure 2); the graphs
  come from ``ComplexGraph.from_data`` and ``Calculate_all_shortest_path``, the step returns from
  ``compute_graph_path_returns``; the invalid-format penalty is then subtracted from the step returns and
  from the score at each row's last token (``apply_invalid_action_penalty``); ``index`` is the group.

Batches (from benchmarks/conformance/hgpo_vs_reference.py): (1) "walk": 8 groups x 8 trajectories x 5-50 turns of a
random walk over 30 states; (2) "few-states": 6 groups x 8 x 3-20 turns over 3 states, 10% format-invalid
turns, an all-failed group and a task with a single one-turn episode; (3) "alfworld-sim": recorded with a
noisy expert, compared with state_key and with observation anchors (these also with similarity merging).
Each runs in several settings. Our side is the float64 per-row value before the float32 token broadcast;
the reference's is its output at each row's first token. Rows of a one-row task are reported apart: there
the reference divides the episode score by 1 + eps rounded to float32 (our departure 5).
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

from benchmarks.conformance.hgpo_vs_reference import alfworld_batch, few_states_batch, walk_batch
from benchmarks.conformance.reference_files import PinnedFiles, setting_label, side_by_side
from prover.config import TrainConfig
from prover.credit.base import CreditContext
from prover.credit.graphgpo import GraphGPOConfig, graphgpo_row_advantages
from prover.types import Batch

REF_REPO, REF_COMMIT = "zzj1111/alfworldauto", "234a913609ef820de826f2276b7b912e4b8b8410"  # docs/methods/graphgpo.md
REF_FILES = {"core_graph.py": "recipe/GraphGPO/core_graph.py", "core_gigpo.py": "gigpo/core_gigpo.py"}
REFERENCE = PinnedFiles(REF_REPO, REF_COMMIT, REF_FILES)
TOLERANCE = 1e-6
SETTINGS = [dict(), dict(normalize_distance=True), dict(mode="mean_norm"),
            dict(mode="mean_norm", normalize_distance=True, episode_advantage_w=0.0),
            dict(gamma=0.5, step_advantage_w=0.5, episode_advantage_w=2.0)]
SIMILAR = [dict(similarity_thresh=0.9), dict(similarity_thresh=0.9, normalize_distance=True)]


class _Anything(types.ModuleType):
    """A stub module whose every attribute is a stand-in (the plotting imports are never used)."""

    def __getattr__(self, name: str):
        return object


def load_reference(folder: Path) -> types.ModuleType:
    """Import core_graph.py (and the core_gigpo.py it imports) with verl, networkx and matplotlib stubbed
    and the float32 casts made float64."""
    stubs = {name: _Anything(name) for name in ("verl", "networkx", "matplotlib", "matplotlib.pyplot",
                                                "matplotlib.patches", "matplotlib.cm", "matplotlib.colors")}
    stubs["gigpo"] = types.ModuleType("gigpo")
    saved = {name: sys.modules.get(name) for name in [*stubs, "gigpo.core_gigpo"]}
    sys.modules.update(stubs)
    try:
        gigpo = _exec(folder / "core_gigpo.py", "gigpo.core_gigpo")
        stubs["gigpo"].core_gigpo = gigpo
        sys.modules["gigpo.core_gigpo"] = gigpo
        return _exec(folder / "core_graph.py", "_reference_core_graph")
    finally:
        for name, mod in saved.items():
            sys.modules.pop(name) if mod is None else sys.modules.__setitem__(name, mod)


def _exec(file: Path, name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    exec(compile(file.read_text().replace("float32", "float64"), str(file), "exec"), mod.__dict__)
    return mod


def reference_rows(ref: types.ModuleType, batch: Batch, cfg: TrainConfig, ours: GraphGPOConfig) -> np.ndarray:
    """The reference's advantage at each row's first token, from inputs built as its rollout loop and trainer
    build them."""
    import torch

    reward, rng = cfg.reward, random.Random(0)
    trajs = [(n, tr) for n, tr in enumerate(tr for g in batch.groups for tr in g.trajectories)]
    group_of = [k for k, g in enumerate(batch.groups) for _ in g.trajectories]
    ids: dict = {}
    anchor, nxt, uid, traj_uid, valid, score, n_tok = [], [], [], [], [], [], []
    for n, tr in trajs:
        keys = [getattr(t, ours.anchor) for t in tr.turns]
        keys = [k if ours.anchor == "observation" else ids.setdefault(k, len(ids)) for k in keys]
        end = "success" if reward.scale * tr.env_return > 0 else f"{rng.getrandbits(128):032x}"
        anchor += keys
        nxt += [*keys[1:], end][:len(keys)]
        uid += [f"g{group_of[n]}"] * len(keys)
        traj_uid += [f"t{n}"] * len(keys)
        valid += [t.format_valid for t in tr.turns]
        score += [reward.scale * tr.env_return] * len(keys)
        n_tok += [t.n_tokens for t in tr.turns]
    obj = lambda xs: np.array(xs + [None], dtype=object)[:-1]  # noqa: E731 (object arrays, even of tuples)
    invalid = 1.0 - np.array(valid, dtype=np.float64)
    stand_in = types.SimpleNamespace(batch={"input_ids": torch.zeros(1)}, non_tensor_batch={
        "uid": obj(uid), "traj_uid": obj(traj_uid), "anchor_obs": obj(anchor), "next_obs": obj(nxt),
        "text_actions": obj(["a"] * len(uid)), "episode_rewards": np.array(score), "rewards": np.zeros(len(uid)),
        "active_masks": np.ones(len(uid)), "is_action_valid": np.array(valid)})
    thresh = ours.similarity_thresh if ours.anchor == "observation" else None
    with contextlib.redirect_stdout(io.StringIO()):  # it prints group sizes on every call
        graphs = ref.ComplexGraph.from_data(stand_in, enable_similarity=thresh is not None,
                                            similarity_thresh=thresh or 0.95)
        ref.ComplexGraph.Calculate_all_shortest_path(graphs)
        step = ref.compute_graph_path_returns(stand_in, graphs, gamma=ours.gamma,
                                              normalize_distance=ours.normalize_distance)
        step = step - reward.invalid_penalty * torch.from_numpy(invalid)
        mask, scores = np.zeros((len(uid), max(n_tok))), np.zeros((len(uid), max(n_tok)))
        for r, k in enumerate(n_tok):
            mask[r, :k] = 1.0
            scores[r, k - 1] = score[r] - reward.invalid_penalty * invalid[r]
        out, _ = ref.compute_graphgpo_outcome_advantage(
            token_level_rewards=torch.tensor(scores), step_rewards=step, response_mask=torch.tensor(mask),
            anchor_obs=obj(anchor), index=obj(uid), traj_index=obj(traj_uid), epsilon=ours.eps,
            step_advantage_w=ours.step_advantage_w, episode_advantage_w=ours.episode_advantage_w, mode=ours.mode)
    return out[:, 0].numpy()


def compare(ref: types.ModuleType, name: str, batch: Batch, anchor: str) -> tuple[float, float]:
    """Max abs difference over the rows of tasks with two rows or more, and over one-row tasks."""
    ctx, worst, worst_single = CreditContext(TrainConfig()), 0.0, 0.0
    sizes = [sum(len(tr.turns) for tr in g.trajectories) for g in batch.groups]
    single = np.repeat(np.array(sizes) == 1, sizes)
    for setting in SETTINGS + (SIMILAR if anchor == "observation" else []):
        cfg = GraphGPOConfig(anchor=anchor, **setting)
        ours, diff, ours_ms, ref_ms = side_by_side(lambda c=cfg: graphgpo_row_advantages(batch, ctx, c),
                                                   lambda c=cfg: reference_rows(ref, batch, ctx.config, c))
        main, lone = float(diff[~single].max(initial=0.0)), float(diff[single].max(initial=0.0))
        worst, worst_single = max(worst, main), max(worst_single, lone)
        print(f"| {name} | {anchor} | {setting_label(setting, 'reference defaults')} | {len(ours)} | {main:.1e} | "
              f"{lone:.1e} | {int((diff > TOLERANCE).sum())} | {int((diff == 0).sum())} | {ours_ms:.0f} / "
              f"{ref_ms:.0f} |")
    return worst, worst_single


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    REFERENCE.add_arguments(ap, "alfworldauto checkout or git directory, or a folder with core_graph.py and "
                            "core_gigpo.py")
    args = ap.parse_args()
    folder = REFERENCE.found(args)
    if folder is None:
        return 2
    ref = load_reference(folder)
    print(f"reference: {REF_REPO}@{REF_COMMIT[:12]}:{REF_FILES['core_graph.py']} ({folder}), float32 made float64\n")
    print("| batch | anchor | setting | rows | max abs diff | one-row tasks | rows > 1e-6 | rows equal "
          "| ours / ref ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    worst = {}
    for name, batch, anchors in [("walk", walk_batch(), ["state_key", "observation"]),
                                 ("few-states", few_states_batch(), ["state_key", "observation"]),
                                 ("alfworld-sim", alfworld_batch(), ["state_key", "observation"])]:
        results = [compare(ref, name, batch, a) for a in anchors]
        worst[name] = (max(r[0] for r in results), max(r[1] for r in results))
    print("\nmax abs difference per batch (one-row tasks apart): "
          + ", ".join(f"{k} {v:.1e} ({s:.1e})" for k, (v, s) in worst.items()))
    ok = all(v <= TOLERANCE for v, _ in worst.values())
    print(f"within {TOLERANCE:g} (one-row tasks apart): {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
