"""``webshop-sim``: an embedded WebShop with the real site's pages, text, actions and reward.

Each split has ``n_catalogs`` generated catalogs (``catalog``), each searched by a small BM25
(``search``); ``reset(seed=s)`` shops in catalog ``s % n_catalogs`` for one of its target products.
Pages, buttons, the `` [SEP] `` text, the action grammar and lower-casing follow WebShop's text env
(``engine``); ``click[buy now]`` ends the episode with WebShop's ``get_reward`` score as the reward
(``reward``), and the task is won when it is exactly 1.0. The step cap is verl-agent's 15. The reward
is the raw score; verl-agent's 10-if-won mapping is the trainer's.

Difficulty: ``catalog_size`` products per catalog, grouped in families of one target and
``n_distractors`` near misses. ``reset(seed=s, options={"split": "test"})`` draws from catalogs and
goals that no train seed reaches. Many catalogs (default 200) matter for learning: with one, a small
policy memorises its fifteen target codes instead of learning to read them off the results page.

Switches, each defaulting to WebShop's behaviour (see ``rules``): ``option_match`` (``"webshop"``: a goal's
options are matched as (name, value) pairs, the form of WebShop's synthetic goals, which these goals
follow; ``"values"``: bare values), ``type_nouns`` (``"webshop"``: repeated title nouns count in the
type score's denominator; ``"unique"``) and ``pages`` (``"webshop"``, or ``"prover-v0"`` for the pages of
runs recorded before the sim followed WebShop's pages).

``codes``: ``"asin"`` (default) gives products WebShop's ASIN-like codes (``B09QKP7XQL``, clicked as
``click[b09qkp7xql]``); ``"item"`` names them ``#item 1`` .. ``#item N`` from a pool that every catalog
reuses (see ``catalog``), with the pages, actions and reward unchanged. A tiny policy cannot copy an ASIN
it has never seen (it is several of its tokens, and it writes pieces of codes seen in training), so it
scores 0 held out with ``"asin"``; an ``"item"`` code is one token it has met on other catalogs, the same
token on the page and in the action.

Pivotal turns (``pivotal_turns``, diagnostics only), pivot-sim's definition. With Q* the best achievable
success (``won``: a purchase scoring exactly 1.0; not the graded score) under optimal play for the rest
of the episode, computed exactly by ``truth.Oracle`` over (page, chosen options, steps left before
``max_steps``; the rollout's own turn cap is not the env's and does not count), turn t is pivotal when

    max_a Q*(s_t, a) != min_a Q*(s_t, a)   over the actions a the env accepts at s_t.

``truth`` says how the infinitely many search queries reduce exactly to two. With slack in the step cap
this marks the item-page turns where buy now would lose (the wrong product, or options not yet right);
as the cap nears, any turn whose waste the cap cannot afford.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

from prover.envs.base import TextEnv
from prover.envs.webshop_sim import engine
from prover.envs.webshop_sim.catalog import CODE_FORMS, Catalog, Goal, build_catalog, draw_goal
from prover.envs.webshop_sim.expert import expert_action
from prover.envs.webshop_sim.prompts import PRESETS
from prover.envs.webshop_sim.rules import Rules
from prover.envs.webshop_sim.search import BM25
from prover.envs.webshop_sim.truth import Oracle
from prover.errors import ConfigError, ContractError

if TYPE_CHECKING:
    from prover.types import Trajectory

SPLITS = ("train", "test")
ORACLE_CACHE = 256  # tasks whose solved values are kept


@lru_cache(maxsize=512)  # one per catalog a worker touches; branching restores revisit them
def _index(catalog: Catalog) -> BM25:
    return BM25([p.document() for p in catalog.products])


@dataclass(frozen=True)
class Snapshot:
    """A native snapshot: the catalog and goal (immutable, shared) and the small mutable state."""

    catalog: Catalog
    goal: Goal
    task_id: str
    page: engine.Page
    steps: int
    won: bool
    opened: frozenset  # products the agent has opened (for the observing expert)
    rng_state: dict
    replay: tuple  # (seed, options, actions) as the base class records them


class WebshopSimEnv(TextEnv):
    """WebShop on a generated catalog; see the module docstring."""

    native_snapshot = True
    # The tiny policy does not learn to copy a product code off the page in a warm start a CPU affords:
    # with ASINs it writes pieces of codes seen in training (0 held out); with one-token codes on
    # 60-product catalogs its mass on the page's codes stays at chance after 3 epochs (seed 100). On
    # 8-product catalogs (two families) a search for the goal lists at least the target's family, so a
    # guess among the 8 codes is on the page half the time or more, and 4 epochs teach the rest
    # (docs/conformance.md: held-out success of seeds 0-2).
    train_recipe: ClassVar[dict[str, Any]] = {"env.kwargs.codes": "item", "env.kwargs.catalog_size": 8,
                                              "warmstart.epochs": 4}

    def __init__(self, *, catalog_size: int = 60, n_distractors: int = 3, catalog_seed: int = 0,
                 n_catalogs: int = 200, max_steps: int = 15, prompt: str = "compact",
                 option_match: str = "webshop", type_nouns: str = "webshop", pages: str = "webshop",
                 codes: str = "asin") -> None:
        if prompt not in PRESETS:
            raise ConfigError(f"webshop-sim: unknown prompt {prompt!r}; choose one of {sorted(PRESETS)}")
        if codes not in CODE_FORMS:
            raise ConfigError(f"webshop-sim: codes={codes!r}; choose one of {CODE_FORMS}")
        if not 0 <= n_distractors <= 12:
            raise ConfigError(f"webshop-sim: n_distractors={n_distractors} must be in 0..12")
        if catalog_size < 1 + n_distractors:
            raise ConfigError(f"webshop-sim: catalog_size={catalog_size} must hold at least one family "
                              f"(1 + n_distractors = {1 + n_distractors} products)")
        if n_catalogs < 1:
            raise ConfigError(f"webshop-sim: n_catalogs={n_catalogs} must be at least 1")
        if max_steps < 1:
            raise ConfigError(f"webshop-sim: max_steps={max_steps} must be at least 1")
        self.n_families = catalog_size // (1 + n_distractors)
        self.n_distractors, self.catalog_seed, self.max_steps = n_distractors, catalog_seed, max_steps
        self.n_catalogs, self.codes = n_catalogs, codes
        self.rules = Rules(option_match=option_match, type_nouns=type_nouns, pages=pages)
        self.agent_spec = PRESETS[prompt]
        self.catalog: Catalog | None = None
        self._oracles: OrderedDict[str, Oracle] = OrderedDict()
        self._private: WebshopSimEnv | None = None

    # -- the gym API -----------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        self.catalog, self.goal, self.task_id = self._draw_task(seed, options)
        self.index = _index(self.catalog)
        self.page = engine.Page()
        self.steps, self.won, self.opened = 0, False, frozenset()
        return engine.render(self.catalog, self.goal, self.page, self.rules), self._info(True)

    def _draw_task(self, seed: int, options: dict) -> tuple[Catalog, Goal, str]:
        """The catalog, the goal and a task id for this reset. The seam for other product data: an
        env that loads a real catalog overrides this and keeps the pages, actions and reward."""
        split = options.get("split", "train")
        if split not in SPLITS:
            raise ConfigError(f"webshop-sim: unknown split {split!r}; choose one of {SPLITS}")
        catalog = build_catalog(split, self.catalog_seed, self.n_families, self.n_distractors,
                                seed % self.n_catalogs, self.codes)
        goal = draw_goal(catalog, split, seed)
        return catalog, goal, f"{split}/{goal.asin}/seed-{seed}"

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        new = engine.apply(self.catalog, self.index, self.goal, self.page, action, self.rules)
        self.steps += 1
        reward, terminated = 0.0, False
        if new is not None:
            self.page = new
            if new.name == "item":
                self.opened = self.opened | {new.asin}
            if new.name == "done":
                reward, terminated, self.won = new.score, True, new.score == 1.0
        truncated = not terminated and self.steps >= self.max_steps
        obs = engine.render(self.catalog, self.goal, self.page, self.rules)
        return obs, reward, terminated, truncated, self._info(new is not None)

    def _info(self, valid: bool) -> dict:
        return {"won": self.won, "is_action_valid": valid, "task": self.goal.instruction,
                "task_id": self.task_id, "task_score": self.page.score,
                "admissible_actions": engine.admissible(self.catalog, self.page, self.rules),
                "available_actions": engine.available_actions(self.catalog, self.page, self.rules)}

    def gold(self) -> str:
        self._require_reset("gold")
        g = self.goal
        options = ", ".join(f"{k}: {v}" for k, v in g.options) or "none"
        return (f"the target product: {g.name} (asin {g.asin}); attributes: {', '.join(g.attributes)}; "
                f"options: {options}; price below {g.price_upper:g} dollars")

    def state_key(self) -> Hashable:
        """The task and the page (search hits, page number, item, chosen options); not the step count."""
        self._require_reset("state_key")
        return (self.task_id, self.page)

    # -- snapshots -------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        self._require_reset("snapshot")
        return Snapshot(self.catalog, self.goal, self.task_id, self.page, self.steps, self.won, self.opened,
                        self.np_random.bit_generator.state,
                        self.replay_record())

    def restore(self, snapshot: object) -> None:
        if not isinstance(snapshot, Snapshot):
            raise ContractError(f"WebshopSimEnv.restore() got {type(snapshot).__name__}, "
                                "expected a Snapshot from WebshopSimEnv.snapshot()")
        self.catalog, self.goal, self.task_id = snapshot.catalog, snapshot.goal, snapshot.task_id
        self.index = _index(self.catalog)
        self.page, self.steps = snapshot.page, snapshot.steps
        self.won, self.opened = snapshot.won, snapshot.opened
        self.np_random.bit_generator.state = snapshot.rng_state
        self.set_replay_record(snapshot.replay)

    # -- the oracle ------------------------------------------------------------------------------
    def expert_action(self) -> str | None:
        """The next action of an expert that uses only what the agent has seen (see ``expert``);
        None once the episode is over."""
        self._require_reset("expert_action")
        return expert_action(self.catalog, self.goal, self.page, self.opened)

    # -- the ground truth (diagnostics only) -----------------------------------------------------------
    def pivotal_turns(self, trajectory: Trajectory) -> list[int]:
        """The pivotal turns of ``trajectory`` (definition in the module docstring); ``self`` is untouched."""
        oracle, states = self._replay(trajectory)
        return [t for t, (page, left) in enumerate(states[:-1]) if oracle.is_pivotal(page, left)]

    def value_trace(self, trajectory: Trajectory) -> list[bool]:
        """V* (can a 1.0 purchase still be made?) before each turn of ``trajectory`` and after its last one."""
        oracle, states = self._replay(trajectory)
        return [oracle.value(page, left) for page, left in states]

    def _replay(self, trajectory: Trajectory) -> tuple[Oracle, list[tuple[engine.Page, int]]]:
        """The task's oracle and (page, steps left) before each turn and after the last, on a private env."""
        split, _, seed = str(trajectory.task_id).partition("/")
        if split not in SPLITS or not seed.lstrip("-").isdigit():
            raise ContractError(f"webshop-sim: task_id {trajectory.task_id!r} is not 'split/seed'")
        if self._private is None:  # a shallow copy: reset gives it its own state and replay record
            self._private = copy.copy(self)
        env = self._private
        env.reset(seed=int(seed), options={"split": split})
        states, over = [(env.page, env.max_steps)], False
        for t, turn in enumerate(trajectory.turns):
            if over:
                raise ContractError(f"webshop-sim: trajectory {trajectory.traj_id!r} goes on after its episode "
                                    f"ended (turn {t} of {len(trajectory.turns)}); is it from this env's knobs?")
            _, _, terminated, truncated, _ = env.step(turn.action)
            states.append((env.page, env.max_steps - env.steps))
            over = terminated or truncated
        oracle = self._oracles.get(env.task_id)
        if oracle is None:
            oracle = self._oracles[env.task_id] = Oracle(env.catalog, env.index, env.goal, env.rules)
            if len(self._oracles) > ORACLE_CACHE:
                self._oracles.popitem(last=False)
        return oracle, states

    def _require_reset(self, what: str) -> None:
        if self.catalog is None:
            raise ContractError(f"WebshopSimEnv.{what}() called before reset()")
