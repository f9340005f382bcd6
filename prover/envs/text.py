"""What text an env may hand the agent: any ``str`` that is valid Unicode, so any character at all ('√',
accented letters, CJK, emoji), and no lone surrogate (U+D800-U+DFFF). A lone surrogate is what
``bytes.decode(errors="surrogateescape")`` leaves for a byte it cannot decode (``\\udcff`` for 0xFF); it
cannot be encoded as UTF-8, so no tokenizer, JSON file or terminal can take it. ``text_problem`` says which
text of an env's answer holds one; the rollout ends that episode as an env error saying so, and ``check_env``
refuses the env.

Every prompt lists the admissible actions, all of them, so a list longer than a prompt can usefully show is
refused the same way, from its length, before anything walks, renders or tokenizes it: more than
``MAX_ADMISSIBLE_ACTIONS`` actions, or more than ``MAX_ADMISSIBLE_CHARS`` characters in all (a list that size
is some 250 000 tokens, past the context of the models prover trains)."""

from __future__ import annotations

import itertools
from typing import Any

SURROGATES = range(0xD800, 0xE000)
MAX_ADMISSIBLE_ACTIONS = 10_000
MAX_ADMISSIBLE_CHARS = 1_000_000


def unencodable(text: str) -> int:
    """The index of the first character of ``text`` that UTF-8 cannot encode (a lone surrogate), or -1."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return -1


def actions_problem(actions: list | tuple) -> str:
    """Why a list of admissible actions is too long for any prompt, in one line, or ''. The count is read
    first; the characters are summed only up to the bound."""
    if len(actions) > MAX_ADMISSIBLE_ACTIONS:
        return (f"info['admissible_actions'] lists {len(actions)} actions, more than the {MAX_ADMISSIBLE_ACTIONS} "
                "a prompt may show (every prompt lists them all)")
    total = 0
    for k, action in enumerate(actions):
        total += len(action) if isinstance(action, str) else 0
        if total > MAX_ADMISSIBLE_CHARS:
            return (f"info['admissible_actions'] holds more than {MAX_ADMISSIBLE_CHARS} characters (action {k} "
                    "passes it), more than a prompt may show (every prompt lists them all)")
    return ""


def text_problem(obs: object, info: object) -> str:
    """Why the agent-facing text of an env's answer (the observation, ``info['task']``, each admissible
    action) cannot be used, in one line, or ''. Types are the contract check's business; only strings are
    looked at here."""
    texts: list[tuple[str, Any]] = [("observation", obs)]
    actions: list | tuple = ()
    if isinstance(info, dict):
        texts.append(("info['task']", info.get("task")))
        found = info.get("admissible_actions")
        actions = found if isinstance(found, (list, tuple)) else ()
        if problem := actions_problem(actions):
            return problem
    named = ((f"admissible action {k}", a) for k, a in enumerate(actions))
    for where, text in itertools.chain(texts, named):
        if isinstance(text, str) and (at := unencodable(text)) >= 0:
            return (f"{where} is not valid Unicode: it holds the lone surrogate {text[at]!r} at character {at} "
                    "(what decoding with errors='surrogateescape' leaves); decode the env's bytes with "
                    "errors='replace'")
    return ""
