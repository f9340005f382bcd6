"""How an agent is prompted on searchqa-sim: two ``AgentSpec`` presets, picked by name.

``search-r1`` has the structure of Search-R1's ``make_prefix`` (scripts/data_process/qa_search_*.py),
worded our own way: reason in <think>, search with <search> query </search>, read results between
<information> tags, answer inside <answer> without explanation, an example answer, then the question.
The history is the transcript so far (each query followed by its <information> block), which is
what Search-R1's model sees as one growing sequence.

``compact`` (the default) is the same interface with one line of instruction, for tiny CPU models.

Both parse Search-R1's tags: the action is the first ``<search>...</search>`` or
``<answer>...</answer>`` span, tags kept (``AgentSpec.raw_action_tags``), and case is kept because a
query or an answer is not a command.
"""

from __future__ import annotations

from prover.envs.agent_spec import AgentSpec

_INSTRUCTIONS = (
    "Answer the question below. Each time you receive new information, reason about it inside <think> "
    "and </think> first. If some knowledge is missing, you can query a search engine by writing "
    "<search> query </search>, and the top results come back between <information> and </information>. "
    "You may search as many times as you like. Once no further knowledge is needed, give only the final "
    "answer inside <answer> and </answer>, with no explanation, for example <answer> Paris </answer>.\n"
)
_TAGS = ("search", "answer")

PRESETS: dict[str, AgentSpec] = {
    "search-r1": AgentSpec(
        first_template=_INSTRUCTIONS + "{observation}",
        later_template=_INSTRUCTIONS + "{history}\n{observation}",
        history_entry="{observation}\n{action}",
        action_separator=", ",
        history_window=4,  # the env widens this to its turn cap, so the whole transcript is shown
        lowercase=False,
        raw_action_tags=_TAGS,
    ),
    "compact": AgentSpec(
        first_template="{observation}\nReply <search>query</search> or <answer>answer</answer>.",
        later_template="{history}\n{observation}\nReply <search>query</search> or <answer>answer</answer>.",
        history_entry="{observation}\n{action}",
        action_separator=", ",
        history_window=4,
        lowercase=False,
        raw_action_tags=_TAGS,
    ),
}
