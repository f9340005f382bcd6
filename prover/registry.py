"""One ``Registry`` type for every plugin kind: envs, credit assigners, judges, engines, retrievers.

A name resolves, in order, to
1. a built-in (the ``builtins`` table each registry is given below, names to ``"module:Object"`` strings:
   the one place a built-in is registered) or an object registered in code (``ENVS.register("x", Cls)``),
2. an installed entry point in the registry's group (``prover.envs`` ...), read lazily the first time a
   name is missing, never at ``import prover`` (gym 0.21/0.24 crashed on import from eager scans),
3. a ``"package.module:Object"`` string.

Nothing registers itself as a side effect of an import, so listing every name (``prover list``) imports
no plugin module, built-in or installed. Every object a registry hands out is checked against its kind's
contract (e.g. a ``prover.envs.TextEnv`` subclass) when it is loaded, built-ins too, so a wrong object is
one line naming it. Two installed distributions that register the same name make that name an error
naming both.

Targets may be objects or ``"module:Object"`` strings; strings are imported only when asked for, so
heavy optional dependencies load only for the name that needs them.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from prover.errors import DuplicateName, NameNotFound, PluginLoadError

AUTOLOAD_OFF_VAR = "PROVER_DISABLE_PLUGIN_AUTOLOAD"
T = TypeVar("T")


@dataclass
class Entry:
    """One registered name: its target (object or ``module:Object`` string) and where it came from."""

    name: str
    target: str | type  # a class, or the "module:Object" string of one
    origin: str  # "code" (a built-in too), "entry point (<distribution> <version>)" or "module:Object string"
    loaded: object = None
    check: Callable[[Entry, Any], None] | None = None  # its kind's contract, checked on every load
    conflict: str | None = None  # set when two distributions register this name

    def load(self) -> Any:
        if self.conflict is not None:
            raise DuplicateName(self.conflict)
        if self.loaded is None:
            target = self.target
            obj = _import_target(target, self.name, self.origin) if isinstance(target, str) else target
            if self.check is not None:
                self.check(self, obj)  # before caching: a wrong object fails on every lookup
            self.loaded = obj
        return self.loaded


def split_target(spec: str) -> tuple[str, str] | None:
    """``"package.module:Object.attr"`` as (module, attribute path), or None when it is not of that form."""
    module_name, sep, attr = str(spec).partition(":")
    return (module_name, attr) if sep and module_name and attr else None


def load_target(module_name: str, attr: str) -> object:
    """Import ``module_name`` and follow the dotted ``attr`` in it; whatever the import raises propagates."""
    obj: object = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _import_target(spec: str, name: str, origin: str = "") -> object:
    who = f"{name!r} (from {origin})" if origin else repr(name)  # names the distribution of an entry point
    target = split_target(spec)
    if target is None:
        raise PluginLoadError(f"{who}: target {spec!r} is not of the form 'package.module:Object'")
    try:
        obj = load_target(*target)
    except Exception as exc:  # any failure of a plugin's import is that plugin's failure only
        raise PluginLoadError(f"{who}: could not load {spec!r}: {type(exc).__name__}: {exc}") from exc
    except SystemExit as exc:  # a plugin that exits while imported would end prover silently, with its code
        raise PluginLoadError(f"{who}: importing {spec!r} called sys.exit({exc.code!r}); a plugin must raise "
                              "an exception instead") from None
    return obj


def required(method: Callable[..., T]) -> Callable[..., T]:
    """Mark a method of a contract's base class that every implementation must override. The base keeps a
    body that raises ``NotImplementedError``; the registry refuses, when it loads a class, one that still
    has it, in one line naming the method (``unimplemented``)."""
    method.__contract_required__ = True  # type: ignore[attr-defined]  # a marker attribute on the function
    return method


def _is_placeholder(attr: object) -> bool:
    inner = getattr(attr, "__func__", attr)  # a classmethod or staticmethod wraps the marked function
    return bool(getattr(inner, "__contract_required__", False))


def protocol_methods(protocol: type) -> list[str]:
    """The methods a Protocol declares (its own and its Protocol bases'), in declaration order; dunders aside."""
    names: dict[str, None] = {}
    for klass in reversed(protocol.__mro__):
        if getattr(klass, "_is_protocol", False) and klass is not protocol.__mro__[-1]:
            for name, value in vars(klass).items():
                if not name.startswith("__") and (callable(value) or isinstance(value, (classmethod, staticmethod))):
                    names[name] = None
    return list(names)


def unimplemented(cls: type, protocol: type | None = None) -> list[str]:
    """The methods ``cls`` must have and lacks: each method ``protocol`` declares that ``cls`` has not, and
    each ``required`` method of its bases that it still inherits unchanged. Sorted; empty when it keeps
    the contract."""
    must = set(protocol_methods(protocol)) if protocol is not None else set()
    must |= {name for klass in cls.__mro__ for name, value in vars(klass).items() if _is_placeholder(value)}
    return sorted(name for name in must if (attr := inspect.getattr_static(cls, name, None)) is None
                  or _is_placeholder(attr) or not callable(getattr(cls, name, None)))


def _contract_gap(obj: object, kind: str, base: type, base_name: str, protocol: type | None = None,
                  protocol_name: str = "") -> str | None:
    """How ``obj`` fails to be a class that keeps ``base``'s contract, or None: a subclass of ``base`` (for a
    Protocol ``base``, whose instance attributes a class cannot show, a class with every method it declares)
    that implements each method ``protocol`` declares and each ``required`` one of its bases."""
    if getattr(base, "_is_protocol", False):
        if isinstance(obj, type) and not unimplemented(obj, base):
            return None
        return (f"does not implement {base_name} (a class with {', '.join(protocol_methods(base))}); every {kind} "
                "plugin must be one")
    if not (isinstance(obj, type) and issubclass(obj, base)):
        return f"is not a {base_name} subclass; every {kind} plugin must be one"
    missing = unimplemented(obj, protocol)
    if missing:
        return f"does not implement {', '.join(missing)}, which every {kind} must ({protocol_name or base_name})"
    return None


class Registry:
    """Names to objects for one plugin kind, with lazy entry points and precise errors.

    ``contract``: the ``module:Object`` of the base class (or Protocol) every plugin of this kind must
    subclass (or implement); ``protocol``: the ``module:Object`` of the Protocol whose docstrings say what
    each method must do, and whose methods the plugin must have. Both are imported only when a plugin is
    loaded, so ``import prover`` stays light."""

    def __init__(self, kind: str, group: str, contract: str | None = None,
                 builtins: dict[str, str] | None = None, protocol: str | None = None) -> None:
        self.kind = kind  # "env", "credit assigner", ... (for messages)
        self.group = group  # entry-point group, e.g. "prover.envs"
        self.contract = contract
        self.protocol = protocol
        self.builtins = dict(builtins or {})  # name -> "module:Object", imported only when asked for
        self._entries: dict[str, Entry] = {}
        self._scanned = False
        for name, target in self.builtins.items():
            self.register(name, target)

    def _check_contract(self, entry: Entry, obj: object) -> None:
        if self.contract is None:
            return
        protocol = _import_target(self.protocol, self.protocol) if self.protocol is not None else None
        base = _import_target(self.contract, self.contract)
        assert isinstance(base, type) and (protocol is None or isinstance(protocol, type))  # prover's own names
        gap = _contract_gap(obj, self.kind, base, self.contract.replace(":", "."), protocol,
                            (self.protocol or "").replace(":", "."))
        if gap is not None:
            what = f"{obj.__module__}.{obj.__qualname__}" if isinstance(obj, type) else f"a {type(obj).__name__}"
            raise PluginLoadError(f"{self.kind} {entry.name!r} (from {entry.origin}): {what} {gap}")

    def register(self, name: str, target: str | type | None = None) -> Any:
        """Register ``target`` under ``name``; without a target, return a decorator."""
        if target is None:
            def decorator(obj: type) -> type:
                self._add(Entry(name, obj, "code", check=self._check_contract))
                return obj
            return decorator
        self._add(Entry(name, target, "code", check=self._check_contract))
        return target

    def _add(self, entry: Entry) -> None:
        old = self._entries.get(entry.name)
        if old is not None and old.target is not entry.target and old.target != entry.target:
            raise DuplicateName(
                f"{self.kind} name {entry.name!r} is already registered (from {old.origin}); "
                "pick another name or unregister the old one first"
            )
        self._entries.setdefault(entry.name, entry)

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)

    def _scan_entry_points(self) -> None:
        """Add the group's entry points as unloaded entries; an entry point never overrides code."""
        if self._scanned or os.environ.get(AUTOLOAD_OFF_VAR, "") not in ("", "0"):
            return
        self._scanned = True
        # lazy: importlib.metadata loads some 60 modules; importing prover reads no entry point
        from importlib import metadata

        found: dict[str, tuple[str, Entry]] = {}  # name -> (first distribution, its entry)
        for ep in metadata.entry_points(group=self.group):
            if ep.name in self._entries:
                continue
            dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else "unknown distribution"
            if ep.name not in found:
                found[ep.name] = dist, Entry(ep.name, ep.value, f"entry point ({dist})", check=self._check_contract)
                continue
            first, old = found[ep.name]
            if old.target != ep.value and old.conflict is None:  # the same target twice is harmless
                old.conflict = (f"{self.kind} name {ep.name!r} is registered by two installed distributions: "
                                f"{first} ({old.target}) and {dist} ({ep.value}); uninstall one of them, "
                                "or give the 'package.module:Object' you mean")
        self._entries.update((name, entry) for name, (_, entry) in found.items())

    def get(self, name: str) -> Any:
        """The object for ``name``: built-ins and code registrations, then entry points, then
        ``module:Object``."""
        if not isinstance(name, str) or not name:
            raise NameNotFound(f"{self.kind} name must be a non-empty string, got {name!r}")
        if name not in self._entries:
            self._scan_entry_points()
        if name in self._entries:
            return self._entries[name].load()
        if ":" in name:
            entry = Entry(name, name, "module:Object string", check=self._check_contract)
            obj = entry.load()
            self._entries[name] = entry
            return obj
        known = sorted(self._entries)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise NameNotFound(
            f"unknown {self.kind} {name!r}; known: {', '.join(known) or '(none)'}{hint} "
            "(or give a 'package.module:Object' string)"
        )

    def __getitem__(self, name: str) -> Any:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str) and name not in self._entries:
            self._scan_entry_points()
        return name in self._entries

    def entries(self) -> Iterator[Entry]:
        """Every known name (after reading entry points), sorted, with its origin."""
        self._scan_entry_points()
        for name in sorted(self._entries):
            yield self._entries[name]

    def names(self) -> list[str]:
        return [e.name for e in self.entries()]


