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

``--resume`` continues the same tracker runs: <run.dir>/trackers.json keeps each one's run id (ids and steps
only, never a secret) and the last row it got. A resumed run repeats the steps after its last checkpoint, so
the rows a tracker already got from the killed session are not sent again (their values are the same: a
repeated step has the same tasks and seeds). With that file missing or damaged the tracker starts a new run,
with one note. TensorBoard needs none of this: its folder stays, and its curves go on.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from prover.errors import ConfigError
from prover.system.files import write_atomic

if TYPE_CHECKING:
    from prover.config import TrainConfig

# a config entry is left out of every tracker if a part of its dotted name, or its value, looks like a secret
SECRET_NAME = re.compile(r"api_?key|secret|passw(or)?d|credential|private_?key|access_?key|"
                         r"(?<![a-z])(token|auth)(?![a-z])", re.IGNORECASE)  # not max_new_tokens, author
SECRET_VALUE = re.compile(r'(^|")(sk-|sk_|hf_|ghp_|gho_|github_pat_|xox[abp]-|AKIA)')  # also inside JSON text
MLFLOW_PARAM_CHARS = 500  # the smallest parameter-value limit of MLflow versions in use (newer allow 6000)
KEPT_FILE = "trackers.json"  # in the run folder: the tracker runs a --resume continues
RUN_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")  # what a kept run id may look like (wandb, MLflow, trackio ids)


class CannotContinue(Exception):
    """The run an earlier session kept cannot be continued: the tracker starts a new one, with one note."""


class Tracker(Protocol):
    name: str  # the run.report_to value
    module: str  # what it imports; its absence is the one-line error

    def start(self, config: dict[str, Any], run_dir: Path, kept: dict[str, Any] | None = None
              ) -> dict[str, Any] | None:
        """Start a new run, or continue the one ``kept`` names (what an earlier ``start`` returned; raises
        CannotContinue if that run is gone). Returns what continues this run later (ids), or None."""

    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def finish(self) -> None: ...


def require(name: str) -> ModuleType:
    """The library of tracker ``name``, imported; a one-line ConfigError naming the extra if it is missing."""
    module = TRACKERS[name].module
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"run.report_to={name} needs the {module!r} module ({reason}); install it with: "
                          f"pip install 'prover-rl[{name}]'") from exc


def kept_text(kept: dict[str, Any], key: str, name: str, pattern: re.Pattern = RUN_ID) -> str:
    """``kept[key]``, a string like ``pattern``, or CannotContinue (a hand-edited or damaged trackers.json)."""
    value = kept.get(key)
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise CannotContinue(f"{KEPT_FILE} keeps no valid {name} {key}")
    return value


def check_trackers(cfg: TrainConfig) -> None:
    """Every tracker of ``run.report_to`` can be imported (preflight: before the run folder is touched)."""
    for name in dict.fromkeys(cfg.run.report_to):
        require(name)


class TensorBoardTracker:
    name, module = "tensorboard", "torch.utils.tensorboard"

    def start(self, config: dict[str, Any], run_dir: Path, kept: dict[str, Any] | None = None) -> None:
        tensorboard = require(self.name)
        from torch.utils.tensorboard.summary import hparams  # an optional tracker: loaded when a run uses it

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

    def start(self, config: dict[str, Any], run_dir: Path, kept: dict[str, Any] | None = None
              ) -> dict[str, Any]:
        wandb = require(self.name)
        # wandb itself reads WANDB_MODE (online, offline, disabled), WANDB_PROJECT and the API key from the
        # environment; console="off" leaves the terminal to prover's own progress lines
        project = None if os.environ.get("WANDB_PROJECT") else "prover"
        # "allow", not "must": a run the server no longer has (or another project) becomes a new run under
        # the same id instead of a failed start. Offline, wandb writes a second offline-run-*-<id> folder
        # whose run record carries the id and resume=True; `wandb sync` (0.31) uploads the folders of one
        # resumed run in start order (not checked against a server here).
        same = {} if kept is None else {"id": kept_text(kept, "id", self.name), "resume": "allow"}
        self.run = wandb.init(project=project, name=run_dir.name, dir=str(run_dir), config=config,
                              settings=wandb.Settings(console="off"), **same)
        return {"id": self.run.id}

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def finish(self) -> None:
        self.run.finish()


