"""Checks that can fail, run before a run folder is touched: a run that cannot start never costs an old one.

The config's names and field types are checked when it loads (prover/config_load.py). What needs the parts
themselves is checked here, by building them once and throwing them away:

- the run folder is a folder this process may write (or can be made);
- each experiment tracker of ``run.report_to`` has its library installed;
- a judge the credit method will call is built, and has the credentials it needs;
- the env, with its ``env.kwargs``, is a TextEnv and resets on the train split and on ``eval.split``, its
  prompt templates render (every placeholder known), and it passes the contract checks that a run would
  otherwise fail silently: instances stepped in lockstep, and snapshots for a credit method that branches
  (``prover.envs.train_checks``, once per process per env);
- a model folder (``model.path`` other than ``tiny``) is a folder with a config, weights whose header
  reads, and a tokenizer with a chat template (``prover.learning.model_folder``), kept as the run's
  ``ModelSpec``;
- with ``model.lora`` on, peft imports and the adapters' target layers exist in the policy's architecture.

Each failure is a one-line ProverError naming the problem. ``preflight`` returns the ``ModelSpec``: the trainer
passes it on instead of reading ``model.path`` again.
"""

from __future__ import annotations

import os
from pathlib import Path

from prover.config import TrainConfig
from prover.envs.train_checks import check_run_env
from prover.errors import ProverError, RunFolderError
from prover.judges import check_judge_ready
from prover.learning.lora import check_lora
from prover.learning.model_folder import ModelSpec, model_spec
from prover.registry import CREDIT
from prover.rundir.trackers import check_trackers
from prover.system.environment import native_bfloat16


def preflight(cfg: TrainConfig, resume: bool = False) -> ModelSpec:
    """Every check below, the quick ones first (a typo in a tracker's or judge's name costs no env episode
    and no tokenizer load); returns the model's spec."""
    check_run_folder(Path(cfg.run.dir))
    if cfg.eval.cache_dir:
        check_run_folder(Path(cfg.eval.cache_dir).expanduser(), "eval.cache_dir")
    judged = cfg.judge.name is not None and uses_judge(cfg)
    branches = bool(getattr(CREDIT.get(cfg.credit.name), "needs_snapshots", False))
    check_trackers(cfg)  # run.report_to: each tracker's library imports
    if judged:  # built now, so a missing key or model fails before any work
        check_judge_ready(cfg)
    check_run_env(cfg.env, ["train", cfg.eval.split], cfg.rollout.max_turns, branches)
    # a resumed run starts from its own checkpoint, unless that holds a LoRA adapter alone
    model = model_spec(cfg.model, whole_folder=not resume or cfg.model.lora.enabled)
    check_lora(cfg)  # model.lora: peft imports, its target layers exist
    return model


def precision_note(cfg: TrainConfig, on_gpu: bool, flags: dict[str, bool] | None) -> str | None:
    """A note, not a refusal, when a run asks a CPU without bfloat16 instructions for bfloat16: the run works,
    several times slower than in float32. ``flags``: ``prover.system.environment.cpu()["flags"]``."""
    asked = [setting for setting, on in (("model.dtype=bfloat16", cfg.model.dtype == "bfloat16"),
                                         ("model.engine_dtype=bfloat16", cfg.model.engine_dtype == "bfloat16"),
                                         ("learner.autocast=bfloat16", cfg.learner.autocast == "bfloat16")) if on]
    if not asked or on_gpu or native_bfloat16(flags) is not False:
        return None
    return (f"{', '.join(asked)} on a CPU without AVX512-BF16 or AMX: torch converts bfloat16 in software here, "
            "so its products run several times slower than float32's (docs/perf.md); float32 is faster on this CPU")


def check_run_folder(path: Path, setting: str = "run.dir") -> None:
    """The run folder (or another folder the run writes, named by ``setting``) is a folder this process can
    write, or can be made in one."""
    if path.exists() and not path.is_dir():
        raise RunFolderError(f"{setting} {str(path)!r} is a file, not a folder")
    existing = next(p for p in (path, *path.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise RunFolderError(f"{setting} {str(path)!r} cannot be made: {str(existing)!r} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "is read-only" if existing == path else f"is under the read-only folder {str(existing)!r}"
        raise RunFolderError(f"{setting} {str(path)!r} {what}")


def uses_judge(cfg: TrainConfig) -> bool:
    """Whether the credit method refuses to run without a judge (ProVer), i.e. will call one."""
    bare = cfg.model_copy(deep=True)
    bare.judge = bare.judge.model_copy(update={"name": None})
    try:
        CREDIT.get(cfg.credit.name).validate_config(bare)
    except ProverError:
        return True
    return False
