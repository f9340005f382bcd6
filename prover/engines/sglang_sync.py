"""Weight sync from the learner to SGLang servers: from disk (simple) or by broadcast (fast).

``disk``: the learner writes a Hugging Face folder (safetensors) to ``sync_dir/v<N>``, every server is
told ``POST /update_weights_from_disk {model_path}``, then ``POST /flush_cache``. The folder must be
readable by the servers at the same path (one machine, or a shared file system).

``distributed``: once, the trainer and every server join one process group (``POST
/init_weights_update_group``, the trainer as rank 0, server i's tensor-parallel ranks after it); then
per sync, every server opens a session (``POST /begin_weight_update``: SGLang 0.5.23 refuses a broadcast
update outside one, srt/managers/scheduler_components/weight_updater.py:187-199), for each bucket of
tensors every server is told ``POST /update_weights_from_distributed {names, dtypes, shapes, group_name}``
while the trainer broadcasts those tensors from rank 0 in the same order, the session is closed (``POST
/end_weight_update``, also after a failure, so the next trainer can open one) and the caches flushed.
A server with ``dp_size > 1`` cannot join (SGLang asserts ``dp_size == 1``,
srt/managers/tokenizer_control_mixin.py:451-453): the engine refuses that at start.

The group is built the way SGLang builds its end (a ``tcp://`` rendezvous, a store prefixed with the
group name, ``_new_process_group_helper``), because both ends must agree on every store key; it is a
group of its own, beside any default group accelerate made.

Both paths flush the prefix cache (its KV was computed with the old weights), time out, and fail with
one ``EngineError`` line. SGLang refuses a flush while requests run or wait, as when a client gave up
on one; the sync waits that out up to ``sync_timeout_s`` (``when_idle``). A failed broadcast may leave a
server with some new and some old tensors, which its message says. ``check_weights`` compares a few
parameters with ``/get_weights_by_name``, which SGLang 0.5.23 answers only for model classes that define
``get_weights_by_name`` (not Qwen3 or Qwen3.5): ``probe_readback`` refuses the option at start there.
"""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
import threading
import weakref
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from prover.engines.sglang_http import ServerBusy, ServerClient, positive_int, together, when_idle
from prover.errors import ConfigError, EngineError

if TYPE_CHECKING:
    import torch

CHECK_ROWS = 100  # SGLang's default truncate_size: the first rows of a parameter
CLOSE_WAIT_S = 10.0  # most seconds close() waits for the weight group to be torn down


class DiskSync:
    # cfg: the engine's SGLangSettings, untyped here because prover.engines.sglang imports this module
    def __init__(self, servers: list[ServerClient], cfg: Any) -> None:
        self.servers, self.cfg = servers, cfg
        self.version = 0
        if cfg.sync_dir is None:  # a private folder, removed when the engine goes away
            self.root = Path(tempfile.mkdtemp(prefix="prover-sglang-sync-"))
            weakref.finalize(self, shutil.rmtree, str(self.root), True)
        else:
            self.root = Path(cfg.sync_dir).expanduser().resolve()
            self.root.mkdir(parents=True, exist_ok=True)

    def load_folder(self, folder: str | Path) -> None:
        """Every server loads the weights in ``folder`` (a Hugging Face checkpoint), then flushes."""
        path = str(Path(folder).resolve())
        body = {"model_path": path, "weight_version": str(self.version)}

        def load(s: ServerClient) -> None:
            try:
                reply = s.post("/update_weights_from_disk", body, self.cfg.sync_timeout_s)
            except ServerBusy:  # loaded, but its own flush was refused: the flush below waits for idle
                return
            if not (isinstance(reply, dict) and reply.get("success")):
                msg = reply.get("message") if isinstance(reply, dict) else reply
                raise EngineError(f"{s.name}: could not load the weights in {path}: {msg}")
        together([lambda s=s: load(s) for s in self.servers], self.cfg.sync_timeout_s + 5, "weight load")
        flush(self.servers, self.cfg.sync_timeout_s)

    def push(self, learner: Any, state: dict | None = None) -> None:
        """``state``: the full weights, already gathered when the learner is sharded over processes."""
        self.version += 1
        folder = self.root / f"v{self.version}"
        shutil.rmtree(folder, ignore_errors=True)
        learner.save_pretrained(folder, state)  # None: the learner's own (unsharded) weights
        self.load_folder(folder)
        for old in self.root.glob("v*"):  # the servers hold the new weights in memory now
            if old != folder:
                shutil.rmtree(old, ignore_errors=True)

    def check_servers(self) -> None:
        """Nothing to check for a disk sync: every server setting takes one."""

    def close(self) -> None:
        """Nothing held: a sync folder outlives a sync only until the next one."""


