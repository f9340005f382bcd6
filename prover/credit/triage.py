"""TRIAGE: a structured judge gives every turn one of four roles; a fixed bonus per role is added to GRPO's
outcome advantage.

    l_{i,t}   in {decisive_progress, useful_exploration, no_progress, regression}   the judge's role of turn t
    b(l)      = 1.0, 0.5, -0.1, -0.5 for those four roles                           ``credit.bonus.<role>``
    A_{i,t}   = A^GRPO_{i,t} + lam * b(l_{i,t})                                     lam = 0.2 (0.4 on Search-QA)
    A_{i,t,k} = A_{i,t} for every token k of turn t

Paper: "TRIAGE: Role-Typed Credit Assignment for Agentic Reinforcement Learning", arXiv 2606.32017. Its
abstract: a structured judge classifies each environment-facing segment as decisive progress, useful
exploration, no-progress infrastructure or regression, and a fixed role-conditioned rule maps the labels to
bounded segment-level process rewards, while the verifier outcome keeps the optimisation direction. No
public code was found and the paper's body was not read here. The constants (1.0 / 0.5 / -0.1 / -0.5 times
lam, lam = 0.2, 0.4 on Search-QA) come from a secondary summary of the paper, not from the paper itself: they
are all settings (``lam``, ``bonus.*``).

Departures and choices:
1. A segment is one turn. Every env here ends a turn with exactly one environment-facing action (the
   paper's unit), a turn is the training row whose tokens carry one value, and pivot-sim's truth is a set
   of turns, so labels and truth meet without any mapping. The paper's own segmentation was not read.
2. "Role-conditioned" is read as: the bonus depends on the role alone, not on the run's outcome or
   position. The bonus is added unnormalised to our GRPO advantage (``grpo.py``'s fields and defaults,
   the base shared with grpo, criticsearch and prover: ``reward.scale`` * return, centred by the group
   mean). With ``reward.scale = 10`` that outcome term is 10 times a 0/1 reward's, so the bonus weighs
   less than with 0/1 rewards; ``credit.norm=std`` puts the outcome term on a unit scale.
3. The judge is CriticSearch's frozen critic and its plumbing (``criticsearch.py``): the ``credit.critic``
   section (``backend: litellm | local``), one call per trajectory, concurrent calls, ``max_repairs``,
   and structured decoding under ``labels_schema`` with the four roles (exactly one per turn, so labels
   always parse). The user prompt is CriticSearch's (the task, the run's outcome, ``Trajectory.gold``
   and the group's shortest success); the system prompt defining the roles is ours (the paper's is not
   known).
4. By default only groups whose wins lie in ``eligible`` (1-3 of 8, scaled as ProVer's) are labelled, as
   CriticSearch and ProVer are in the ProVer comparison (the same critic budget); ``groups=mixed`` labels
   every group whose runs' scores differ. A group whose runs all score alike (all failed, all won, or
   empty) is never labelled and keeps GRPO's advantage (zeros), as every method's contract requires; the
   paper may give bonuses there too.
5. A critic call that fails, or whose answer is not one role per turn after ``max_repairs`` re-asks, leaves
   its whole group at plain GRPO, counted in ``credit/critic_failures``.
6. Role counts are logged as ``credit/triage_labels/<role>``. The labels of the last ``assign`` are kept in
   ``last_labels`` (trajectory id -> roles) so that a diagnostic can score them against an env's
   ``pivotal_turns`` with ``label_truth`` / ``pivotal_tally``; the truth never reaches a prompt or an
   advantage.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from prover.chat import ChatModel, find_json_object
from prover.credit.base import CreditContext, WinRangeConfig, broadcast, in_win_range, trajectory_score
from prover.credit.criticsearch import CRITIC_COUNTS, CriticSearch, CriticSettings, labels_schema
from prover.credit.grpo import GRPOConfig, grpo_turn_advantages
from prover.judges.health import usage_metrics
from prover.types import Advantages, Batch, Group, Trajectory

TRIAGE_SYSTEM = """You are a judge of an agent's episode. You know how it ended and how a successful \
attempt at the same task went. Give each turn exactly one role:
- "decisive_progress": its action moved the task decisively toward the goal or the correct final answer \
(a step a solution needs);
- "useful_exploration": it did not advance the goal itself, but sensibly gathered information or ruled \
out an option;
- "no_progress": it changed nothing that matters (a repeat, an invalid or wasted action, bookkeeping);
- "regression": it undid progress, moved away from the goal, or committed to a wrong answer.
Reply with one JSON object and nothing else: {"labels": [one role per turn, in turn order]}."""


class RoleBonuses(BaseModel):
    """b(role): the bonus of each role before lam (the constants of the secondary summary)."""

    model_config = ConfigDict(extra="forbid")
    decisive_progress: float = Field(1.0, description="Bonus of a decisive-progress turn (summary: 1.0).")
    useful_exploration: float = Field(0.5, description="Bonus of a useful-exploration turn (summary: 0.5).")
    no_progress: float = Field(-0.1, description="Bonus of a no-progress turn (summary: -0.1).")
    regression: float = Field(-0.5, description="Bonus of a regression turn (summary: -0.5).")


ROLES: tuple[str, ...] = tuple(RoleBonuses.model_fields)
ALIASES = {"decisive": "decisive_progress", "progress": "decisive_progress", "exploration": "useful_exploration",
           "no_progress_infrastructure": "no_progress", "infrastructure": "no_progress", "regressive": "regression"}


class TriageConfig(GRPOConfig, WinRangeConfig):
    lam: float = Field(0.2, ge=0.0, description="lambda, the scale of the role bonuses (summary: 0.2; 0.4 on "
                       "Search-QA).")
    bonus: RoleBonuses = Field(default_factory=RoleBonuses, description="b(role) of each of the four roles.")
    groups: Literal["eligible", "mixed"] = Field("eligible", description="Label only groups whose wins lie in "
                                                 "eligible (ProVer's comparison) or every group whose scores "
                                                 "differ (mixed).")
    eligible: tuple[int, int] = Field((1, 3), description="Win range (min, max) labelled with groups=eligible "
                                      "(ProVer comparison: 1-3 of 8).")
    critic: CriticSettings = Field(default_factory=CriticSettings, description="The frozen judge model "
                                   "(CriticSearch's critic section).")


def normalise_role(value: object) -> str | None:
    """A role as the judge may write it ("Decisive progress", "no-progress") -> its name, or None."""
    if not isinstance(value, str):
        return None
    key = re.sub(r"[\s\-]+", "_", value.strip().lower())
    key = ALIASES.get(key, key)
    return key if key in ROLES else None


def read_roles(text: str, n_turns: int) -> list[str] | str:
    """The judge's reply -> one role per turn, or why it cannot be used."""
    raw = find_json_object(text, key="labels")
    if raw is None:
        return 'no JSON object with "labels" found'
    labels = raw["labels"]
    if not isinstance(labels, list):
        return '"labels" is not a list'
    roles = [normalise_role(v) for v in labels]
    bad = [v for v, r in zip(labels, roles) if r is None]
    if bad:
        return f"{bad[0]!r} is not a role; use one of {', '.join(ROLES)}"
    if len(roles) != n_turns:
        return f"{len(roles)} labels for {n_turns} turns; give exactly one per turn"
    return roles


