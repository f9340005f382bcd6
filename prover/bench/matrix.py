"""The cells a bench matrix plans (the matrix config itself is in ``config.py``).

A method is named ``credit`` or ``credit+judge`` (``grpo``, ``spo-tree``, ``prover+contrast``,
``prover+litellm``). Every name is resolved, and every cell's config validated, before any work
starts: an unknown name is a one-line ConfigError naming it. A method that needs a model the user has
not configured (an API judge or critic without its model or key, a local one without its folder) is
skipped with a note instead.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from prover.bench.config import BenchConfig, MethodSpec, load_bench_config  # noqa: F401  (the matrix's API)
from prover.config import TrainConfig, warmstart_lr
from prover.config_load import config_from_tree
from prover.errors import ConfigError, ProverError
from prover.registry import CREDIT, ENVS, JUDGES

RESERVED = ("steps", "seed", "env.name", "credit.name", "judge.name", "run.dir")  # set by the matrix itself


@dataclass
class Cell:
    """One run of the matrix: a method on an env with a seed."""

    env: str
    method: MethodSpec
    seed: int
    dir: Path
    config: TrainConfig = field(repr=False)  # validated; run.dir is the cell's folder
    key: str = ""  # hash of the settings; a cell finished under other settings is rerun
    budget_ref: Path | None = None  # the paired cell whose generated tokens this one matches

    @property
    def name(self) -> str:
        return f"{self.env} · {self.method.row} · seed {self.seed}"


@dataclass
class Plan:
    bench: BenchConfig
    cells: list[Cell]
    skipped: list[str]  # one note per skipped method (and why)
    budget_refs: dict[str, str] = field(default_factory=dict)  # budget-matched row -> the row it matches


# -- settings trees --------------------------------------------------------------------------------

def expand(settings: dict[str, Any], where: str) -> dict[str, Any]:
    """Dotted keys to nested sections: {"a.b": 1, "c": {"d.e": 2}} -> {"a": {"b": 1}, "c": {"d": {"e": 2}}}
    (a key given twice, dotted and as a section, is merged)."""
    tree: dict[str, Any] = {}
    for key, value in settings.items():
        if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
            raise ConfigError(f"{where}: {key!r} is not a setting name (section.field)")
        node = tree
        *parents, last = key.split(".")
        for k in parents:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{where}: {key!r}: {k!r} is a value, not a section")
        value = expand(value, f"{where}.{key}") if isinstance(value, dict) else value
        node[last] = merge(node.get(last), value)
    return tree


def merge(base: Any, top: Any) -> Any:
    """``top`` over ``base``, section by section."""
    if isinstance(base, dict) and isinstance(top, dict):
        out = dict(base)
        for k, v in top.items():
            out[k] = merge(out.get(k), v)
        return out
    return copy.deepcopy(top)


def _get(tree: dict, dotted: str) -> Any:
    for k in dotted.split("."):
        if not isinstance(tree, dict) or k not in tree:
            return None
        tree = tree[k]
    return tree


# -- models a method needs -------------------------------------------------------------------------

def _litellm_gap(section: dict, where: str) -> str | None:
    """Why a LiteLLM model of this section cannot be reached, or None."""
    model = section.get("model")
    if not model:
        return f"{where}.model is not set (an API model runs only when the matrix names it)"
    if section.get("api_base"):
        return None  # a local OpenAI-compatible server takes no key
    key_env = section.get("api_key_env")
    if key_env:
        if os.environ.get(key_env):
            return None
        return f"environment variable {key_env!r} ({where}.api_key_env) is unset"
    if {"mock_response", "mock_tool_calls"} & set(section.get("litellm_kwargs") or {}):
        return None
    try:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of the remote price map
        import litellm  # an optional extra, and slow to import
    except ImportError:
        return "litellm is not installed (pip install 'prover-rl[litellm]')"
    missing = litellm.validate_environment(model=model).get("missing_keys") or []
    return f"model {model!r} needs the environment variable(s) {missing}" if missing else None


def _local_gap(section: dict, where: str) -> str | None:
    path = section.get("model_path")
    if not path:
        return f"{where}.model_path is not set"
    from prover.chat import expand_path  # lazy: the chat package loads http and ssl

    return None if Path(expand_path(path)).is_dir() else f"{where}.model_path {path!r} is not a folder"


def missing_setup(tree: dict) -> str | None:
    """Why a cell's method cannot run with what the user configured, or None when it can. ``tree`` holds
    the settings as given (a default model name is not a configured one), already validated."""
    judge = tree.get("judge") or {}
    if judge.get("name") == "litellm":
        gap = _litellm_gap(judge, "judge")
        if gap:
            return gap
    if judge.get("name") == "local":
        gap = _local_gap(judge, "judge")
        if gap:
            return gap
    if _get(tree, "credit.name") in ("criticsearch", "triage"):  # a frozen critic that must be configured
        critic = _get(tree, "credit.critic") or {}
        if critic.get("backend", "litellm") == "litellm":
            return _litellm_gap(critic.get("litellm") or {}, "credit.critic.litellm")
        return _local_gap(critic.get("local") or {}, "credit.critic.local")
    return None


# -- planning --------------------------------------------------------------------------------------

def _folder_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]", "_", text)


def settings_hash(cfg: TrainConfig, start: str = "") -> str:
    """The cell's settings without its folder, and where its policy starts: a finished cell is reused only
    under the same ones. Only the settings that differ from their defaults count, so a field added to the
    config with a default that keeps today's behaviour leaves every finished (and archived) cell valid; a
    changed default, like any change of code, does not rerun cells. A default that resolves by the model's
    kind (warmstart.lr) counts as its resolved value, so a cell does not rerun because it became implicit."""
    tree = cfg.model_dump(mode="json", exclude_defaults=True)
    tree.get("run", {}).pop("dir", None)
    tree.pop("threads", None)  # speed, not results
    tree.get("eval", {}).pop("cache_dir", None)  # the same record, read instead of sampled
    tree.setdefault("warmstart", {})["lr"] = warmstart_lr(cfg.warmstart, cfg.model.path)
    tree["bench_start"] = start
    return hashlib.sha256(json.dumps(tree, sort_keys=True).encode()).hexdigest()[:12]


def _check_names(bench: BenchConfig) -> None:
    for env in bench.envs:
        _named(partial(ENVS.get, env), f"envs: {env!r}")
    for k in bench.env_overrides:
        if k not in bench.envs:
            raise ConfigError(f"bench env_overrides: {k!r} is not one of envs {bench.envs}")
    rows = [m.row for m in bench.methods]
    for m in bench.methods:
        if not re.fullmatch(r"[^+\s]+(\+[^+\s]+)?", m.name):
            raise ConfigError(f"bench method {m.name!r}: write 'credit' or 'credit+judge', "
                              "e.g. prover+contrast")
        _named(partial(CREDIT.get, m.credit), f"method {m.name!r}")
        if m.judge is not None:
            _named(partial(JUDGES.get, m.judge), f"method {m.name!r}")
        if rows.count(m.row) > 1:
            raise ConfigError(f"bench method {m.row!r} appears twice; give the variants different labels")
    for row in bench.power.compare if bench.power else ():
        if row not in rows:
            raise ConfigError(f"bench power.compare: {row!r} is not a method (row) of the matrix: {', '.join(rows)}")
    if "baseline" in bench.model_fields_set and bench.baseline not in rows:  # the default may be absent
        raise ConfigError(f"bench baseline {bench.baseline!r} is not a method (row) of the matrix: "
                          f"{', '.join(rows)}")


def _named(resolve: Callable[..., object], where: str) -> None:
    try:
        resolve()
    except ProverError as exc:
        raise type(exc)(f"bench {where}: {exc}") from exc


def plan(bench: BenchConfig) -> Plan:
    """Every cell, its config validated, or a ConfigError naming the first problem. Nothing is written."""
    _check_names(bench)
    common = expand(bench.common, "bench common")
    per_env = {env: expand(bench.env_overrides.get(env, {}), f"bench env_overrides.{env}")
               for env in bench.envs}
    own = {m.row: expand(m.overrides, f"bench method {m.row!r} overrides") for m in bench.methods}
    refs = budget_refs(bench, own)
    cells: list[Cell] = []
    gaps: dict[str, str] = {}  # the first reason each skipped method cannot run
    for env in bench.envs:  # env, then seed, then method: a stopped bench has whole comparisons done
        for seed in bench.seeds:
            for m in ordered(bench.methods, refs):
                folder = cell_folder(bench, env, m.row, seed)
                fixed = {"steps": bench.steps, "seed": seed, "env": {"name": env}, "credit": {"name": m.credit},
                         "judge": {"name": m.judge}, "run": {"dir": str(folder)}}
                tree = merge(merge(common, per_env[env]), own[m.row])
                taken = [k for k in RESERVED if _get(tree, k) is not None]
                if taken:
                    raise ConfigError(f"bench method {m.row!r}, env {env!r}: {taken[0]!r} is set by the "
                                      "matrix itself (its steps, seeds, envs and methods fields, and the "
                                      "cell folders)")
                tree = merge(tree, fixed)
                cfg = _cell_config(tree, f"{env} · {m.row} · seed {seed}")  # types checked before the gaps
                gap = missing_setup(tree)
                if gap:
                    gaps.setdefault(m.row, gap)
                    continue
                if m.judge is not None:
                    _judge_used(cfg, m)
                ref = refs.get(m.row)
                start = _start(bench) + (f"/budget-of/{ref}" if ref else "")
                cells.append(Cell(env, m, seed, folder, cfg, settings_hash(cfg, start),
                                  cell_folder(bench, env, ref, seed) if ref else None))
    skipped = [f"skipped {row!r}: {gap}" for row, gap in gaps.items()]
    skipped += [f"{row!r} matches the generated tokens of {ref!r} (same env and seed, step by step)"
                for row, ref in refs.items()]
    return Plan(bench, cells, skipped, refs)


def cell_folder(bench: BenchConfig, env: str, row: str, seed: int) -> Path:
    return Path(bench.dir) / "cells" / _folder_name(env) / _folder_name(row) / f"seed-{seed}"


def budget_refs(bench: BenchConfig, own: dict[str, dict]) -> dict[str, str]:
    """For each budget-matched method, the row whose tokens it matches: its match_budget_of, or the
    first prover method when it names no budget of its own (schedule, overhead or budget_from)."""
    rows = {m.row: m for m in bench.methods}
    first_prover = next((m.row for m in bench.methods if m.credit == "prover"), None)
    refs = {}
    for m in bench.methods:
        if m.match_budget_of is not None:
            if m.credit != "budget-matched-grpo":
                raise ConfigError(f"bench method {m.row!r}: match_budget_of is for budget-matched-grpo")
            if m.match_budget_of not in rows or m.match_budget_of == m.row:
                raise ConfigError(f"bench method {m.row!r}: match_budget_of {m.match_budget_of!r} is not "
                                  f"another method of the matrix ({', '.join(rows)})")
            refs[m.row] = m.match_budget_of
        elif m.credit == "budget-matched-grpo" and first_prover is not None and not any(
                _get(own[m.row], f"credit.{k}") is not None for k in ("schedule", "overhead", "budget_from")):
            refs[m.row] = first_prover
    return refs


def ordered(methods: list[MethodSpec], refs: dict[str, str]) -> list[MethodSpec]:
    """The methods with every budget reference before the methods that match it."""
    firsts = set(refs.values())
    return [m for m in methods if m.row in firsts] + [m for m in methods if m.row not in firsts]


def warmstart_folder(bench: BenchConfig, cell: Cell) -> Path | None:
    """The shared folder a cell's warm start is built in (``shared/<env>/seed-<s>``), or None when the cell
    builds none of its own (its model is given, or share_warmstart none makes it part of its training)."""
    cfg = cell.config
    if bench.share_warmstart == "none" or (cfg.model.path != "tiny" and not cfg.warmstart.enabled):
        return None
    seed = bench.shared_seed if bench.share_warmstart == "env" else cell.seed
    return Path(bench.dir) / "shared" / cell.dir.parent.parent.name / f"seed-{seed}"


def _start(bench: BenchConfig) -> str:
    """Where the cells' policies start, as part of their settings."""
    return bench.share_warmstart + (f"/{bench.shared_seed}" if bench.share_warmstart == "env" else "")


def _cell_config(tree: dict, where: str) -> TrainConfig:
    try:
        return config_from_tree(copy.deepcopy(tree))
    except ProverError as exc:
        raise type(exc)(f"bench cell {where}: {exc}") from exc


def _judge_used(cfg: TrainConfig, m: MethodSpec) -> None:
    """A judge named for a method that never asks one would be built and paid for for nothing."""
    bare = cfg.model_copy(deep=True)
    bare.judge = bare.judge.model_copy(update={"name": None})
    try:
        CREDIT.get(m.credit).validate_config(bare)
    except ConfigError:
        return  # it needs a judge
    raise ConfigError(f"bench method {m.name!r}: credit {m.credit!r} uses no judge; write {m.credit!r}")
