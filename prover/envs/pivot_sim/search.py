"""Exact optimal values of a pivot-sim task, for the ground-truth pivotal turns (diagnostics only).

``Oracle(world)`` computes, by memoised search over the true states reachable in that task and with
``engine``'s own transition rules, the optimal success probability

    V*(s)    = 1 if s is won, 0 if s is any other end (a wrong item, a jam, out of turns),
    V*(s)    = max over the admissible actions a of Q*(s, a) otherwise,
    Q*(s, a) = sum over the chance outcomes s' of a (the vault's jam) of P(s') * V*(s').

Every move uses a turn, so the state graph is acyclic (the step count grows) and finite (``max_steps``);
the search walks it with an explicit stack, so long horizons cannot overflow Python's recursion limit.
Fillers all lead to one next state, so each distinct successor is solved once.
"""

from __future__ import annotations

from prover.envs.pivot_sim.engine import State, choices, outcomes
from prover.envs.pivot_sim.world import World

TOLERANCE = 1e-9  # Q* values closer than this count as equal


class Oracle:
    """V* and Q* of one task's states, memoised across calls."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.values: dict[State, float] = {}

    def _moves(self, state: State) -> dict[str, list[tuple[float, State]]]:
        menu, _ = choices(self.world, state)
        return {action: outcomes(self.world, state, code) for action, code in menu.items()}

    def value(self, root: State) -> float:
        """V*(root)."""
        values = self.values
        stack = [root]
        while stack:
            state = stack[-1]
            if state in values:
                stack.pop()
                continue
            if state.done:
                values[state] = 1.0 if state.won else 0.0
                stack.pop()
                continue
            moves = self._moves(state).values()
            missing = {s for outs in moves for _, s in outs if s not in values}
            if missing:  # solve the successors first; this state is met again once they are known
                stack.extend(missing)
                continue
            values[state] = max(sum(p * values[s] for p, s in outs) for outs in moves)
            stack.pop()
        return values[root]

    def q_values(self, state: State) -> dict[str, float]:
        """Q*(state, a) for every admissible action a (empty once the episode is over)."""
        return {action: sum(p * self.value(s) for p, s in outs) for action, outs in self._moves(state).items()}

    def is_pivotal(self, state: State) -> bool:
        """Whether the best achievable success depends on the action taken in ``state``."""
        q = self.q_values(state).values()
        return bool(q) and max(q) - min(q) > TOLERANCE
