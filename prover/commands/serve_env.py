"""``prover serve-env NAME``: a prover env served over OpenEnv's protocol, for TRL, Unsloth or any OpenEnv client.

The server is OpenEnv's own (openenv-core 0.3.0, ``pip install -e '.[openenv]'``): ``create_fastapi_app`` of
``openenv/core/env_server/http_server.py`` over ``prover.commands.openenv_bridge.ProverEnvironment``, run by uvicorn.
Each WebSocket session (``/ws``, what OpenEnv's ``EnvClient`` speaks) gets its own env, so one server feeds
several episodes at once (``--max-sessions``). The HTTP ``POST /reset`` and ``/step`` routes of OpenEnv build a
fresh env per request, so an episode needs the WebSocket client (``/step`` answers 400, "call reset first");
``GET /health``, ``/schema`` and ``/metadata`` answer as usual.

The env's settings come as in ``prover train``: ``env.kwargs.KEY=VALUE`` (or ``KEY=VALUE``) arguments and the
``env`` section of a ``--config`` file (its other sections are not used here). The env's ``train_recipe`` is
not applied: a served env gets its constructor's defaults and what you set.

Every request and message is bounded as training bounds its inputs (``prover.commands.serve_env_guard``: 1 MiB a
message; ``prover.commands.openenv_bridge``: seeds, reset options, action length), and a malformed one is answered
with one line while the session goes on.

It listens on 127.0.0.1 unless ``--host`` says otherwise (OpenEnv's server has no authentication: on another
address anyone who can reach the port can play). Ctrl-C or SIGTERM stops it gracefully: open sessions are
closed (their envs too) within ``--grace`` seconds and the command exits 0.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import signal
import socket
import sys
from typing import TYPE_CHECKING, Any

from prover.commands.serve_checks import is_loopback
from prover.commands.serve_env_guard import MAX_MESSAGE_BYTES, ASGIApp, Guard, Receive, Send, one_line_validation_error
from prover.errors import ConfigError, ContractError, ProverError, validation_line

if TYPE_CHECKING:  # fastapi comes with the optional openenv extra
    from fastapi import Request
    from fastapi.responses import JSONResponse

DEFAULT_PORT = 8000  # OpenEnv's own default (its server template and `openenv serve`)
INSTALL_HINT = "pip install -c constraints/cpu.txt -e '.[openenv]' (openenv-core==0.3.0)"


def env_settings(name: str | None, config: str | None, overrides: list[str]) -> tuple[str, dict[str, Any]]:
    """The env's name and checked kwargs: ``name`` over the ``env`` section of ``config`` and ``overrides``."""
    # lazy: pydantic, the config and the env's plugin load when the command runs, not for --help
    from pydantic import ValidationError

    from prover.config import EnvConfig
    from prover.config_load import read_tree
    from prover.settings.config_checks import check_env_settings
    from prover.settings.config_overrides import type_overrides_by_field

    dotted = []
    for text in overrides:
        key, sep, _ = text.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"serve-env: argument {text!r} is not of the form env.kwargs.KEY=VALUE (or KEY=VALUE)")
        if "." not in key:
            text = f"env.kwargs.{text}"
        elif not key.startswith("env."):
            raise ConfigError(f"serve-env: {key!r} is not an env setting; a served env takes env.name and "
                              "env.kwargs.KEY=VALUE (or KEY=VALUE) only")
        dotted.append(text)
    tree = read_tree(config, dotted)
    section = tree.setdefault("env", {})
    if not isinstance(section, dict):
        raise ConfigError(f"serve-env: the env section must be a mapping, not {type(section).__name__}")
    if name is not None:
        section["name"] = name
    type_overrides_by_field(tree, dotted)  # as `prover train` reads them: env.kwargs.words=[1,2] into a list[str]
    try:
        env = EnvConfig.model_validate(section)
    except ValidationError as exc:
        raise ConfigError(validation_line(exc, prefix="env.", unknown="; an env section holds name and kwargs")
                          ) from exc
    check_env_settings(env.name, env.kwargs)  # an unknown name or a bad setting: the one line `prover train` gives
    return env.name, env.kwargs


def require_openenv() -> None:
    if importlib.util.find_spec("openenv") is None or importlib.util.find_spec("openenv.core") is None:
        raise ConfigError(f"prover serve-env needs openenv-core, which is not installed: {INSTALL_HINT}")


