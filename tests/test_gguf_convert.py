"""`prover convert-gguf` keyed by content: a different file never gets another file's folder, bad files and a bad
``--out`` are one line before anything is loaded, the path is alone on stdout, the temporary folders of killed
conversions are removed by the next run, and two conversions of one file at once both succeed. The loading and
saving of a real model is replaced by files written by hand (test_local_judge_structured.py converts real
models); the GGUF files are real, written by the ``gguf`` package's writer or byte by byte from the format's
header."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from prover.cli import main
from prover.judges import gguf_convert

EMPTY_GGUF = b"GGUF" + struct.pack("<IQQ", 3, 0, 0)  # version 3, no tensors, no metadata: a whole GGUF file


class Saved:
    """Stands for a model or a tokenizer: ``save_pretrained`` writes the files a complete folder holds."""

    def __init__(self, *files: str) -> None:
        self.files = files

    def save_pretrained(self, folder) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        for name in self.files:
            (Path(folder) / name).write_text("{}")


@pytest.fixture
def loads(monkeypatch, tmp_path):
    """The GGUF files loaded; a load prints to stdout as libraries do (Python's print and C's fd 1)."""
    loaded: list[Path] = []

    def load(path):
        loaded.append(Path(path))
        print("[WARNING] Setting accelerator to CPU")
        os.write(1, b"a C library's line\n")
        return Saved("config.json", "model.safetensors"), Saved("tokenizer_config.json")

    monkeypatch.setattr(gguf_convert, "load_gguf", load)
    monkeypatch.setattr(gguf_convert, "rebuild", lambda model: model)
    monkeypatch.setenv("PROVER_CACHE", str(tmp_path / "cache"))
    return loaded


def write_gguf(path: Path, values: int = 64) -> Path:
    gguf = pytest.importorskip("gguf")
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(path.stem)
    writer.add_tensor("w", np.arange(values, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def run(argv: list[str], capfd) -> tuple[int, str, str]:
    rc = main(["convert-gguf", *argv])
    out, err = capfd.readouterr()
    return rc, out, err


def one_line_error(argv: list[str], capfd) -> str:
    rc, out, err = run(argv, capfd)
    assert rc == 2 and out == "" and err.count("\n") == 1 and err.startswith("prover: error: "), (out, err)
    return err


def test_a_different_file_of_the_same_name_gets_its_own_folder(loads, tmp_path, capfd):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = tmp_path / "a" / "My.Model.gguf", tmp_path / "b" / "My.Model.gguf"
    first.write_bytes(EMPTY_GGUF)
    second.write_bytes(EMPTY_GGUF + b"\0")  # other bytes: another model
    models = tmp_path / "cache" / "models"
    assert run([str(first)], capfd)[:2] == (0, f"{models / 'my.model'}\n")
    digest = gguf_convert.sha256_of(second)
    assert run([str(second)], capfd)[:2] == (0, f"{models / ('my.model-' + digest[:12])}\n")
    assert run([str(first)], capfd)[:2] == (0, f"{models / 'my.model'}\n") and loads == [first, second]
    stamp = json.loads((models / "my.model" / gguf_convert.STAMP).read_text())
    assert stamp == {"sha256": gguf_convert.sha256_of(first), "converter": gguf_convert.CONVERTER_VERSION,
                     "gguf": "My.Model.gguf"}
    first.write_bytes(EMPTY_GGUF + b"\1")  # the same path, new content: a third folder
    digest = gguf_convert.sha256_of(first)
    assert run([str(first)], capfd)[:2] == (0, f"{models / ('my.model-' + digest[:12])}\n") and len(loads) == 3


def test_a_folder_of_another_converter_version_is_not_reused(loads, tmp_path, capfd, monkeypatch):
    src = tmp_path / "m.gguf"
    src.write_bytes(EMPTY_GGUF)
    assert run([str(src), "--out", str(tmp_path / "out")], capfd)[0] == 0
    monkeypatch.setattr(gguf_convert, "CONVERTER_VERSION", gguf_convert.CONVERTER_VERSION + 1)
    assert "converted from another file or by another converter version" in \
        one_line_error([str(src), "--out", str(tmp_path / "out")], capfd)
    assert run([str(src)], capfd)[0] == 0 and len(loads) == 2  # the cache's folder: converted again


def test_the_path_is_alone_on_stdout(loads, tmp_path, capfd):
    src = tmp_path / "m.gguf"
    src.write_bytes(EMPTY_GGUF)
    rc, out, err = run([str(src)], capfd)
    assert rc == 0 and out == f"{tmp_path / 'cache' / 'models' / 'm'}\n"
    assert "[WARNING] Setting accelerator to CPU" in err and "a C library's line" in err
    print("stdout is stdout again")
    assert capfd.readouterr().out == "stdout is stdout again\n"


@pytest.mark.parametrize("content, words", [
    (b"hello\n", "is not a GGUF file (it starts with b'hell', not b'GGUF')"),
    (b"", "is not a GGUF file (it starts with b'', not b'GGUF')"),
    (EMPTY_GGUF[:20], "is a truncated or damaged GGUF file (20 bytes): shorter than the 24-byte header"),
])
def test_a_file_that_is_not_gguf_or_is_cut_in_its_header_is_one_line(content, words, loads, tmp_path, capfd):
    src = tmp_path / "m.gguf"
    src.write_bytes(content)
    assert words in one_line_error([str(src)], capfd) and loads == []
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("keep", [30, 100, 300, 415])  # in the metadata, in the tensor's data (bytes 160-416)
def test_a_truncated_gguf_file_is_one_line_and_never_loaded(keep, loads, tmp_path, capfd):
    whole = write_gguf(tmp_path / "whole.gguf")
    assert whole.stat().st_size == 416 and gguf_convert.table_problem(whole) == ""
    cut = tmp_path / "mymodel.Q8_0.gguf"
    cut.write_bytes(whole.read_bytes()[:keep])
    err = one_line_error([str(cut)], capfd)
    assert f"is a truncated or damaged GGUF file ({keep} bytes): its metadata, tensor table or tensor data run " \
        "past its end or do not parse" in err and "unpack" not in err
    assert loads == []


def test_an_out_under_a_file_is_one_line_before_loading(loads, tmp_path, capfd):
    src = tmp_path / "m.gguf"
    src.write_bytes(EMPTY_GGUF)
    (tmp_path / "a-file").write_text("x")
    err = one_line_error([str(src), "--out", str(tmp_path / "a-file" / "deeper" / "model")], capfd)
    assert f"{str(tmp_path / 'a-file')!r} is a file, not a folder" in err and loads == []


def test_the_temporary_folders_of_killed_conversions_are_removed(loads, tmp_path, capfd):
    src = tmp_path / "m.gguf"
    src.write_bytes(EMPTY_GGUF)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    models = tmp_path / "cache" / "models"
    dead, alive, other = (models / f".m.tmp-{int(gone.stdout)}", models / f".m.tmp-{os.getppid()}",
                          models / f".other.tmp-{int(gone.stdout)}")
    for folder in (dead, alive, other):
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_text("half")
    assert run([str(src)], capfd)[0] == 0
    assert sorted(p.name for p in models.iterdir()) == sorted(["m", alive.name, other.name])


def test_two_processes_converting_one_file_at_once_both_get_the_folder(loads, monkeypatch, tmp_path, capfd):
    """The other process finishes first: this one's rename then meets a complete folder of the same file."""
    src = tmp_path / "m.gguf"
    src.write_bytes(EMPTY_GGUF)
    load_alone, started = gguf_convert.load_gguf, []  # the fixture's stand-in records each load in ``loads``

    def load(path):
        if not started:  # the first load: the other process converts, from start to end, while this one loads
            started.append(path)
            gguf_convert.convert(path)
        return load_alone(path)

    monkeypatch.setattr(gguf_convert, "load_gguf", load)
    rc, out, err = run([str(src)], capfd)
    models = tmp_path / "cache" / "models"
    assert (rc, out.strip(), len(loads)) == (0, str(models / "m"), 2), err
    assert [p.name for p in models.iterdir()] == ["m"]  # no temporary folder left
    assert gguf_convert.holds(models / "m", json.loads((models / "m" / gguf_convert.STAMP).read_text()))


