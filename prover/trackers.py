"""Experiment trackers (``run.report_to``): TensorBoard, Weights & Biases, MLflow and trackio.

metrics.jsonl stays the record of a run; a tracker is a view of it. Each tracker gets every row that
metrics.jsonl gets (train steps and evaluations), under the same names and at the same step, and the
resolved config as hyperparameters, flattened to dotted keys with secret-looking entries left out.

Where each one writes (the defaults; each library's own environment variables still apply):

    tensorboard   <run.dir>/tensorboard/          (moved aside with the old run's history on a fresh start)
    wandb         <run.dir>/wandb/                (WANDB_MODE=offline keeps it off the network)
    mlflow        sqlite:///<run.dir>/mlflow.db   (or MLFLOW_TRACKING_URI; MLflow 3 refuses file: stores)
    trackio       trackio's own folder            (TRACKIO_DIR, default ~/.cache/huggingface/trackio)

A library is imported only when its tracker is asked for; a missing one is a one-line ConfigError with
the pip extra to install, raised by ``check_trackers`` before the run folder is touched.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from prover.errors import ConfigError

# a config entry is left out of every tracker if a part of its dotted name, or its value, looks like a secret
SECRET_NAME = re.compile(r"api_?key|secret|passw(or)?d|credential|private_?key|access_?key|"
                         r"(?<![a-z])(token|auth)(?![a-z])", re.IGNORECASE)  # not max_new_tokens, author
SECRET_VALUE = re.compile(r'(^|")(sk-|sk_|hf_|ghp_|gho_|github_pat_|xox[abp]-|AKIA)')  # also inside JSON text
MLFLOW_PARAM_CHARS = 500  # the smallest parameter-value limit of MLflow versions in use (newer allow 6000)


class Tracker(Protocol):
    name: str  # the run.report_to value
    module: str  # what it imports; its absence is the one-line error

    def start(self, config: dict[str, Any], run_dir: Path) -> None: ...

    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def finish(self) -> None: ...


def require(name: str) -> Any:
    """The library of tracker ``name``, imported; a one-line ConfigError naming the extra if it is missing."""
    module = TRACKERS[name].module
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"run.report_to={name} needs the {module!r} module ({reason}); install it with: "
                          f"pip install 'prover-rl[{name}]'") from exc


def check_trackers(cfg: Any) -> None:
    """Every tracker of ``run.report_to`` can be imported (preflight: before the run folder is touched)."""
    for name in dict.fromkeys(cfg.run.report_to):
        require(name)


class TensorBoardTracker:
    name, module = "tensorboard", "torch.utils.tensorboard"

    def start(self, config: dict[str, Any], run_dir: Path) -> None:
        tensorboard = require(self.name)
        from torch.utils.tensorboard.summary import hparams

        self.writer = tensorboard.SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        # what add_hparams writes, but into this run's own folder rather than a new timestamped one
        for summary in hparams(config, {"eval/success": None, "rollout/success": None}):
            self.writer.file_writer.add_summary(summary)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()  # once a step, like metrics.jsonl: a killed run loses at most the step it was in

    def finish(self) -> None:
        self.writer.close()


class WandbTracker:
    name, module = "wandb", "wandb"

    def start(self, config: dict[str, Any], run_dir: Path) -> None:
        wandb = require(self.name)
        # wandb itself reads WANDB_MODE (online, offline, disabled), WANDB_PROJECT and the API key from the
        # environment; console="off" leaves the terminal to prover's own progress lines
        project = None if os.environ.get("WANDB_PROJECT") else "prover"
        self.run = wandb.init(project=project, name=run_dir.name, dir=str(run_dir), config=config,
                              settings=wandb.Settings(console="off"))

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def finish(self) -> None:
        self.run.finish()


class MlflowTracker:
    name, module = "mlflow", "mlflow"

    def start(self, config: dict[str, Any], run_dir: Path) -> None:
        require(self.name)
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        # with a sqlite store MLflow would put artifacts under the current folder, not the run's
        artifacts = None if uri else (run_dir / "mlartifacts").absolute().as_uri()
        self.client = MlflowClient(tracking_uri=uri or f"sqlite:///{(run_dir / 'mlflow.db').absolute()}")
        experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME", "prover")
        found = self.client.get_experiment_by_name(experiment)
        exp_id = found.experiment_id if found else self.client.create_experiment(experiment, artifacts)
        self.run_id = self.client.create_run(exp_id, run_name=run_dir.name).info.run_id
        params = [Param(k, str(v)[:MLFLOW_PARAM_CHARS]) for k, v in config.items()]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 parameters per batch
            self.client.log_batch(self.run_id, params=params[i:i + 100])

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()])

    def finish(self) -> None:
        self.client.set_terminated(self.run_id)


class TrackioTracker:
    name, module = "trackio", "trackio"

    def start(self, config: dict[str, Any], run_dir: Path) -> None:
        trackio = require(self.name)
        self.run = trackio.init(project="prover", name=run_dir.name, config=config)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def finish(self) -> None:
        self.run.finish()


TRACKERS: dict[str, type] = {t.name: t for t in (TensorBoardTracker, WandbTracker, MlflowTracker,
                                                  TrackioTracker)}


def flat_config(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A config dump as {dotted key: bool, int, float or str}; other values (None, lists, empty sections)
    as JSON text. Entries whose name or value looks like a secret are left out."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if SECRET_NAME.search(str(key)):
            continue
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat |= flat_config(value, f"{dotted}.")
        elif isinstance(value, (bool, int, float)):
            flat[dotted] = value
        else:
            text = value if isinstance(value, str) else json.dumps(value)  # None, lists, {} as JSON text
            secret_inside = not isinstance(value, str) and SECRET_NAME.search(text)  # e.g. a key in a list
            if not (SECRET_VALUE.search(text) or secret_inside):
                flat[dotted] = text
    return flat


def numeric_metrics(record: dict[str, Any]) -> dict[str, float]:
    """The numbers of a metrics.jsonl row under their own names (``phase``, text, is not one); ``step`` is
    the x-axis, not a metric."""
    return {k: float(v) for k, v in record.items() if k != "step" and isinstance(v, (int, float))}


class Trackers:
    """The trackers of one run, started together. ``log`` takes metrics.jsonl rows; a tracker that fails
    mid-run is dropped with one note (metrics.jsonl, the record, is unaffected). A context manager:
    leaving it finishes every tracker."""

    def __init__(self, trackers: list[Any], note: Callable[[str], None] = print) -> None:
        self.trackers, self.note = trackers, note

    @classmethod
    def start(cls, cfg: Any, note: Callable[[str], None] = print, enabled: bool = True) -> Trackers:
        """Start ``cfg.run.report_to`` (none when not ``enabled``: only the main process logs metrics)."""
        started = cls([], note)
        config = flat_config(cfg.model_dump(mode="json"))
        for name in dict.fromkeys(cfg.run.report_to) if enabled else []:
            tracker = TRACKERS[name]()
            try:
                tracker.start(config, Path(cfg.run.dir))
            except ConfigError:
                started.finish()
                raise
            except Exception as exc:  # a refused login, an unreachable server: the user's setup, one line
                started.finish()
                reason = " ".join(str(exc).split()) or type(exc).__name__
                raise ConfigError(f"run.report_to={name}: the tracker did not start ({reason})") from exc
            started.trackers.append(tracker)
        return started

    def log(self, record: dict[str, Any]) -> None:
        metrics, step = numeric_metrics(record), int(record["step"])
        for tracker in list(self.trackers):
            try:
                tracker.log(metrics, step)
            except Exception as exc:  # noqa: BLE001 - a tracker's outage must not stop training
                self.trackers.remove(tracker)
                reason = " ".join(str(exc).split()) or type(exc).__name__
                self.note(f"step {step}: the {tracker.name} tracker failed ({reason}); it gets no more rows "
                          "(metrics.jsonl has them all)")

    def finish(self) -> None:
        trackers, self.trackers = self.trackers, []
        for tracker in trackers:
            try:
                tracker.finish()
            except Exception as exc:  # noqa: BLE001 - nor its shutdown: it is reported, the others still finish
                self.note(f"the {tracker.name} tracker did not finish cleanly ({' '.join(str(exc).split())})")

    def __enter__(self) -> Trackers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()
