"""Where each training step's batch comes from: sampled when the loop asks for it (the default), or sampled
ahead by a worker process while the learner updates (``rollout.max_off_policy_steps`` = k > 0).

Policy versions count learner updates: the policy a run starts from is version t0 (0 for a new run, t0 for
one resumed from step t0's checkpoint) and the weights after step t's update are version t. Every Turn
records the version that sampled it. The rule, exact because the order of requests sets it, not timing:

    step s's rows are sampled by version    max(t0, s - 1 - k)     (k = 0: s - 1, the synchronous loop)
    the learner updates on them holding     s - 1                  so no row lags more than k versions
    branching in step s's credit            s - 1                  ProVer's verification, SPO, Tree-GRPO
    evaluation after step s                 s

Branching and evaluation run on the engine of the learner's process, synced after every update as in the
synchronous loop. So ProVer verifies a segment sampled by version s-1-k with continuations of version
s-1: it asks whether the segment helps the policy being trained, the one its bonus will move. Each checked
segment records both (``sampled_version``, ``verify_version``, also in groups.jsonl) and the step logs
``credit/verify_policy_version``. Free samples (``credit.free_samples``) are the group's own runs, of the
rows' version s-1-k.

PPO under staleness: the learner's ratio is exp(logp_now - logp_sampled) with the log-probs the rollout
recorded (prover/learning/learner.py never recomputes them), so the update is importance-weighted towards the
sampling policy and clipped as PPO clips; ``learner/ppo_kl`` and ``learner/clipfrac`` show the distance.

How (k > 0): a worker process (a fresh interpreter running ``worker_main``) builds its own engine and envs
from the run's policy folder and serves one FIFO pipe of requests: "roll out step s" and "load version v"
(the weights as safetensors bytes). ``next_batch(s)`` queues the rollouts of the steps up to s + k not yet
queued, then waits for step s's; ``sync(learner, s)`` loads version s into this process's engine and queues
it for the worker. Rollout(s) is queued by next_batch(s - k), after version s-k-1 was queued and before
version s-k: hence the rule. On a CPU that is two processes (learner, engine), one core each. An engine over
shared servers (sglang) cannot hold a copy of its own in the worker and is refused (``Engine.own_weights``);
so is more than one training process.

Failures never hang the run: the worker sends any error back, pickled by itself (a ProverError keeps its
class, anything else becomes one WorkerError line, its traceback printed by the worker); a worker that dies
is an EOF on its pipe, seen at once; one silent past ``rollout.worker_timeout_s`` stops the run. The worker
runs in its own session, so Ctrl-C reaches the trainer alone, which closes it (asked, then terminated after
``CLOSE_GRACE_S``); a trainer that dies closes the pipe, and the worker leaves. Pickle only crosses between
these two processes, never a file.

Resume: a prefetched batch is not saved; it is discarded with the worker and sampled again. A run resumed
from step t0 samples steps t0+1 .. t0+1+k with version t0 (lagging 0 .. k), so it follows the rule but not an
uninterrupted run's numbers. tests/test_async_resume.py kills a run with SIGKILL and checks each step once.
"""

from __future__ import annotations

import os
import pickle
import queue
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prover.config import engine_dtype
from prover.engines.base import WeightSource
from prover.envs.global_rng import protected_class
from prover.errors import ConfigError, ProverError, WorkerError
from prover.registry import ENGINES, ENVS
from prover.rollout import Rollout, build_rollout, engine_counts, one_line
from prover.types import Batch, RolloutRequest

if TYPE_CHECKING:
    from prover.config import TrainConfig
    from prover.envs.base import TextEnv

POLL_S = 0.5  # how often a wait for the worker looks at its deadline
CLOSE_GRACE_S = 10.0  # a worker asked to stop gets this long before it is terminated


def sample(rollout: Rollout, request: RolloutRequest) -> tuple[Batch, dict[str, float]]:
    """One step's batch and its rollout metrics: the engine's counts, the seconds sampling took, the version."""
    t0 = time.perf_counter()
    batch = rollout.run(request.tasks, request.sizes, split="train", seed=request.seed,
                        record_snapshots=request.record_snapshots)
    metrics = engine_counts(rollout.engine, "rollout")
    metrics["time/rollout_sampling"] = time.perf_counter() - t0
    metrics["rollout/policy_version"] = float(rollout.policy_version)
    return batch, metrics