# -- the shipped models, pinned; a file of the user's own, pinned only when asked -------------------

@pytest.fixture
def shipped_file(tmp_path, monkeypatch):
    """The default shipped model replaced by a one-part fake installed as a real distribution, pinned."""
    import dataclasses
    import hashlib
    import importlib

    site = tmp_path / "site"
    (site / "fake_smol").mkdir(parents=True)
    (site / "fake_smol" / "Fake.Q4_1.gguf").write_bytes(EMPTY_GGUF)
    info = site / "fake_smol-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-smol\nVersion: 0.1\n")
    (info / "RECORD").write_text("fake_smol/Fake.Q4_1.gguf,,\nfake_smol-0.1.dist-info/METADATA,,\n")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    model = dataclasses.replace(gguf_convert.SHIPPED[gguf_convert.DEFAULT_MODEL], size=len(EMPTY_GGUF),
                                parts=(("fake-smol", "Fake.Q4_1.gguf"),),
                                sha256=hashlib.sha256(EMPTY_GGUF).hexdigest())
    monkeypatch.setitem(gguf_convert.SHIPPED, gguf_convert.DEFAULT_MODEL, model)
    return site / "fake_smol" / "Fake.Q4_1.gguf", model


def test_the_shipped_file_converts_when_its_sha256_is_the_pinned_one(shipped_file, loads, tmp_path, capfd):
    path, _ = shipped_file
    assert run([], capfd)[:2] == (0, f"{tmp_path / 'cache' / 'models' / gguf_convert.DEFAULT_NAME}\n")
    assert loads == [path]


