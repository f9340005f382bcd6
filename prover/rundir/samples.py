"""The rollout groups a run keeps as text (``groups.jsonl``), so that ``prover view`` can show them.

One JSON object per kept group and step::

    {"step": 3, "group": 1, "task_id": ..., "task_text": ...,
     "trajectories": [{"traj_id", "won", "return", "truncated", "truncation", "env_error",
                       "turns": [{"observation", "completion", "action", "reward", "format_valid",
                                  "action_valid", "advantage", "state_key"}]}],
     "segments": [{"traj_id", "start_turn", "end_turn", "delta", "accepted", "problem", "rationale",
                   "sampled_version", "verify_version"}],
     "judge_failure": null or why the judge gave no proposal for the group,
     "judge_replies": [what an LLM judge replied, in order]}

``advantage`` is the mean advantage over the turn's tokens (null when the method trained on other turns
than the rollout's, as SPO-tree does). ``state_key`` is the env's ``state_key()`` before the turn (a str,
number or null as it is, anything else as its ``repr``, cut to KEY_CHARS): the key GiGPO groups turns by
(``credit.anchor=state_key``), so turns with equal keys shared a step group.
``segments`` are the judge's proposals as the credit method
checked them: ``delta`` is null for one dropped by validation (``problem`` says why).
``sampled_version`` and ``verify_version`` are the policy versions that sampled the segment and played
the continuations that verified it (prover/episodes/async_rollout.py; null when unknown or not verified).
``judge_failure`` says why a group the judge was asked about got no proposal at all, e.g. "judge request failed
(http_401): ..." (one line, key-free, at most 500 characters); null when it got one or was not asked.
``judge_replies`` are an LLM judge's replies to the group's request (its text and tool calls, each cut to
``judge.max_reply_chars`` and then to TEXT_CHARS); empty for free judges and groups it was not asked about.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from prover.types import Advantages, Batch, Group

OBS_CHARS = 2000  # an observation is cut to its first characters; the viewer shows an excerpt anyway
TEXT_CHARS = 2000  # so is a rationale or a reason, whichever judge wrote it (a model's may run on)
KEY_CHARS = 500  # a state key is an env's choice; a history key grows with the episode


def _json_key(key: object) -> object:
    """A state key as JSON: str, numbers, bool and None as they are, else its ``repr``; cut to KEY_CHARS."""
    if key is None or isinstance(key, (bool, int, float)):
        return key
    return (key if isinstance(key, str) else repr(key))[:KEY_CHARS]


def _rank(gi: int, group: Group, proposed: set[int]) -> tuple[int, int]:
    """Groups the judge answered first (a proposal, or why it has none), then groups with both wins and
    losses, then the rest."""
    mixed = 0 < group.n_won < len(group.trajectories)
    return (0 if gi in proposed else 1 if mixed else 2, gi)


def _mean(values: np.ndarray) -> float | None:
    return float(np.mean(values)) if len(values) else None


def saved_groups(batch: Batch, adv: Advantages, step: int, n: int) -> list[dict[str, Any]]:
    """Up to ``n`` groups of one step as JSON-ready records, in batch order."""
    if n <= 0:
        return []
    proposed = {s.group for s in adv.segments}
    keep = sorted(sorted(range(len(batch.groups)), key=lambda gi: _rank(gi, batch.groups[gi], proposed))[:n])
    with_adv = adv.train_batch is None  # otherwise the values index another batch
    out = []
    for gi in keep:
        group = batch.groups[gi]
        trajs = []
        for i, tr in enumerate(group.trajectories):
            turns = [{"observation": t.observation[:OBS_CHARS], "completion": t.completion_text,
                      "action": t.action, "reward": float(t.reward), "format_valid": bool(t.format_valid),
                      "action_valid": bool(t.action_valid),
                      "advantage": _mean(adv.values[gi][i][k]) if with_adv else None,
                      "state_key": _json_key(t.state_key)}
                     for k, t in enumerate(tr.turns)]
            trajs.append({"traj_id": tr.traj_id, "won": bool(tr.won), "return": tr.env_return,
                          "truncated": bool(tr.truncated),
                          "truncation": tr.truncation, "env_error": tr.env_error, "turns": turns})
        mine = [s for s in adv.segments if s.group == gi]
        segments = [{"traj_id": s.segment.traj_id, "start_turn": s.segment.start_turn,
                     "end_turn": s.segment.end_turn, "delta": s.delta, "accepted": s.accepted,
                     "problem": s.problem[:TEXT_CHARS], "rationale": s.rationale[:TEXT_CHARS],
                     "sampled_version": s.sampled_version, "verify_version": s.verify_version}
                    for s in mine if s.segment is not None]
        failure = next((s.problem[:TEXT_CHARS] for s in mine if s.segment is None), None)
        replies = next(([r[:TEXT_CHARS] for r in s.transcript] for s in mine if s.transcript), [])
        out.append({"step": step, "group": gi, "task_id": group.task_id,
                    "task_text": group.trajectories[0].task_text if group.trajectories else "",
                    "trajectories": trajs, "segments": segments, "judge_failure": failure,
                    "judge_replies": replies})
    return out