class DistributedSync(DiskSync):
    """Starts from a folder like ``DiskSync``; every later sync is a broadcast."""

    # cfg: the engine's SGLangSettings, untyped here because prover.engines.sglang imports this module
    def __init__(self, servers: list[ServerClient], cfg: Any) -> None:
        super().__init__(servers, cfg)
        self.group: Any = None
        self.tp: list[int] = []

    def check_servers(self) -> None:
        """Each server's tensor-parallel size (its ranks in the group); one with data-parallel replicas is a
        ``ConfigError``, before any training: SGLang 0.5.23 asserts ``dp_size == 1`` on joining the group."""
        self.tp = []
        for s in self.servers:
            info = s.get("/get_server_info", self.cfg.sync_timeout_s)
            dp = positive_int(s, "/get_server_info", info, "dp_size")
            if dp != 1:
                raise ConfigError(f"engine.kwargs.sync=distributed: {s.name} runs dp_size={dp}, and SGLang takes a "
                                  "broadcast weight update only with dp_size 1; use sync=disk, or start one server "
                                  "per replica (prover serve --dp 1 with more --gpus)")
            self.tp.append(positive_int(s, "/get_server_info", info, "tp_size"))

    def _join(self) -> None:
        cfg = self.cfg
        listener = listen_socket(cfg.master_address, cfg.master_port or 0)  # 0: a free port, taken at once
        port = listener.getsockname()[1]
        if not self.tp:
            self.check_servers()
        world = 1 + sum(self.tp)
        offsets = [1 + sum(self.tp[:i]) for i in range(len(self.tp))]

        def init(s: ServerClient, offset: int) -> None:
            body = {"master_address": cfg.master_address, "master_port": port, "rank_offset": offset,
                    "world_size": world, "group_name": cfg.group_name, "backend": cfg.backend}
            reply = s.post("/init_weights_update_group", body, cfg.sync_timeout_s, retry=False)
            if not (isinstance(reply, dict) and reply.get("success")):
                raise EngineError(f"{s.name}: did not join the weight group: {reply}")
        join = lambda: join_weight_group(cfg.master_address, port, world, 0, cfg.group_name, cfg.backend,  # noqa: E731
                                         cfg.sync_timeout_s, listener)
        try:
            self.group = together([join] + [lambda s=s, o=o: init(s, o) for s, o in zip(self.servers, offsets)],
                                  cfg.sync_timeout_s + 5, "joining the weight group")[0]
        except EngineError:
            raise
        except Exception as exc:
            raise EngineError(f"could not build the weight group at {cfg.master_address}:{port} with backend "
                              f"{cfg.backend!r} ({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); "
                              "is master_address reachable from the servers?") from exc

    def push(self, learner: Any, state: dict | None = None) -> None:
        import torch  # torch is heavy: the engine's process loads it only to push weights

        if self.group is None:
            self._join()
        self.version += 1
        cfg = self.cfg
        device = torch.device("cuda", torch.cuda.current_device()) if cfg.backend == "nccl" else torch.device("cpu")
        named = list((state if state is not None else learner.policy_state_dict()).items())
        buckets = bucketed(named, int(cfg.bucket_mb * 2 ** 20))
        try:
            self._all("/begin_weight_update", {"selector": "all"})
            try:
                for bucket in buckets:
                    self._send(bucket, device=device)
            except BaseException:
                self._end_quietly()
                raise
            self._all("/end_weight_update", {})
            flush(self.servers, cfg.sync_timeout_s)
        except Exception as exc:
            detail = str(exc) if isinstance(exc, EngineError) else f"{type(exc).__name__}: {exc}"
            raise EngineError(f"distributed weight sync {self.version} failed ({' '.join(detail.split())[:300]}); "
                              "the servers' weights may be half-updated: restart them and resume from the "
                              "last checkpoint") from exc

    def _all(self, path: str, body: dict) -> None:
        """``path`` on every server, each answering success (SGLang's session calls, http_server.py:1458-1486)."""
        def call(s: ServerClient) -> None:
            try:
                reply = s.post(path, body, self.cfg.sync_timeout_s, retry=False)
            except EngineError as exc:
                if path != "/begin_weight_update" or "already open" not in str(exc):
                    raise
                # a session a trainer that died mid-sync left open: close it, then open ours
                s.post("/end_weight_update", {}, self.cfg.sync_timeout_s, retry=False)
                reply = s.post(path, body, self.cfg.sync_timeout_s, retry=False)
            if not (isinstance(reply, dict) and reply.get("success") is True):
                raise EngineError(f"{s.name}: {path} sent {str(reply)[:120]!r}, not success")
        together([lambda s=s: call(s) for s in self.servers], self.cfg.sync_timeout_s + 5, path)

    def _end_quietly(self) -> None:
        """Close the sessions after a failed broadcast, so that a restarted trainer can open one; errors
        are left to the broadcast's own."""
        for s in self.servers:
            try:
                s.post("/end_weight_update", {}, min(self.cfg.sync_timeout_s, 30.0), retry=False)
            except EngineError:
                pass

    def _send(self, bucket: list[tuple[str, torch.Tensor]], device: torch.device) -> None:
        import torch.distributed as dist  # torch is heavy: loaded only once weights are pushed

        # no flush per bucket: the flush after /end_weight_update waits out running requests
        body = {"names": [n for n, _ in bucket], "dtypes": [str(t.dtype).removeprefix("torch.") for _, t in bucket],
                "shapes": [list(t.shape) for _, t in bucket], "group_name": self.cfg.group_name,
                "flush_cache": False, "weight_version": str(self.version)}

        def receive(s: ServerClient) -> None:
            reply = s.post("/update_weights_from_distributed", body, self.cfg.sync_timeout_s, retry=False)
            if not (isinstance(reply, dict) and reply.get("success")):
                raise EngineError(f"{s.name}: refused the broadcast weights: {reply}")

        def broadcast() -> None:  # the same order as ``names``: the servers receive one by one
            for _, tensor in bucket:
                dist.broadcast(tensor.detach().to(device).contiguous(), src=0, group=self.group)
        together([broadcast] + [lambda s=s: receive(s) for s in self.servers], self.cfg.sync_timeout_s + 5,
                 "the weight broadcast")

    def close(self) -> None:
        """Tear the weight group down, waiting at most ``CLOSE_WAIT_S``: a broadcast a server refused may
        still wait for it in a daemon thread, and destroying the group then can block."""
        group, self.group = self.group, None
        if group is None:
            return
        import torch.distributed as dist  # torch is heavy: loaded only once weights are pushed

        def destroy() -> None:
            try:
                dist.destroy_process_group(group)
            except Exception:  # noqa: BLE001 - best effort at shutdown: the servers may be gone already
                pass
        worker = threading.Thread(target=destroy, daemon=True)
        worker.start()
        worker.join(CLOSE_WAIT_S)


