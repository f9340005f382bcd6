"""The bench matrix config: which methods, envs and seeds, with which settings, and how the tables read
them (the baseline row of the paired differences, the success level of "steps to reach").

Loaded from a YAML file plus dotted overrides; every problem is a one-line ConfigError.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from prover.config_load import read_tree
from prover.errors import ConfigError, validation_line
from prover.seeding import RunSeed
from prover.settings.strict_numbers import StrictNumbers


class MethodSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="'credit' or 'credit+judge', e.g. grpo, spo-tree, prover+contrast.")
    label: str | None = Field(None, description="Row name in the tables and folder name of its cells; "
                              "defaults to name (give one to compare two variants of a method).")
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="Config settings for this method's cells only, as dotted keys or "
        "sections, e.g. {credit.samples: 4} or {judge.model: gpt-5.4-mini}.")
    match_budget_of: str | None = Field(
        None, description="For budget-matched-grpo: the method (row) whose cells' realised generated tokens "
        "its cells match, step by step, on the same env and seed; those cells run first. Defaults to the "
        "matrix's first prover method; give a credit.schedule or credit.overhead to opt out.")

    @property
    def row(self) -> str:
        return self.label or self.name

    @property
    def credit(self) -> str:
        return self.name.split("+", 1)[0]

    @property
    def judge(self) -> str | None:
        return self.name.split("+", 1)[1] if "+" in self.name else None


class PowerSpec(StrictNumbers):
    model_config = ConfigDict(extra="forbid")
    compare: tuple[str, str] = Field(description="The headline comparison, [method row, reference row], e.g. "
                                     "[prover+contrast, budget-matched-grpo]: results.md gives its paired "
                                     "verdict first, and the power analysis is for it.")
    effect: float = Field(0.02, gt=0.0, le=1.0, description="The difference in final held-out success to "
                          "detect (0.02: 2 points).")
    power: float = Field(0.8, gt=0.0, lt=1.0, description="The chance of detecting it that the seeds must give.")
    alpha: float = Field(0.05, gt=0.0, lt=1.0, description="Level of the two-sided paired t test.")
    pilot_seeds: list[RunSeed] = Field(min_length=2, description="Seeds (not the reported ones) whose finished "
                                   "cells of the two rows, under this matrix's settings, measure the spread "
                                   "of the paired difference; train them first with seeds=[...] set to these.")


class BenchConfig(StrictNumbers):
    model_config = ConfigDict(extra="forbid")
    dir: str = Field("runs/bench", description="Bench folder: the cells' run folders (cells/<env>/<method>/"
                     "seed-<s>), the warm-started policies they share (shared/<env>/seed-<s>) and "
                     "timings.json (measured seconds per step, for the time estimate).")
    out: str | None = Field(None, description="Folder for results.md, table1-3.csv and curves-<env>.png; "
                            "None writes them into dir.")
    envs: list[str] = Field(["alfworld-sim", "webshop-sim", "searchqa-sim"], min_length=1,
                            description="Registered env names (see `prover list`).")
    seeds: list[RunSeed] = Field(
        [0, 1, 2, 3, 4], min_length=1,
        description="Run seeds, paired across methods: every method of an env trains seed s on the same task "
        "stream (tasks derive from (seed, step)) from the same warm start (share_warmstart env-seed or env), "
        "so Table 1 compares methods seed by seed. Use 5 or more: a bootstrap CI over fewer seeds is too "
        "narrow to tell methods apart (ProVer: 3).")
    steps: int = Field(4, ge=0, description="RL steps of every cell: one step budget for every method.")
    methods: list[MethodSpec] = Field(min_length=1, description="Rows of the tables: 'credit' or "
                                      "'credit+judge' names, or {name, label, overrides} mappings.")
    common: dict[str, Any] = Field(default_factory=dict, description="Config settings for every cell, as "
                                   "dotted keys or sections (as in a `prover train` YAML file).")
    env_overrides: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Settings for the "
                                                     "cells of one env, by env name, over common.")
    share_warmstart: Literal["env-seed", "env", "none"] = Field(
        "env-seed", description="Which cells start from one warm-started policy, built once: 'env-seed' "
        "every method of an (env, seed); 'env' every cell of an env (built with warmstart_seed; seeds then "
        "vary only RL, as the paper's seeds start from one pretrained model); 'none' each cell its own "
        "(seeded alike, so the methods of a seed still start alike).")
    warmstart_seed: RunSeed | None = Field(None, description="With share_warmstart: env, the seed the shared "
                                       "warm start is built with; null: the smallest of seeds (so a second "
                                       "process with the seeds reversed shares it). Set it when processes "
                                       "split the seeds (seeds=[3,4]) so they share one policy.")
    baseline: str = Field("grpo", description="Row every method is compared with in Table 1: per seed, method "
                          "minus baseline on the same env and seed, with a bootstrap CI; a matrix without "
                          "this row shows no paired differences.")
    power: PowerSpec | None = Field(None, description="The headline comparison and how many seeds it needs "
                                    "(prover.bench.power): printed with the time estimate and on results.md; "
                                    "null: none.")
    reach: float | None = Field(0.5, description="Held-out success level (0, 1] for Table 1's 'steps to "
                                "reach': the first evaluated step with eval/success >= reach, per seed; "
                                "null leaves the column out.")

    @field_validator("methods", mode="before")
    @classmethod
    def _names(cls, value: object) -> object:  # a bare string is a method with no settings of its own
        return [{"name": v} if isinstance(v, str) else v for v in value] if isinstance(value, list) else value

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):  # two cells would share one folder
            raise ValueError(f"seeds repeat a seed: {value}")
        return value

    @field_validator("reach")
    @classmethod
    def _level(cls, value: float | None) -> float | None:
        if value is not None and not 0.0 < value <= 1.0:
            raise ValueError("reach is a success level above 0 and at most 1 (e.g. 0.5), or null for none")
        return value

    @property
    def shared_seed(self) -> int:
        """The seed of the warm start every cell of an env shares (share_warmstart: env)."""
        return min(self.seeds) if self.warmstart_seed is None else self.warmstart_seed

    @property
    def out_dir(self) -> Path:
        return Path(self.out or self.dir)


def load_bench_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> BenchConfig:
    """A bench YAML file (optional) plus dotted overrides (``steps=2``, ``seeds=[0]``,
    ``common.rollout.group_size=4``), read as `prover train` reads its config; a one-line ConfigError on any
    problem. A row named by ``methods=[...]`` that the file also lists (by its label, else its name) keeps the
    file's settings for it: ``methods=[grpo,prover+contrast]`` picks two of the file's rows, overrides and all."""
    tree = read_tree(path, overrides, what="bench config")
    if any(o.split("=", 1)[0].strip() == "methods" for o in overrides):
        tree["methods"] = _rows_of_the_file(tree.get("methods"), read_tree(path, (), what="bench config"))
    try:
        return BenchConfig.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(validation_line(exc, what="bench field", unknown="; see `prover bench --help`")) from exc


def _rows_of_the_file(picked: object, file_tree: dict) -> object:
    """``picked`` (an override's list of rows) with each bare name that names a row of the file replaced by
    that row, settings included."""
    listed = file_tree.get("methods")
    if not isinstance(picked, list) or not isinstance(listed, list):
        return picked
    by_name: dict[str, dict] = {}
    for row in listed:
        spec = row if isinstance(row, dict) else {"name": row}
        by_name.setdefault(str(spec.get("label") or spec.get("name")), spec)
    return [by_name.get(row, row) if isinstance(row, str) else row for row in picked]
