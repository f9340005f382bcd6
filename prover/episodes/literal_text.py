"""Prompts encoded so that env text stays literal: no text from an env, a tool or a retriever can become a
control token of the policy's or a judge's tokenizer.

A tokenizer matches its added tokens (``<|im_end|>``, ``<|im_start|>``, ``<|endoftext|>``, ``<think>``, ...)
anywhere in the text it encodes, so a chat template rendered to text and encoded whole turns an observation
holding ``<|im_end|>\\n<|im_start|>assistant\\n...`` into a forged assistant turn. Here only the template's
own text produces added tokens:

- a message's content never produces a special token (one the tokenizer marks special: every entry of its
  ``all_special_tokens`` and the chat markers);
- the parts of a content that are env text (a message's ``ENV_SPANS``: the observation, the task, the
  actions, a tool's output) produce no added token at all, special or not (``<think>``, ``<tool_call>``).

Such text is encoded as the tokenizer's model encodes any other text, byte for byte, so it decodes back to
itself. Text that holds none of these strings is encoded exactly as ``apply_chat_template(tokenize=True)``
encodes it (the rendered text, encoded whole), token for token.

Where each message's content lies in the rendered text is measured by rendering the conversation once more
with a marker in place of each content (a hash of all the contents, so no content can hold it) and checking
that putting the contents back gives the template's own text: nothing depends on a string an env could write.
"""

from __future__ import annotations

import hashlib
import json
import re
import weakref
from typing import TYPE_CHECKING, Any

from prover.errors import EnvTextError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

ENV_SPANS = "env_spans"  # a message's key: (start, end) character ranges of its content that are env text

# (start, end, every_added): a character range of a prompt from which no special token may come, or, with
# every_added, no added token at all
Span = tuple[int, int, bool]

_LITERAL_BACKENDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def added_tokens(tokenizer: PreTrainedTokenizerBase) -> dict[int, tuple[str, bool]]:
    """Every added token of ``tokenizer``: id -> (its text, whether it is special)."""
    special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    return {i: (t.content, bool(t.special) or i in special_ids)
            for i, t in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).items()}


def _holds_added(tokenizer: PreTrainedTokenizerBase, text: str, spans: list[Span]) -> bool:
    """Whether a range of ``spans`` touches the text of a token it may not produce (over-approximated:
    a token's text within its length of the range)."""
    tokens = added_tokens(tokenizer).values()
    longest = max((len(text_) for text_, _ in tokens), default=0)
    for start, end, every in spans:
        near = text[max(0, start - longest + 1):end + longest - 1]
        if any(tok in near for tok, special in tokens if tok and (every or special)):
            return True
    return False


def _literal_backend(tokenizer: PreTrainedTokenizerBase) -> Any:
    """A copy of the fast tokenizer's backend in which no added token is matched in the text: every one is
    marked special, and special tokens are encoded as text."""
    from tokenizers import Tokenizer  # lazy: the ground floor loads no tokenizer library

    backend = _LITERAL_BACKENDS.get(tokenizer)
    if backend is None:
        data = json.loads(tokenizer.backend_tokenizer.to_str())
        for token in data.get("added_tokens") or []:
            token["special"] = True
        data["truncation"] = data["padding"] = None
        backend = Tokenizer.from_str(json.dumps(data))
        backend.encode_special_tokens = True
        _LITERAL_BACKENDS[tokenizer] = backend
    return backend


def encode_literal(tokenizer: PreTrainedTokenizerBase, text: str, spans: list[Span]) -> list[int]:
    """The ids of ``text`` (no special tokens added around it), no token in ``spans`` coming from a range
    that may not produce it. Without such a token in ``spans``: ``tokenizer.encode`` of the text, as is."""
    if not spans or not _holds_added(tokenizer, text, spans):
        return list(tokenizer.encode(text, add_special_tokens=False))
    if not getattr(tokenizer, "is_fast", False):
        raise EnvTextError("the text holds the tokenizer's own tokens and only a fast tokenizer (a "
                           "tokenizer.json) can keep them literal")
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    added = added_tokens(tokenizer)
    kept: list[tuple[int, int, int]] = []  # (start, end, id) of the added tokens the template's text produced
    dropped = False
    for token_id, (start, end) in zip(encoded["input_ids"], encoded["offset_mapping"]):
        if token_id not in added:
            continue
        special, piece = added[token_id][1], text[start:end]
        # where the token's own text lies (an lstrip/rstrip token's offsets take in the spaces around it)
        lo, hi = start + len(piece) - len(piece.lstrip()), end - len(piece) + len(piece.rstrip())
        if any(lo < s_end and s_start < hi and (every or special) for s_start, s_end, every in spans):
            dropped = True
        else:
            kept.append((start, end, token_id))
    if not dropped:
        return list(encoded["input_ids"])
    # the text between the kept tokens is encoded with no added token matched, as the tokenizer encodes the
    # text between added tokens anyway (each piece on its own)
    backend, ids, at = _literal_backend(tokenizer), [], 0
    for start, end, token_id in kept:
        if start > at:
            ids += backend.encode(text[at:start], add_special_tokens=False).ids
        ids.append(token_id)
        at = max(at, end)
    if at < len(text):
        ids += backend.encode(text[at:], add_special_tokens=False).ids
    return ids