def checked_lag(metrics: dict[str, float], step: int, bound: int) -> dict[str, float]:
    """``metrics`` with ``rollout/policy_lag``; a lag past ``bound`` is a broken rule, never trained on."""
    lag = step - 1 - int(metrics["rollout/policy_version"])
    if not 0 <= lag <= bound:
        raise WorkerError(f"step {step}'s batch was sampled by policy version {metrics['rollout/policy_version']:g}, "
                          f"{lag} updates behind the learner; rollout.max_off_policy_steps={bound} allows 0 to "
                          f"{bound} (a bug: please report it)")
    return metrics | {"rollout/policy_lag": float(lag)}


class StepBatches:
    """k = 0, the synchronous loop: step s's batch is sampled when asked for, by the engine synced after s-1."""

    def __init__(self, rollout: Rollout, plan: Callable[[int], RolloutRequest], version: int) -> None:
        self.rollout, self.plan, self.bound = rollout, plan, 0
        rollout.policy_version = version

    def next_batch(self, step: int) -> tuple[Batch, dict[str, float]]:
        """Step ``step``'s batch and its rollout metrics (``sample``'s, with the lag)."""
        engine_counts(self.rollout.engine, "eval")  # drop what an evaluation generated
        batch, metrics = sample(self.rollout, self.plan(step))
        return batch, checked_lag(metrics, step, self.bound)

    def sync(self, learner: WeightSource, step: int) -> None:
        """The learner's weights after step ``step``'s update become the engine's (version ``step``)."""
        self.rollout.engine.update_weights(learner)
        self.rollout.policy_version = step

    def close(self) -> None:
        """Nothing to release: the engine is the trainer's."""


@dataclass(frozen=True)
class EnvFactory:
    """``make_env`` for another process: the env class travels by reference (module and name), so an env
    registered in code works there too, if its class is importable."""

    cls: type
    kwargs: dict[str, Any]
    isolate_global_rng: bool = False  # the run's env.isolate_global_rng (the class's own flag is read too)

    def __call__(self) -> TextEnv:
        return protected_class(self.cls, self.isolate_global_rng)(**self.kwargs)


@dataclass(frozen=True)
class WorkerSpec:
    """What the worker builds its engine and rollout from."""

    config: TrainConfig
    policy_dir: str
    env_cls: type
    engine_cls: type
    version: int  # of the policy in policy_dir


def from_peer(data: bytes) -> Any:  # whatever the peer pickled
    """The one place the tree unpickles (tests/test_run_folder_is_data.py holds it to that): bytes from the
    other end of a ``Pipe``, an OS pipe between the trainer and the worker it started, never a file, so
    nothing a user could be handed reaches it."""
    return pickle.loads(data)


class Pipe:
    """Pickled messages over a pair of OS pipes to or from the other process. A thread drains the incoming
    pipe into a queue, so neither side's send waits for the other to finish its work; the other side
    going away (exit, crash, SIGKILL) arrives as EOF."""

    EOF = ("eof", b"")

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.reader = Connection(read_fd, writable=False)
        self.writer = Connection(write_fd, readable=False)
        self.incoming: queue.Queue = queue.Queue()
        threading.Thread(target=self._drain, daemon=True, name="prover-pipe").start()

    def _drain(self) -> None:
        try:
            while True:
                self.incoming.put(from_peer(self.reader.recv_bytes()))
        except (EOFError, OSError):
            self.incoming.put(self.EOF)

    def send(self, message: object) -> None:
        self.writer.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))

    def get(self, timeout: float) -> Any:
        """The next message; queue.Empty after ``timeout`` seconds."""
        return self.incoming.get(timeout=timeout)

    def close(self) -> None:
        for conn in (self.writer, self.reader):
            try:
                conn.close()
            except OSError:
                pass


