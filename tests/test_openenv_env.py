"""``env.name=openenv``: an env served over OpenEnv's protocol, played by URL, against a real
``prover serve-env`` on 127.0.0.1; and what OpenEnv's own client shows of the server's refusals."""

from __future__ import annotations

import json

import pytest

from conftest import TINY_RUN
from prover.cli import main
from prover.envs import make_env
from prover.errors import ConfigError, EnvFaultError
from test_serve_env import PIVOT_ARGS, PIVOT_KWARGS, TIMEOUT_S, EnvServer, client, needs_openenv


@pytest.fixture(scope="module")
def server():
    served = EnvServer([*PIVOT_ARGS, "--max-sessions", "40"])
    yield served
    served.stop()


def remote(url: str, name: str = "openenv-deterministic", **kwargs):
    return make_env(name, url=url, connect_timeout_s=TIMEOUT_S, message_timeout_s=TIMEOUT_S, **kwargs)


@needs_openenv
@pytest.mark.slow
def test_an_episode_by_url_equals_the_env_in_process_and_restores_by_replay(server):
    here, there = make_env("pivot-sim", **PIVOT_KWARGS), remote(server.url)
    try:
        assert there.reset(seed=5, options={"split": "test"}) == here.reset(seed=5, options={"split": "test"})
        for _ in range(3):
            action = here.expert_action()
            assert there.step(action)[:4] == here.step(action)[:4]
        snap, key = there.snapshot(), there.state_key()
        later = [there.step(a)[0] for a in ("look", "wait")]
        there.restore(snap)
        assert there.state_key() == key and [there.step(a)[0] for a in ("look", "wait")] == later
        for action in ("look", "wait"):
            here.step(action)
        while True:  # the expert's episode ends won, on the server as here
            action = here.expert_action()
            *out, info = there.step(action)
            assert out == list(here.step(action)[:4])
            if out[2] or out[3]:
                break
        assert info["won"] is True
    finally:
        there.close()


@needs_openenv
@pytest.mark.slow
def test_check_env_passes_against_a_live_server(server, capsys):
    assert main(["check-env", "openenv-deterministic", f"url={server.url}", "--strict"]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.startswith("openenv-deterministic: passes the env contract (")


@needs_openenv
@pytest.mark.slow
def test_train_one_step_against_a_live_server(server, tmp_path, capsys):
    run = tmp_path / "run"
    args = ["train", *TINY_RUN, "steps=1", "env.name=openenv-deterministic", f"env.kwargs.url={server.url}",
            "warmstart.enabled=false", f"run.dir={run}"]
    assert main(args) == 0, capsys.readouterr().err
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert ("train", 1) in [(r["phase"], r["step"]) for r in steps]


@needs_openenv
@pytest.mark.slow
def test_the_servers_refusal_is_one_line(server):
    env = remote(server.url, reset_kwargs={"max_turns": 3})
    with pytest.raises(EnvFaultError) as err:
        env.reset(seed=1)
    env.close()
    assert "reset failed: Server error: reset got unknown argument(s) ['max_turns']" in str(err.value)
    assert "\n" not in str(err.value)


@needs_openenv
def test_a_server_that_is_not_there_or_no_url_is_one_line():
    with pytest.raises(ConfigError, match=r"^env 'openenv': cannot open a session at http://127.0.0.1:9: "):
        make_env("openenv", url="http://127.0.0.1:9", connect_timeout_s=5)
    with pytest.raises(ConfigError, match="is not an http"):
        make_env("openenv", url="ftp://example.org")


@needs_openenv
@pytest.mark.slow
def test_openenvs_client_shows_the_servers_reason_for_a_malformed_action(server):
    with client(server.url) as session:
        session.reset(seed=1)
        with pytest.raises(RuntimeError) as err:
            session.step({"text": "go forward", "speed": 3})
        assert "Invalid message: speed: Extra inputs are not permitted" in str(err.value)
        assert session.step({"text": "go forward"}).observation["text"]  # the session goes on


@needs_openenv
@pytest.mark.slow
def test_openenvs_client_shows_the_reason_a_full_server_refuses_a_session():
    from websockets.exceptions import ConnectionClosed

    full = EnvServer([*PIVOT_ARGS, "--max-sessions", "1"])
    try:
        with client(full.url) as first:
            first.reset(seed=1)
            second = client(full.url)
            with pytest.raises((ConnectionClosed, RuntimeError)) as err:
                second.reset(seed=1)
            second.close()
        assert "capacity" in str(err.value).lower() and "1/1" in str(err.value), str(err.value)
    finally:
        full.stop()


@needs_openenv
@pytest.mark.slow
def test_the_docs_openenv_client_example_runs(server, capsys):
    from test_docs_env_examples import example

    code = example("openenv client")
    assert "http://127.0.0.1:8000" in code  # the port `prover serve-env` takes by default; here the OS picks one
    exec(compile(code.replace("http://127.0.0.1:8000", server.url), "docs/envs.md", "exec"), {})
    assert "'episode_id'" in capsys.readouterr().out
