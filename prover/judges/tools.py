"""The tools every judge shares, as plain functions over a rollout group, and their OpenAI schemas.

An LLM judge reads the successful trajectory in full (``prover.chat.render_trajectory``), compact
previews of the failed ones (``preview``), and may call ``search_trajectory(query, top_k)`` (a fuzzy
search over the failed runs' turns) and ``get_segment(traj_id, start_turn, end_turn)`` (the text of
some turns) before it answers with ``submit_segment``. Arguments written by a model are checked strictly: a
bad id, range or type comes back as a one-line ``error: ...`` string the model can act on, never as an
exception.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import TypeGuard

from prover.chat.render import clip_line, cut_text
from prover.types import Group, Trajectory, Turn

MAX_TOP_K = 20
MAX_SEGMENT_TURNS = 10  # the most turns one get_segment call returns (keeps tool answers short)
MAX_TOOL_CHARS = 8000  # the most characters of one tool answer (judge.max_tool_chars): a reply stays in
# the conversation and is resent with every later request, so one huge observation would be paid many times
FUZZY_CUTOFF = 0.8  # a query word matches a turn word this similar (difflib ratio): "mugs" ~ "mug"
_WORD = re.compile(r"[a-z0-9]+")


@dataclass
class SearchHit:
    """One turn that matches a query: where it is, a short excerpt, and how well it matches (0..1]."""

    traj_id: str
    turn: int
    snippet: str
    score: float


def turn_text(turn: Turn) -> str:
    """What a turn said: the observation the agent saw, then the action it took."""
    return f"observation: {turn.observation}\naction: {turn.action}"


def preview(traj: Trajectory, max_chars: int = 400) -> str:
    """A compact line for a failed run: length, outcome, its actions (repeats folded), where it ended."""
    runs: list[list] = []  # [action, times in a row]
    for turn in traj.turns:
        a = turn.action if turn.format_valid and turn.action_valid else f"{turn.action} [invalid]"
        if runs and runs[-1][0] == a:
            runs[-1][1] += 1
        else:
            runs.append([a, 1])
    actions = [a if k == 1 else f"{a} x{k}" for a, k in runs]
    outcome = "turn cap" if traj.truncated else "failed"
    last = clip_line(traj.turns[-1].observation, 120) if traj.turns else ""
    body = f"{traj.traj_id!r} ({len(traj.turns)} turns, {outcome}): " + " | ".join(actions)
    return clip_line(body, max_chars - len(last) - 16) + (f" || last seen: {last}" if last else "")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _word_match(q: str, vocab: set[str], memo: dict[tuple[str, str], float]) -> tuple[float, str | None]:
    """Best similarity of query word ``q`` to a word of ``vocab``: 1 exact, difflib ratio >= cutoff, else 0."""
    if q in vocab:
        return 1.0, q
    best, word = 0.0, None
    for w in vocab:
        if abs(len(w) - len(q)) > max(2, len(q) // 3):  # cannot reach the cutoff; skip the ratio
            continue
        key = (q, w)
        if key not in memo:
            memo[key] = difflib.SequenceMatcher(None, q, w).ratio()
        if memo[key] >= FUZZY_CUTOFF and memo[key] > best:
            best, word = memo[key], w
    return best, word


def _snippet(turn: Turn, word: str | None, chars: int) -> str:
    """The action and the part of the observation around the first matched word."""
    obs = " ".join(turn.observation.split())
    at = obs.lower().find(word) if word else -1
    room = max(20, chars - len(turn.action) - 12)
    start = max(0, at - room // 3) if at >= 0 else 0
    part = obs[start:start + room]
    part = ("..." if start > 0 else "") + part + ("..." if start + room < len(obs) else "")
    return f"{part} -> {turn.action}"


def search_hits(group: Group, query: str, top_k: int = 5, failed_only: bool = True,
                snippet_chars: int = 160) -> list[SearchHit]:
    """The ``top_k`` turns best matching ``query`` (observation and action text), best first.

    Score = 0.8 * (mean over query words of their best fuzzy match in the turn) + 0.2 * (difflib
    similarity of the whole query to the action), so a query that names an action finds it exactly
    and one that paraphrases an observation still ranks by shared words. Ties keep group order.
    """
    q_words = _words(query)
    memo: dict[tuple[str, str], float] = {}
    hits = []
    for traj in group.trajectories:
        if failed_only and traj.won:
            continue
        for t, turn in enumerate(traj.turns):
            vocab = set(_words(turn.observation) + _words(turn.action))
            matches = [_word_match(q, vocab, memo) for q in q_words]
            word_score = sum(m[0] for m in matches) / len(q_words) if q_words else 0.0
            action_sim = difflib.SequenceMatcher(None, query.lower().strip(), turn.action.lower()).ratio()
            score = 0.8 * word_score + 0.2 * action_sim
            if word_score > 0:
                first = next((m[1] for m in matches if m[1] is not None), None)
                hits.append(SearchHit(traj.traj_id, t, _snippet(turn, first, snippet_chars), round(score, 4)))
    hits.sort(key=lambda h: -h.score)  # stable: equal scores keep group and turn order
    return hits[:top_k]


def _is_int(x: object) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool)


def search_trajectory(group: Group, query: object, top_k: object = 5,
                      failed_only: bool = True) -> list[SearchHit] | str:
    """``search_hits`` with a model's arguments checked; a bad argument gives an ``error: ...`` string."""
    if not isinstance(query, str) or not query.strip():
        return f"error: query must be a non-empty string (got {query!r})"
    if not _is_int(top_k) or not 1 <= top_k <= MAX_TOP_K:
        return f"error: top_k must be an integer from 1 to {MAX_TOP_K} (got {top_k!r})"
    if not _words(query):
        return f"error: query {query!r} has no letters or digits to search for"
    return search_hits(group, query, top_k, failed_only)


