"""The seams' Protocols (prover/engines/base.py ``EngineContract``, prover/judges/base.py ``JudgeContract``,
prover/envs/base.py ``EnvContract``, prover/credit/base.py ``CreditContract``, prover/episodes/branching.py
``BrancherContract``): every implementation prover ships or documents keeps its Protocol, and the registry
refuses, when it loads one, a class that leaves a method unimplemented, in one line naming the method.

The implementations are read from where they are declared, not from the registries: the built-in tables of
prover/registry.py, and the entry points of every plugin in plugins/ and examples/plugins/ (their
pyproject.toml), so a plugin added there is checked without a change here.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from prover.credit.base import CreditAssigner, CreditContext, CreditContract
from prover.engines.base import Engine, EngineContract
from prover.envs.base import EnvContract, TextEnv
from prover.episodes.branching import Brancher, BrancherContract, BranchRequest, BranchResult
from prover.errors import PluginLoadError
from prover.judges.base import Judge, JudgeContract
from prover.registry import CREDIT, ENGINES, ENVS, JUDGES, Registry, protocol_methods, unimplemented
from prover.types import Advantages, Batch, JudgeRequest, JudgeResult

REPO = Path(__file__).resolve().parents[1]
# entry-point group -> (registry, base class, Protocol)
KINDS = {"prover.envs": (ENVS, TextEnv, EnvContract), "prover.credit": (CREDIT, CreditAssigner, CreditContract),
         "prover.judges": (JUDGES, Judge, JudgeContract), "prover.engines": (ENGINES, Engine, EngineContract)}


def declared_plugins() -> list[tuple[str, str, str, Path]]:
    """(group, name, "module:Object", source folder) of every entry point that plugins/ and examples/plugins/
    declare in their pyproject.toml."""
    out = []
    for pyproject in sorted([*REPO.glob("plugins/*/pyproject.toml"), *REPO.glob("examples/plugins/*/pyproject.toml")]):
        points = tomllib.loads(pyproject.read_text()).get("project", {}).get("entry-points", {})
        for group, names in points.items():
            out += [(group, name, target, pyproject.parent) for name, target in names.items() if group in KINDS]
    return out


IMPLEMENTATIONS = ([(group, name, target, None) for group, (registry, _, _) in KINDS.items()
                    for name, target in registry.builtins.items()] + declared_plugins())


def test_the_implementations_cover_every_kind_and_every_plugin_folder() -> None:
    """The table below is not empty by accident: each kind has built-ins, and every plugin folder declares one."""
    groups = {group for group, *_ in IMPLEMENTATIONS}
    assert groups == set(KINDS)
    folders = {folder.name for *_, folder in IMPLEMENTATIONS if folder is not None}
    assert folders == {p.parent.name for p in [*REPO.glob("plugins/*/pyproject.toml"),
                                               *REPO.glob("examples/plugins/*/pyproject.toml")]}
    assert len([i for i in IMPLEMENTATIONS if i[0] == "prover.credit"]) == 12  # 11 built-in methods and loo


@pytest.mark.parametrize("group, name, target, folder", IMPLEMENTATIONS,
                         ids=[f"{g.split('.')[1]}:{n}" for g, n, *_ in IMPLEMENTATIONS])
def test_every_implementation_keeps_its_protocol(group, name, target, folder, monkeypatch) -> None:
    registry, base, protocol = KINDS[group]
    if folder is not None:
        monkeypatch.syspath_prepend(str(folder))  # an example plugin that is not installed
    fresh = Registry(registry.kind, "prover.tests-no-such-group", registry.contract, protocol=registry.protocol)
    cls = fresh.get(target)
    assert isinstance(cls, type) and issubclass(cls, base), target
    assert unimplemented(cls, protocol) == [], target
    for method in protocol_methods(protocol):  # each declared method is a callable of the class's own line
        assert callable(getattr(cls, method)), (target, method)


def test_a_method_built_with_its_defaults_is_an_instance_of_the_protocol() -> None:
    """The runtime check a caller may use: instances, not only classes, keep the contract."""
    for name in CREDIT.builtins:
        assert isinstance(CREDIT.get(name)(), CreditContract), name
    for name in ("contrast", "text-contrast", "random"):
        assert isinstance(JUDGES.get(name)(), JudgeContract), name
    env = ENVS.get("pivot-sim")()
    assert isinstance(env, EnvContract)
    assert not isinstance(object(), EnvContract) and not isinstance(CREDIT.get("grpo")(), JudgeContract)


def test_the_brancher_keeps_its_protocol_and_a_stand_in_may_too() -> None:
    assert unimplemented(Brancher, BrancherContract) == []

    class Scripted:  # what a test hands a credit method in place of the rollout's brancher
        def continue_from(self, requests, seed=0, *, max_new_turns=None, record_snapshots=False):
            return [BranchResult(r, np.ones(r.n, bool), 0, []) for r in requests]

    class Silent:
        def take_counts(self) -> dict[str, float]:
            return {}

    assert isinstance(Scripted(), BrancherContract) and not isinstance(Silent(), BrancherContract)
    assert unimplemented(Silent, BrancherContract) == ["continue_from"]
    ctx = CreditContext(config=None, brancher=Scripted())  # type: ignore[arg-type]
    assert ctx.need_brancher("spo-chain") is ctx.brancher
    with pytest.raises(Exception, match="credit 'spo-chain' branches, but its CreditContext has no brancher"):
        CreditContext(config=None).need_brancher("spo-chain")  # type: ignore[arg-type]
    assert BranchRequest  # the request type the Protocol's method takes, importable beside it


# -- a class that leaves a method unimplemented is refused when loaded, in one line naming it ------------------


class HalfEngine(Engine):
    def generate(self, prompts, params, seed=None):
        return []


class HalfJudge(Judge):
    def check_ready(self) -> None:
        pass


class HalfEnv(TextEnv):
    def _reset(self, seed, options):
        return "", {}


class HalfCredit(CreditAssigner):
    def group_sizes(self, step, n_tasks, default):
        return [default] * n_tasks


class NotCallableCredit(CreditAssigner):
    assign = None  # shadows the method with something that cannot be called


BROKEN = [(ENGINES, "HalfEngine", "logprobs, update_weights", "prover.engines.base.EngineContract"),
          (JUDGES, "HalfJudge", "propose", "prover.judges.base.JudgeContract"),
          (ENVS, "HalfEnv", "_step, state_key", "prover.envs.base.EnvContract"),
          (CREDIT, "HalfCredit", "assign", "prover.credit.base.CreditContract"),
          (CREDIT, "NotCallableCredit", "assign", "prover.credit.base.CreditContract")]


@pytest.mark.parametrize("registry, cls, missing, protocol", BROKEN, ids=[b[1] for b in BROKEN])
def test_a_class_with_a_method_missing_is_refused_at_load_naming_it(registry, cls, missing, protocol) -> None:
    fresh = Registry(registry.kind, "prover.tests-no-such-group", registry.contract, protocol=registry.protocol)
    for _ in range(2):  # the refused class is not cached as a success
        with pytest.raises(PluginLoadError) as err:
            fresh.get(f"{__name__}:{cls}")
        assert str(err.value) == (f"{registry.kind} '{__name__}:{cls}' (from module:Object string): {__name__}.{cls} "
                                  f"does not implement {missing}, which every {registry.kind} must ({protocol})")
    fresh.register("by-name", f"{__name__}:{cls}")  # a built-in or an entry point: the same line, by its name
    with pytest.raises(PluginLoadError, match=f"^{registry.kind} 'by-name' \\(from code\\): .* does not implement"):
        fresh.get("by-name")


def test_unimplemented_reads_markers_through_the_bases() -> None:
    """A method a base marks required counts as implemented once any class between it and the plugin
    overrides it; a subclass of a complete class inherits its completeness."""

    class Complete(HalfCredit):
        def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
            return Advantages(values=[])

    class Child(Complete):
        pass

    class Answering(HalfJudge):
        def propose(self, request: JudgeRequest) -> JudgeResult:
            return JudgeResult(None, failure="nothing")

    assert unimplemented(HalfCredit, CreditContract) == ["assign"]
    assert unimplemented(Complete, CreditContract) == unimplemented(Child, CreditContract) == []
    assert unimplemented(Answering, JudgeContract) == []
    assert protocol_methods(BrancherContract) == ["continue_from"]
    assert protocol_methods(CreditContract) == ["validate_config", "from_train_config", "derived_settings",
                                                "group_sizes", "assign"]
