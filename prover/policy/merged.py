"""The policy a LoRA checkpoint stands for, as a whole Hugging Face folder: its base (``prepare_policy``)
with the adapter merged in, for ``prover eval``, which scores whole folders. It builds a policy, so it lives
with the policy's other builders; ``prover.learning.lora`` keeps the adapter arithmetic and imports no builder."""

from __future__ import annotations

import hashlib
from pathlib import Path

from prover.config import TrainConfig
from prover.envs import make_configured_env
from prover.learning.learner import Learner
from prover.learning.lora import check_base
from prover.policy import build_once, prepare_policy
from prover.progress import Reporter
from prover.rundir.run import RunDir


def merged_policy(cfg: TrainConfig, adapter: Path, report: Reporter) -> Path:
    """A Hugging Face folder of the policy an adapter checkpoint stands for (its base with the adapter
    merged), for ``prover eval``; built once per adapter file in ``<run.dir>/models``."""
    run = RunDir(cfg)
    base = prepare_policy(cfg, run, lambda: make_configured_env(cfg.env), report)
    check_base(adapter, base)
    with open(adapter / "adapter_model.safetensors", "rb") as f:
        key = hashlib.file_digest(f, "sha256").hexdigest()[:10]

    def build(out: Path) -> None:  # rank and alpha come from the adapter's own config
        lora = cfg.model.lora.model_copy(update={"enabled": True})
        Learner(base, cfg.learner, dtype=cfg.model.dtype, lora=lora, adapter=adapter).save_pretrained(out)
    return build_once(run.model_dir(f"merged-{base.name}-{key}"), build)