def join_weight_group(master_address: str, master_port: int, world_size: int, rank: int, group_name: str,
                      backend: str, timeout_s: float, listener: socket.socket | None = None) -> Any:
    """A process group of its own between the trainer and the servers, keyed like SGLang's end.

    SGLang (python/sglang/srt/utils, ``init_custom_process_group``) rendezvouses at
    ``tcp://master_address:master_port``, prefixes the store with the group name and calls torch's
    ``_new_process_group_helper``; verl and slime build the trainer's end the same way, and so do we,
    since store keys that differ in one prefix would leave both ends waiting for each other.

    Rank 0 hosts the store. torch's ``tcp://`` rendezvous would listen on every interface (``::``) whatever
    the address, so rank 0 builds the store on a socket bound to ``master_address`` (``listener``, or one
    made here), and only that interface accepts joiners.
    """
    # torch is heavy: loaded only when a weight group is built
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d
    from torch.distributed.rendezvous import rendezvous

    timeout = timedelta(seconds=timeout_s)
    if rank == 0:
        listener = listener or listen_socket(master_address, master_port)
        # the store's daemon owns the descriptor from here on (and closes it), so Python must not
        store = dist.TCPStore(master_address, master_port, world_size, is_master=True, timeout=timeout,
                              master_listen_fd=listener.detach())
    else:
        store, rank, world_size = next(rendezvous(f"tcp://{master_address}:{master_port}", rank, world_size,
                                                  timeout=timeout))
    store.set_timeout(timeout)
    store = dist.PrefixStore(group_name, store)
    group, _ = c10d._new_process_group_helper(world_size, rank, [], backend, store, group_name=group_name,
                                              timeout=timeout)
    c10d._world.pg_group_ranks[group] = {i: i for i in range(world_size)}  # group rank == rank in the group
    return group


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host`` alone (an IPv4 or IPv6 address or a name), at ``port`` (0: a free
    one); a host or port that cannot be had is an ``EngineError`` line."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise EngineError(f"master_address {host!r} is not an address of this machine ({exc})") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port a finished run just left
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise EngineError(f"cannot listen on master_address {host!r} port {port} for the weight group "
                          f"({exc.strerror or exc}); pick another engine.kwargs.master_port, or an address "
                          "of this machine") from exc
    return sock


