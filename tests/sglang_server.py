"""A real HTTP server on 127.0.0.1 that speaks the part of SGLang's native API prover uses.

It is backed by a real (tiny) Qwen3 model loaded with ``prover.learning.modeling.load_model``, so token ids
and log-probs are genuine, and it follows SGLang's rules field by field where prover depends on them:

- ``POST /generate``: batched ``input_ids`` with one ``sampling_params`` dict per prompt (unknown keys
  are refused, as SGLang's SamplingParams does; ``top_k`` must be -1 or >= 1; temperature 0 is greedy);
  ``sampling_seed`` seeds a per-request generator; log-probs are ``log_softmax(logits / temperature)``
  before top-k/top-p filtering (raw when greedy); ``finish_reason`` is checked for length before stop
  tokens, as SGLang's ``check_finished`` does; ``max_new_tokens=0`` with ``logprob_start_len=L`` scores
  the input, one ``input_token_logprobs`` entry per token from position L.
- ``meta_info.cached_tokens`` comes from a real prefix cache: a token trie of every prompt and output
  served (SGLang's radix cache), matched on all but the last input token, emptied by ``/flush_cache``.
- ``/update_weights_from_disk``, ``/get_weights_by_name``, ``/init_weights_update_group``,
  ``/begin_weight_update``, ``/update_weights_from_distributed`` (tensors received by broadcast over the
  group, in ``names`` order) and ``/end_weight_update`` change or read the live model.

Where SGLang 0.5.23 refuses, so does this server; each rule cites the file:line of the 0.5.23 wheel it
copies (``pip download sglang==0.5.23 --no-deps``, sha256 00b3cd5b...9937, paths under ``sglang/``):

- ``/update_weights_from_distributed`` outside a ``/begin_weight_update`` .. ``/end_weight_update``
  session answers 400 without receiving anything (srt/managers/scheduler_components/weight_updater.py:
  187-199; the session: 99, 309-335), so a trainer that broadcasts anyway is left waiting.
- ``input_token_logprobs`` starts with ``None``: the log-prob of the token at ``logprob_start_len`` is never
  computed (logprob_result_processor.py:35-38; schedule_batch.py:3005-3031 shifts the targets by one).
- ``/get_weights_by_name`` answers 400 "Get parameter by name failed" for model classes without a
  ``get_weights_by_name`` method, Qwen3 and Qwen3.5 among them (weight_exporter.py:169-188,
  http_server.py:1559-1570; the classes that have one: llama.py:819, granite.py:476, opt.py:525,
  exaone4.py:628); ``weights_readable=True`` plays a server of such a class.
- ``/flush_cache`` answers 400 "Flush cache failed." while any request is running or queued
  (scheduler.py:5518-5547, http_server.py:1025-1040), and a weight update whose flush is so refused
  answers 400 although the weights were loaded (weight_updater.py:120-131); ``busy_for(s)`` plays requests
  that still run on the server after their client gave up.
- ``/init_weights_update_group`` and ``/update_weights_from_distributed`` on a server with ``dp_size > 1``
  fail an assertion, a 500 (tokenizer_control_mixin.py:451-453, 509-511).

Faults for tests (``server.faults`` in process, or ``POST /_faults`` to a subprocess): die after N
generate requests or after N weight updates (the connection is closed unanswered and the port stops
listening), a delay before each reply, scripted HTTP statuses, replies that are not JSON, failing syncs.

Started with an API key (``api_key=``, or ``--api-key KEY`` when run alone), it refuses every request but
``/health`` that lacks ``Authorization: Bearer <key>`` with 401 ``{"error": "Unauthorized"}``, as SGLang's
``--api-key`` does; ``authorizations`` keeps each request's header.

Run alone: ``python tests/sglang_server.py <model folder> [port] [--api-key KEY]`` prints ``ready <url>`` and
serves.
"""

from __future__ import annotations

import inspect
import json
import secrets
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch

# transformers builds a model under a process-wide "meta device" context, so two servers of one test
# process must not build models at the same time
LOAD_LOCK = threading.Lock()

SAMPLING_KEYS = {"max_new_tokens", "temperature", "top_p", "top_k", "min_p", "stop", "stop_token_ids",
                 "skip_special_tokens", "no_stop_trim", "sampling_seed", "ignore_eos", "n",
                 "spaces_between_special_tokens", "min_new_tokens"}