WORKER_CODE = ("import sys; from prover.episodes.async_rollout import worker_main; "
               "worker_main(int(sys.argv[1]), int(sys.argv[2]))")


class AheadBatches(StepBatches):
    """k > 0: a worker process samples steps s+1 .. s+k while this one learns on step s (module docstring)."""

    def __init__(self, rollout: Rollout, plan: Callable[[int], RolloutRequest], version: int, spec: WorkerSpec,
                 last_step: int) -> None:
        super().__init__(rollout, plan, version)
        cfg = spec.config
        self.bound, self.last_step = cfg.rollout.max_off_policy_steps, last_step
        self.timeout_s = cfg.rollout.worker_timeout_s
        # the last step whose rollout was queued, and received: none past the start, so a resumed run samples
        # step t0+1 again rather than keep what the killed worker sampled ahead. Saving that batch would put a
        # pickle (its Batch, env snapshots included) in the run folder, which holds data only, and it may be
        # half-sampled when the kill comes; resampling costs one rollout per resume and keeps the rule exact.
        self.queued = self.received = version
        try:
            blob = pickle.dumps(spec, pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            raise ConfigError(f"env {cfg.env.name!r} or engine {cfg.engine.name!r} cannot be sent to the rollout "
                              f"worker process ({one_line(exc)}); define its class at module level, or set "
                              "rollout.max_off_policy_steps=0") from None
        # a fresh interpreter, not fork (torch's threads) nor multiprocessing's spawn (which re-runs the
        # caller's script); its own session, so Ctrl-C reaches the trainer alone, which closes it
        to_worker, from_trainer = os.pipe()
        to_trainer, from_worker = os.pipe()
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-c", WORKER_CODE, str(to_worker), str(from_worker)],
            pass_fds=(to_worker, from_worker), start_new_session=True)
        os.close(to_worker)
        os.close(from_worker)
        self.pipe = Pipe(to_trainer, from_trainer)
        self.pipe.send(("start", list(sys.path), blob))

    def next_batch(self, step: int) -> tuple[Batch, dict[str, float]]:
        engine_counts(self.rollout.engine, "eval")  # this engine's evaluations; the worker's counts come below
        for ahead in range(self.queued + 1, min(step + self.bound, self.last_step) + 1):
            self.pipe.send(("rollout", self.plan(ahead)))
            self.queued = ahead
        got, batch, metrics = self._receive(f"sampling step {step}")
        self.received = got
        if got != step:
            raise WorkerError(f"the rollout worker sent step {got}'s batch when step {step}'s was due (a bug)")
        return batch, checked_lag(metrics, step, self.bound)

    def sync(self, learner: WeightSource, step: int) -> None:
        super().sync(learner, step)  # this process's engine: branching and evaluation
        if self.queued < self.last_step:  # a later rollout will be queued behind it
            self.pipe.send(("weights", step, weights_blob(learner.policy_state_dict())))

    def _receive(self, what: str) -> Any:
        """The worker's next answer; its error raised here as one line; never waits forever."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                kind, blob = self.pipe.get(POLL_S)
            except queue.Empty:
                if time.monotonic() < deadline:
                    continue
                raise WorkerError(f"the rollout worker sent nothing for {self.timeout_s:g} s while {what}; raise "
                                  "rollout.worker_timeout_s if its rollouts take that long") from None
            if kind == "eof":
                try:
                    code = self.proc.wait(CLOSE_GRACE_S) if self.proc is not None else None
                except subprocess.TimeoutExpired:  # its pipe closed, the process not yet gone
                    code = None
                raise WorkerError(f"the rollout worker process died (exit code {code}) while {what}")
            value = from_peer(blob)
            if kind == "error":
                raise value
            return value

    def close(self) -> None:
        """Stop the worker: asked, when it has nothing queued; terminated, when it is sampling a batch no one
        will read (an error or Ctrl-C in this process) or does not stop in time."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if self.received >= self.queued:
                self.pipe.send(None)
                proc.wait(CLOSE_GRACE_S)
        except (OSError, subprocess.TimeoutExpired):  # gone already, or busy: stopped below
            pass
        for stop in (proc.terminate, proc.kill):
            if proc.poll() is None:
                stop()
                try:
                    proc.wait(CLOSE_GRACE_S)
                except subprocess.TimeoutExpired:
                    pass
        self.pipe.close()


