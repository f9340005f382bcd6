"""ALFWorld's dynamics and text in plain Python: what each command does and what the game says.

The rules are those of ALFWorld's PDDL domain (``alfred.pddl``) and the text those of its grammar
(``alfred.twl2``), so that prompts and parsers written against the stand-in work unchanged on the real
game (see ``shared/research/environments.md`` §1.2-1.3):

* ``go to R`` reaches any receptacle in one step, and with it the location R stands at: every
  receptacle there can then be opened, searched and used, and going to another of them is not a move
  (the real engine answers "Nothing happens."). Openable receptacles start closed and hide what is in
  them until opened.
* One object in hand. ``take`` needs empty hands and an open (or non-openable) receptacle; ``move``
  (``put`` in the old grammar) needs the receptacle to be open and able to contain the object.
  Fixtures (a house plant, a television, a desk lamp) cannot be picked up.
* ``heat``/``cool``/``clean`` need a microwave/fridge/sink basin at the current location and
  the object in hand; the appliance may stay closed. Heating clears cold and cooling clears hot.
* ``use`` switches on a lamp in a receptacle at the current location. As in the PDDL domain the lamp
  stays "toggled" once used, so the game always answers "You turn on ..." (its hidden on/off bit
  changes nothing). Which lamps can be used is the rules' choice (``World.switches``).
* ``slice X with K``: holding a knife or a butter knife, any sliceable object at the current location
  can be sliced, even inside a closed receptacle (SliceObject asks only that it be at the location).
  Slicing changes nothing but what ``examine`` says.
* ``examine`` works on the receptacles at the current location and on the object in hand, nothing
  else: the real engine (Fast Downward's reading of ``examineObject``'s disjunctive precondition)
  admits no other object.
* Anything not admissible answers exactly "Nothing happens." and changes nothing.

``plugins/prover-alfworld`` plays the same generated tasks on the real engine and checks, step by
step, that the feedback and the admissible lists agree with this file.

A command is a tuple ``(verb, *names)`` (``("go", receptacle, location)`` for a move);
``choices`` maps every admissible command string to one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prover.envs.alfworld_sim.world import LIGHT, PROCESSING, TWO, World

NOTHING = "Nothing happens."
KNIVES = ("knife", "butterknife")  # alfred.pddl's SliceObject: the held object is a Knife or a ButterKnife
WELCOME = "-= Welcome to TextWorld, ALFRED! =-"
APPLIANCE_VERBS = {verb: (prop, appliances) for verb, prop, appliances in PROCESSING.values()}
# The 2.1.3 help text, verbatim (its "move" line is two columns short, as in the game). The grammar
# starts it with a newline, which the real engine's text generator drops.
HELP = {"move": (
    "Available commands:\n"
    "  look:                             look around your current location\n"
    "  inventory:                        check your current inventory\n"
    "  go to (receptacle):               move to a receptacle\n"
    "  open (receptacle):                open a receptacle\n"
    "  close (receptacle):               close a receptacle\n"
    "  take (object) from (receptacle):  take an object from a receptacle\n"
    "  move (object) to (receptacle):  place an object in or on a receptacle\n"
    "  examine (something):              examine a receptacle or an object\n"
    "  use (object):                     use an object\n"
    "  heat (object) with (receptacle):  heat an object using a receptacle\n"
    "  clean (object) with (receptacle): clean an object using a receptacle\n"
    "  cool (object) with (receptacle):  cool an object using a receptacle\n"
    "  slice (object) with (object):     slice an object using a sharp object\n"
)}
HELP["put"] = HELP["move"].replace("move (object) to (receptacle):", "put (object) in/on (receptacle):")


@dataclass
class State:
    """Everything that changes during an episode. ``where[o]`` is None while ``o`` is held."""

    where: dict[str, str | None]
    loc: str | None = None  # a location (World.at); None: the middle of the room, where episodes start
    holding: str | None = None
    opened: set[str] = field(default_factory=set)
    hot: set[str] = field(default_factory=set)
    cool: set[str] = field(default_factory=set)
    clean: set[str] = field(default_factory=set)
    lit: set[str] = field(default_factory=set)  # lamps switched on
    sliced: set[str] = field(default_factory=set)

    @classmethod
    def initial(cls, world: World) -> State:
        # ALFWorld's problems mark goal-type objects that start in a fridge as already cool
        # (alfworld:alfworld/gen/game_states/planned_game_state.py, "already cool").
        chilled = {o for o in world.targets if world.kind[world.start[o]] == "fridge"}
        return cls(where=dict(world.start), cool=chilled)

    def copy(self) -> State:
        return State(dict(self.where), self.loc, self.holding, set(self.opened), set(self.hot),
                     set(self.cool), set(self.clean), set(self.lit), set(self.sliced))

    def key(self) -> tuple:
        """Canonical and hashable; ``where`` keeps the world's object order, so its values suffice."""
        return (self.loc, self.holding, tuple(self.where.values()), tuple(sorted(self.opened)),
                tuple(sorted(self.hot)), tuple(sorted(self.cool)), tuple(sorted(self.clean)),
                tuple(sorted(self.lit)), tuple(sorted(self.sliced)))