@dataclass
class Faults:
    die_after_generates: int | None = None  # serve this many /generate calls, then die on the next
    die_after_syncs: int | None = None  # after this many weight updates, die on the next /generate
    delay_s: float = 0.0  # wait before answering /generate
    statuses: list[int] = field(default_factory=list)  # the next /generate calls answer these HTTP codes
    garbage: int = 0  # the next /generate calls answer this many bodies that are not JSON
    fail_sync: bool = False  # weight updates answer success=false
    fake_sync: bool = False  # a disk update answers success but loads nothing (what check_weights is for)


class TokenTrie:
    """Every token sequence served, for the longest cached prefix of a new one."""

    def __init__(self) -> None:
        self.root: dict = {}

    def insert(self, ids: list[int]) -> None:
        node = self.root
        for t in ids:
            node = node.setdefault(t, {})

    def match(self, ids: list[int]) -> int:
        node, n = self.root, 0
        for t in ids:
            if t not in node:
                break
            node, n = node[t], n + 1
        return n


UNFLUSHED = ("Weights were updated, but the cache was not flushed because requests are still running or "
             "queued. Retract or finish them, then call /flush_cache.")  # weight_updater.py:127-131


class BadRequest(Exception):
    pass


# model types whose SGLang 0.5.23 class defines get_weights_by_name (see the module docstring)
READABLE_MODEL_TYPES = {"llama", "granite", "opt", "exaone4"}


