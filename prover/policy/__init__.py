"""The starting policy of a run: a given checkpoint folder, or the tiny model (``tiny``), then the warm
start (``warmstart``).

Both products are folders under ``<run.dir>/models``, named by a hash of every setting that shapes
them, written atomically and reused when present: a resumed or repeated run does not redo them, and a
changed setting never picks up a stale one. The warm start's name hashes its base folder's content, not
its path, so a copied ``models/`` folder is reused in a new run folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from prover.config import TrainConfig, WarmStartConfig, warmstart_lr
from prover.envs.base import TextEnv
from prover.episodes.turn_prompts import prompt_budget
from prover.errors import CheckpointError
from prover.learning.model_folder import ModelSpec, model_spec
from prover.policy.tiny import build_tiny_policy
from prover.policy.warmstart import expert_rows
from prover.progress import Reporter
from prover.rundir.run import FileLock, RunDir
from prover.system.distributed import world_size
from prover.system.files import write_atomic
from prover.system.threads import apply_threads


def settings_key(*parts: object) -> str:
    """A short hash of the settings that determine a built folder."""
    text = json.dumps([p.model_dump(mode="json") if hasattr(p, "model_dump") else p for p in parts], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


DIGESTS_FILE = "digests.json"  # in <run.dir>/models: base folder -> file signature and content digest


def folder_digest(folder: Path, cache: Path) -> str:
    """A hash of the content of a model folder's files (what from_pretrained reads: the top-level files).

    Hashing a 2B model's weights reads ~4.5 GB (seconds at the ~0.5-2 GB/s sha256 runs here), so the
    digest is cached in ``cache``, keyed by the folder's resolved path and the name, size and mtime of each
    file, the signature make and git trust to say a file is unchanged. A copied run folder carries the cache
    along; a base that moved with it (the tiny model) is hashed again, which for that model is milliseconds.
    """
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    signature = [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files]
    where = str(folder.resolve())
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):  # none yet, or a damaged one: hash again
        known = {}
    entry = known.get(where) if isinstance(known, dict) else None
    if isinstance(entry, dict) and entry.get("signature") == signature:
        return str(entry["digest"])
    whole = hashlib.sha256()
    for p in files:
        with open(p, "rb") as f:
            whole.update(f"{p.name}\0{hashlib.file_digest(f, 'sha256').hexdigest()}\n".encode())
    digest = whole.hexdigest()[:16]
    known = known if isinstance(known, dict) else {}
    known[where] = {"signature": signature, "digest": digest}
    cache.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(cache, json.dumps(known, indent=1) + "\n")  # several ranks may write it at once
    return digest


def resolved_warmstart(ws: WarmStartConfig, model: ModelSpec) -> WarmStartConfig:
    """``ws`` with its lr resolved to the value it trains ``model`` with (unset and its default are one warm
    start)."""
    return ws.model_copy(update={"lr": warmstart_lr(ws, model.path)})


def warmstart_key(cfg: TrainConfig, model: ModelSpec, ws: WarmStartConfig, base_digest: str) -> str:
    """What names a warm-start folder: the base's content and every setting the SFT depends on, ``ws`` the
    warm start's settings with the lr it trains with (``resolved_warmstart``)."""
    return settings_key(base_digest, ws, cfg.seed, cfg.model.chat_template_kwargs, cfg.model.dtype,
                        cfg.learner.micro_batch_rows, cfg.learner.grad_clip, cfg.rollout.max_turns,
                        cfg.rollout.history_window,
                        # only when set, so that the warm starts built before the bound existed keep their names
                        *([cfg.rollout.max_prompt_tokens] if cfg.rollout.max_prompt_tokens is not None else []),
                        *(["chat"] if cfg.rollout.context == "chat" else []),
                        # the env decides which expert episodes are cloned; a tiny base's name holds it already
                        *([cfg.env] if not model.tiny else []))


def build_once(target: Path, build: Callable[[Path], None]) -> Path:
    """``target``, built by ``build`` into a temporary folder and renamed into place unless it exists.

    Another process (a second ``prover bench`` sharing the warm start) may be building it now: a lock per
    target makes this one wait for that build and then reuse it, rather than build into the same temporary
    folder and fail to rename it over the finished one."""
    if (target / "config.json").is_file():
        return target
    if world_size() > 1:  # every process would build it at once, and the warm start is a training run itself
        raise CheckpointError(f"{str(target)!r} is not built yet, and a run of several processes does not "
                              "build it: run `prover sft` with the same config in one process first")
    with FileLock(target.with_name(f".{target.name}.lock")):
        if (target / "config.json").is_file():  # built by the process this one waited for
            return target
        tmp = target.with_name(f".tmp-{target.name}")
        shutil.rmtree(tmp, ignore_errors=True)
        build(tmp)
        os.rename(tmp, target)
    return target


