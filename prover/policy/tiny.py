"""A tiny Qwen3-architecture policy and a tokenizer trained on an env's own text, built offline.

This is how the whole loop runs on a laptop CPU and in CI with no hub download: the tokenizer is a
byte-level BPE trained with ``tokenizers`` on prompts and actions the env itself produces (expert and
random moves), the model is ``Qwen3ForCausalLM`` from a config with random weights, and both are
saved with ``save_pretrained`` so every other room loads them like any local checkpoint folder.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path

from prover.envs.base import TextEnv
from prover.episodes.turn_prompts import agent_spec_for, bounded_text
from prover.learning.model_folder import TINY_POSITIONS
from prover.learning.modeling import quiet_transformers

ENTITY_PIECES = r" ?[A-Za-z]+ [0-9]+| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+"
PAD, BOS, EOS = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
TAG_TOKENS = ["<action>", "</action>", "<think>", "</think>"]
# The Qwen chat format, so tiny and real Qwen checkpoints go through the same prompt code.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def env_corpus(make_env: Callable[[], TextEnv], n_episodes: int, seed: int,
               history_window: int | None = None) -> Iterator[str]:
    """Prompts and completions of episodes that mix expert and random actions, on the train split, played
    on the env's ``corpus_env()`` when it names a faster one with the same text. Text is cut as the
    rollout cuts it (``bounded_text`` at the tiny model's positions), so a huge observation stays small."""
    rng = random.Random(seed)
    env = make_env()
    env = env.corpus_env() or env
    spec = agent_spec_for(env, history_window)
    for ep in range(n_episodes):
        obs, info = env.reset(seed=seed * 100_003 + ep, options={"split": "train"})
        task, history = bounded_text(str(info.get("task", obs)), TINY_POSITIONS), []
        obs = bounded_text(obs, TINY_POSITIONS)
        for step in range(60):
            actions = list(info.get("admissible_actions") or [])
            yield spec.render(task, obs, actions, history, step)
            expert = env.expert_action()
            explore = expert is None or rng.random() < 0.3
            action = (rng.choice(actions) if actions else "look") if explore else expert
            yield spec.format_action(action)
            history.append((obs, action))
            obs, _, term, trunc, info = env.step(action)
            obs = bounded_text(obs, TINY_POSITIONS)
            if term or trunc:
                break


def train_tokenizer(texts: Iterator[str], vocab_size: int):
    # tokenizers and transformers load torch's stack: only building the tiny policy needs them
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Keep "<name> <number>" mentions ("cabinet 1", "apple 2") in one piece, so BPE can give each
    # entity one token: a tiny model then copies an entity from the prompt as a single token, which
    # it learns far faster than a multi-token span. Byte-level below keeps every text exact.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(ENTITY_PIECES), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[PAD, BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens(TAG_TOKENS)  # one id per tag: the action format costs the model 2 tokens
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS, bos_token=BOS)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_policy(make_env: Callable[[], TextEnv], out_dir: str | Path, *, vocab_size: int = 2048,
                      hidden_size: int = 128, num_layers: int = 4, num_heads: int = 4,
                      intermediate_size: int = 384, corpus_episodes: int = 300, seed: int = 0,
                      history_window: int | None = None) -> Path:
    """Train the tokenizer, initialise the model, save both to ``out_dir``; returns the folder."""
    # torch and transformers are heavy: only building the tiny policy needs them
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    quiet_transformers()
    out = Path(out_dir)
    tokenizer = train_tokenizer(env_corpus(make_env, corpus_episodes, seed, history_window), vocab_size)
    head_dim = max(8, hidden_size // num_heads)
    config = AutoConfig.for_model(
        "qwen3", vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=max(1, num_heads // 2),
        head_dim=head_dim, max_position_embeddings=TINY_POSITIONS, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
