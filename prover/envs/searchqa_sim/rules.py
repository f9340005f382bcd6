"""Search-R1's episode rules, each named by the file and function of the original it follows.

Shared by ``searchqa-sim`` and the ``searchr1`` plugin, so that the sim and the real benchmark end,
parse and show an episode the same way. The original is PeterGriffinJin/Search-R1:

1. Actions (search_r1/llm_agent/generation.py, ``postprocess_predictions``): the first span matching
   ``<(search|answer)>(.*?)</\\1>`` is the action and its content is that span's text with the outer
   whitespace stripped. An empty content is still that action: ``<answer></answer>`` is an answer (the
   episode ends; ``execute_predictions``) that scores 0, and ``<search></search>`` searches for "".
2. Stop (generation.py, ``_postprocess_responses``): a response is cut just after its first
   ``</search>``; only when it holds none, after its first ``</answer>``. Nothing after the cut is
   trained on or shown again. ``STOP`` lists the two in that order of precedence.
3. Documents (generation.py, ``_passages2string``): each retrieved ``contents`` is split at its first
   newline into title and text, as stored (quotes and all), and becomes ``Doc i(Title: {title}) {text}``
   plus a newline; ``execute_predictions`` strips the joined string before wrapping it in
   ``<information>`` tags. A document with no newline is all title.
4. History (generation.py, ``run_llm_loop``): every later prompt holds the model's whole response so far,
   ``<think>`` text included, not only the extracted action.
5. Reward (verl/utils/reward_score/qa_em.py, ``compute_score_em`` / ``em_check``): 1.0 when the answer
   equals a gold answer after ``normalize_answer`` (SQuAD's), else 0.0; no format score.

Departures, each a documented switch whose default is the original's behaviour, or a bug not copied:

1. ``empty_action="invalid"`` (default ``"act"``): an empty ``<search>`` or ``<answer>`` span is an
   invalid no-op that uses a turn, as prover did before.
2. ``history="action"`` (default ``"response"``): later prompts show only each turn's action span, which
   keeps prompts short for tiny models.
3. Not copied: ``extract_solution`` scores the last ``<answer>...</answer>`` of the decoded prompt plus
   every response and ``<information>`` block (requiring two, since the prompt's example is one), so a
   span the loop never took as an answer, e.g. inside a query ``<search>x <answer>y</answer></search>``
   or a retrieved document, is scored, and an episode that never answers can score 1.0. Here only the
   answer action is scored.
4. Not copied: ``_postprocess_responses`` re-tokenizes the cut text, so the trained tokens can differ
   from the sampled ones; prover keeps the sampled tokens up to the one that completes the stop string.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

TAG_RE = re.compile(r"<(search|answer)>(.*?)</\1>", flags=re.DOTALL)
STOP = ("</search>", "</answer>")  # in Search-R1's order of precedence (rule 2)
EMPTY_ACTIONS = ("act", "invalid")
HISTORIES = ("response", "action")


def first_action(text: str) -> tuple[str, str] | None:
    """(tag, content) of the first action span in ``text``, content stripped (rule 1); None without one."""
    m = TAG_RE.search(text)
    return (m.group(1), m.group(2).strip()) if m else None


def information(contents: Sequence[str]) -> str:
    """The observation for retrieved documents given as their stored ``contents`` (rule 3)."""
    docs = []
    for i, content in enumerate(contents, 1):
        title, _, text = content.partition("\n")  # same split as Search-R1's split("\n")[0] and the rest
        docs.append(f"Doc {i}(Title: {title}) {text}\n")
    return f"<information>{''.join(docs).strip()}</information>"
