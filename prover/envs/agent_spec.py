"""How an agent talks to an env: the prompt templates, the history window and the action parser.

This is data that lives with the env (``TextEnv.agent_spec``) so that an embedded env and the real
benchmark it stands in for build identical prompts and parse identical actions. The per-turn prompt
is the task plus the last ``history_window`` (observation, action) pairs, as in verl-agent's
"step-independent" rollout: prompts stay bounded on long episodes and restarting from turn t is exact.

With ``rollout.context=chat`` the episode is one growing chat instead (``prover/episodes/episode_chat.py``): the
opening messages (``system_prompt`` when set, then ``first_template`` with the task and first observation),
then each turn's completion as the assistant message and ``reply_template`` (the env's answer and the
admissible actions) as the next user message. ``history_window`` plays no part there: the chat is the history.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import TypeVar

from prover.episodes.literal_text import ENV_SPANS


@dataclass(frozen=True)
class ParsedAction:
    action: str  # what is sent to the env
    format_valid: bool  # the completion followed the output format


@dataclass(frozen=True)
class AgentSpec:
    """Templates are ``str.format`` strings over: task, observation, actions, history, step, n_history."""

    first_template: str = (
        "Task: {task}\nObservation: {observation}\nAdmissible actions: {actions}\n"
        "Answer with <action>one admissible action</action>."
    )
    later_template: str = (
        "Task: {task}\nStep {step}. Recent history:\n{history}\nObservation: {observation}\n"
        "Admissible actions: {actions}\nAnswer with <action>one admissible action</action>."
    )
    history_entry: str = "[Observation {k}: {observation} Action {k}: {action}]"
    action_separator: str = ", "
    history_window: int = 2
    action_tag: str = "action"
    require_think: bool = False  # verl-agent marks a turn invalid without <think></think>
    lowercase: bool = True  # verl-agent lower-cases the completion before extracting the action
    fallback_chars: int = 30  # without tags, the last N characters are sent (the env answers no-op)
    hidden_actions: tuple[str, ...] = ()  # admissible actions not shown to the agent (e.g. "help")
    # Tags whose whole span is the action (Search-R1's <search>q</search> / <answer>a</answer>):
    # when set, the first such span, tags included, is sent to the env instead of <action> text.
    raw_action_tags: tuple[str, ...] = ()
    # Stop strings in order of precedence: the rollout cuts each completion just after the first
    # occurrence of the first listed string it holds (Search-R1's "</search>", then "</answer>").
    stop: tuple[str, ...] = ()
    # Chat context only: a system message before the first user message ("" for none, so the chat
    # template's own default, if it has one, stays), and the user message that follows each turn.
    system_prompt: str = ""
    reply_template: str = "Observation: {observation}\nActions: {actions}"

    def chat_opening(self, task: str, observation: str, actions: list[str] | None) -> list[dict]:
        """The messages a chat episode starts with: the system prompt (when set), then the first prompt; its
        ``ENV_SPANS`` say which of its text is the env's (kept literal when encoded:
        prover/episodes/literal_text.py)."""
        text, spans = self.render_marked(task, observation, actions, [], 0)
        first = {"role": "user", "content": text, ENV_SPANS: spans}
        return ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else []) + [first]

    def chat_reply(self, observation: str, actions: list[str] | None, step: int) -> dict:
        """The user message with the env's answer after turn ``step - 1``: what turn ``step`` sees."""
        shown = [a for a in (actions or []) if a not in self.hidden_actions]
        text, spans = fill(self.reply_template, {"step": step + 1}, observation=observation,
                           actions=self.action_separator.join(shown))
        return {"role": "user", "content": text, ENV_SPANS: spans}

    def render(self, task: str, observation: str, actions: list[str] | None,
               history: list[tuple[str, str]], step: int) -> str:
        """The prompt text for one turn. ``history`` holds every earlier (observation, action)."""
        return self.render_marked(task, observation, actions, history, step)[0]

    def render_marked(self, task: str, observation: str, actions: list[str] | None,
                      history: list[tuple[str, str]], step: int) -> Marked:
        """``render``'s text and the (start, end) ranges of it that are env text: the task, the observations
        and the admissible actions, never the template's own words nor the policy's earlier actions."""
        shown = [a for a in (actions or []) if a not in self.hidden_actions]
        window = history[-self.history_window:] if self.history_window > 0 else []
        first_k = len(history) - len(window) + 1
        # an earlier action is the policy's own text, shown as it wrote it (its tags as their tokens; no
        # special token, as in any message): only the observations are the env's
        entries = [fill(self.history_entry, {"k": first_k + j, "action": a}, observation=o)
                   for j, (o, a) in enumerate(window)]
        hist = join_marked("\n", entries)
        template = self.first_template if not window else self.later_template
        return fill(template, {"step": step + 1, "n_history": len(window)}, task=task,
                    observation=observation, actions=self.action_separator.join(shown), history=hist)

    def parse(self, completion: str) -> ParsedAction:
        """The verl-agent projection: text between the first <action> and </action> tags; with
        ``raw_action_tags``, the first span like Search-R1's ``<(search|answer)>...</\\1>``, tags kept."""
        text = completion.lower() if self.lowercase else completion
        if self.raw_action_tags:
            tags = "|".join(re.escape(t) for t in self.raw_action_tags)
            m = re.search(rf"<({tags})>(.*?)</\1>", text, flags=re.DOTALL)
        else:
            m = re.search(rf"<{self.action_tag}>(.*?)</{self.action_tag}>", text, flags=re.DOTALL)
        if m is None:
            return ParsedAction(text.strip()[-self.fallback_chars:], False)
        valid = True
        if self.require_think and not re.search(r"<think>.*?</think>", text, flags=re.DOTALL):
            valid = False
        if re.search(r"[\u4e00-\u9fff]", text):  # verl-agent rejects CJK output
            valid = False
        if self.raw_action_tags:
            tag, inner = m.group(1), " ".join(m.group(2).split())
            return ParsedAction(f"<{tag}>{inner}</{tag}>", valid)
        return ParsedAction(" ".join(m.group(1).split()), valid)

    def format_action(self, action: str) -> str:
        """The completion text an expert would write for ``action`` (used by the warm start)."""
        return self.format_action_marked(action)[0]

    def format_action_marked(self, action: str) -> Marked:
        """``format_action``'s text and the range of it that is the action (env text)."""
        think = "<think></think>" if self.require_think else ""
        if self.raw_action_tags:  # the action already carries its tags
            return f"{think}{action}", [(len(think), len(think) + len(action))]
        head = f"{think}<{self.action_tag}>"
        return f"{head}{action}</{self.action_tag}>", [(len(head), len(head) + len(action))]


