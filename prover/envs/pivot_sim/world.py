"""What a pivot-sim corridor holds, and how one task is drawn from a seed.

A ``World`` is everything about an episode that never changes: the stations (which kind of item each
rack offers, its options in rack order, which one the vault takes), where the stations stand, the
corridor's length and the rules' knobs (horizon, noise, clue mode). The mutable part is
``engine.State``.

Layout. The expert's path is ``n_pivots`` "take" turns, the choices that matter, and ``W`` "go forward"
turns (walking cells), which do not. ``irrelevant_share`` s asks for W / (W + n_pivots) = s, so

    W = max(delay + n_pivots - 1, floor(n_pivots * s / (1 - s) + 0.5))

(rounded half up). The agent starts at position 0 and the vault is at position W: the W-th step forward
arrives there and resolves the episode. The last station stands at W - delay, so the outcome of the last
choice comes ``delay`` turns after it; the other stations stand at distinct positions drawn from
[0, W - delay). The ``delay + n_pivots - 1`` floor is what leaves every station a cell of its own.

Seen and unseen tasks: a fixed table (``in_test_half``) puts half of every kind's words in the test half.
A train task's right items are all (kind, word) pairs of the train half, a test task's all of the test
half, so no train seed ever produces a test task, and both splits use the same words (wrong options are
drawn from the whole kind). With ``unseen_items=False`` both splits draw right items from every word, and
the splits differ only in their seed streams: a policy can then win a train task only by reading the clue,
where the split table lets it win most train tasks by taking the word it has seen taken before.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import lru_cache

# Kind -> the six words that make its items ("blue key"). Words never repeat across kinds, so each
# item name is one unambiguous string.
KINDS: dict[str, tuple[str, ...]] = {
    "key": ("red", "blue", "green", "yellow", "white", "black"),
    "tool": ("brass", "iron", "steel", "wooden", "bone", "glass"),
    "gem": ("ruby", "amber", "jade", "opal", "pearl", "onyx"),
    "coin": ("gold", "silver", "bronze", "copper", "nickel", "zinc"),
    "mask": ("fox", "owl", "bear", "wolf", "cat", "hawk"),
    "badge": ("round", "square", "star", "oval", "cross", "heart"),
    "card": ("ace", "king", "queen", "jack", "joker", "ten"),
    "rune": ("fire", "water", "earth", "wind", "ice", "storm"),
}
KIND_NAMES = tuple(KINDS)
WORDS_PER_KIND = 6
SPLITS = ("train", "test")
CLUE_MODES = ("visible", "memory")


def in_test_half(kind: str, word: str) -> bool:
    """The fixed split table: alternate words of each kind, shifted by the kind's index, are unseen."""
    return (KIND_NAMES.index(kind) + KINDS[kind].index(word)) % 2 == 1


def corridor_length(n_pivots: int, irrelevant_share: float, delay: int) -> int:
    """W, the walking cells (steps forward) of the corridor; see the module docstring."""
    asked = math.floor(n_pivots * irrelevant_share / (1.0 - irrelevant_share) + 0.5)
    return max(delay + n_pivots - 1, asked)


def listing(items: list[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def with_article(item: str) -> str:
    return ("an " if item[0] in "aeiou" else "a ") + item


@dataclass(frozen=True)
class Station:
    kind: str
    options: tuple[str, ...]  # item names in rack order, e.g. ("red key", "blue key", "green key")
    right: int  # index of the item the vault takes
    rack: str  # what the agent sees at the open rack, written once here because steps read it often

    @property
    def right_item(self) -> str:
        return self.options[self.right]


@dataclass(frozen=True)
class World:
    task_id: str  # f"{split}/{seed}", as rollout names tasks
    stations: tuple[Station, ...]
    positions: tuple[int, ...]  # station i stands at positions[i], strictly increasing
    length: int  # W: the vault is at this position
    max_steps: int
    noise: float
    clue_mode: str  # "visible" or "memory"
    clue: str  # "The vault takes the blue key and the ruby gem."


# kind -> (train-half words, test-half words)
HALVES = {kind: tuple(tuple(w for w in words if in_test_half(kind, w) == test) for test in (False, True))
          for kind, words in KINDS.items()}


def _draw(rng: random.Random, pool, k: int) -> list:
    """k distinct members of ``pool`` in random order (a partial Fisher-Yates shuffle): the same draw as
    ``rng.sample`` in spirit, several times faster on these tiny pools, and resets are most of a step's cost."""
    items = list(pool)
    for i in range(k):
        j = i + int(rng.random() * (len(items) - i))
        items[i], items[j] = items[j], items[i]
    return items[:k]


@lru_cache(maxsize=4096)  # a task is reset many times (a group, branching, evaluation); worlds are immutable
def generate(split: str, seed: int, *, n_pivots: int, n_options: int, delay: int, length: int,
             max_steps: int, noise: float, clue_mode: str, unseen_items: bool = True) -> World:
    """The task ``seed`` of ``split``: station kinds, racks, right items and station positions."""
    rng = random.Random(seed * 2 + SPLITS.index(split))  # the two splits draw from separate streams
    stations = []
    for kind in _draw(rng, KIND_NAMES, n_pivots):
        pool = HALVES[kind][split == "test"] if unseen_items else KINDS[kind]
        right_word = _draw(rng, pool, 1)[0]
        wrong = _draw(rng, [w for w in KINDS[kind] if w != right_word], n_options - 1)
        words = _draw(rng, [right_word, *wrong], n_options)
        options = tuple(f"{w} {kind}" for w in words)
        rack = f"A rack holds {listing([with_article(o) for o in options])}."
        stations.append(Station(kind, options, words.index(right_word), rack))
    last = length - delay
    positions = (*sorted(_draw(rng, range(last), n_pivots - 1)), last)
    clue = f"The vault takes {listing([f'the {s.right_item}' for s in stations])}."
    return World(f"{split}/{seed}", tuple(stations), positions, length, max_steps, noise, clue_mode, clue)