def role_bonus(roles: list[str], cfg: TriageConfig) -> np.ndarray:
    """(n_turns,) lam * b(l_t)."""
    return cfg.lam * np.array([getattr(cfg.bonus, r) for r in roles], dtype=np.float64)


def is_labelled(group: Group, cfg: TriageConfig, ctx: CreditContext) -> bool:
    """Whether the judge labels ``group``: it has turns, its runs' scores differ, and (groups=eligible) its
    wins lie in the win range."""
    if not any(t.turns for t in group.trajectories):
        return False
    scores = [trajectory_score(t, ctx.config.reward) for t in group.trajectories]
    if min(scores) == max(scores):
        return False  # no outcome signal: zeros, as the contract asks
    return cfg.groups == "mixed" or in_win_range(group, cfg.eligible, cfg.eligible_of)


def pivotal_tally(labels: Mapping[str, list[str]],
                  pivotal: Mapping[str, list[int] | None]) -> dict[str, dict[str, int]]:
    """How often each role lands on a pivotal turn: {role: {"turns": labelled turns, "pivotal": of them, on a
    pivotal turn}}, over the trajectories (by id) whose pivotal turns are known (None: not known, skipped)."""
    out = {r: {"turns": 0, "pivotal": 0} for r in ROLES}
    for traj_id, roles in labels.items():
        turns = pivotal.get(traj_id)
        if turns is None:
            continue
        hits = {int(t) for t in turns}
        for t, role in enumerate(roles):
            out[role]["turns"] += 1
            out[role]["pivotal"] += t in hits
    return out


def label_truth(batch: Batch, labels: Mapping[str, list[str]],
                pivotal_turns: Callable[[Trajectory], list[int] | None]) -> dict[str, dict[str, int]]:
    """``pivotal_tally`` of a batch's labels (``TRIAGE.last_labels``), the truth read with ``pivotal_turns``
    (an env's ``pivotal_turns``; pivot-sim knows it)."""
    pivotal = {tr.traj_id: pivotal_turns(tr) for g in batch.groups for tr in g.trajectories if tr.traj_id in labels}
    return pivotal_tally(labels, pivotal)


class TRIAGE(CriticSearch):
    """A structured judge gives every turn a role; a fixed bonus per role is added to GRPO's advantage."""

    Config = TriageConfig
    config: TriageConfig  # the parsed settings of ``Config``
    system_prompt = TRIAGE_SYSTEM

    def __init__(self, config: TriageConfig | None = None, critic: ChatModel | None = None) -> None:
        super().__init__(config, critic)
        self.last_labels: dict[str, list[str]] = {}  # the last assign's roles by trajectory id (diagnostics)

    def schema(self, n_turns: int) -> dict:
        return labels_schema(n_turns, ROLES)

    def read(self, text: str, n_turns: int) -> list[str] | str:
        return read_roles(text, n_turns)

    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
        cfg = self.config
        per_turn = [grpo_turn_advantages(g, ctx, cfg) for g in batch.groups]
        chosen = [gi for gi, g in enumerate(batch.groups) if is_labelled(g, cfg, ctx)]
        labelled, usage, failures = self.label_groups(batch, chosen)
        counts = dict.fromkeys(ROLES, 0)
        self.last_labels = {}
        for gi, mine in labelled.items():
            for i, roles in mine.items():
                per_turn[gi][i] = per_turn[gi][i] + role_bonus(roles, cfg)
                self.last_labels[batch.groups[gi].trajectories[i].traj_id] = roles
                for role in roles:
                    counts[role] += 1
        metrics = {"credit/critic_labelled_groups": float(len(labelled)), "credit/critic_failures": float(failures),
                   **{f"credit/triage_labels/{r}": float(n) for r, n in counts.items()},
                   **usage_metrics(usage, CRITIC_COUNTS)}
        return Advantages(values=broadcast(batch, per_turn), metrics=metrics)