def render(tokenizer: PreTrainedTokenizerBase, messages: list[dict], generation_prompt: bool,
           template_kwargs: dict) -> str:
    """The chat template's text for ``messages`` (their ``ENV_SPANS`` are not the template's)."""
    clean = [{k: v for k, v in m.items() if k != ENV_SPANS} for m in messages]
    return tokenizer.apply_chat_template(clean, add_generation_prompt=generation_prompt, tokenize=False,
                                         **template_kwargs)


def _marker(contents: list[str]) -> str:
    """A string that none of ``contents`` holds: their hash (no text can hold the hash of itself)."""
    digest = hashlib.sha256("\0".join(contents).encode("utf-8", "surrogatepass")).hexdigest()
    marker = f"PROVER{digest[:32]}"
    while any(marker in c for c in contents):  # not seen: a SHA-256 prefix in the text it hashes
        marker += digest[len(marker) % 64]
    return marker


def _spans_of(message: dict, start: int, content: str, lead: int = 0) -> list[Span]:
    """The ranges of one message's ``content`` placed at ``start``: all of it, and its env text (its
    ``ENV_SPANS``, counted in the message's content less the ``lead`` characters a template trimmed)."""
    end = start + len(content)
    spans: list[Span] = [(start, end, False)]
    for lo, hi in message.get(ENV_SPANS) or ():
        lo, hi = max(start, start + lo - lead), min(end, start + hi - lead)
        if hi > lo:
            spans.append((lo, hi, True))
    return spans


def content_spans(tokenizer: PreTrainedTokenizerBase, messages: list[dict], generation_prompt: bool,
                  template_kwargs: dict,
                  text: str) -> list[Span] | None:
    """Where each message's content lies in ``text`` (the template's rendering of ``messages``), as the
    ranges from which no token may come that its content may not produce; None when the template rewrites
    a content otherwise than trimming it, so that it cannot be found."""
    contents = [m.get("content") if isinstance(m.get("content"), str) else "" for m in messages]
    marker = _marker(contents)
    shown = [{**m, "content": f"{marker}{i:06d}"} if contents[i] else m for i, m in enumerate(messages)]
    pieces = re.split(f"({re.escape(marker)}[0-9]{{6}})", render(tokenizer, shown, generation_prompt,
                                                                 template_kwargs))
    for trim in (False, True):  # a template that writes contents trimmed (Llama 3's) is read so
        built, spans, at = [], [], 0
        for k, piece in enumerate(pieces):
            if k % 2:  # a marker: message i's content goes here
                i = int(piece[len(marker):])
                piece = contents[i].strip() if trim else contents[i]
                lead = len(contents[i]) - len(contents[i].lstrip()) if trim else 0
                spans += _spans_of(messages[i], at, piece, lead)
            built.append(piece)
            at += len(piece)
        if "".join(built) == text:
            return spans
    return None


def render_with_spans(tokenizer: PreTrainedTokenizerBase, messages: list[dict], generation_prompt: bool,
                      template_kwargs: dict) -> tuple[str, list[Span]]:
    """The template's text for ``messages`` and the ranges of it that came from their contents (none when
    no content holds a token's text: then the plain encoding is the literal one)."""
    text = render(tokenizer, messages, generation_prompt, template_kwargs)
    if not any(_holds_added(tokenizer, m["content"], _spans_of(m, 0, m["content"]))
               for m in messages if isinstance(m.get("content"), str)):
        return text, []
    spans = content_spans(tokenizer, messages, generation_prompt, template_kwargs, text)
    if spans is None:
        raise EnvTextError("the text holds the tokenizer's own tokens and the chat template rewrites message "
                           "text, so it cannot be kept literal")
    return text, spans


def encode_chat(tokenizer: PreTrainedTokenizerBase, messages: list[dict], generation_prompt: bool = True,
                **template_kwargs: object) -> list[int]:
    """The ids of ``messages`` through the chat template, with every content literal (above): what
    ``apply_chat_template(messages, tokenize=True)`` returns for text that holds no token's text."""
    text, spans = render_with_spans(tokenizer, messages, generation_prompt, template_kwargs)
    return encode_literal(tokenizer, text, spans)