def command(cmd: tuple, grammar: str) -> str:
    """The text of a command tuple in the given placing grammar ("move" or "put")."""
    verb = cmd[0]
    if verb == "go":
        return "go to " + cmd[1]
    if verb == "take":
        return f"take {cmd[1]} from {cmd[2]}"
    if verb == "put":
        return f"move {cmd[1]} to {cmd[2]}" if grammar == "move" else f"put {cmd[1]} in/on {cmd[2]}"
    if verb in APPLIANCE_VERBS:
        return f"{verb} {cmd[1]} with {cmd[2]}"
    return " ".join(cmd)


def is_open(world: World, state: State, rec: str) -> bool:
    return world.kind[rec] not in world.rules.openable or rec in state.opened


def contents(world: World, state: State, rec: str) -> list[str]:
    where = state.where
    return [o for o in world.objects if where[o] == rec]


def choices(world: World, state: State, grammar: str) -> dict[str, tuple]:
    """Every admissible command: its text (the game's grammar) mapped to its tuple."""
    out: dict[str, tuple] = {"help": ("help",), "inventory": ("inventory",), "look": ("look",)}
    loc, held, site = state.loc, state.holding, world.site
    for rec in world.receptacles:
        if site[rec] != loc:
            out["go to " + rec] = ("go", rec, site[rec])
    if held is not None:
        out["examine " + held] = ("examine", held)
    if loc is not None:
        for rec in world.at[loc]:
            _at_receptacle(world, state, rec, grammar, out)
    return out


def _at_receptacle(world: World, state: State, rec: str, grammar: str, out: dict[str, tuple]) -> None:
    """Add the commands on one receptacle at the agent's location."""
    held, kind, rules = state.holding, world.kind, world.rules
    out["examine " + rec] = ("examine", rec)
    rtype = kind[rec]
    reachable = is_open(world, state, rec)
    if rtype in rules.openable:
        verb = "close" if rec in state.opened else "open"
        out[f"{verb} {rec}"] = (verb, rec)
    knife = held is not None and kind[held] in KNIVES
    for obj in contents(world, state, rec):
        # Neither ToggleObject nor SliceObject asks for an open receptacle, only the same location.
        if obj in world.switches:
            out["use " + obj] = ("use", obj)
        elif reachable and held is None and obj in world.portable:
            out[f"take {obj} from {rec}"] = ("take", obj, rec)
        if knife and "s" in rules.props[kind[obj]]:
            out[f"slice {obj} with {held}"] = ("slice", obj, held)
    if held is not None:
        htype = kind[held]
        if reachable and rtype in rules.holds[htype]:
            cmd = ("put", held, rec)
            out[command(cmd, grammar)] = cmd
        for verb, (prop, appliances) in APPLIANCE_VERBS.items():
            if rtype in appliances and prop in rules.props[htype]:
                out[f"{verb} {held} with {rec}"] = (verb, held, rec)


def transition(state: State, cmd: tuple) -> None:
    """Apply an admissible command to ``state`` in place."""
    verb = cmd[0]
    if verb == "go":
        state.loc = cmd[2]
    elif verb == "open":
        state.opened.add(cmd[1])
    elif verb == "close":
        state.opened.discard(cmd[1])
    elif verb == "take":
        state.where[cmd[1]] = None
        state.holding = cmd[1]
    elif verb == "put":
        state.where[cmd[1]] = cmd[2]
        state.holding = None
    elif verb == "heat":
        state.hot.add(cmd[1])
        state.cool.discard(cmd[1])
    elif verb == "cool":
        state.cool.add(cmd[1])
        state.hot.discard(cmd[1])
    elif verb == "clean":
        state.clean.add(cmd[1])
    elif verb == "use":
        state.lit.add(cmd[1])
    elif verb == "slice":
        state.sliced.add(cmd[1])


