"""The starting policy's held-out evaluation, kept by what decides it, so a run that starts from the same
policy with the same settings reads it instead of sampling it again (``eval.cache_dir``).

Why: every method of a bench seed starts from one shared warm start and evaluates it at step 0 with the
same sampling seed (``eval_seed``), so a matrix of M methods sampled the same episodes M times for the same
number; in a 12-step pivot-sim cell that evaluation is a sixth of the cell's CPU time (docs/perf.md). The
bench sets ``eval.cache_dir`` for cells that start from a shared warm start (``prover.bench.runner``).

The key is the digest of the policy folder's files (``prover.policy.folder_digest``) and every setting that
reaches an evaluation: the seed, the torch threads it runs on (rounding), the env, ``eval`` (all but ``every`` and
``cache_dir``), ``rollout`` (all but how training batches are sized and scheduled), ``engine``, and the
model's dtype and chat-template arguments. What is not in it:

1. the code: as with a finished bench cell, an evaluation is not redone because the code changed (empty
   the folder to redo them);
2. which credit method, judge or learner the run uses: nothing of them runs before the step-0 evaluation,
   and it leaves no random state behind that training reads (every rollout and chunk seeds its own draws;
   ``tests/test_eval_cache.py`` checks that training after a read and after a sampled evaluation match).

Only the step-0 evaluation of a fresh run in one process is kept (later ones measure a trained policy, and
with several processes each would have to agree on a read before the collective evaluation).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from prover.config import TrainConfig, engine_dtype
from prover.policy import DIGESTS_FILE, folder_digest
from prover.system.files import write_atomic

# rollout settings that size and schedule training batches; an evaluation plays one episode per task
NOT_EVAL_ROLLOUT = ("groups_per_step", "group_size", "max_off_policy_steps", "max_env_error_share")


def eval_key(cfg: TrainConfig, policy_dir: Path, digests: Path) -> str:
    """What decides the evaluation of ``policy_dir`` under ``cfg``, hashed (``digests``: where the folder's
    content digest is cached)."""
    import torch  # torch is heavy: only a run's evaluation needs it

    tree = cfg.model_dump(mode="json")
    settings = {
        "policy": folder_digest(policy_dir, digests), "seed": cfg.seed, "threads": torch.get_num_threads(),
        "env": tree["env"], "engine": tree["engine"],
        "eval": {k: v for k, v in tree["eval"].items() if k not in ("every", "cache_dir")},
        "rollout": {k: v for k, v in tree["rollout"].items() if k not in NOT_EVAL_ROLLOUT},
        "model": {"dtype": engine_dtype(cfg.model), "chat_template_kwargs": tree["model"]["chat_template_kwargs"]},
    }
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


class EvalCache:
    """One evaluation's entry: ``<eval.cache_dir>/eval-<key>.json``, the metrics record it logged."""

    def __init__(self, cfg: TrainConfig, policy_dir: Path, folder: Path) -> None:
        self.path = folder / f"eval-{eval_key(cfg, policy_dir, folder / DIGESTS_FILE)}.json"

    @classmethod
    def of(cls, cfg: TrainConfig, policy_dir: Path | None, world: int) -> EvalCache | None:
        """The entry for a fresh run's step-0 evaluation, or None when none is kept (see the module)."""
        if not cfg.eval.cache_dir or policy_dir is None or world != 1:
            return None
        try:  # the policy's digest is cached in the folder too
            return cls(cfg, policy_dir, Path(cfg.eval.cache_dir).expanduser())
        except OSError:  # written to since preflight checked it (a full disk): sample, as with no cache
            return None

    def read(self) -> dict[str, Any] | None:
        """The kept record, marked ``eval/cached``; None when there is none or it cannot be read (a torn or
        foreign file is sampled again and overwritten, never trusted)."""
        try:
            record = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or not isinstance(record.get("eval/success"), float):
            return None
        return {**record, "step": 0, "eval/cached": 1.0}

    def write(self, record: dict[str, Any]) -> str | None:
        """Keep ``record``; a folder that cannot be written costs the next run a sampled evaluation, not this
        run: the reason comes back as one line instead of an error."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, json.dumps(record, sort_keys=True))
        except OSError as exc:
            return f"eval.cache_dir: the evaluation was not kept in {str(self.path.parent)!r} ({exc.strerror or exc})"
        return None
