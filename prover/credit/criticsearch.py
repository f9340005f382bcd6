"""CriticSearch: a frozen critic labels every turn Good or Bad; the Good turns share one unit of credit,
mixed with GRPO's outcome advantage.

    l_{i,t}   in {Good, Bad}                                   the critic's label of turn t of trajectory i
    A^a_{i,t} = 1[l_{i,t} = Good] / (sum_u 1[l_{i,u} = Good] + eps)      turn credit (Good turns share 1)
    A_{i,t}   = alpha * A^a_{i,t} + (1 - alpha) * A^GRPO_{i,t}           alpha = 0.25
    A_{i,t,k} = A_{i,t} for every token k of turn t

Paper: "CriticSearch", arXiv 2511.12159 (ACL Findings 2026): a frozen, asymmetric critique LLM sees the
question, the full trajectory and the gold answer and labels each turn; turn reward, its normalisation
within the trajectory and the hybrid with alpha = 0.25 as summarised in docs/methods/criticsearch.md
(the paper's PDF was not readable; its equation numbers are not known).

Departures and choices:
1. The critic's settings are the ``credit.critic`` section (``backend: litellm | local`` and that
   backend's fields, e.g. ``credit.critic.litellm.model=gpt-5.4-mini``), not ``judge:``: the judge
   section belongs to ProVer's proposer, and a comparison may run both with different models.
2. The privileged reference is ``Trajectory.gold`` (the env's ``gold()``: the gold aliases in
   searchqa-sim, the target product in webshop-sim, an all-knowing shortest plan in alfworld-sim), plus
   the run's outcome and the actions of the group's shortest successful run. An env with no ``gold()``
   leaves the critic that successful run alone (or only the task, when the group has no success).
3. The outcome term is our GRPO (``grpo.py``'s switches and defaults, the GRPO base shared with grpo,
   budget-matched-grpo and prover: scale * env return minus the format penalty, centred by the group
   mean, ``norm="mean"``; ``credit.norm=std`` divides by the group std) instead of the paper's
   {1, 0.8, 0.2, 0} correctness-by-format reward. CriticSearch has no norm field of its own.
4. By default only groups whose wins lie in ``eligible`` (1-3 of 8, scaled to the group size as
   ProVer's: ``eligible_of``) are labelled, as in the ProVer paper's comparison, which is what this
   baseline is here for; ``groups="all"`` labels every group (the paper). An unlabelled group keeps
   plain GRPO (weight 1, not 1 - alpha), so an all-failed or all-won group gets exactly GRPO's advantage.
5. A critic call that fails, or whose answer is not exactly one Good/Bad label per turn (after
   ``max_repairs`` re-asks, default none), leaves its whole group at plain GRPO, counted in
   ``credit/critic_failures``: a group is never half critic, half not.
6. One critic call per trajectory, calls run concurrently; eps = 1e-6 (the paper's value was not found).
7. A structured critic (``credit.critic.local.structured=true`` or ``...litellm.structured=true``) decodes
   its reply under ``labels_schema``: exactly one "Good" or "Bad" per turn, so its labels always parse.

The critic plumbing (``label``, ``label_groups``, the ``CRITIC_COUNTS`` metric prefix) is shared with TRIAGE
(``triage.py``), which replaces the system prompt, the schema's labels and the reader.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from prover.chat import (
    ChatError,
    ChatModel,
    LiteLLMChat,
    LiteLLMSettings,
    LocalChat,
    LocalSettings,
    ask,
    assistant_message,
    count_reply,
    find_json_object,
    render_trajectory,
)
from prover.credit.base import CreditAssigner, CreditContext, WinRangeConfig, broadcast, in_win_range
from prover.credit.grpo import GRPOConfig, grpo_turn_advantages
from prover.errors import validation_line
from prover.judges.health import usage_metrics
from prover.types import Advantages, Batch, Group, JudgeUsage, Trajectory

CRITIC_COUNTS = "credit/critic_"  # where every critic method logs its requests (calls, errors, cached_calls)

CRITIC_SYSTEM = """You are a critic of an agent's episode. You know how it ended and how a successful \
attempt at the same task went. For each turn, decide whether its action contributed to reaching the \
goal or the correct final answer (Good) or not: useless, redundant, wrong or harmful (Bad). Reply with \
one JSON object and nothing else: {"labels": ["Good" or "Bad", one per turn, in turn order]}."""


class CriticSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    backend: Literal["litellm", "local"] = Field("litellm", description="Which chat layer runs the frozen critic.")
    litellm: LiteLLMSettings = Field(default_factory=LiteLLMSettings, description="The critic model with "
                                     "backend=litellm (ProVer's comparison: gpt-5.4-mini).")
    local: LocalSettings = Field(default_factory=LocalSettings, description="The critic model with backend=local.")
    concurrency: int = Field(8, ge=1, description="Critic calls (trajectories) in flight at once.")
    max_repairs: int = Field(0, ge=0, description="Malformed label lists sent back with the reason before the "
                             "group falls back to GRPO.")
    obs_chars: int = Field(400, ge=20, description="Characters of each observation shown to the critic.")


class CriticSearchConfig(GRPOConfig, WinRangeConfig):
    alpha: float = Field(0.25, ge=0.0, le=1.0, description="Weight of the critic's turn credit (paper: 0.25).")
    credit_eps: float = Field(1e-6, gt=0.0, description="Added to the number of Good turns before dividing.")
    groups: Literal["all", "eligible"] = Field("eligible", description="Label only groups whose wins lie in "
                                               "eligible (ProVer's comparison) or every group (the paper).")
    eligible: tuple[int, int] = Field((1, 3), description="Win range (min, max) labelled with groups=eligible "
                                      "(ProVer comparison: 1-3 of 8).")
    critic: CriticSettings = Field(default_factory=CriticSettings, description="The frozen critic model.")


class CriticAnswer(BaseModel):
    labels: list[Literal["Good", "Bad"]]

    @field_validator("labels", mode="before")
    @classmethod
    def _case(cls, value: object) -> object:  # "good", "BAD" are the same answer
        if not isinstance(value, list):
            return value
        return [v.strip().capitalize() if isinstance(v, str) else v for v in value]


def reference_run(group: Group) -> Trajectory | None:
    """The group's shortest successful run (the critic's hindsight reference), or None."""
    wins = [t for t in group.trajectories if t.won]
    return min(wins, key=lambda t: len(t.turns)) if wins else None


def critic_prompt(traj: Trajectory, group: Group, obs_chars: int = 400) -> str:
    ref = reference_run(group)
    if ref is None:
        reference = "No attempt at this task succeeded; judge each turn against the task itself."
    elif ref is traj:
        reference = "This run is itself the shortest successful attempt."
    else:
        reference = ("A successful attempt took these actions, in order: "
                     + " | ".join(t.action for t in ref.turns) + f" (its final action: {ref.turns[-1].action!r}).")
    if traj.gold:
        reference = f"{traj.gold}. {reference}"
    outcome = "succeeded" if traj.won else "failed"
    n = len(traj.turns)
    return (f"Task: {traj.task_text}\nOutcome of this run: it {outcome} (return {traj.env_return:g}).\n"
            f"Reference: {reference}\n\nThe run:\n{render_trajectory(traj, obs_chars)}\n\n"
            f"Label all {n} turns (0..{n - 1}): exactly {n} labels.")


def read_labels(text: str, n_turns: int) -> list[bool] | str:
    """The critic's reply -> one bool (Good) per turn, or why it cannot be used."""
    raw = find_json_object(text, key="labels")
    if raw is None:
        return 'no JSON object with "labels" found'
    try:
        labels = CriticAnswer.model_validate(raw).labels
    except ValidationError as exc:
        return validation_line(exc, what="", at="labels")
    if len(labels) != n_turns:
        return f"{len(labels)} labels for {n_turns} turns; give exactly one per turn"
    return [label == "Good" for label in labels]


def labels_schema(n_turns: int, names: tuple[str, ...] = ("Good", "Bad")) -> dict:
    """The JSON schema of a critic's answer for a run of ``n_turns`` turns (structured decoding): exactly one
    of ``names`` per turn."""
    labels = {"type": "array", "items": {"type": "string", "enum": list(names)},
              "minItems": n_turns, "maxItems": n_turns}
    return {"type": "object", "properties": {"labels": labels}, "required": ["labels"],
            "additionalProperties": False}


def turn_credit(good: list[bool], eps: float) -> np.ndarray:
    """A^a_t = 1[Good_t] / (#Good + eps): the Good turns share one unit of credit."""
    g = np.asarray(good, dtype=np.float64)
    return g / (g.sum() + eps)


