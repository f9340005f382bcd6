"""How an agent is prompted on searchqa-sim: two ``SearchAgentSpec`` presets, picked by name.

``search-r1`` has the structure of Search-R1's ``make_prefix`` (scripts/data_process/qa_search_*.py),
worded our own way: reason in <think>, search with <search> query </search>, read results between
<information> tags, answer inside <answer> without explanation, an example answer, then the question.
The history is the transcript so far (each response followed by its <information> block), which is
what Search-R1's model sees as one growing sequence.

``compact`` (the default) is the same interface with one line of instruction, for tiny CPU models.

Both follow Search-R1's rules (``rules``): generation stops after the first ``</search>``, else after
the first ``</answer>`` (``stop``); the action is the first ``<search>``/``<answer>`` span, case kept;
with ``history="response"`` (the default, Search-R1's) the action handed to the env, and so shown in
later prompts, is the whole response, ``<think>`` text included, and the env finds the span in it;
with ``history="action"`` it is the span alone. The format is valid when a span is present; there is
no other format rule (no CJK rule: a correct Chinese answer is a correct answer).
"""

from __future__ import annotations

from dataclasses import dataclass

from prover.envs.agent_spec import AgentSpec, ParsedAction, compact_preset
from prover.envs.searchqa_sim.rules import STOP, TAG_RE

_INSTRUCTIONS = (
    "Answer the question below. Each time you receive new information, reason about it inside <think> "
    "and </think> first. If some knowledge is missing, you can query a search engine by writing "
    "<search> query </search>, and the top results come back between <information> and </information>. "
    "You may search as many times as you like. Once no further knowledge is needed, give only the final "
    "answer inside <answer> and </answer>, with no explanation, for example <answer> Paris </answer>.\n"
)
_TAGS = ("search", "answer")


@dataclass(frozen=True)
class SearchAgentSpec(AgentSpec):
    """An ``AgentSpec`` that parses like Search-R1's ``postprocess_predictions``; ``history`` is
    "response" (later prompts keep the whole response) or "action" (only its action span)."""

    history: str = "response"

    def parse(self, completion: str) -> ParsedAction:
        m = TAG_RE.search(completion)
        if self.history == "response":
            return ParsedAction(completion, m is not None)
        if m is None:
            return ParsedAction(completion.strip()[-self.fallback_chars:], False)
        return ParsedAction(f"<{m.group(1)}>{m.group(2).strip()}</{m.group(1)}>", True)


PRESETS: dict[str, SearchAgentSpec] = {
    "search-r1": SearchAgentSpec(
        first_template=_INSTRUCTIONS + "{observation}",
        later_template=_INSTRUCTIONS + "{history}\n{observation}",
        history_entry="{observation}\n{action}",
        action_separator=", ",
        history_window=4,  # the env widens this to its turn cap, so the whole transcript is shown
        lowercase=False,
        raw_action_tags=_TAGS,
        stop=STOP,
    ),
    "compact": compact_preset(SearchAgentSpec, head="",
                              turn="{observation}\nReply <search>query</search> or <answer>answer</answer>.",
                              history_entry="{observation}\n{action}", history_window=4, lowercase=False,
                              raw_action_tags=_TAGS, stop=STOP),
}