def base_policy(cfg: TrainConfig, model: ModelSpec, run: RunDir, make_env: Callable[[], TextEnv]) -> Path:
    """``model``'s folder, or the tiny model built (once) from the env's text."""
    if model.folder is not None:
        return model.folder
    t = cfg.model.tiny
    key = settings_key(t, cfg.env, cfg.seed, cfg.rollout.history_window)
    return build_once(run.model_dir(f"base-{key}"), lambda out: build_tiny_policy(
        make_env, out, vocab_size=t.vocab_size, hidden_size=t.hidden_size, num_layers=t.num_layers,
        num_heads=t.num_heads, intermediate_size=t.intermediate_size, corpus_episodes=t.corpus_episodes,
        seed=cfg.seed, history_window=cfg.rollout.history_window))


def warm_start(cfg: TrainConfig, ws: WarmStartConfig, positions: int | None, base: Path, out: Path,
               make_env: Callable[[], TextEnv], report: Reporter) -> dict[str, float]:
    """Behaviour-clone noisy expert episodes into ``base`` (``ws``: the settings with the lr resolved; a
    model of ``positions`` positions); save the result to ``out``."""
    from prover.learning.learner import Learner  # here: it loads torch, and prover.policy must import without it

    learner = Learner(base, cfg.learner.model_copy(update={"lr": ws.lr}), dtype=cfg.model.dtype, seed=cfg.seed)
    with report.task(f"warm start: {ws.episodes} expert episodes", total=ws.episodes) as tick:
        rows = expert_rows(make_env, learner.tokenizer, episodes=ws.episodes, random_share=ws.random_action_share,
                           seed=cfg.seed, max_turns=cfg.rollout.max_turns, history_window=cfg.rollout.history_window,
                           chat_kwargs=cfg.model.chat_template_kwargs, on_episode=tick, context=cfg.rollout.context,
                           note=report.note,
                           max_prompt_tokens=prompt_budget(cfg.rollout.max_prompt_tokens,
                                                           cfg.rollout.sampling.max_new_tokens, positions))
    n_batches = ws.epochs * -(-len(rows) // ws.batch_rows)
    with report.task(f"warm start: {len(rows)} turns x {ws.epochs} epochs", total=n_batches) as tick:
        stats = learner.sft(rows, ws.epochs, ws.batch_rows, prompt_weight=ws.prompt_loss_weight, on_batch=tick)
    learner.save_pretrained(out)
    stats["sft/rows"] = float(len(rows))
    return stats


def prepare_policy(cfg: TrainConfig, run: RunDir, make_env: Callable[[], TextEnv], report: Reporter) -> Path:
    """The folder the RL phase starts from, ``model`` checked and torch's threads set first (``threads``): for
    the commands that begin here (`prover sft`, a bench's shared warm start, `prover eval` of a LoRA
    checkpoint). The trainer, which checks the model and sets the threads before anything else, calls
    ``starting_policy``."""
    model = model_spec(cfg.model, whole_folder=False)
    apply_threads(cfg.threads, model.hidden_size)
    return starting_policy(cfg, model, run, make_env, report)


def starting_policy(cfg: TrainConfig, model: ModelSpec, run: RunDir, make_env: Callable[[], TextEnv],
                    report: Reporter) -> Path:
    """The folder the RL phase starts from: ``model``'s, warm-started when ``warmstart.enabled``."""
    base = base_policy(cfg, model, run, make_env)
    if not cfg.warmstart.enabled:
        return base
    ws = resolved_warmstart(cfg.warmstart, model)
    stats: dict[str, float] = {}

    def build(out: Path) -> None:
        stats.update(warm_start(cfg, ws, model.positions, base, out, make_env, report))

    key = warmstart_key(cfg, model, ws, folder_digest(base, run.model_dir(DIGESTS_FILE)))
    folder = build_once(run.model_dir(f"warmstart-{key}"), build)
    if stats:
        report.note("warm start " + ", ".join(f"{k.split('/')[1]} {v:.3g}" for k, v in stats.items()))
    return folder