def bucketed(named: list[tuple[str, Any]], max_bytes: int) -> list[list[tuple[str, Any]]]:
    """Consecutive tensors grouped up to ``max_bytes`` each (a larger tensor goes alone): a server holds
    one bucket's received tensors beside its weights before loading them."""
    buckets: list[list[tuple[str, Any]]] = [[]]
    size = 0
    for name, t in named:
        nbytes = t.numel() * t.element_size()
        if buckets[-1] and size + nbytes > max_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append((name, t))
        size += nbytes
    return buckets


def flush(servers: list[ServerClient], timeout_s: float) -> None:
    """Drop every server's prefix cache: its KV was computed with the old weights. A server with requests
    still running or queued refuses; it is asked again until idle, for at most ``timeout_s``."""
    def one(s: ServerClient) -> None:
        when_idle(lambda: s.post("/flush_cache", None, timeout_s, expect_json=False), timeout_s)
    together([lambda s=s: one(s) for s in servers], 2 * timeout_s + 5, "flush_cache")


UNREADABLE = ("SGLang reads weights back only for model classes that define get_weights_by_name (in 0.5.23: "
              "Llama, Granite, OPT, EXAONE 4; not Qwen3 or Qwen3.5, srt/model_executor/model_runner_components/"
              "weight_exporter.py:181); set engine.kwargs.check_weights=false")


def read_rows(s: ServerClient, name: str, rows: int, timeout_s: float) -> np.ndarray:
    """The first ``rows`` rows of parameter ``name`` as the server holds them (one copy per data-parallel
    rank, stacked, when it has several); a server that cannot read weights back is one ``ConfigError``."""
    try:
        reply = s.post("/get_weights_by_name", {"name": name, "truncate_size": rows}, timeout_s)
    except EngineError as exc:
        if "Get parameter by name failed" in str(exc):  # http_server.py:1567-1568 for a None from the model
            raise ConfigError(f"check_weights: {s.name} cannot read {name!r} back ({exc}); {UNREADABLE}") from exc
        raise
    if reply is None or (isinstance(reply, list) and reply and all(r is None for r in reply)):
        raise ConfigError(f"check_weights: {s.name} sent null for {name!r} from /get_weights_by_name; {UNREADABLE}")
    try:
        return np.asarray(reply, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise EngineError(f"{s.name}: /get_weights_by_name {name!r} sent {str(reply)[:80]!r}, not an array of "
                          "numbers") from exc


def first_weight_name(folder: str | Path) -> str | None:
    """A tensor name from a Hugging Face folder's safetensors (its index, or a file's header); None if none."""
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    try:
        if index.is_file():
            return next(iter(json.loads(index.read_text())["weight_map"]), None)
        for f in sorted(folder.glob("*.safetensors")):
            with f.open("rb") as fh:  # 8-byte length, then a JSON header of the tensors
                header = json.loads(fh.read(int.from_bytes(fh.read(8), "little")))
            return next((k for k in header if k != "__metadata__"), None)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return None


def probe_readback(servers: list[ServerClient], folder: str | Path, timeout_s: float) -> None:
    """``check_weights`` at start: every server reads one of the policy's tensors back, or the run is refused
    before any training (a ``ConfigError`` naming the model class's limit)."""
    name = first_weight_name(folder)
    if name is not None:
        together([lambda s=s: read_rows(s, name, 1, timeout_s) for s in servers], timeout_s + 5, "check_weights")


def check_weights(servers: list[ServerClient], state: dict[str, Any], timeout_s: float) -> None:
    """Debug: the first rows of a few parameters, read back from every server, equal the learner's
    ``state``. Tolerances allow a server that keeps bfloat16 weights (about 3 significant digits)."""
    names = list(dict.fromkeys(n for n in (next(iter(state)), list(state)[len(state) // 2], list(state)[-1])))
    for s in servers:
        for name in names:
            want = state[name][:CHECK_ROWS].detach().float().cpu().numpy()
            got = read_rows(s, name, CHECK_ROWS, timeout_s)
            copies = got if got.ndim == want.ndim + 1 else got[None]  # data-parallel servers send one per rank
            for copy in copies:
                if copy.shape != want.shape or not np.allclose(copy, want, rtol=1e-2, atol=1e-3):
                    delta = float(np.abs(copy - want).max()) if copy.shape == want.shape else float("nan")
                    raise EngineError(f"{s.name}: weight check after sync: {name!r} differs from the learner's "
                                      f"(shape {list(copy.shape)} vs {list(want.shape)}, max |diff| {delta:.3g}); "
                                      "the sync did not take")