def weights_blob(state: dict[str, Any]) -> bytes:
    """A state dict as safetensors bytes (each tensor copied: tied weights share storage, safetensors refuses)."""
    from safetensors.torch import save  # safetensors.torch loads torch: only a worker's weights need it

    return save({k: v.detach().cpu().contiguous().clone() for k, v in state.items()})


@dataclass
class Weights:
    """What an engine's ``update_weights`` reads from a learner, for weights that arrived as bytes."""

    blob: bytes

    def policy_state_dict(self) -> dict[str, Any]:
        from safetensors.torch import load  # safetensors.torch loads torch: only a worker's weights need it

        return load(self.blob)


def worker_main(read_fd: int, write_fd: int) -> None:
    """The worker process: the trainer's import path first (so an env class of its own resolves here), then
    the spec, then ``serve``."""
    pipe = Pipe(read_fd, write_fd)
    try:
        message = pipe.incoming.get()
        if not (isinstance(message, tuple) and message[0] == "start"):
            return  # the trainer left before it could start this process
        sys.path[:] = message[1]
        serve(from_peer(message[2]), pipe)
    except BaseException as exc:  # noqa: BLE001  (a spec that does not load: the trainer hears why)
        tell(pipe, exc)
    finally:
        pipe.close()


def serve(spec: WorkerSpec, pipe: Pipe) -> None:
    """Build the engine and rollout, then answer requests in order until told to stop, the trainer's
    process is gone (EOF), or something fails (sent back as the error to raise there)."""
    rollout = None
    try:
        cfg = spec.config
        engine = spec.engine_cls(spec.policy_dir, dtype=engine_dtype(cfg.model), **cfg.engine.kwargs)
        make = EnvFactory(spec.env_cls, dict(cfg.env.kwargs), cfg.env.isolate_global_rng)
        rollout = build_rollout(cfg, engine, make)
        rollout.policy_version = spec.version
        while (message := pipe.incoming.get()) is not None and message != Pipe.EOF:
            if message[0] == "weights":
                rollout.engine.update_weights(Weights(message[2]))
                rollout.policy_version = message[1]
            else:
                request = message[1]
                batch, metrics = sample(rollout, request)
                # pickled here, so a batch that cannot travel is an error sent back, not a silent loss
                pipe.send(("batch", pickle.dumps((request.step, batch, metrics), pickle.HIGHEST_PROTOCOL)))
    except BaseException as exc:  # noqa: BLE001  (every failure goes back to the trainer as one line)
        tell(pipe, exc)
    finally:
        if rollout is not None:
            rollout.close()


def tell(pipe: Pipe, exc: BaseException) -> None:
    """Send the trainer the error to raise: a ProverError as it is (one line already), anything else as a
    WorkerError line, its traceback printed here (the worker's stderr is the trainer's)."""
    if not isinstance(exc, ProverError):
        traceback.print_exc()
        exc = WorkerError(f"the rollout worker failed: {one_line(exc)} (its traceback is printed above)")
    try:
        blob = pickle.dumps(exc)
    except Exception:  # noqa: BLE001  (an error that cannot travel goes as its text)
        blob = pickle.dumps(WorkerError(f"the rollout worker failed: {one_line(exc)}"))
    try:
        pipe.send(("error", blob))
    except OSError:  # the trainer is gone: no one to tell
        pass


def make_batches(cfg: TrainConfig, rollout: Rollout, plan: Callable[[int], RolloutRequest], *, version: int,
                 policy_dir: str | Path) -> StepBatches:
    """The batch source of a run: ``StepBatches`` at k = 0, else ``AheadBatches`` with its worker."""
    if not cfg.rollout.max_off_policy_steps:
        return StepBatches(rollout, plan, version)

    spec = WorkerSpec(cfg, str(policy_dir), ENVS.get(cfg.env.name), ENGINES.get(cfg.engine.name), version)
    return AheadBatches(rollout, plan, version, spec, last_step=cfg.steps)
