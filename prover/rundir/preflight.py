"""Checks that can fail, run before a run folder is touched: a run that cannot start never costs an old one.

The config's names and field types are checked when it loads (prover/config_load.py). What needs the parts
themselves is checked here, by building them once and throwing them away:

- the run folder is a folder this process may write (or can be made);
- the env, with its ``env.kwargs``, is a TextEnv and resets on the train split and on ``eval.split``, and
  passes the contract checks that a run would otherwise fail silently: instances stepped in lockstep, and
  snapshots for a credit method that branches (``prover.envs.train_checks``, once per process per env);
- the agent's prompt templates render (every placeholder known);
- a model folder (``model.path`` other than ``tiny``) is a folder with a config, weights whose header
  reads, and a tokenizer with a chat template;
- with ``model.lora`` on, peft imports and the adapters' target layers exist in the policy's architecture;
- a judge the credit method will call is built, and has the credentials it needs;
- each experiment tracker of ``run.report_to`` has its library installed.

Each failure is a one-line ProverError naming the problem.
"""

from __future__ import annotations

import os
from pathlib import Path

from prover.config import TrainConfig
from prover.errors import CheckpointError, ConfigError, ContractError, ProverError, RunFolderError
from prover.learning.lora import check_lora
from prover.learning.modeling import check_model_dir
from prover.registry import CREDIT
from prover.rundir.trackers import check_trackers

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def preflight(cfg: TrainConfig, resume: bool = False) -> None:
    """Every check below, in the order a run would meet the parts."""
    check_run_folder(Path(cfg.run.dir))
    if cfg.eval.cache_dir:
        check_run_folder(Path(cfg.eval.cache_dir).expanduser(), "eval.cache_dir")
    check_env(cfg)
    # a resumed run starts from its own checkpoint, unless that holds a LoRA adapter alone
    if cfg.model.path != "tiny" and (not resume or cfg.model.lora.enabled):
        check_model_folder(Path(cfg.model.path))
    check_lora(cfg)  # model.lora: peft imports, its target layers exist
    check_judge(cfg)
    check_trackers(cfg)  # run.report_to: each tracker's library imports


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


def check_env(cfg: TrainConfig) -> None:
    # lazy: the env machinery (gymnasium, numpy) loads only when a run is checked
    from prover.envs import make_configured_env
    from prover.episodes.turn_prompts import agent_spec_for

    env = make_configured_env(cfg.env)
    try:
        for split in dict.fromkeys(["train", cfg.eval.split]):
            try:
                obs, info = env.reset(seed=0, options={"split": split})
            except (ValueError, KeyError) as exc:
                raise ConfigError(f"env {cfg.env.name!r} cannot reset on split {split!r}: {exc}") from exc
            if not isinstance(obs, str) or not isinstance(info, dict):
                raise ContractError(f"env {cfg.env.name!r} reset gave {type(obs).__name__} and "
                                    f"{type(info).__name__}, not text and a dict")
        spec = agent_spec_for(env, cfg.rollout.history_window)
        try:
            spec.render("task", obs, list(info.get("admissible_actions") or []), [("o", "a")] * 3, 3)
            spec.render("task", obs, [], [], 0)
        except (KeyError, IndexError, ValueError) as exc:
            raise ContractError(f"env {cfg.env.name!r}: its prompt template has an unknown placeholder {exc}; "
                                "templates may use task, observation, actions, history, step, n_history") from exc
        env_class = type(env)
    finally:
        env.close()
    check_env_contract(cfg, env_class)


def check_env_contract(cfg: TrainConfig, env_class: type) -> None:
    """The lockstep and (for a method that branches) snapshot checks of ``prover check-env``, on two fresh
    instances, unless this process passed them for the same env class and settings."""
    # as in check_env: the env machinery (gymnasium, numpy) loads only when a run is checked
    from prover.envs import make_configured_env
    from prover.envs.train_checks import check_for_training, check_key

    branches = bool(getattr(CREDIT.get(cfg.credit.name), "needs_snapshots", False))
    key = check_key(env_class, cfg.env.kwargs, cfg.env.isolate_global_rng, branches)
    check_for_training(cfg.env.name, lambda: make_configured_env(cfg.env), key, branches,
                       cfg.rollout.max_turns)


def check_model_folder(path: Path) -> None:
    check_model_dir(path)  # a folder with a config.json
    weights = [path / w for w in WEIGHT_FILES if (path / w).is_file()]
    if not weights:
        raise CheckpointError(f"model.path {str(path)!r} has no weights ({', '.join(WEIGHT_FILES)})")
    if weights[0].name == "model.safetensors":
        try:
            from safetensors import safe_open  # lazy: only a safetensors file is opened

            with safe_open(str(weights[0]), framework="np") as f:
                f.keys()
        except Exception as exc:  # a truncated or foreign file
            raise CheckpointError(f"weights {str(weights[0])!r} are unreadable: {str(exc).splitlines()[0]}") from exc
    check_chat_template(path)


def check_chat_template(path: Path) -> None:
    from transformers import AutoTokenizer  # lazy: transformers loads torch; only a model folder's check needs it

    try:
        tok = AutoTokenizer.from_pretrained(str(path))
    except Exception as exc:
        raise CheckpointError(f"tokenizer in {str(path)!r} does not load: {str(exc).splitlines()[0]}") from exc
    if not getattr(tok, "chat_template", None):
        raise CheckpointError(f"tokenizer in {str(path)!r} has no chat template; prover builds every prompt with "
                              "it (set tokenizer.chat_template, e.g. from the instruct model it came from)")


def check_judge(cfg: TrainConfig) -> None:
    """A judge the method may call is built now, so a missing key or model fails before any work."""
    if cfg.judge.name is None or not uses_judge(cfg):
        return
    from prover.judges import make_judge  # lazy: the judge contract loads numpy; only a judged run needs it

    judge = make_judge(cfg)
    try:
        judge.check_ready()
    finally:
        judge.close()


def uses_judge(cfg: TrainConfig) -> bool:
    """Whether the credit method refuses to run without a judge (ProVer), i.e. will call one."""
    bare = cfg.model_copy(deep=True)
    bare.judge = bare.judge.model_copy(update={"name": None})
    try:
        CREDIT.get(cfg.credit.name).validate_config(bare)
    except ProverError:
        return True
    return False
