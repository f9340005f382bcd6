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
from prover.run import RunDir
from prover.trackers import TRACKERS, Trackers, flat_config

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
    aside = RunDir(_cfg(run)).start(fresh=True)
    assert (aside / "tensorboard" / "events.out.tfevents.1").read_text() == "old run"
    assert not (run / "tensorboard").exists()  # the new run's curves start alone


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


@pytest.mark.slow
@_needs("wandb")
def test_wandb_offline_writes_under_the_run_folder_and_no_secret(tmp_path, monkeypatch):
    for var, value in {"WANDB_MODE": "offline", "WANDB_API_KEY": SECRETS[0], "WANDB_CONFIG_DIR": str(tmp_path / "cfg"),
                       "WANDB_CACHE_DIR": str(tmp_path / "cache"), "WANDB_DATA_DIR": str(tmp_path / "data")}.items():
        monkeypatch.setenv(var, value)
    for var in ("WANDB_DIR", "WANDB_PROJECT", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    run = tmp_path / "run"
    _log_rows(_cfg(run, "wandb"))
    [folder] = (run / "wandb").glob("offline-run-*")
    records = _finished_wandb_log(next(folder.glob("*.wandb")))
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    for secret in SECRETS:
        assert not [p for p in files if secret.encode() in p.read_bytes()], secret
    seen, config = {}, {}
    for record in records:
        if record.HasField("history"):
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
            seen |= {(k, items["_step"]): v for k, v in items.items() if not k.startswith("_")}
        for update in [record.run.config.update, record.config.update]:  # at init, and any later change
            config |= {i.key: json.loads(i.value_json) for i in update}
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


@_needs("trackio")
def test_trackio_holds_every_metric_at_its_step(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    for var in ("TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL"):
        monkeypatch.delenv(var, raising=False)
    import trackio.utils
    from trackio.sqlite_storage import SQLiteStorage

    if trackio.utils.TRACKIO_DIR != tmp_path / "trackio":
        pytest.skip("trackio was imported before this test could point TRACKIO_DIR at a temporary folder")
    _log_rows(_cfg(tmp_path / "run", "trackio"))
    logs = SQLiteStorage.get_logs("prover", "run")
    seen = {(k, row["step"]): v for row in logs for k, v in row.items() if k not in ("step", "timestamp")}
    assert seen == pytest.approx(EXPECTED)


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
    from prover.config import load_config

    assert load_config(None, ["run.report_to=tensorboard"]).run.report_to == ["tensorboard"]
    assert load_config(None, ["run.report_to=[tensorboard,wandb]"]).run.report_to == ["tensorboard", "wandb"]
