"""``searchqa-sim``: Search-R1's search-and-answer interface over a generated fictional knowledge base.

``kb`` invents entities, relations and passages, ``questions`` turns them into single-hop, bridge and
comparison questions with hop chains and holds the exact-match reward, ``prompts`` holds the agent
presets and ``env`` ties them into a ``TextEnv`` with retrieval by a ``prover.retrieval`` backend.
``rules`` holds Search-R1's episode rules (actions, empty spans, stop strings, history, documents),
each named by its source in the original, and the departures with their switches.
"""

from prover.envs.searchqa_sim.env import SearchqaSimEnv
from prover.envs.searchqa_sim.questions import KINDS, exact_match, normalize_answer

__all__ = ["KINDS", "SearchqaSimEnv", "exact_match", "normalize_answer"]
