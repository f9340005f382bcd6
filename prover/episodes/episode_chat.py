"""An episode as one growing chat (``rollout.context=chat``): token for token, each turn's prompt is the
previous turn's prompt, its completion as the policy generated it, and the env's reply.

    prompt[0]   = template(opening messages, add_generation_prompt)
    prompt[t+1] = prompt[t] + completion[t] + ids(closing rest + reply message + generation prompt)

``completion[t]`` is the engine's ids, never re-tokenised text, so the engine's prefix cache (the ``hf``
engine's, SGLang's radix cache) serves everything but the newest message, and the learner can forward the
whole episode once (``prover/learning/learner_rows.py``). This is how verifiers / prime-rl, SkyRL and ART keep a
multi-turn trajectory.

What the template writes between messages is measured from the template itself, with our own probe
messages: the *closing* it writes after an assistant's content (ChatML: ``<|im_end|>\\n``), and, for each
reply, the template's text for (probe user message, probe assistant message, reply) less its text for the
two probes alone: a prefix comparison, so nothing in the reply is searched for and no string an env writes
can change where the reply's text starts. When the completion ended with the closing's first token (the
end-of-turn id the engine stopped on), only the rest of the closing is appended; when it was cut (length, a
stop string) the whole closing is, so the chat stays well formed. The reply is encoded so that its env text
stays literal (``prover/episodes/literal_text.py``): an observation cannot write a turn of its own.

Templates that rewrite earlier turns when the whole conversation is re-rendered (Qwen3 drops the
``<think>`` of past assistant turns) are never re-rendered here: the chat keeps what the policy saw and
wrote, which is what it was sampled from and what it trains on. Such a template only has to write a new
user message the same way after any assistant message; one that does not for a plain reply is refused with
one line when the chat is set up. A reply whose own text makes the template write the turns before it
differently ends its episode (``EnvTextError``), not the run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prover.episodes.literal_text import encode_chat, encode_literal, render, render_with_spans
from prover.errors import ConfigError, EnvTextError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

PROBE = "PROVERPROBEREPLY"  # the probe assistant message's text: only ever in the probes, never next to env text
PROBES = [{"role": "user", "content": "x"}, {"role": "assistant", "content": PROBE}]


class EpisodeChat:
    """The token arithmetic of a growing chat for one tokenizer and its chat-template arguments."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, chat_kwargs: dict | None = None) -> None:
        self.tok = tokenizer
        self.kwargs = dict(chat_kwargs or {})
        self.probes_text = render(self.tok, PROBES, False, self.kwargs)
        if PROBE not in self.probes_text:
            raise ConfigError("the tokenizer's chat template drops the assistant's message; rollout.context=chat "
                              "needs a template that writes it (use rollout.context=window)")
        # the text the template writes after an assistant message's content
        self.closing = self.probes_text[self.probes_text.rindex(PROBE) + len(PROBE):]
        head = self.tok.encode(self.closing, add_special_tokens=False)[:1]
        head_text = self.tok.decode(head, skip_special_tokens=False) if head else ""
        # the end-of-turn id a completion may end with, and what the closing adds after it
        self.end_id = head[0] if head and head_text and self.closing.startswith(head_text) else None
        self.after_end = self.closing[len(head_text):] if self.end_id is not None else self.closing
        if self._reply({"role": "user", "content": "x"}) is None:
            raise ConfigError("the tokenizer's chat template writes an assistant message differently once a user "
                              "message follows it, so a chat cannot grow by appending; use rollout.context=window")

    def _reply(self, message: dict) -> tuple[str, list] | None:
        """What the template writes for ``message`` after an assistant's closing, generation prompt included,
        and the ranges of it that are message text; None when it writes the probes before it differently."""
        text, spans = render_with_spans(self.tok, [*PROBES, message], True, self.kwargs)
        if not text.startswith(self.probes_text):
            return None
        cut = len(self.probes_text)
        return text[cut:], [(s - cut, e - cut, every) for s, e, every in spans if s >= cut]

    def opening(self, messages: list[dict]) -> list[int]:
        """The first prompt: the opening messages through the template, ready for the assistant's answer."""
        return encode_chat(self.tok, messages, True, **self.kwargs)

    def rest_of_closing(self, completion_ids: list[int]) -> str:
        """The closing less what the completion already holds: when its last id is the closing's first
        token (the end-of-turn id the engine stopped on), the rest of the closing; else the whole closing."""
        if self.end_id is not None and completion_ids and completion_ids[-1] == self.end_id:
            return self.after_end
        return self.closing

    def next_prompt(self, prompt: list[int], completion_ids: list[int], message: dict) -> list[int]:
        """The prompt of the next turn: ``prompt + completion_ids``, then the closing's rest and ``message``.
        EnvTextError when the message's text makes the template write the turns before it differently."""
        reply = self._reply(message)
        if reply is None:
            raise EnvTextError("its reply changes how the chat template writes the turns before it, so the chat "
                               "cannot grow by appending")
        head = self.rest_of_closing(completion_ids)
        text, spans = reply
        tail = encode_literal(self.tok, head + text, [(s + len(head), e + len(head), every) for s, e, every in spans])
        return list(prompt) + list(completion_ids) + tail


def chat_budget_reason(length: int, budget: int) -> str:
    """Why a chat episode stopped growing: the one line a truncated trajectory keeps."""
    return (f"context: the chat reached {length} tokens, past rollout.max_prompt_tokens={budget}; raise it (with "
            "the model's positions) or lower rollout.max_turns")
