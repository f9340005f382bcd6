"""Text a chat model reads: a trajectory with turn numbers (the main input of an LLM judge and of a
critic), and text cut to a budget, saying how much was cut."""

from __future__ import annotations

from prover.types import Trajectory, Turn


def clip_line(text: str, n: int) -> str:
    """``text`` on one line (whitespace runs folded), at most ``n`` characters, "..." where it was cut."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: max(0, n - 3)] + "..."


def cut_text(text: str, max_chars: int) -> str:
    """``text`` kept to its first ``max_chars`` characters, saying how much was cut when it was."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}... [cut: {len(text) - max_chars:,} more characters]"


def _turn_line(t: int, turn: Turn, obs_chars: int) -> str:
    flag = "" if turn.format_valid and turn.action_valid else "  [invalid action]"
    return f"[turn {t}] observation: {clip_line(turn.observation, obs_chars)}\n         action: {turn.action}{flag}"


def render_trajectory(traj: Trajectory, obs_chars: int = 600) -> str:
    """The whole trajectory with turn numbers, its task and outcome (the main input of an LLM judge or critic)."""
    outcome = "succeeded" if traj.won else ("failed (turn cap)" if traj.truncated else "failed")
    lines = [f"trajectory {traj.traj_id!r} ({len(traj.turns)} turns, {outcome}, return {traj.env_return:g})"]
    lines += [_turn_line(t, turn, obs_chars) for t, turn in enumerate(traj.turns)]
    return "\n".join(lines)