class MlflowTracker:
    name, module = "mlflow", "mlflow"

    def start(self, config: dict[str, Any], run_dir: Path, kept: dict[str, Any] | None = None
              ) -> dict[str, Any]:
        require(self.name)
        # mlflow is an optional tracker: loaded when a run uses it
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        self.client = MlflowClient(tracking_uri=uri or f"sqlite:///{(run_dir / 'mlflow.db').absolute()}")
        if kept is None:
            # with a sqlite store MLflow would put artifacts under the current folder, not the run's
            self.run_id = self._new_run(run_dir, None if uri else (run_dir / "mlartifacts").absolute().as_uri())
        else:
            self.run_id = kept_text(kept, "run_id", self.name)
            # MLflow refuses to change a parameter's value: a resumed run adds only the parameters it lacks,
            # so one a resume may change (steps, eval.*) keeps the first session's value
            config = {k: v for k, v in config.items() if k not in self._continue_run().data.params}
        params = [Param(k, str(v)[:MLFLOW_PARAM_CHARS]) for k, v in config.items()]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 parameters per batch
            self.client.log_batch(self.run_id, params=params[i:i + 100])
        return {"run_id": self.run_id}

    def _new_run(self, run_dir: Path, artifacts: str | None) -> str:
        experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME", "prover")
        found = self.client.get_experiment_by_name(experiment)
        exp_id = found.experiment_id if found else self.client.create_experiment(experiment, artifacts)
        return self.client.create_run(exp_id, run_name=run_dir.name).info.run_id

    def _continue_run(self) -> Any:
        """The kept run, marked running again (``finish`` marked it finished); CannotContinue if this store
        (MLFLOW_TRACKING_URI may have changed) has no such live run."""
        from mlflow.exceptions import MlflowException  # mlflow is an optional tracker

        try:
            run = self.client.get_run(self.run_id)
        except MlflowException as exc:
            raise CannotContinue(f"MLflow has no run {self.run_id} ({str(exc).splitlines()[0]})") from exc
        if run.info.lifecycle_stage != "active":
            raise CannotContinue(f"MLflow run {self.run_id} is {run.info.lifecycle_stage}")
        self.client.update_run(self.run_id, status="RUNNING")
        return run

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric  # mlflow is an optional tracker

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()])

    def finish(self) -> None:
        self.client.set_terminated(self.run_id)


class TrackioTracker:
    name, module = "trackio", "trackio"

    def start(self, config: dict[str, Any], run_dir: Path, kept: dict[str, Any] | None = None
              ) -> dict[str, Any]:
        trackio = require(self.name)
        if kept is None:
            self.run = trackio.init(project="prover", name=run_dir.name, config=config)
        else:
            self.run = self._continue_run(trackio, kept, config)
        return {"project": self.run.project, "name": self.run.name, "id": self.run.id}

    def _continue_run(self, trackio: ModuleType, kept: dict[str, Any], config: dict[str, Any]) -> Any:
        """trackio continues a run by project and name (resume="must": the newest run of that name), so the
        run it picks is checked against the kept id: another run folder of the same name may be newer."""
        project, name = kept_text(kept, "project", self.name), kept_text(kept, "name", self.name, re.compile(".+"))
        run_id = kept_text(kept, "id", self.name)
        try:
            run = trackio.init(project=project, name=name, config=config, resume="must")
        except ValueError as exc:  # "Run 'x' does not exist in project 'prover'"
            raise CannotContinue(f"trackio: {exc}") from exc
        if run.id != run_id:
            run.finish()  # nothing logged: the other run is left as it was
            raise CannotContinue(f"trackio's newest run named {name!r} in {project!r} is another one "
                                 f"({run.id}, not {run_id})")
        return run

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


def row_order(record: dict[str, Any]) -> tuple[int, int]:
    """Where a metrics row comes in its run: by step, and within a step the train row before the evaluation."""
    return int(record["step"]), int(record.get("phase") == "eval")


def kept_runs(run_dir: Path) -> tuple[dict[str, Any], str]:
    """The tracker runs trackers.json keeps ({tracker name: what its ``start`` returned, and ``last``: the
    order of the last row it got}), and why none can be continued ('' when the file was read, or when
    nothing is being continued: a fresh start moved the old run's metrics.jsonl and trackers.json aside)."""
    path = run_dir / KEPT_FILE
    try:
        kept = json.loads(path.read_text())
    except FileNotFoundError:
        metrics = run_dir / "metrics.jsonl"
        continued = metrics.is_file() and metrics.stat().st_size > 0  # rows of earlier sessions: a resume
        return {}, f"no run to continue ({path} is missing)" if continued else ""
    except (OSError, ValueError) as exc:
        return {}, f"no run to continue ({path} is unreadable: {' '.join(str(exc).split())})"
    if not isinstance(kept, dict) or not all(isinstance(v, dict) for v in kept.values()):
        return {}, f"no run to continue ({path} is unreadable: not an object of objects)"
    return kept, ""