# text and the (start, end) ranges of it that are env text
Marked = tuple[str, list[tuple[int, int]]]


def fill(template: str, plain: dict, **env: str | Marked) -> Marked:
    """``template.format(**plain, **env)`` and the ranges of the result that the ``env`` values fill: the
    whole of a text, the ranges a marked text carries (where the template writes it as is)."""
    out, spans, at = [], [], 0
    formatter = string.Formatter()
    for literal, field, spec, conversion in formatter.parse(template):
        out.append(literal)
        at += len(literal)
        if field is None:
            continue
        name = re.match(r"[^.\[]*", field).group(0)
        value = env.get(name)
        shown = {name: value if isinstance(value, str) else value[0]} if value is not None else plain
        text = formatter.format_field(formatter.convert_field(formatter.get_field(field, (), shown)[0], conversion),
                                      spec or "")
        if isinstance(value, tuple) and text == value[0]:
            spans += [(at + lo, at + hi) for lo, hi in value[1]]
        elif value is not None and text:
            spans.append((at, at + len(text)))
        out.append(text)
        at += len(text)
    return "".join(out), spans


def join_marked(separator: str, parts: list[Marked]) -> Marked:
    """``separator.join`` of marked texts, their ranges moved to where each lands."""
    out, spans, at = [], [], 0
    for k, (text, inner) in enumerate(parts):
        if k:
            out.append(separator)
            at += len(separator)
        out.append(text)
        spans += [(at + lo, at + hi) for lo, hi in inner]
        at += len(text)
    return "".join(out), spans


Spec = TypeVar("Spec", bound=AgentSpec)

COMPACT_HEAD = "Task: {task}\n"
COMPACT_TURN = "Observation: {observation}\nActions: {actions}"


def compact_preset(spec_type: type[Spec] = AgentSpec, *, head: str = COMPACT_HEAD, turn: str = COMPACT_TURN,
                   **fields) -> Spec:
    """The ``compact`` preset of the bundled envs, for tiny models trained on a CPU: no prose, a prompt of a
    few hundred characters. The first prompt is ``head`` then ``turn``; later ones put the history window
    (one ``history_entry`` per line) between them. ``fields`` are the env's own (history entry and window,
    hidden actions, parser settings)."""
    return spec_type(first_template=head + turn, later_template=head + "{history}\n" + turn, action_separator=", ",
                     **fields)
