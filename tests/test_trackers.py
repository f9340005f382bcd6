"""Experiment trackers (run.report_to): what each one holds equals what metrics.jsonl holds, read back with
the tracker's own reader; no secret reaches a tracker; a missing library is one line before the run folder
is touched; a tracker that fails mid-run does not stop training.

The expected values are metrics.jsonl's own rows (the definition of what a tracker must show) or the
hand-made rows below, and the config values set here."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest

from conftest import TINY_RUN
from prover.cli import main
from prover.config import TrainConfig
from prover.rundir.run import RunDir
from prover.rundir.trackers import KEPT_FILE, TRACKERS, Trackers, flat_config

# two rows as metrics.jsonl holds them: an evaluation, then a train step (a bool and an int among the numbers)
ROWS = [{"step": 0, "phase": "eval", "eval/success": 0.25, "eval/episodes": 4.0},
        {"step": 1, "phase": "train", "rollout/success": 0.5, "learner/rows": 35, "learner/kl": 0.125,
         "credit/some_flag": True}]
# what a tracker must hold for ROWS: (name, step) -> value
EXPECTED = {("eval/success", 0): 0.25, ("eval/episodes", 0): 4.0, ("rollout/success", 1): 0.5,
            ("learner/rows", 1): 35.0, ("learner/kl", 1): 0.125, ("credit/some_flag", 1): 1.0}
SECRETS = ["secret-xyz-123", "secret-in-config-456", "hf_SecretTokenInList789", "sk-PlainValue000"]


def _cfg(run_dir: Path, *names: str) -> TrainConfig:
    """A config whose env.kwargs hold secrets under secret-looking names and as secret-looking values."""
    return TrainConfig.model_validate({
        "run": {"dir": str(run_dir), "report_to": list(names)}, "rollout": {"group_size": 5},
        "env": {"kwargs": {"api_key": SECRETS[1], "urls": [SECRETS[2]], "endpoint": SECRETS[3],
                           "max_new_tokens": 7}}})


def _log_rows(cfg: TrainConfig) -> None:
    with Trackers.start(cfg) as trackers:
        for row in ROWS:
            trackers.log(row)


def _needs(module: str):
    return pytest.mark.skipif(importlib.util.find_spec(module) is None,
                              reason=f"{module} is not installed (pip install 'prover-rl[{module}]'; not in dev)")


# -- (a) a real tiny run, read back with TensorBoard's own reader ---------------------------------------

@pytest.mark.slow
@_needs("tensorboard")
def test_a_tiny_run_sends_every_metrics_row_to_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    run = tmp_path / "run"
    assert main(["train", *TINY_RUN, "steps=1", f"run.dir={run}", "run.report_to=[tensorboard]"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["phase"], r["step"]) for r in rows] == [("eval", 0), ("train", 1), ("eval", 1)]
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    seen = {(tag, e.step): e.value for tag in events.Tags()["scalars"] for e in events.Scalars(tag)}
    want = {(k, r["step"]): float(v) for r in rows for k, v in r.items() if k not in ("step", "phase")}
    assert seen.keys() == want.keys()  # every number of every row, no more (no "phase", no "step")
    for key, value in want.items():  # TensorBoard stores float32
        assert seen[key] == pytest.approx(value, rel=1e-6), key
    for key in [("eval/success", 0), ("rollout/success", 1), ("learner/entropy", 1), ("cost/rollout_tokens", 1),
                ("time/step", 1), ("eval/success", 1)]:
        assert key in seen
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hparams = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
    assert hparams["rollout.group_size"].number_value == 3  # TINY_RUN's
    assert hparams["run.report_to"].string_value == '["tensorboard"]'


def test_a_fresh_start_moves_the_old_runs_tensorboard_folder_aside(tmp_path):
    run = tmp_path / "run"
    (run / "tensorboard").mkdir(parents=True)
    (run / "tensorboard" / "events.out.tfevents.1").write_text("old run")
    (run / KEPT_FILE).write_text('{"mlflow": {"run_id": "0123abcd"}}')
    aside = RunDir(_cfg(run)).start(fresh=True)
    assert (aside / "tensorboard" / "events.out.tfevents.1").read_text() == "old run"
    assert not (run / "tensorboard").exists()  # the new run's curves start alone
    assert (aside / KEPT_FILE).is_file() and not (run / KEPT_FILE).exists()  # and new tracker runs, not the old


# -- (b) wandb, offline: its folder is inside the run folder, and holds no secret ---------------------

def _wandb_records(path: Path) -> list[bytes]:
    """The records of a .wandb file: a 7-byte file header, then LevelDB-log chunks in 32 KiB blocks (each
    chunk: crc32 4, length 2, type 1 = full, 2 = first, 3 = middle, 4 = last)."""
    data, pos, records, part = path.read_bytes(), 7, [], b""
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a chunk header is padding
            pos += 32768 - pos % 32768
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if pos + 7 + length > len(data):  # still being written
            break
        part, pos = part + data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):
            records.append(part)
            part = b""
    return records


def _finished_wandb_log(path: Path) -> list:
    """The records of a run's .wandb file once its last one (``exit``) is there: wandb's service process
    finishes writing the file a moment after ``run.finish()`` returns (seen: 2 runs in 15, under 2 s)."""
    from wandb.proto import wandb_internal_pb2

    deadline = time.monotonic() + 60
    while True:
        records = [wandb_internal_pb2.Record.FromString(data) for data in _wandb_records(path)]
        if (records and records[-1].HasField("exit")) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def _offline_wandb(tmp_path: Path, monkeypatch) -> None:
    for var, value in {"WANDB_MODE": "offline", "WANDB_API_KEY": SECRETS[0], "WANDB_CONFIG_DIR": str(tmp_path / "cfg"),
                       "WANDB_CACHE_DIR": str(tmp_path / "cache"), "WANDB_DATA_DIR": str(tmp_path / "data")}.items():
        monkeypatch.setenv(var, value)
    for var in ("WANDB_DIR", "WANDB_PROJECT", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)


def _wandb_history(records: list) -> list[tuple[str, int, float]]:
    """(name, step, value) of each metric of each history record, in order (a repeated step shows twice)."""
    seen = []
    for record in records:
        if record.HasField("history"):
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
            seen += [(k, items["_step"], v) for k, v in items.items() if not k.startswith("_")]
    return seen


@pytest.mark.slow
@_needs("wandb")
def test_wandb_offline_writes_under_the_run_folder_and_no_secret(tmp_path, monkeypatch):
    _offline_wandb(tmp_path, monkeypatch)
    run = tmp_path / "run"
    _log_rows(_cfg(run, "wandb"))
    [folder] = (run / "wandb").glob("offline-run-*")
    records = _finished_wandb_log(next(folder.glob("*.wandb")))
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    for secret in SECRETS:
        assert not [p for p in files if secret.encode() in p.read_bytes()], secret
    seen = {(k, step): v for k, step, v in _wandb_history(records)}
    config = {i.key: json.loads(i.value_json) for record in records  # at init, and any later change
              for update in [record.run.config.update, record.config.update] for i in update}
    assert seen == pytest.approx(EXPECTED)
    assert config["rollout.group_size"] == 5 and config["env.kwargs.max_new_tokens"] == 7
    assert not any("api_key" in k or k in ("env.kwargs.urls", "env.kwargs.endpoint") for k in config)


# -- (c) mlflow, a store inside the run folder, read back with mlflow's client -------------------------

@_needs("mlflow")
def test_mlflow_holds_every_metric_at_its_step_and_the_config(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    run = tmp_path / "run"
    _log_rows(_cfg(run, "mlflow"))
    client = MlflowClient(tracking_uri=f"sqlite:///{run / 'mlflow.db'}")
    [found] = client.search_runs([client.get_experiment_by_name("prover").experiment_id])
    assert found.info.run_name == "run" and found.info.status == "FINISHED"
    seen = {(m.key, m.step): m.value for name in found.data.metrics
            for m in client.get_metric_history(found.info.run_id, name)}
    assert seen == pytest.approx(EXPECTED)
    params = found.data.params
    assert params["rollout.group_size"] == "5" and params["env.kwargs.max_new_tokens"] == "7"
    assert not any(secret in value for value in params.values() for secret in SECRETS)


@pytest.fixture(scope="module")
def trackio_dir(tmp_path_factory):
    """A temporary TRACKIO_DIR for this module's trackio tests (each with its own run names): trackio reads
    it once, when first imported."""
    folder = tmp_path_factory.mktemp("trackio")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRACKIO_DIR", str(folder))
        for var in ("TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL"):
            patch.delenv(var, raising=False)
        import trackio.utils

        if trackio.utils.TRACKIO_DIR != folder:
            pytest.skip("trackio was imported before this module could point TRACKIO_DIR at a temporary folder")
        yield folder


@_needs("trackio")
def test_trackio_holds_every_metric_at_its_step(tmp_path, trackio_dir):
    from trackio.sqlite_storage import SQLiteStorage

    _log_rows(_cfg(tmp_path / "run", "trackio"))
    logs = SQLiteStorage.get_logs("prover", "run")
    seen = {(k, row["step"]): v for row in logs for k, v in row.items() if k not in ("step", "timestamp")}
    assert seen == pytest.approx(EXPECTED)


# -- (e) --resume continues the same tracker run, on the same step axis ---------------------------------

def _train(step: int, success: float) -> dict:
    return {"step": step, "phase": "train", "rollout/success": success}


# a first session killed after step 2's row but before its checkpoint; the resume (from checkpoint 1, with
# more steps) repeats step 2 with the same values (same tasks and seeds), then runs step 3 and the final eval
FIRST = [_train(1, 0.1), _train(2, 0.2)]
RESUMED = [_train(2, 0.2), _train(3, 0.3), {"step": 3, "phase": "eval", "eval/success": 0.5}]
# what the tracker must hold afterwards, each (name, step) once
CONTINUED = sorted([("rollout/success", 1, 0.1), ("rollout/success", 2, 0.2), ("rollout/success", 3, 0.3),
                    ("eval/success", 3, 0.5)])


def _session(cfg: TrainConfig, rows: list[dict], resume: bool, notes: list[str] | None = None) -> dict:
    """What the trainer does with the run folder and the trackers in one session; returns trackers.json
    ({} if there is none)."""
    run = RunDir(cfg)
    run.start(fresh=not resume)
    if resume:
        run.truncate_history(1)  # the checkpoint it resumes from
    with Trackers.start(cfg, notes.append if notes is not None else print) as run.trackers:
        for row in rows:
            run.log(row)
    kept = run.path / KEPT_FILE
    return json.loads(kept.read_text()) if kept.is_file() else {}


def _first_and_resumed(run: Path, name: str, notes: list[str] | None = None) -> tuple[dict, dict]:
    """trackers.json after each of two sessions of one run: FIRST, then, resumed with more steps, RESUMED."""
    cfg = _cfg(run, name)
    first = _session(cfg, FIRST, resume=False)
    return first, _session(cfg.model_copy(update={"steps": cfg.steps + 1}), RESUMED, True, notes)


@pytest.mark.slow
@_needs("wandb")
def test_a_resumed_run_continues_its_wandb_run(tmp_path, monkeypatch):
    _offline_wandb(tmp_path, monkeypatch)
    run = tmp_path / "run"
    first, resumed = _first_and_resumed(run, "wandb")
    run_id = first["wandb"]["id"]
    # offline, each session is a folder of its own; the second's run record carries the same id and resume
    # (what `wandb sync` appends to the first by)
    folders = sorted((run / "wandb").glob("offline-run-*"), key=lambda p: p.stat().st_mtime)
    assert len(folders) == 2 and all(f.name.split("-")[3] == run_id for f in folders)
    logs = [_finished_wandb_log(next(f.glob("*.wandb"))) for f in folders]
    assert [(r.run.run_id, r.run.resume) for log in logs for r in log if r.HasField("run")] == \
        [(run_id, False), (run_id, True)]
    assert sorted(_wandb_history(logs[0] + logs[1])) == CONTINUED  # values as sent: floats stored exactly
    assert resumed["wandb"] == {"id": run_id, "last": [3, 1]}


@_needs("mlflow")
def test_a_resumed_run_continues_its_mlflow_run(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    run = tmp_path / "run"
    first, resumed = _first_and_resumed(run, "mlflow")
    client = MlflowClient(tracking_uri=f"sqlite:///{run / 'mlflow.db'}")
    [found] = client.search_runs([client.get_experiment_by_name("prover").experiment_id])  # one run, not two
    assert found.info.run_id == first["mlflow"]["run_id"] and found.info.status == "FINISHED"
    seen = sorted((m.key, m.step, m.value) for key in found.data.metrics
                  for m in client.get_metric_history(found.info.run_id, key))
    assert seen == CONTINUED  # values as sent: floats stored exactly
    assert found.data.params["steps"] == "12"  # MLflow keeps a parameter's first value; the resume's 13 is no error
    assert resumed["mlflow"] == {"run_id": first["mlflow"]["run_id"], "last": [3, 1]}


@_needs("trackio")
def test_a_resumed_run_continues_its_trackio_run(tmp_path, trackio_dir):
    from trackio.sqlite_storage import SQLiteStorage

    first, resumed = _first_and_resumed(tmp_path / "resumed", "trackio")
    assert first["trackio"]["name"] == "resumed" and first["trackio"]["project"] == "prover"
    [record] = [r for r in SQLiteStorage.get_run_records("prover") if r["name"] == "resumed"]  # one run
    assert record["id"] == first["trackio"]["id"]
    logs = SQLiteStorage.get_logs("prover", run_id=record["id"])
    seen = sorted((k, row["step"], v) for row in logs for k, v in row.items() if k not in ("step", "timestamp"))
    assert seen == CONTINUED  # values as sent: floats stored exactly
    assert resumed["trackio"] == {**first["trackio"], "last": [3, 1]}


@_needs("trackio")
def test_trackio_does_not_continue_a_newer_run_of_the_same_name(tmp_path, trackio_dir):
    from trackio.sqlite_storage import SQLiteStorage

    mine, other, notes = tmp_path / "a" / "twin", tmp_path / "b" / "twin", []
    first = _session(_cfg(mine, "trackio"), FIRST, resume=False)
    _session(_cfg(other, "trackio"), FIRST, resume=False)  # trackio continues runs by name: this one is newer
    resumed = _session(_cfg(mine, "trackio"), RESUMED, True, notes)
    assert len(notes) == 1 and "is another one" in notes[0] and "starts a new trackio run" in notes[0]
    assert resumed["trackio"]["id"] not in (first["trackio"]["id"], _kept_id(other, "trackio", "id"))
    other_logs = SQLiteStorage.get_logs("prover", run_id=_kept_id(other, "trackio", "id"))
    assert [row["step"] for row in other_logs] == [1, 2]  # the other folder's run got nothing


def _kept_id(run: Path, name: str, key: str) -> str:
    return json.loads((run / KEPT_FILE).read_text())[name][key]


@_needs("mlflow")
@pytest.mark.parametrize("damage", ["missing", "unreadable"])
def test_a_missing_or_damaged_trackers_file_starts_a_new_run_with_one_note(damage, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    run, notes = tmp_path / "run", []
    cfg = _cfg(run, "mlflow")
    _session(cfg, FIRST, resume=False)
    if damage == "missing":
        (run / KEPT_FILE).unlink()
    else:
        (run / KEPT_FILE).write_text('{"mlflow": {"run_id": "0a')  # torn
    resumed = _session(cfg, RESUMED, True, notes)
    [note] = notes  # one line, e.g. "... (<run>/trackers.json is unreadable: Unterminated string ...); ..."
    assert note.startswith(f"run.report_to=mlflow: no run to continue ({run / KEPT_FILE} is {damage}")
    assert note.endswith("); it starts a new mlflow run") and "\n" not in note
    client = MlflowClient(tracking_uri=f"sqlite:///{run / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("prover").experiment_id])
    assert len(runs) == 2 and resumed["mlflow"]["run_id"] in [r.info.run_id for r in runs]
    assert _kept_id(run, "mlflow", "run_id") == resumed["mlflow"]["run_id"]  # the next resume continues the new run


@_needs("mlflow")
def test_a_fresh_run_gets_no_note_and_a_tracker_added_on_resume_gets_one(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    run, notes = tmp_path / "run", []
    _session(_cfg(run), FIRST, resume=False, notes=notes)  # no tracker: no trackers.json
    assert not (run / KEPT_FILE).exists()
    _session(_cfg(run, "tensorboard", "mlflow"), RESUMED, True, notes)
    assert notes == [f"run.report_to=mlflow: no run to continue ({run / KEPT_FILE} is missing); it starts a new "
                     "mlflow run"]  # TensorBoard's folder simply goes on
    notes.clear()
    _session(_cfg(run, "mlflow"), FIRST, resume=False, notes=notes)
    assert notes == []


# -- (d) a missing library: one line, before the run folder is touched ---------------------------------

@pytest.mark.parametrize("name", sorted(TRACKERS))
def test_a_missing_tracker_library_is_one_line_before_the_run_folder(name, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, TRACKERS[name].module, None)  # `import` of it now raises ImportError
    run = tmp_path / "run"
    assert main(["train", *TINY_RUN, "steps=1", f"run.dir={run}", f"run.report_to=[{name}]"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"run.report_to={name}" in err
    assert f"pip install 'prover-rl[{name}]'" in err
    assert not run.exists()


# -- the config as hyperparameters, and a tracker's outage ---------------------------------------------

def test_the_config_is_flattened_to_dotted_keys_without_secrets():
    tree = {"seed": 3, "run": {"dir": "runs/x", "report_to": []}, "judge": {"name": None, "api_key_env": "K"},
            "env": {"kwargs": {}}, "engine": {"kwargs": {"hf_token": "abc", "auth": "x", "author": "me",
                                                         "password": "p", "headers": [{"Token": "t"}],
                                                         "path": "/models/hf_cache", "model": "hf_q"}},
            "rollout": {"sampling": {"max_new_tokens": 24, "temperature": 1.0, "greedy": False}}}
    assert flat_config(tree) == {
        "seed": 3, "run.dir": "runs/x", "run.report_to": "[]", "judge.name": "null", "env.kwargs": "{}",
        "engine.kwargs.author": "me", "engine.kwargs.path": "/models/hf_cache",
        "rollout.sampling.max_new_tokens": 24, "rollout.sampling.temperature": 1.0,
        "rollout.sampling.greedy": False}


class Failing:
    name = "failing"

    def log(self, metrics, step):
        raise ConnectionError("server\ngone")

    def finish(self):
        pass


class Recording:
    name = "recording"

    def __init__(self):
        self.logged, self.finished = [], False

    def log(self, metrics, step):
        self.logged.append((step, metrics))

    def finish(self):
        self.finished = True


def test_a_tracker_that_fails_is_dropped_with_one_note_and_the_others_go_on():
    notes, recording = [], Recording()
    with Trackers([Failing(), recording], notes.append) as trackers:
        for row in ROWS:
            trackers.log(row)
    assert notes == ["step 0: the failing tracker failed (server gone); it gets no more rows "
                     "(metrics.jsonl has them all)"]
    assert recording.logged == [(0, {"eval/success": 0.25, "eval/episodes": 4.0}),
                                (1, {"rollout/success": 0.5, "learner/rows": 35.0, "learner/kl": 0.125,
                                     "credit/some_flag": 1.0})]
    assert recording.finished


def test_one_tracker_can_be_named_without_brackets():
    from prover.config_load import load_config

    assert load_config(None, ["run.report_to=tensorboard"]).run.report_to == ["tensorboard"]
    assert load_config(None, ["run.report_to=[tensorboard,wandb]"]).run.report_to == ["tensorboard", "wandb"]