class Trackers:
    """The trackers of one run, started together. ``log`` takes metrics.jsonl rows; a tracker that fails
    mid-run is dropped with one note (metrics.jsonl, the record, is unaffected). A context manager:
    leaving it finishes every tracker. ``kept``: what trackers.json keeps, rewritten as rows go out."""

    def __init__(self, trackers: list[Tracker], note: Callable[[str], None] = print,
                 kept_path: Path | None = None, kept: dict[str, Any] | None = None) -> None:
        self.trackers, self.note = trackers, note
        self.kept_path, self.kept = kept_path, kept if kept is not None else {}
        self.sent: dict[str, tuple[int, int]] = {}  # tracker name -> the last row an earlier session sent it

    @classmethod
    def start(cls, cfg: TrainConfig, note: Callable[[str], None] = print, enabled: bool = True) -> Trackers:
        """Start ``cfg.run.report_to`` (none when not ``enabled``: only the main process logs metrics),
        continuing the runs trackers.json keeps."""
        run_dir = Path(cfg.run.dir)
        names = list(dict.fromkeys(cfg.run.report_to)) if enabled else []
        kept, problem = kept_runs(run_dir) if names else ({}, "")
        # entries of trackers not asked for this time stay: a later resume that asks again continues them
        started = cls([], note, run_dir / KEPT_FILE, dict(kept))
        config = flat_config(cfg.model_dump(mode="json"))
        for name in names:
            # kept runs, but none of this tracker: it was not in run.report_to before this resume
            missing = problem or (f"no run to continue ({KEPT_FILE} keeps none: it was not in run.report_to)"
                                  if kept else "")
            try:
                started._start_one(TRACKERS[name](), config, run_dir, kept.get(name), missing)
            except ConfigError:
                started.finish()
                raise
            except Exception as exc:  # a refused login, an unreachable server: the user's setup, one line
                started.finish()
                reason = " ".join(str(exc).split()) or type(exc).__name__
                raise ConfigError(f"run.report_to={name}: the tracker did not start ({reason})") from exc
        started.save()
        return started

    def _start_one(self, tracker: Tracker, config: dict[str, Any], run_dir: Path, earlier: dict[str, Any] | None,
                   missing: str) -> None:
        """Start ``tracker``, continuing its ``earlier`` run; failing that, a new run with one note (not an
        error: the new run still gets every row from here on)."""
        if earlier is not None:
            try:
                self._keep(tracker, tracker.start(config, run_dir, earlier), earlier.get("last"))
                return
            except CannotContinue as exc:
                missing = f"no run to continue ({exc})"
        kept = tracker.start(config, run_dir, None)
        if kept is not None and missing:  # TensorBoard (None) has no run to continue
            self.note(f"run.report_to={tracker.name}: {missing}; it starts a new {tracker.name} run")
        self._keep(tracker, kept, None)

    def _keep(self, tracker: Tracker, kept: dict[str, Any] | None, last: Any) -> None:
        self.trackers.append(tracker)
        if kept is None:  # TensorBoard: nothing to continue by
            return
        if isinstance(last, list) and len(last) == 2 and all(type(v) is int for v in last):
            self.sent[tracker.name] = (last[0], last[1])
            kept["last"] = last
        self.kept[tracker.name] = kept

    def save(self) -> None:
        """trackers.json, atomically (a kill mid-write leaves the previous one)."""
        if self.kept_path is not None and self.kept:
            self.kept_path.parent.mkdir(parents=True, exist_ok=True)  # trackio writes elsewhere: none may exist yet
            write_atomic(self.kept_path, json.dumps(self.kept, indent=1, sort_keys=True) + "\n")

    def log(self, record: dict[str, Any]) -> None:
        metrics, step, order = numeric_metrics(record), int(record["step"]), row_order(record)
        sent = False
        for tracker in list(self.trackers):
            if order <= self.sent.get(tracker.name, (-1, 0)):
                continue  # a step the killed session sent already, repeated after its last checkpoint
            try:
                tracker.log(metrics, step)
            except Exception as exc:  # noqa: BLE001 - a tracker's outage must not stop training
                self.trackers.remove(tracker)
                reason = " ".join(str(exc).split()) or type(exc).__name__
                self.note(f"step {step}: the {tracker.name} tracker failed ({reason}); it gets no more rows "
                          "(metrics.jsonl has them all)")
            else:
                if tracker.name in self.kept:
                    self.kept[tracker.name]["last"], sent = list(order), True
        if sent:  # after the row went out: a kill between the two sends it once more, never loses it
            self.save()

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