class SGLangTestServer:
    def __init__(self, model_dir: str, port: int = 0, api_key: str | None = None,
                 weights_readable: bool | None = None, dp_size: int = 1) -> None:
        """``weights_readable``: whether ``/get_weights_by_name`` works; None: as 0.5.23 does for this
        model's class. ``dp_size``: what ``/get_server_info`` reports (data-parallel replicas)."""
        from prover.learning.modeling import load_model, load_tokenizer

        self.model_path = str(model_dir)
        self.api_key = api_key
        self.dp_size = dp_size
        self.authorizations: list[str | None] = []  # the Authorization header of every request, in order
        with LOAD_LOCK:
            self.model = load_model(model_dir).eval()
        # transformers 5 renamed the KV-cache argument and output from past_key_values to cache
        self.cache_arg = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        self.tokenizer = load_tokenizer(model_dir)
        self.weights_readable = (self.model.config.model_type in READABLE_MODEL_TYPES
                                 if weights_readable is None else weights_readable)
        # a /begin_weight_update session is open (weight_updater.py:99, 309-335)
        self.session_open = self.loaded_in_session = False
        self.running = 0  # /generate calls being served
        self.busy_until = 0.0  # time.monotonic() before which requests are still running or queued
        self.faults = Faults()
        self.cache = TokenTrie()
        self.lock = threading.Lock()  # one model call at a time
        self.requests: list[tuple[str, Any]] = []  # (path, body) of every request, in order
        self.generates = self.syncs = 0
        self.weight_version = "0"
        self.groups: dict[str, Any] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def do_GET(self) -> None:
                server._handle(self, "GET")

            def do_POST(self) -> None:
                server._handle(self, "POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.alive = True

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> SGLangTestServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.kill()

    def kill(self) -> None:
        """Stop listening: later connections are refused."""
        if self.alive:
            self.alive = False
            self.httpd.shutdown()
            self.httpd.server_close()

    # -- HTTP ------------------------------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        path = h.path.split("?")[0]
        raw = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return self._send(h, 400, {"error": {"message": "body is not JSON"}})
        self.authorizations.append(h.headers.get("Authorization"))
        if self.api_key and not path.startswith("/health") and \
                h.headers.get("Authorization") != f"Bearer {self.api_key}":
            return self._send(h, 401, {"error": "Unauthorized"})
        self.requests.append((path, body))
        routes = {"/health": self._health, "/get_model_info": self._model_info, "/get_server_info": self._server_info,
                  "/generate": self._generate, "/flush_cache": self._flush, "/_faults": self._set_faults,
                  "/update_weights_from_disk": self._from_disk, "/get_weights_by_name": self._weights_by_name,
                  "/init_weights_update_group": self._init_group,
                  "/update_weights_from_distributed": self._from_distributed,
                  "/begin_weight_update": self._begin, "/end_weight_update": self._end}
        if path not in routes:
            return self._send(h, 404, {"detail": "Not Found"})
        try:
            code, out = routes[path](h, body)
        except BadRequest as exc:
            code, out = 400, {"error": {"message": str(exc)}}
        if code is not None:
            self._send(h, code, out)

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, code: int, out: Any) -> None:
        data = out if isinstance(out, bytes) else (out.encode() if isinstance(out, str) else json.dumps(out).encode())
        try:
            h.send_response(code)
            h.send_header("Content-Type", "text/plain" if isinstance(out, (str, bytes)) else "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout): fine
            pass

    def _die(self, h: BaseHTTPRequestHandler) -> tuple[None, None]:
        """Hang up on this request unanswered and stop listening, like a crashed server."""
        h.close_connection = True
        threading.Thread(target=self.kill, daemon=True).start()
        return None, None

    def _health(self, h: Any, body: Any) -> tuple[int, Any]:
        return 200, b""

    def _model_info(self, h: Any, body: Any) -> tuple[int, Any]:
        return 200, {"model_path": self.model_path, "tokenizer_path": self.model_path, "is_generation": True,
                     "weight_version": self.weight_version}

    def _server_info(self, h: Any, body: Any) -> tuple[int, Any]:
        # the resolved server args, flat (server_args.py:551, utils/common.py:3584-3593)
        return 200, {"model_path": self.model_path, "tp_size": 1, "dp_size": self.dp_size, "version": "prover-test"}

    def busy_for(self, seconds: float) -> None:
        """Requests keep running or waiting on the server for ``seconds`` from now."""
        self.busy_until = time.monotonic() + seconds

    def _idle(self) -> bool:
        """Scheduler.is_fully_idle: nothing running, nothing queued (scheduler.py:5337, 5520)."""
        return self.running == 0 and time.monotonic() >= self.busy_until

    def _set_faults(self, h: Any, body: dict) -> tuple[int, Any]:
        for k, v in body.items():
            setattr(self.faults, k, v)
        return 200, {"success": True}

    def _flush(self, h: Any, body: Any) -> tuple[int, Any]:
        if not self._idle():  # scheduler.py:5541-5547: success=False, empty message; http_server.py:1034-1040
            return 400, "Flush cache failed.\n"
        self.cache = TokenTrie()
        return 200, "Cache flushed.\nPlease check backend logs for more details.\n"

    def _flush_after_update(self, body: dict) -> bool:
        """weight_updater.py:120-131: an update that asks for a flush fails when the flush is refused."""
        if body.get("flush_cache", True) and not self._idle():
            return False
        if body.get("flush_cache", True):
            self.cache = TokenTrie()
        return True

    # -- generation ------------------------------------------------------------------------------
    def _generate(self, h: Any, body: dict) -> tuple[int | None, Any]:
        f = self.faults
        if (f.die_after_generates is not None and self.generates >= f.die_after_generates) or \
                (f.die_after_syncs is not None and self.syncs >= f.die_after_syncs):
            return self._die(h)
        self.generates += 1
        self.running += 1
        try:
            return self._generate_running(body)
        finally:
            self.running -= 1

    def _generate_running(self, body: dict) -> tuple[int | None, Any]:
        f = self.faults
        time.sleep(f.delay_s)
        if f.statuses:
            code = f.statuses.pop(0)
            return code, {"error": {"message": f"scripted HTTP {code}\nsecond line"}}
        if f.garbage > 0:
            f.garbage -= 1
            return 200, b"<html>502 Bad Gateway</html>"
        ids = body.get("input_ids")
        single = bool(ids) and isinstance(ids[0], int)
        batch = [ids] if single else ids
        if not isinstance(batch, list) or not batch:
            raise BadRequest("input_ids is required")
        n = len(batch)

        def per(key: str, default: Any) -> list[Any]:
            v = body.get(key, default)
            return list(v) if isinstance(v, list) else [v] * n
        sps, want_lp, starts = per("sampling_params", {}), per("return_logprob", False), per("logprob_start_len", -1)
        with self.lock:
            out = [self._one(list(p), sp or {}, bool(lp), int(s if s is not None else -1))
                   for p, sp, lp, s in zip(batch, sps, want_lp, starts)]
        return 200, out[0] if single else out

    @torch.no_grad()
    def _one(self, prompt: list[int], sp: dict, want_lp: bool, start: int) -> dict:
        unknown = set(sp) - SAMPLING_KEYS
        if unknown:
            raise BadRequest(f"SamplingParams.__init__() got an unexpected keyword argument {sorted(unknown)[0]!r}")
        t0 = time.perf_counter()
        temperature, top_p = float(sp.get("temperature", 1.0)), float(sp.get("top_p", 1.0))
        top_k, max_new = int(sp.get("top_k", -1)), int(sp.get("max_new_tokens", 128))
        if not (top_k == -1 or top_k >= 1):
            raise BadRequest(f"top_k must be -1 (disable) or at least 1, got {top_k}.")
        if temperature < 0 or not 0 < top_p <= 1 or max_new < 0:
            raise BadRequest("temperature, top_p or max_new_tokens out of range")
        greedy = temperature < 1e-6
        scale = 1.0 if greedy else temperature
        stops = set(sp.get("stop_token_ids") or []) | {self.tokenizer.eos_token_id}
        gen = torch.Generator()
        # no global RNG is touched: a server in the test's process must not shift the trainer's draws
        gen.manual_seed(int(sp["sampling_seed"]) if sp.get("sampling_seed") is not None else secrets.randbits(31))
        cached = self.cache.match(prompt[:-1])
        out = self.model(input_ids=torch.tensor([prompt]), use_cache=True)
        meta: dict[str, Any] = {"id": uuid.uuid4().hex, "prompt_tokens": len(prompt), "cached_tokens": cached}
        if want_lp and start >= 0:
            lp = torch.log_softmax(out.logits[0, :-1].float() / scale, dim=-1)
            # [None] + the rest: the hidden state at position i scores token i + 1, and the one before
            # ``start`` is not computed (logprob_result_processor.py:35-38, schedule_batch.py:3005-3031)
            meta["input_token_logprobs"] = [[None if i == start else float(lp[i - 1, prompt[i]]), prompt[i], None]
                                            for i in range(start, len(prompt))]
        ids, lps, finish = [], [], {"type": "length", "length": 0}
        past, logits = getattr(out, self.cache_arg), out.logits[0, -1].float()
        for _ in range(max_new):
            scaled = logits / scale
            if greedy:
                tok = int(scaled.argmax())
            else:
                tok = int(torch.multinomial(_filtered(torch.softmax(scaled, -1), top_k, top_p), 1, generator=gen))
            ids.append(tok)
            lps.append(float(torch.log_softmax(scaled, -1)[tok]))
            if len(ids) >= max_new:  # SGLang checks the length before stop tokens
                finish = {"type": "length", "length": max_new}
                break
            if tok in stops:
                finish = {"type": "stop", "matched": tok}
                break
            out = self.model(input_ids=torch.tensor([[tok]]), use_cache=True, **{self.cache_arg: past})
            past, logits = getattr(out, self.cache_arg), out.logits[0, -1].float()
        self.cache.insert(prompt + ids[:-1])
        meta.update(completion_tokens=len(ids), finish_reason=finish, e2e_latency=time.perf_counter() - t0)
        if want_lp:
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(lps, ids)]
        return {"text": self.tokenizer.decode(ids), "output_ids": ids, "meta_info": meta}

    # -- weights ---------------------------------------------------------------------------------
    def _updated(self, version: Any) -> None:
        self.syncs += 1
        self.weight_version = str(version) if version is not None else self.weight_version

    def _from_disk(self, h: Any, body: dict) -> tuple[int, Any]:
        from prover.learning.modeling import load_model

        if self.faults.fail_sync:
            return 400, {"success": False, "message": "Failed to update weights: scripted failure",
                         "num_paused_requests": 0}
        try:
            with LOAD_LOCK:
                state = load_model(body["model_path"]).state_dict()
            with self.lock:
                if not self.faults.fake_sync:
                    self.model.load_state_dict(state)
        except Exception as exc:  # noqa: BLE001 - like sglang, any failure is a 400 answer
            return 400, {"success": False, "message": f"Failed to update weights: {exc}", "num_paused_requests": 0}
        self._updated(body.get("weight_version"))
        if not self._flush_after_update(body):  # loaded, but the flush was refused (weight_updater.py:125-131)
            return 400, {"success": False, "message": UNFLUSHED, "num_paused_requests": 0}
        return 200, {"success": True, "message": "Succeeded to update model weights.", "num_paused_requests": 0}

    def _weights_by_name(self, h: Any, body: dict) -> tuple[int, Any]:
        state = self.model.state_dict()
        # weight_exporter.py:181-188 returns None for a class without get_weights_by_name, or a name it lacks;
        # http_server.py:1567-1568 answers that with _create_error_response (2246-2250)
        if not self.weights_readable or body.get("name") not in state:
            return 400, {"error": {"message": "Get parameter by name failed"}}
        return 200, state[body["name"]][:int(body.get("truncate_size", 100))].float().tolist()

    def _init_group(self, h: Any, body: dict) -> tuple[int, Any]:
        from prover.engines.sglang_sync import join_weight_group

        if self.dp_size != 1:  # an AssertionError in the handler: FastAPI's plain 500
            return 500, "Internal Server Error"
        try:
            self.groups[body.get("group_name", "weight_update_group")] = join_weight_group(
                body["master_address"], int(body["master_port"]), int(body["world_size"]), int(body["rank_offset"]),
                body.get("group_name", "weight_update_group"), body.get("backend", "nccl"), 60.0)
        except Exception as exc:  # noqa: BLE001 - like sglang, any failure is a 400 answer
            return 400, {"success": False, "message": f"Failed to init group: {exc}"}
        return 200, {"success": True, "message": "Succeeded to initialize custom process group."}

    def _from_distributed(self, h: Any, body: dict) -> tuple[int, Any]:
        import torch.distributed as dist

        if self.dp_size != 1:
            return 500, "Internal Server Error"
        if not self.session_open:  # weight_updater.py:193-199: refused before any tensor is received
            return 400, {"success": False, "message": "update_weights_from_distributed must run between "
                         "begin_weight_update() and end_weight_update()"}
        group = self.groups.get(body.get("group_name", "weight_update_group"))
        if group is None or self.faults.fail_sync:
            return 400, {"success": False, "message": "Failed to update parameter online: no such group"
                         if group is None else "Failed to update parameter online: scripted failure"}
        received = []
        for name, dtype, shape in zip(body["names"], body["dtypes"], body["shapes"]):
            t = torch.empty(shape, dtype=getattr(torch, dtype))
            dist.broadcast(t, src=0, group=group)
            received.append((name, t))
        with self.lock, torch.no_grad():
            state = self.model.state_dict()
            for name, t in received:
                state[name].copy_(t)
        self.loaded_in_session = True
        if body.get("weight_version") is not None:
            self.weight_version = str(body["weight_version"])
        if not self._flush_after_update(body):
            return 400, {"success": False, "message": UNFLUSHED}
        return 200, {"success": True, "message": "Succeeded to update parameter online."}

    def _begin(self, h: Any, body: dict) -> tuple[int, Any]:
        if self.session_open:  # weight_updater.py:311-316
            return 400, {"success": False, "message": "a weight-update session is already open; "
                         "call end_weight_update() first"}
        self.session_open, self.loaded_in_session = True, False
        return 200, {"success": True, "message": "Success"}

    def _end(self, h: Any, body: dict) -> tuple[int, Any]:
        if not self.session_open:  # weight_updater.py:325-329
            return 400, {"success": False, "message": "no weight-update session is open; "
                         "call begin_weight_update() first"}
        self.session_open = False
        if self.loaded_in_session:  # one weight update per session, as a disk update is one
            self._updated(None)
        return 200, {"success": True, "message": "Success"}


def _filtered(probs: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Top-k then top-p (nucleus) mass of a probability vector, as SGLang's torch sampling path does."""
    sorted_p, order = probs.sort(descending=True)
    keep = (sorted_p.cumsum(0) - sorted_p) <= top_p
    if top_k >= 1:
        keep[top_k:] = False
    kept = torch.zeros_like(probs)
    kept[order[keep]] = sorted_p[keep]
    return kept / kept.sum()


def main(argv: list[str]) -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("port", nargs="?", type=int, default=0)
    ap.add_argument("--api-key")
    ap.add_argument("--weights-readable", action="store_true", help="answer /get_weights_by_name (a Llama class)")
    args = ap.parse_args(argv)
    server = SGLangTestServer(args.model_dir, args.port, args.api_key, args.weights_readable or None)
    server.thread.start()
    print(f"ready {server.url}", flush=True)
    server.thread.join()


if __name__ == "__main__":
    main(sys.argv[1:])
