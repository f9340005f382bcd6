"""`prover serve` on an address beyond this machine without PROVER_SGLANG_API_KEY is refused in one line,
unless the flag that names the risk is given."""

from __future__ import annotations

import socket

import pytest

from prover.cli import main
from prover.commands.serve_checks import RISK_FLAG, is_loopback


@pytest.fixture
def model_dir(tmp_path):
    m = tmp_path / "Qwen3.5-2B"
    m.mkdir()
    (m / "config.json").write_text("{}")
    return m


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(model_dir, host, *extra):
    return ["serve", "--model", str(model_dir), "--host", host, "--port", str(_free_port()), "--python", "py",
            "--dry-run", *extra]


def test_loopback_is_told_apart_from_every_interface_and_names():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("10.1.2.3")
    assert not is_loopback("no-such-host.invalid")


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_a_keyless_server_on_every_interface_is_refused_in_one_line(host, model_dir, capsys, monkeypatch):
    monkeypatch.delenv("PROVER_SGLANG_API_KEY", raising=False)
    rc = main(_serve(model_dir, host))
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"prover: error: --host {host} without PROVER_SGLANG_API_KEY: anyone who can reach")
    assert RISK_FLAG in err


def test_a_key_or_the_named_risk_lets_it_start(model_dir, capsys, monkeypatch):
    monkeypatch.setenv("PROVER_SGLANG_API_KEY", "s3cret-key-for-the-test")
    assert main(_serve(model_dir, "0.0.0.0")) == 0
    assert "--api-key" in capsys.readouterr().out
    monkeypatch.delenv("PROVER_SGLANG_API_KEY")
    assert main(_serve(model_dir, "0.0.0.0", RISK_FLAG)) == 0
    out, err = capsys.readouterr()
    assert "--api-key" not in out and err.startswith("prover serve: warning: --host 0.0.0.0 without")
    assert main(_serve(model_dir, "127.0.0.1")) == 0  # loopback needs no key
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("key", [" ", "x", "               ", "short-key-15chr"])
def test_a_weak_key_on_an_open_address_is_refused_in_one_line(key, model_dir, capsys, monkeypatch):
    monkeypatch.setenv("PROVER_SGLANG_API_KEY", key)
    rc = main(_serve(model_dir, "0.0.0.0"))
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert "at least 16 characters" in err and "secrets.token_urlsafe(32)" in err
    assert len(key.strip()) < 2 or key not in err  # the key itself is never printed
    monkeypatch.setenv("PROVER_SGLANG_API_KEY", "sixteen-chars-ok")  # 16: the bound itself starts
    assert main(_serve(model_dir, "0.0.0.0")) == 0
