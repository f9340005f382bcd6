"""What forwarding each chat trajectory once saves the learner: one row per turn against one sequence row per
trajectory (``learner.sequence_rows`` off and on), on the same synthetic chats, side by side in one process.

    python -m benchmarks.perf.learner_sequences [--episodes 8] [--turns 8] [--first 120] [--observation 40]
        [--completion 16] [--repeats 3] [--models tiny,smollm2-shape] [--micro-rows 32]

A chat: a first prompt of --first tokens, then per turn a completion of --completion tokens and an
observation of --observation tokens, each turn's prompt the one before plus its completion and observation
(append-only, as chat prompts are). Every token gets a nonzero advantage, so every turn trains.

Models: ``tiny`` (the run's default tiny policy, built from alfworld-sim's text); ``smollm2`` (the folder
~/.cache/prover/models/smollm2-135m-instruct, when it exists); ``smollm2-shape`` (a Llama of
SmolLM2-135M's shape, 49,152-token vocabulary, random weights: the learner's work does not depend on the
weights' values). Reported per model and mode: learner/forwarded_tokens per learner/unique_tokens, and the
update's seconds (median of --repeats, the two modes interleaved, each on its own Learner): read the ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

SMOLLM2 = Path.home() / ".cache/prover/models/smollm2-135m-instruct"


def chats(episodes: int, turns: int, first: int, observation: int, completion: int, vocab: int, seed: int = 0):
    from prover.types import Advantages, Batch, Group, Trajectory, Turn

    rng, nrng = random.Random(seed), np.random.default_rng(seed)

    def ids(n: int) -> list[int]:
        return [rng.randrange(3, vocab) for _ in range(n)]

    trajs, values = [], []
    for e in range(episodes):
        prompt, episode = ids(first), []
        for _ in range(turns):
            done = ids(completion)
            episode.append(Turn(prompt_ids=prompt, completion_ids=done, logprobs=[-5.0] * completion,
                                observation="o", completion_text="c", action="a", format_valid=True,
                                action_valid=True, reward=0.0, state_key=e))
            prompt = prompt + done + ids(observation)
        trajs.append(Trajectory(traj_id=f"e{e}", task_id="task", task_text="t", turns=episode))
        values.append([nrng.uniform(-1, 1, completion).astype(np.float32) for _ in range(turns)])
    return Batch([Group("task", trajs)]), Advantages(values=[values])


def smollm2_shape(folder: Path, tokenizer_from: Path) -> Path:
    """A Llama of SmolLM2-135M-Instruct's shape (its config.json's numbers), random weights."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                         rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tokenizer_from).save_pretrained(folder)  # the learner reads its pad id only
    return folder


def measure(model: Path, batch, adv, repeats: int, micro_rows: int) -> dict[str, dict[str, float]]:
    from prover.config import LearnerConfig
    from prover.learning.learner import Learner
    learners = {mode: Learner(model, LearnerConfig(sequence_rows=(mode == "sequence rows"), mini_batch_rows=1024,
                                                   micro_batch_rows=micro_rows), max_completion_tokens=64)
                for mode in ("turn rows", "sequence rows")}
    seconds: dict[str, list[float]] = {mode: [] for mode in learners}
    stats: dict[str, dict[str, float]] = {}
    for _ in range(repeats):
        for mode, learner in learners.items():
            start = time.perf_counter()
            stats[mode] = learner.update(batch, adv)
            seconds[mode].append(time.perf_counter() - start)
    return {mode: {"forwarded_tokens": s["learner/forwarded_tokens"], "unique_tokens": s["learner/unique_tokens"],
                   "forwarded_per_unique": s["learner/forwarded_tokens"] / s["learner/unique_tokens"],
                   "padding_share": s["learner/padding_share"], "update_s": statistics.median(seconds[mode])}
            for mode, s in stats.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--first", type=int, default=120)
    parser.add_argument("--observation", type=int, default=40)
    parser.add_argument("--completion", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default="tiny,smollm2-shape")
    parser.add_argument("--micro-rows", type=int, default=32, help="learner.micro_batch_rows (turns)")
    args = parser.parse_args()
    import torch

    from prover.envs import make_env
    from prover.learning.model_folder import model_setting
    from prover.policy.tiny import build_tiny_policy

    torch.manual_seed(0)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tiny = build_tiny_policy(lambda: make_env("alfworld-sim"), Path(tmp) / "tiny")
        folders = {"tiny": (tiny, model_setting(tiny, "vocab_size"))}
        if SMOLLM2.is_dir():
            folders["smollm2"] = (SMOLLM2, 49152)
        folders["smollm2-shape"] = (None, 49152)
        for name in args.models.split(","):
            if name not in folders:
                print(f"{name}: not here, skipped")
                continue
            folder, vocab = folders[name]
            if folder is None:
                folder = smollm2_shape(Path(tmp) / name, tiny)
            batch, adv = chats(args.episodes, args.turns, args.first, args.observation, args.completion, vocab)
            results[name] = measure(folder, batch, adv, args.repeats, args.micro_rows)
            turn, seq = results[name]["turn rows"], results[name]["sequence rows"]
            for mode, r in results[name].items():
                print(f"{name:14s} {mode:13s} forwarded {r['forwarded_tokens']:7.0f}  unique "
                      f"{r['unique_tokens']:7.0f}  ratio {r['forwarded_per_unique']:.3f}  padding "
                      f"{r['padding_share']:.3f}  update {r['update_s']:7.2f} s")
            print(f"{name:14s} turn rows / sequence rows: update time {turn['update_s'] / seq['update_s']:.2f}x, "
                  f"tokens forwarded {turn['forwarded_tokens'] / seq['forwarded_tokens']:.2f}x")
    print(json.dumps({"settings": vars(args), "threads": torch.get_num_threads(), "results": results}, indent=1))


if __name__ == "__main__":
    main()
