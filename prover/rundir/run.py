"""The run folder: resolved config, metrics.jsonl, models and atomic checkpoints.

    <run.dir>/config.yaml          the resolved config of the run
    <run.dir>/environment.json     what else its numbers depend on: versions, CPU, threads, GPUs
                                   (prover/system/environment.py)
    <run.dir>/metrics.jsonl        one JSON object per evaluation and per RL step
    <run.dir>/groups.jsonl         a few rollout groups per step as text (run.save_groups), for `prover view`
    <run.dir>/tensorboard/ ...     what the trackers of run.report_to write (see prover/rundir/trackers.py)
    <run.dir>/trackers.json        the tracker runs (ids, last row sent) that --resume continues
    <run.dir>/models/base-<hash>       the initial policy (the tiny model when model.path=tiny)
    <run.dir>/models/warmstart-<hash>  the policy after SFT
    <run.dir>/checkpoints/step-N   model and tokenizer (with model.lora, the adapter alone: see
                                   prover/learning/lora.py),
                                   optimizer and rng state (.json + .safetensors: data, never a pickle; see
                                   prover/rundir/checkpoint_state.py), manifest.json, state.json

A checkpoint is written to a temporary folder and renamed into place, so a run killed at any moment
leaves the previous checkpoint intact. Metrics are appended before the checkpoint is written; on
resume, lines after the checkpoint's step are dropped and that step is run again, so the history
has no step lost and none duplicated.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prover.config import TrainConfig
from prover.errors import CheckpointError, ConfigError, RunFolderError
from prover.rundir.checkpoint_state import (
    CheckpointSource,
    checkpoint_problem,
    load_state,
    refuse_old_format,
    save_state,
    write_manifest,
)
from prover.rundir.trackers import KEPT_FILE, Trackers
from prover.settings.config_text import dump_config
from prover.system.environment import ENVIRONMENT_FILE, write_environment
from prover.system.files import read_jsonl, write_atomic
from prover.system.stopping import STARTED


def in_use(folder: Path, holder: str) -> RunFolderError:
    return RunFolderError(f"run folder {str(folder)!r} is in use by process {holder} (another prover train); "
                          "wait for it to end, or choose another run.dir")


class FileLock:
    """An exclusive ``flock`` on ``path``, a file that holds the holder's PID. The kernel drops the lock when
    its process dies, however it dies, so a killed holder's lock is simply taken by the next one; the stale
    PID in the file is then overwritten. Separate processes (two benches on one folder) exclude each other."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.fd: int | None = None

    def try_acquire(self) -> str | None:
        """Take the lock if it is free (None); else the holder's PID, as text, and nothing is taken."""
        return self._take(blocking=False)

    def acquire(self, on_wait: Callable[[str], None] | None = None) -> None:
        """Take the lock, waiting as long as its holder keeps it; ``on_wait(pid)`` first, when there is one."""
        holder = self.try_acquire()
        if holder is not None:
            if on_wait is not None:
                on_wait(holder)
            self._take(blocking=True)

    def _take(self, blocking: bool) -> str | None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            return holder
        except BaseException:  # Ctrl-C while waiting
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return None

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class RunLock(FileLock):
    """One writer per run folder: a ``FileLock`` on ``<run.dir>/.lock``; a second writer fails at once."""

    def __init__(self, folder: Path) -> None:
        super().__init__(Path(folder) / ".lock")

    def acquire(self, on_wait: Callable[[str], None] | None = None) -> None:
        holder = self.try_acquire()
        if holder is not None:
            raise in_use(self.path.parent, holder)

    def refuse_if_held(self) -> None:
        """Refuse now, naming the holder, when another process holds the lock; writes nothing (an empty
        folder a failed start leaves stays empty). ``acquire`` takes the lock later."""
        try:
            fd = os.open(self.path, os.O_RDWR)
        except OSError:
            return  # no lock file: no writer has ever held this folder
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError as exc:
            raise in_use(self.path.parent, os.read(fd, 32).decode(errors="replace").strip() or "unknown") from exc
        finally:
            os.close(fd)


def real_run_folder(folder: Path) -> Path:
    """The folder a run acts on: a symlink is followed to its target, so that an old run moved aside by a fresh
    start lands beside the target (on its filesystem), never beside the link; a dangling link or a loop is one
    RunFolderError, before anything is made or moved."""
    if not folder.is_symlink():
        return folder
    try:
        return folder.resolve(strict=True)
    except RuntimeError:  # Python 3.11 raises this for a loop; 3.13 an OSError (ELOOP)
        raise RunFolderError(f"run folder {str(folder)!r} is a symlink loop; point it at a folder or name "
                             "another run.dir") from None
    except OSError as exc:
        why = "a symlink loop" if exc.errno == errno.ELOOP else f"a symlink to {os.readlink(folder)!r}, " \
              "which does not exist"
        raise RunFolderError(f"run folder {str(folder)!r} is {why}; create the target or name another run.dir") \
            from None


