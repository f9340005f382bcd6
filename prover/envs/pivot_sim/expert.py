"""The observing expert that the warm start clones: take the clue's item at each rack, else walk on.

It knows which item each rack needs only from the clue, which every episode's first observation shows
(on the sign at the entrance, in both clue modes), so it uses nothing the agent has not seen. It never
wastes a turn on a filler, and after a wrong item (a random action of the warm start) it walks on to
the vault anyway: nothing can undo a closed rack.
"""

from __future__ import annotations

from prover.envs.pivot_sim.engine import FORWARD_ACTION, State, open_station
from prover.envs.pivot_sim.world import World


def expert_action(world: World, state: State) -> str | None:
    """The expert's next action, or None once the episode is over."""
    if state.done:
        return None
    i = open_station(world, state)
    return FORWARD_ACTION if i is None else f"take {world.stations[i].right_item}"


def expert_path_length(n_pivots: int, length: int) -> int:
    """Turns of the expert's episode: one take per station and ``length`` steps forward."""
    return n_pivots + length
