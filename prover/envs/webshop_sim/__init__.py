"""``webshop-sim``: WebShop's shopping website on a procedurally generated catalog, in pure Python.

``vocab`` and ``catalog`` draw products, near-miss distractors and goals; ``search`` is a small BM25;
``reward`` is WebShop's purchase score; ``rules`` holds the switches that bring back prover's earlier
departures (WebShop's behaviour by default); ``engine`` holds the pages and their text; ``expert`` is
an imitable shopper; ``prompts`` holds the agent-facing presets and ``env`` ties them into a ``TextEnv``.
"""

from prover.envs.webshop_sim.env import WebshopSimEnv

__all__ = ["WebshopSimEnv"]