class RunDir:
    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.path = real_run_folder(Path(cfg.run.dir))
        self.metrics_path = self.path / "metrics.jsonl"
        self.groups_path = self.path / "groups.jsonl"
        self.ckpt_root = self.path / "checkpoints"
        self.damaged: list[str] = []  # damaged checkpoints the last look-up skipped, one line each
        self.trackers: Trackers | None = None  # run.report_to while the trainer runs: metrics rows go there too

    def start(self, fresh: bool) -> Path | None:
        """Write config.yaml and environment.json (the environment of this start: a resume on another machine
        records that machine); a fresh start first moves an old run's history aside (never deletes it) and
        returns where it went. The warm-start cache in models/ stays: a new run may reuse it."""
        self.path.mkdir(parents=True, exist_ok=True)
        STARTED.append(self.path)
        for torn in self.ckpt_root.glob(".tmp-step-*"):  # a checkpoint a kill stopped mid-write
            shutil.rmtree(torn, ignore_errors=True)
        moved = self.move_old_run_aside() if fresh else None
        write_atomic(self.path / "config.yaml", dump_config(self.cfg))
        write_environment(self.path)
        return moved

    def move_old_run_aside(self) -> Path | None:
        """metrics.jsonl, groups.jsonl, config.yaml, checkpoints/, tensorboard/ and trackers.json of an earlier
        run into ``<run.dir>.old-<UTC time>``; None when the folder holds no earlier history. (wandb/ and
        mlflow.db stay: they keep each run apart themselves, where TensorBoard would draw both runs as one;
        trackers.json goes, so that the new run starts new tracker runs instead of continuing the old ones.)"""
        history = [self.metrics_path, self.groups_path, self.ckpt_root, self.path / "tensorboard",
                   self.path / KEPT_FILE]
        if not any(p.exists() for p in history):
            return None
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        aside = self.path.with_name(f"{self.path.name}.old-{stamp}")
        n = 1
        while aside.exists():  # two fresh starts within one second
            aside, n = self.path.with_name(f"{self.path.name}.old-{stamp}-{n}"), n + 1
        aside.mkdir(parents=True)
        for p in [*history, self.path / "config.yaml", self.path / ENVIRONMENT_FILE]:
            if p.exists():
                os.rename(p, aside / p.name)
        return aside

    def model_dir(self, name: str) -> Path:
        return self.path / "models" / name

    # -- metrics -----------------------------------------------------------------------------------
    def log(self, record: dict[str, Any], path: Path | None = None) -> None:
        with (path or self.metrics_path).open("a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if path is None and self.trackers is not None:
            self.trackers.log(record)

    def history(self) -> list[dict[str, Any]]:
        return read_jsonl(self.metrics_path)

    def truncate_history(self, last_step: int) -> None:
        """Every append-only file keeps its records up to ``last_step``; a torn line (a kill or a full
        disk mid-write) is dropped from each alike, and the steps after it are run again."""
        for path in (self.metrics_path, self.groups_path):
            if path.is_file():
                kept = [r for r in read_jsonl(path) if isinstance(r.get("step"), int) and r["step"] <= last_step]
                write_atomic(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))

    # -- checkpoints -------------------------------------------------------------------------------
    def latest_checkpoint(self, verify_hashes: bool = False) -> Path | None:
        """The newest checkpoint whose files match its manifest; each damaged newer one is skipped and
        noted in ``self.damaged`` (one line each)."""
        self.damaged: list[str] = []
        if not self.ckpt_root.is_dir():
            return None
        done = [p for p in self.ckpt_root.glob("step-*") if (p / "state.json").is_file()]
        for ckpt in sorted(done, key=lambda p: int(p.name.split("-")[1]), reverse=True):
            problem = checkpoint_problem(ckpt, verify_hashes)
            if not problem:
                return ckpt
            self.damaged.append(f"checkpoint {ckpt.name} is damaged ({problem})")
        return None

    def save_checkpoint(self, step: int, learner: CheckpointSource, weights: dict | None = None) -> Path:
        """``weights``: the learner's ``gathered_state()``, gathered by every process, when it spans several."""
        self.ckpt_root.mkdir(parents=True, exist_ok=True)
        tmp = self.ckpt_root / f".tmp-step-{step}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            self._write_checkpoint(tmp, step, learner, weights)
        except (OSError, RuntimeError) as exc:  # torch reports a full disk as a RuntimeError
            shutil.rmtree(tmp, ignore_errors=True)
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0]
            raise CheckpointError(f"could not write the checkpoint of step {step} in {str(self.ckpt_root)!r} "
                                  f"({reason}); the last checkpoint is intact (resume with --resume)") from exc
        final = self.ckpt_root / f"step-{step}"
        shutil.rmtree(final, ignore_errors=True)
        os.rename(tmp, final)
        done = sorted((p for p in self.ckpt_root.glob("step-*")), key=lambda p: int(p.name.split("-")[1]))
        for old in done[:-self.cfg.run.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def _write_checkpoint(self, tmp: Path, step: int, learner: CheckpointSource, weights: dict | None) -> None:
        learner.save_checkpoint_weights(tmp, weights)
        (tmp / RUN_CONFIG).write_text(json.dumps(self.cfg.model_dump(mode="json"), sort_keys=True))
        import torch  # here, so that readers of a run folder (prover view, prover bench) stay light

        save_state(learner.optimizer_state(), tmp, "optimizer")
        save_state({"torch": torch.get_rng_state(), "learner": learner.rng.getstate()}, tmp, "rng")
        write_manifest(tmp)
        (tmp / "state.json").write_text(json.dumps({"step": step}))  # last: its presence marks a whole checkpoint

    def require_checkpoint(self, command: str = "--resume") -> Path:
        ckpt = self.latest_checkpoint(verify_hashes=True)
        if ckpt is None and self.damaged:
            raise CheckpointError(f"{command}: no intact checkpoint in {str(self.ckpt_root)!r}: "
                                  f"{'; '.join(self.damaged)}")
        if ckpt is None:
            fix = "start the run without --resume" if command == "--resume" else \
                "train the run first, or give a model folder with --model"
            raise CheckpointError(f"{command}: no checkpoint in {str(self.ckpt_root)!r}; {fix}")
        if command == "--resume":  # before the run folder changes: the state is read only after the start
            refuse_old_format(ckpt)
            changed = resume_differences(self.cfg, ckpt)
            if changed:
                shown = "; ".join(changed[:6]) + (f"; and {len(changed) - 6} more" if len(changed) > 6 else "")
                raise ConfigError(f"--resume: the config differs from the run that wrote {ckpt.name} ({shown}); "
                                  f"a resume may change only {', '.join(RESUME_MAY_CHANGE)}; start a new run "
                                  "(another run.dir) to change the rest")
        return ckpt


RUN_CONFIG = "run_config.json"  # the resolved config of the run that wrote a checkpoint
# What --resume may change: how long the run goes on, on how many threads, how it is evaluated, logged and
# kept, where the folder is, and where its sampling is served. Anything else would continue one experiment
# as another.
RESUME_MAY_CHANGE = ("steps", "threads", "eval.", "run.dir", "run.checkpoint_every", "run.keep_checkpoints",
                     "run.save_groups", "run.report_to", "engine.")


def _dotted(tree: object, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict) or not tree:
        return {prefix: tree}
    return {k: v for key, sub in tree.items() for k, v in _dotted(sub, f"{prefix}{key}.").items()}


def resume_differences(cfg: TrainConfig, ckpt: Path) -> list[str]:
    """The fields where ``cfg`` differs from the config of the run that wrote ``ckpt``, outside
    RESUME_MAY_CHANGE, as "field: old -> new"; [] for a checkpoint that keeps no config (converted ones)."""
    path = ckpt / RUN_CONFIG
    if not path.is_file():
        return []
    old, new = _dotted(json.loads(path.read_text())), _dotted(cfg.model_dump(mode="json"))
    # a field added since the checkpoint was written (model.lora) counts only when set away from its default
    default = _dotted(type(cfg)().model_dump(mode="json"))
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k, "<unset>") != new.get(k, "<unset>")
                     and not (k not in old and new.get(k) == default.get(k, "<unset>")))
    return [f"{k.rstrip('.')}: {old.get(k, '<unset>')!r} -> {new.get(k, '<unset>')!r}" for k in changed
            if not k.startswith(RESUME_MAY_CHANGE)]


def load_checkpoint_state(ckpt: Path, learner: CheckpointSource) -> int:
    """Restore optimizer and RNG into ``learner`` (its weights, or its LoRA adapter, came from the folder);
    return the step."""
    import torch  # torch is heavy: readers of a run folder (prover view, prover bench) stay light

    try:
        optimizer, rng = load_state(ckpt, "optimizer"), load_state(ckpt, "rng")
        learner.load_optimizer_state(optimizer)
        step = int(json.loads((ckpt / "state.json").read_text())["step"])
        torch.set_rng_state(rng["torch"])
        learner.rng.setstate(rng["learner"])
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(f"checkpoint {str(ckpt)!r} is unreadable: {' '.join(str(exc).split())[:300]}") from exc
    return step

