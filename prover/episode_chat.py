"""An episode as one growing chat (``rollout.context=chat``): token for token, each turn's prompt is the
previous turn's prompt, its completion as the policy generated it, and the env's reply.

    prompt[0]   = template(opening messages, add_generation_prompt)
    prompt[t+1] = prompt[t] + completion[t] + ids(closing rest + reply message + generation prompt)

``completion[t]`` is the engine's ids, never re-tokenised text, so the engine's prefix cache (the ``hf``
engine's, SGLang's radix cache) serves everything but the newest message, and the learner can forward the
whole episode once (``prover/learner_rows.py``). This is how verifiers / prime-rl, SkyRL and ART keep a
multi-turn trajectory.

What the template writes between messages is measured once from the template itself, with a sentinel
assistant message: the *closing* it writes after an assistant's content (ChatML: ``<|im_end|>\\n``) and the
text of a new user message up to the next assistant header. When the completion ended with the closing's
first token (the end-of-turn id the engine stopped on), only the rest of the closing is appended; when it
was cut (length, a stop string) the whole closing is, so the chat stays well formed.

Templates that rewrite earlier turns when the whole conversation is re-rendered (Qwen3 drops the
``<think>`` of past assistant turns) are never re-rendered here: the chat keeps what the policy saw and
wrote, which is what it was sampled from and what it trains on. Such a template only has to write a new
user message the same way after any assistant message; a template that does not (its text after the
sentinel does not start with its closing) is refused with one line when the run starts.
"""

from __future__ import annotations

from typing import Any

from prover.errors import ConfigError

SENTINEL = "PROVERSENTINELREPLY"


class EpisodeChat:
    """The token arithmetic of a growing chat for one tokenizer and its chat-template arguments."""

    def __init__(self, tokenizer: Any, chat_kwargs: dict | None = None) -> None:
        self.tok = tokenizer
        self.kwargs = dict(chat_kwargs or {})
        self.closing = self._closing()
        head = self.tok.encode(self.closing, add_special_tokens=False)[:1]
        head_text = self.tok.decode(head, skip_special_tokens=False) if head else ""
        # the end-of-turn id a completion may end with, and what the closing adds after it
        self.end_id = head[0] if head and head_text and self.closing.startswith(head_text) else None
        self.after_end = self.closing[len(head_text):] if self.end_id is not None else self.closing

    def _render(self, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        return self.tok.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False,
                                            **self.kwargs)

    def _closing(self) -> str:
        """The text the template writes after an assistant message's content."""
        text = self._render([{"role": "user", "content": "x"}, {"role": "assistant", "content": SENTINEL}], False)
        if SENTINEL not in text:
            raise ConfigError("the tokenizer's chat template drops the assistant's message; rollout.context=chat "
                              "needs a template that writes it (use rollout.context=window)")
        return text[text.rindex(SENTINEL) + len(SENTINEL):]

    def opening(self, messages: list[dict[str, str]]) -> list[int]:
        """The first prompt: the opening messages through the template, ready for the assistant's answer."""
        ids = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **self.kwargs)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # newer transformers return a BatchEncoding
            ids = ids["input_ids"]
        return list(ids)

    def reply_text(self, message: dict[str, str]) -> str:
        """What the template writes for ``message`` after an assistant's closing, generation prompt included."""
        text = self._render([{"role": "user", "content": "x"}, {"role": "assistant", "content": SENTINEL},
                             message], True)
        after = text[text.rindex(SENTINEL) + len(SENTINEL):]
        if not after.startswith(self.closing):
            raise ConfigError("the tokenizer's chat template writes an assistant message differently once a user "
                              "message follows it, so a chat cannot grow by appending; use rollout.context=window")
        return after[len(self.closing):]

    def rest_of_closing(self, completion_ids: list[int]) -> str:
        """The closing less what the completion already holds: when its last id is the closing's first
        token (the end-of-turn id the engine stopped on), the rest of the closing; else the whole closing."""
        if self.end_id is not None and completion_ids and completion_ids[-1] == self.end_id:
            return self.after_end
        return self.closing

    def next_prompt(self, prompt: list[int], completion_ids: list[int], message: dict[str, str]) -> list[int]:
        """The prompt of the next turn: ``prompt + completion_ids``, then the closing's rest and ``message``."""
        tail = self.rest_of_closing(completion_ids) + self.reply_text(message)
        return list(prompt) + list(completion_ids) + list(self.tok.encode(tail, add_special_tokens=False))


def chat_budget_reason(length: int, budget: int) -> str:
    """Why a chat episode stopped growing: the one line a truncated trajectory keeps."""
    return (f"context: the chat reached {length} tokens, past rollout.max_prompt_tokens={budget}; raise it (with "
            "the model's positions) or lower rollout.max_turns")