class CriticSearch(CreditAssigner):
    needs_groups = True
    Config = CriticSearchConfig
    config: CriticSearchConfig  # the parsed settings of ``Config``

    def __init__(self, config: CriticSearchConfig | None = None, critic: ChatModel | None = None) -> None:
        super().__init__(config)
        self._critic = critic  # built on first use, so config checks never import litellm or torch

    @property
    def critic(self) -> ChatModel:
        if self._critic is None:
            c = self.config.critic
            if c.backend == "litellm":
                self._critic = LiteLLMChat(c.litellm)
            else:
                self._critic = LocalChat(c.local)
        return self._critic

    # what the critic is told and how its answer is read; a method with other labels (TRIAGE) replaces these
    system_prompt: str = CRITIC_SYSTEM

    def prompt(self, traj: Trajectory, group: Group) -> str:
        return critic_prompt(traj, group, self.config.critic.obs_chars)

    def schema(self, n_turns: int) -> dict:
        return labels_schema(n_turns)

    def read(self, text: str, n_turns: int) -> list | str:
        return read_labels(text, n_turns)

    def label(self, traj: Trajectory, group: Group) -> tuple[list | None, JudgeUsage]:
        """One critic conversation for one trajectory: its labels, or None when it failed."""
        cfg, usage = self.config.critic, JudgeUsage()
        messages = [{"role": "system", "content": self.system_prompt},
                    {"role": "user", "content": self.prompt(traj, group)}]
        for attempt in range(cfg.max_repairs + 1):
            try:
                reply = ask(self.critic, messages, schema=self.schema(len(traj.turns)))
            except ChatError:
                usage.errors += 1
                usage.calls, usage.failed_calls = usage.calls + 1, usage.failed_calls + 1  # sent, no reply
                return None, usage
            count_reply(usage, reply)
            labels = self.read(reply.text, len(traj.turns))
            if not isinstance(labels, str):
                return labels, usage
            usage.errors += 1
            if attempt < cfg.max_repairs:
                usage.repairs += 1
                messages += [assistant_message(reply), {"role": "user", "content": f"Unusable: {labels}. Reply "
                                                        "again with the JSON object only."}]
        return None, usage

    def label_groups(self, batch: Batch, chosen: list[int]) -> tuple[dict[int, dict[int, list]], JudgeUsage, int]:
        """The critic's labels of every trajectory with turns in the ``chosen`` groups, the calls run
        concurrently: {group: {trajectory: labels}} for the groups whose calls all succeeded, what the calls
        cost, and how many chosen groups had a failed call (those are left out whole)."""
        jobs = [(gi, i) for gi in chosen for i, tr in enumerate(batch.groups[gi].trajectories) if tr.turns]

        def work(job: tuple[int, int]) -> tuple[list | None, JudgeUsage]:
            group = batch.groups[job[0]]
            return self.label(group.trajectories[job[1]], group)

        if jobs:
            self.critic  # noqa: B018  (build it once, before the threads race to: a local model loads here)
        with ThreadPoolExecutor(max_workers=max(1, min(self.config.critic.concurrency, len(jobs)))) as pool:
            results = dict(zip(jobs, pool.map(work, jobs)))
        usage, failures, labelled = JudgeUsage(), 0, {}
        for u in (u for _, u in results.values()):
            usage.add(u)
        for gi in chosen:
            mine = {i: results[(gi, i)][0] for g_i, i in jobs if g_i == gi}
            if any(labels is None for labels in mine.values()):
                failures += 1  # the whole group stays at plain GRPO
            else:
                labelled[gi] = mine
        return labelled, usage, failures

    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
        cfg = self.config
        per_turn = [grpo_turn_advantages(g, ctx, cfg) for g in batch.groups]
        chosen = [gi for gi, g in enumerate(batch.groups)
                  if (cfg.groups == "all" or in_win_range(g, cfg.eligible, cfg.eligible_of))
                  and any(t.turns for t in g.trajectories)]
        labelled, usage, failures = self.label_groups(batch, chosen)
        good, labelled_turns = 0, 0
        for gi, mine in labelled.items():
            for i, labels in mine.items():
                per_turn[gi][i] = cfg.alpha * turn_credit(labels, cfg.credit_eps) + (1 - cfg.alpha) * per_turn[gi][i]
                good, labelled_turns = good + sum(labels), labelled_turns + len(labels)
        metrics = {"credit/critic_labelled_groups": float(len(labelled)), "credit/critic_failures": float(failures),
                   "credit/critic_good_share": good / labelled_turns if labelled_turns else 0.0,
                   **usage_metrics(usage, CRITIC_COUNTS)}
        return Advantages(values=broadcast(batch, per_turn), metrics=metrics)
