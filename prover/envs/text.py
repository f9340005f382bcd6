"""What text an env may hand the agent: any ``str`` that is valid Unicode, so any character at all ('√',
accented letters, CJK, emoji), and no lone surrogate (U+D800-U+DFFF). A lone surrogate is what
``bytes.decode(errors="surrogateescape")`` leaves for a byte it cannot decode (``\\udcff`` for 0xFF); it
cannot be encoded as UTF-8, so no tokenizer, JSON file or terminal can take it. ``text_problem`` says which
text of an env's answer holds one; the rollout ends that episode as an env error saying so, and ``check_env``
refuses the env."""

from __future__ import annotations

from typing import Any

SURROGATES = range(0xD800, 0xE000)


def unencodable(text: str) -> int:
    """The index of the first character of ``text`` that UTF-8 cannot encode (a lone surrogate), or -1."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return -1


def text_problem(obs: Any, info: Any) -> str:
    """Why the agent-facing text of an env's answer (the observation, ``info['task']``, each admissible
    action) cannot be used, in one line, or ''. Types are the contract check's business; only strings are
    looked at here."""
    texts: list[tuple[str, Any]] = [("observation", obs)]
    if isinstance(info, dict):
        texts.append(("info['task']", info.get("task")))
        actions = info.get("admissible_actions")
        if isinstance(actions, (list, tuple)):
            texts += [(f"admissible action {k}", a) for k, a in enumerate(actions)]
    for where, text in texts:
        if isinstance(text, str) and (at := unencodable(text)) >= 0:
            return (f"{where} is not valid Unicode: it holds the lone surrogate {text[at]!r} at character {at} "
                    "(what decoding with errors='surrogateescape' leaves); decode the env's bytes with "
                    "errors='replace'")
    return ""