# The built-ins, each by its "module:Object" string: listing them imports none of them.
ENVS = Registry("env", "prover.envs", "prover.envs:TextEnv", protocol="prover.envs.base:EnvContract", builtins={
    "alfworld-sim": "prover.envs.alfworld_sim:AlfworldSimEnv",
    # alfworld-sim follows ALFWorld's own tables; alfworld-sim-v1 keeps the sim's first tables,
    # whose text already matched the real engine step for step. v0 is gone: asking for it suggests v1.
    "alfworld-sim-v1": "prover.envs.alfworld_sim:AlfworldSimV1Env",
    "webshop-sim": "prover.envs.webshop_sim:WebshopSimEnv",
    "searchqa-sim": "prover.envs.searchqa_sim:SearchqaSimEnv",
    "pivot-sim": "prover.envs.pivot_sim:PivotSimEnv",
    # any Gymnasium env with text observations (prover/envs/gym.py); snapshots only if declared deterministic
    "gymnasium": "prover.envs.gym:GymnasiumTextEnv",
    "gymnasium-deterministic": "prover.envs.gym:DeterministicGymnasiumTextEnv",
    "openenv": "prover.envs.openenv_remote:OpenEnvTextEnv",
    "openenv-deterministic": "prover.envs.openenv_remote:DeterministicOpenEnvTextEnv",
})
CREDIT = Registry("credit assigner", "prover.credit", "prover.credit:CreditAssigner",
                  protocol="prover.credit.base:CreditContract", builtins={
    "grpo": "prover.credit.grpo:GRPO",
    "budget-matched-grpo": "prover.credit.budget_matched_grpo:BudgetMatchedGRPO",
    "gigpo": "prover.credit.gigpo:GiGPO",
    "hgpo": "prover.credit.hgpo:HGPO",
    "graphgpo": "prover.credit.graphgpo:GraphGPO",
    "spo-chain": "prover.credit.spo_chain:SPOChain",
    "spo-tree": "prover.credit.spo_tree:SPOTree",
    "tree-grpo": "prover.credit.tree_grpo:TreeGRPO",
    "prover": "prover.credit.prover:ProVer",
    "criticsearch": "prover.credit.criticsearch:CriticSearch",
    "triage": "prover.credit.triage:TRIAGE",
})
JUDGES = Registry("judge", "prover.judges", "prover.judges:Judge", protocol="prover.judges.base:JudgeContract",
                  builtins={
    "contrast": "prover.judges.contrast:ContrastJudge",
    "text-contrast": "prover.judges.contrast:TextContrastJudge",
    "random": "prover.judges.random_judge:RandomJudge",
    # the LLM judges import litellm or torch only when built
    "litellm": "prover.judges.agentic:LiteLLMJudge",
    "local": "prover.judges.agentic:LocalJudge",
})
ENGINES = Registry("engine", "prover.engines", "prover.engines.base:Engine",
                   protocol="prover.engines.base:EngineContract", builtins={
    "hf": "prover.engines.hf:HFEngine",
    "sglang": "prover.engines.sglang:SGLangEngine",
})
# the local backends of prover.retrieval.make_retriever; the packages each needs are in prover.retrieval
RETRIEVERS = Registry("retriever", "prover.retrievers", "prover.retrieval.base:Retriever", builtins={
    "bm25": "prover.retrieval.bm25:BM25Retriever",
    "dense": "prover.retrieval.dense:DenseRetriever",
    "pyserini": "prover.retrieval.pyserini_bm25:PyseriniBM25Retriever",
})
REGISTRIES = {"envs": ENVS, "credit": CREDIT, "judges": JUDGES, "engines": ENGINES, "retrievers": RETRIEVERS}