def build_app(name: str, kwargs: dict[str, Any], max_sessions: int) -> QuietDisconnect:
    """OpenEnv's FastAPI app serving env ``name``; one env is built first, so that its errors come now."""
    # openenv-core (and fastapi with it) is an optional extra: loaded when a server starts
    from fastapi.exceptions import RequestValidationError
    from openenv.core.env_server.http_server import create_fastapi_app

    from prover.commands.openenv_bridge import EnvAction, EnvObservation, ProverEnvironment

    try:
        ProverEnvironment(name, kwargs).close()
    except ProverError:
        raise
    except Exception as exc:  # a plugin's bug, one line as `prover check-env` gives it
        raise ContractError(f"{name}: building the env raised {type(exc).__name__}: "
                            f"{' '.join(str(exc).split())[:200]}") from exc
    # a partial of the class: OpenEnv reads SUPPORTS_CONCURRENT_SESSIONS from it (http_server.py,
    # _validate_concurrency_safety) and calls it once per session
    factory = functools.partial(ProverEnvironment, name, kwargs)
    app = create_fastapi_app(factory, EnvAction, EnvObservation, max_concurrent_envs=max_sessions)
    app.add_exception_handler(ProverError, _one_line_reply)
    app.add_exception_handler(RequestValidationError, one_line_validation_error)
    return QuietDisconnect(Guard(app))


async def _one_line_reply(request: Request, exc: Exception) -> JSONResponse:
    """A prover error on OpenEnv's HTTP routes (``POST /step`` builds a fresh env, so it always meets "call
    reset first"): 400 with the one line, not a 500 and a traceback in the server's log."""
    from fastapi.responses import JSONResponse  # fastapi comes with the optional openenv extra

    return JSONResponse(status_code=400, content={"detail": str(exc)})


class QuietDisconnect:
    """The app, less a traceback at every session's end: OpenEnv's ``/ws`` handler closes the socket after the
    client has (http_server.py, ``websocket_endpoint``'s ``finally``: ``await websocket.close()`` expects a
    RuntimeError there), and Starlette 1.x raises ``WebSocketDisconnect`` instead, which uvicorn would log as
    an ASGI error. A peer that is gone is no error."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Receive, send: Send) -> None:
        from starlette.websockets import WebSocketDisconnect  # starlette comes with the optional openenv extra

        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            if scope.get("type") != "websocket":
                raise


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: one the OS picks); one line when it cannot be had."""
    if not 0 <= port < 65536:
        raise ConfigError(f"--port {port} is not a TCP port (1-65535, or 0 for a free one)")
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except (OSError, UnicodeError) as exc:
        raise ConfigError(f"--host {host!r} does not resolve to an address") from exc
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a TIME_WAIT port is free
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"port {port} on {host} is not free ({exc.strerror}); pick another with --port, "
                          "or stop what holds it") from exc
    return sock


def cmd_serve_env(args: argparse.Namespace) -> int:
    name, overrides = args.name, list(args.overrides)
    if name is not None and "=" in name:  # `prover serve-env --config c.yaml env.kwargs.x=1`: no name given
        name, overrides = None, [name] + overrides
    if args.max_sessions < 1 or args.grace <= 0:
        raise ConfigError("serve-env: --max-sessions must be at least 1 and --grace above 0")
    name, kwargs = env_settings(name, args.config, overrides)
    require_openenv()
    import uvicorn  # uvicorn comes with the optional openenv extra

    app = build_app(name, kwargs, args.max_sessions)
    sock = bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    if not is_loopback(args.host):
        print(f"note: serving on {args.host}: OpenEnv has no authentication, anyone who reaches port {port} "
              "can play this env", file=sys.stderr)
    server = uvicorn.Server(uvicorn.Config(app, log_level=args.log_level, access_log=False,
                                           timeout_graceful_shutdown=args.grace, ws_max_size=MAX_MESSAGE_BYTES))
    # uvicorn catches SIGINT and SIGTERM while it serves, shuts down gracefully, then raises the signal again
    # (uvicorn/server.py, capture_signals); a shell starts background jobs with SIGINT ignored, so Ctrl-C's
    # handler is put back first, as `prover serve` does
    signal.signal(signal.SIGINT, signal.default_int_handler)
    url = f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"
    print(f"serving {name} over OpenEnv at {url} (WebSocket {url.replace('http', 'ws', 1)}/ws, up to "
          f"{args.max_sessions} sessions); Ctrl-C stops it", flush=True)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # the signal raised again after the graceful shutdown (SIGTERM: prover's Stopped)
        print(f"serve-env: stopped; {name}'s sessions are closed", file=sys.stderr, flush=True)
        return 0
    finally:
        sock.close()
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve-env", help="serve a prover env over OpenEnv's protocol (TRL, Unsloth, any "
                       "OpenEnv client)", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", nargs="?", help="a registered env name (see `prover list`) or package.module:Class; "
                   "default: the --config file's env.name")
    p.add_argument("overrides", nargs="*", help="the env's settings, e.g. env.kwargs.n_pivots=2 (or n_pivots=2)")
    p.add_argument("--config", help="YAML config file whose env section (name, kwargs) is used")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on [127.0.0.1]")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port; 0 picks a free one [{DEFAULT_PORT}]")
    p.add_argument("--max-sessions", type=int, default=8, help="WebSocket sessions (episodes) at once [8]")
    p.add_argument("--grace", type=float, default=10.0, help="seconds a stop waits for open sessions [10]")
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level [warning]")
    p.set_defaults(fn=cmd_serve_env)