def test_a_shipped_file_of_other_bytes_is_refused_in_one_line_before_anything_is_written(shipped_file, loads,
                                                                                          tmp_path, capfd):
    path, model = shipped_file
    path.write_bytes(EMPTY_GGUF[:-1] + b"\1")  # the same size, a GGUF header, one byte changed
    err = one_line_error([], capfd)
    found = gguf_convert.sha256_of(path)
    assert f"has sha256 {found}, not the pinned {model.sha256}" in err and "fake-smol" in err
    assert "prover convert-gguf FILE" in err  # the way out: convert a file of one's own
    assert loads == [] and not (tmp_path / "cache").exists()


def test_a_file_of_ones_own_is_not_blocked_and_sha256_pins_it(shipped_file, loads, tmp_path, capfd):
    own = tmp_path / "mine.gguf"
    own.write_bytes(EMPTY_GGUF + b"\0")  # no pin knows it
    digest = gguf_convert.sha256_of(own)
    wrong = ("0" if digest[0] != "0" else "1") + digest[1:]
    err = one_line_error([str(own), "--sha256", wrong], capfd)
    assert f"has sha256 {digest}, not {wrong} as --sha256 says; nothing converted" in err and loads == []
    assert not (tmp_path / "cache").exists()
    assert run([str(own), "--sha256", digest.upper()], capfd)[:2] == (0, f"{tmp_path / 'cache' / 'models' / 'mine'}\n")
    assert run([str(own)], capfd)[0] == 0 and loads == [own]  # without a pin: converted (here, already)


@pytest.mark.parametrize("argv, words", [
    (["x.gguf", "--shipped", "smollm2-135m"], "give a GGUF file or --shipped, not both"),
    (["--sha256", "0" * 64], "--sha256 pins a GGUF file you give"),
    (["x.gguf", "--sha256", "abc"], "--sha256 must be 64 hex digits, not 'abc'"),
])
def test_bad_arguments_are_one_line(argv, words, loads, tmp_path, capfd):
    assert words in one_line_error(argv, capfd) and loads == [] and not (tmp_path / "cache").exists()


def test_a_users_copy_of_a_shipped_model_gets_its_folder_name(shipped_file, loads, tmp_path, capfd):
    copy = tmp_path / "whatever.gguf"
    copy.write_bytes(EMPTY_GGUF)  # the pinned bytes under another name: the same model, the same folder
    assert run([str(copy)], capfd)[:2] == (0, f"{tmp_path / 'cache' / 'models' / gguf_convert.DEFAULT_NAME}\n")