def find_trajectory(group: Group, traj_id: object) -> Trajectory | str:
    ids = [t.traj_id for t in group.trajectories]
    if not isinstance(traj_id, str):
        return f"error: traj_id must be a string, one of {ids} (got {traj_id!r})"
    for traj in group.trajectories:
        if traj.traj_id == traj_id:
            return traj
    close = difflib.get_close_matches(traj_id, ids, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"error: no trajectory {traj_id!r} in this group; its ids are {ids}{hint}"


def get_segment(group: Group, traj_id: object, start_turn: object, end_turn: object) -> list[tuple[int, str]] | str:
    """(turn index, turn text) for turns ``start_turn..end_turn`` (inclusive) of one trajectory of the
    group, at most ``MAX_SEGMENT_TURNS`` of them; a bad id or range gives an ``error: ...`` string."""
    traj = find_trajectory(group, traj_id)
    if isinstance(traj, str):
        return traj
    if not _is_int(start_turn) or not _is_int(end_turn):
        return f"error: start_turn and end_turn must be integers (got {start_turn!r}, {end_turn!r})"
    n = len(traj.turns)
    if not 0 <= start_turn <= end_turn < n:
        return (f"error: turns {start_turn}..{end_turn} are out of range for {traj_id!r}: "
                f"need 0 <= start_turn <= end_turn <= {n - 1}")
    if end_turn - start_turn + 1 > MAX_SEGMENT_TURNS:
        return f"error: ask for at most {MAX_SEGMENT_TURNS} turns per call (got {end_turn - start_turn + 1})"
    return [(t, turn_text(traj.turns[t])) for t in range(start_turn, end_turn + 1)]


def parse_arguments(arguments: object) -> dict | str:
    """A tool call's arguments (a JSON object as text, or already a dict) -> dict, or an error string."""
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str):
        return f"error: arguments must be a JSON object (got {type(arguments).__name__})"
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError as exc:
        return f"error: arguments are not valid JSON ({exc.msg} at char {exc.pos}); send one JSON object"
    if not isinstance(value, dict):
        return f"error: arguments must be a JSON object, not {type(value).__name__}"
    return value


def run_tool(group: Group, name: str, arguments: object, max_chars: int = MAX_TOOL_CHARS) -> str:
    """Answer one research tool call with text for the model, at most ``max_chars`` characters of it
    (plus a note of what was cut). Never raises on the model's input."""
    return cut_text(_answer_tool(group, name, arguments), max_chars)


def _answer_tool(group: Group, name: str, arguments: object) -> str:
    args = parse_arguments(arguments)
    if isinstance(args, str):
        return args
    expected = {"search_trajectory": {"query", "top_k"}, "get_segment": {"traj_id", "start_turn", "end_turn"}}
    if name not in expected:
        return f"error: unknown tool {name!r}; the tools are {sorted(expected) + ['submit_segment']}"
    unknown = set(args) - expected[name]
    if unknown:
        return f"error: {name} takes {sorted(expected[name])}; unknown argument(s) {sorted(unknown)}"
    if name == "search_trajectory":
        if "query" not in args:
            return "error: search_trajectory needs a 'query'"
        hits = search_trajectory(group, args["query"], args.get("top_k", 5))
        if isinstance(hits, str):
            return hits
        if not hits:
            return "no turn of the failed runs matches that query"
        return "\n".join(f"{h.traj_id} turn {h.turn} (score {h.score:.2f}): {h.snippet}" for h in hits)
    missing = expected[name] - set(args)
    if missing:
        return f"error: get_segment needs {sorted(missing)}"
    seg = get_segment(group, args["traj_id"], args["start_turn"], args["end_turn"])
    if isinstance(seg, str):
        return seg
    return "\n".join(f"[turn {t}] {text}" for t, text in seg)


def _function(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False}}}


SEARCH_SCHEMA = _function(
    "search_trajectory", "Fuzzy search over every turn (observation and action) of the failed runs. Returns "
    "the best matching turns as 'traj_id turn N (score): excerpt -> action'.",
    {"query": {"type": "string", "description": "Words to look for, e.g. an object, a place or an action."},
     "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K, "description": "How many turns to return."}},
    ["query"])
SEGMENT_SCHEMA = _function(
    "get_segment", f"The full text of turns start_turn..end_turn (inclusive, at most {MAX_SEGMENT_TURNS}) "
    "of any trajectory of the group.",
    {"traj_id": {"type": "string"}, "start_turn": {"type": "integer", "minimum": 0},
     "end_turn": {"type": "integer", "minimum": 0}},
    ["traj_id", "start_turn", "end_turn"])
SUBMIT_SCHEMA = _function(
    "submit_segment", "Your final answer: the segment of the successful trajectory that made the difference.",
    {"traj_id": {"type": "string", "description": "The successful trajectory's id."},
     "start_turn": {"type": "integer", "minimum": 0}, "end_turn": {"type": "integer", "minimum": 0},
     "rationale": {"type": "string", "description": "One or two sentences: the failure mode it avoids."}},
    ["traj_id", "start_turn", "end_turn", "rationale"])
TOOL_SCHEMAS = [SEARCH_SCHEMA, SEGMENT_SCHEMA, SUBMIT_SCHEMA]