def won(world: World, state: State) -> bool:
    """ALFWorld's goal test: any instance of the goal type will do."""
    where = state.where
    if world.task_type == LIGHT:  # holding the object where a switched-on goal lamp stands
        held, site = state.holding, world.site
        return (held is not None and world.kind[held] == world.obj_type
                and any(site[where[lamp]] == state.loc for lamp in world.lamps if lamp in state.lit))
    kind, recep = world.kind, world.recep_type
    if world.task_type == TWO:  # two distinct instances in the same receptacle
        places = [where[o] for o in world.targets if where[o] is not None and kind[where[o]] == recep]
        return len(places) > len(set(places))
    need = {"clean": state.clean, "heat": state.hot, "cool": state.cool}.get(
        PROCESSING.get(world.task_type, ("",))[0])
    return any(where[o] is not None and kind[where[o]] == recep and (need is None or o in need)
               for o in world.targets)


# -- text ------------------------------------------------------------------------------------------
def listing(names: list[str] | tuple[str, ...], article: str = "a ") -> str:
    """TextWorld's list: "nothing", "a x", "a x, and a y", "a x, a y, and a z" (always "a")."""
    items = [article + n for n in names]
    if not items:
        return "nothing"
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + ", and " + items[-1]


def describe(world: World, state: State, rec: str) -> str:
    if world.kind[rec] not in world.rules.openable:
        return f"On the {rec}, you see {listing(contents(world, state, rec))}."
    if rec in state.opened:
        return f"The {rec} is open. In it, you see {listing(contents(world, state, rec))}."
    return f"The {rec} is closed."


def look(world: World, state: State, intro: bool = False) -> str:
    """The room (or the receptacles faced). The real grammar lists the receptacles at the agent's
    location, which in the middle of the room is none; only the intro, derived without a location,
    lists them all. Facing several, it lists them as TextWorld does, without articles."""
    if state.loc is None:
        return ("You are in the middle of a room. Looking quickly around you, you see "
                f"{listing(world.receptacles if intro else ())}.")
    return f"You are facing the {listing(world.at[state.loc], '')}. Next to it, you see nothing."


def welcome(world: World, state: State) -> str:
    return f"{WELCOME}\n\n{look(world, state, intro=True)}\n\nYour task is to: {world.goal}."


def examine_object(world: World, state: State, obj: str) -> str:
    if world.kind[obj] in world.rules.receptacle_objects:  # the grammar's first rule wins over the rest
        return f"This is a normal {obj}. In it, you see nothing."
    hot, cool, clean = obj in state.hot, obj in state.cool, obj in state.clean
    if obj in state.sliced:  # the grammar's sliced rules come first, and call a cooled thing "cool"
        temper = "hot" if hot else "cool" if cool else ""
        words = " and ".join(w for w in (temper, "clean" if clean else "") if w)
        return f"This is a {words} sliced {obj}." if words else f"This is a sliced {obj}."
    if clean and (hot or cool):
        return f"This is a {'hot' if hot else 'cool'} and clean {obj}."
    if hot or clean or cool:
        return f"This is a {'hot' if hot else 'clean' if clean else 'cold'} {obj}."
    return f"There's nothing special about {obj}."


def feedback(world: World, state: State, cmd: tuple, grammar: str) -> str:
    """What the game says after ``cmd`` was applied (the state is the one after the command)."""
    verb = cmd[0]
    if verb == "go":
        return f"You arrive at {cmd[1]}. {describe(world, state, cmd[1])}"
    if verb == "open":
        return f"You open the {cmd[1]}. {describe(world, state, cmd[1])}"
    if verb == "close":
        return f"You close the {cmd[1]}."
    if verb == "take":
        return f"You pick up the {cmd[1]} from the {cmd[2]}."
    if verb == "put":
        return (f"You move the {cmd[1]} to the {cmd[2]}." if grammar == "move"
                else f"You put the {cmd[1]} in/on the {cmd[2]}.")
    if verb in APPLIANCE_VERBS:
        return f"You {verb} the {cmd[1]} using the {cmd[2]}."
    if verb == "use":
        return f"You turn on the {cmd[1]}."
    if verb == "slice":
        return f"You sliced the {cmd[1]} with the {cmd[2]}."
    if verb == "examine":
        name = cmd[1]
        if name in world.receptacles:
            return describe(world, state, name)
        return examine_object(world, state, name)
    if verb == "inventory":
        held = state.holding
        return f"You are carrying: a {held}." if held else "You are not carrying anything."
    if verb == "look":
        return look(world, state)
    return HELP[grammar]
