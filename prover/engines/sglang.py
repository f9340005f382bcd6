"""The ``sglang`` engine: one or more SGLang servers, driven over HTTP through the native ``/generate``.

Servers run in their own Python environment (SGLang pins a CUDA torch; prover never imports it). Start
each one on the policy's architecture, e.g. ``python -m sglang.launch_server --model-path <folder>``,
and give their addresses as ``engine.kwargs.urls``.

Generation sends token ids in and reads token ids and log-probs out of
``meta_info.output_token_logprobs``; nothing is re-tokenized. ``temperature``, ``top_p`` and ``top_k``
are always sent (``top_k=-1`` is off), because a server started with its default ``--sampling-defaults
model`` fills unset ones from the model's generation_config. Temperature 0 is greedy. The log-probs are
SGLang's default, ``log_softmax(logits / temperature)`` before top-k/top-p filtering (raw logits when
greedy), the same quantity the ``hf`` engine returns; leave ``SGLANG_RETURN_ORIGINAL_LOGPROB`` unset.
Each request gets its own ``sampling_seed`` from (seed, position in the batch), so the G identical
prompts of a group never share a seed; servers honor it only with ``--enable-deterministic-inference``.

Routing: a request goes to the server that already served the longest prefix of its prompt, when that
prefix reaches ``affinity_tokens`` past the part every prompt of the step shares (the env's
instructions); otherwise to the server with the least work so far this step. The G episodes of a task
(identical first prompts), their later turns (which repeat the task's text) and every branch from them
(which resends an earlier turn's exact prompt) thus meet on one server and hit its prefix cache, while
different tasks spread out. A stateless rule, such as a hash of the first tokens, would send everything
to one server, because every prompt of an env starts with the same instructions. The routing state is
dropped at each weight sync, when the caches are flushed anyway; under ``accelerate launch`` each
process routes its own share.

With ``model.lora`` on, the servers get merged weights: every sync pushes the base model's own tensors,
each adapted one as W + (alpha / r) B A (``learner.policy_state_dict``, prover/learning/lora.py), so the servers need
no ``--enable-lora`` and both ``sync`` modes work unchanged; SGLang's ``/load_lora_adapter`` is not used.

A server that is down, too slow or answers nonsense is an ``EngineError`` line naming it (see
``sglang_http``); the trainer stops there with its last checkpoint intact. Servers started with
``--api-key`` get it from the environment variable ``PROVER_SGLANG_API_KEY`` on every request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from prover.engines.base import Engine, WeightSource
from prover.engines.sglang_http import ServerClient, api_key_from_env, together
from prover.engines.sglang_sync import DiskSync, DistributedSync, check_weights, probe_readback
from prover.errors import EngineError
from prover.learning.model_folder import model_positions
from prover.learning.modeling import load_tokenizer, stop_ids
from prover.seeding import derive_seed
from prover.system.distributed import process_rank, world_size
from prover.types import Generation, SamplingParams


class SGLangSettings(BaseModel):
    """``engine.kwargs`` of the sglang engine."""

    model_config = ConfigDict(extra="forbid")
    urls: list[str] = Field(min_length=1, description="Base URLs of the SGLang servers, e.g. "
                            "[http://127.0.0.1:30000]; each serves the whole policy.")
    timeout_s: float = Field(600.0, gt=0, description="Most seconds for one HTTP call, e.g. one server's share "
                             "of a generation batch; a server slower than this is an error, not retried.")
    retries: int = Field(3, ge=0, description="Extra tries of a call whose connection was refused or dropped, or "
                         "that got HTTP 429/5xx; waits double from retry_backoff_s.")
    retry_backoff_s: float = Field(1.0, ge=0, description="Wait before the first retry, in seconds.")
    send_seed: bool = Field(True, description="Send a per-request sampling_seed (SGLang honors it only with "
                            "--enable-deterministic-inference); turn off for releases that reject the field.")
    affinity_tokens: int = Field(4, ge=1, description="Send a prompt to the server that served its longest "
                                 "prefix only if that prefix reaches this many tokens past what every prompt "
                                 "shares; otherwise to the least-loaded server.")
    load_on_start: bool = Field(True, description="At start, have every server load the policy folder the run "
                                "begins from (the warm start or the resumed checkpoint), which must be readable "
                                "by the servers at the same path; off if they were started on it.")
    sync: Literal["disk", "distributed"] = Field("disk", description="Weight sync after each update: 'disk' "
                                                 "(safetensors in sync_dir, update_weights_from_disk) or "
                                                 "'distributed' (a broadcast; init_weights_update_group).")
    sync_dir: str | None = Field(None, description="Folder for the 'disk' sync's checkpoints, at the same path "
                                 "on the servers (a shared file system across machines); None is a private "
                                 "temporary folder, fine when the servers run on this machine.")
    sync_timeout_s: float = Field(600.0, gt=0, description="Most seconds for each step of a weight sync.")
    master_address: str = Field("127.0.0.1", description="'distributed': this machine's address as the servers "
                                "reach it; the trainer hosts the group's rendezvous there, listening on that "
                                "address only.")
    master_port: int | None = Field(None, ge=1, le=65535, description="'distributed': rendezvous port; None "
                                    "picks a free one.")
    backend: Literal["nccl", "gloo"] = Field("nccl", description="'distributed': torch.distributed backend of "
                                             "the weight group (nccl for GPUs; gloo for CPU tests).")
    group_name: str = Field("weight_update_group", description="'distributed': name of the weight group.")
    bucket_mb: float = Field(512.0, gt=0, description="'distributed': tensors per update request, in MiB (a "
                             "server holds one bucket beside its weights while loading it).")
    check_weights: bool = Field(False, description="Debug: after each sync, read a few parameters back with "
                                "get_weights_by_name and compare them with the learner's. SGLang answers that for "
                                "some model classes only (Llama, not Qwen3/Qwen3.5): checked, and refused, at start.")

    @field_validator("urls")
    @classmethod
    def _urls(cls, urls: list[str]) -> list[str]:
        for u in urls:
            if not u.startswith(("http://", "https://")):
                raise ValueError(f"{u!r} is not an http(s) URL such as http://127.0.0.1:30000")
        return [u.rstrip("/") for u in urls]


def request_seed(seed: int, index: int) -> int:
    """A 31-bit sampling seed for request ``index`` of a batch sampled with ``seed``."""
    return derive_seed(seed, index, "request")


def sampling_params(params: SamplingParams, stops: list[int], seed: int | None) -> dict[str, Any]:
    """SGLang's sampling_params for one request; every sampling knob explicit."""
    sp: dict[str, Any] = {
        "max_new_tokens": int(params.max_new_tokens), "temperature": float(params.temperature),
        "top_p": float(params.top_p), "top_k": int(params.top_k) if params.top_k > 0 else -1,
        "stop_token_ids": [int(t) for t in stops],
        "skip_special_tokens": False, "no_stop_trim": True,  # ids are what count; keep the text whole too
    }
    if seed is not None:
        sp["sampling_seed"] = seed
    return sp


def parse_generation(item: Any, stops: set[int], where: str) -> Generation:
    """One ``/generate`` result -> Generation; a malformed one is an EngineError naming ``where`` and the field."""
    field = "meta_info"
    try:
        meta = item["meta_info"]
        field = "meta_info.output_token_logprobs"
        pairs = meta["output_token_logprobs"]
        ids = [int(p[1]) for p in pairs]
        logprobs = [float(p[0]) for p in pairs]
        field = "output_ids"
        if "output_ids" in item and [int(t) for t in item["output_ids"]] != ids:
            raise ValueError(f"output_ids ({len(item['output_ids'])}) and output_token_logprobs ({len(ids)}) differ")
        field = "meta_info.completion_tokens"
        if meta.get("completion_tokens") is not None and int(meta["completion_tokens"]) != len(ids):
            raise ValueError(f"completion_tokens is {meta['completion_tokens']} but {len(ids)} log-probs came")
        field = "meta_info.finish_reason"
        finish = meta.get("finish_reason")
        kind = finish.get("type") if isinstance(finish, dict) else finish
        field = "meta_info.cached_tokens"
        cached = int(meta.get("cached_tokens") or 0)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise EngineError(f"{where}: /generate result field {field} is not SGLang's format ({type(exc).__name__}: "
                          f"{str(exc)[:120]})") from exc
    if kind == "abort":
        message = finish.get("message") if isinstance(finish, dict) else ""
        raise EngineError(f"{where}: aborted a request ({message}); check its log")
    # "stop" means a stop token ended the completion, as for the hf engine, even where SGLang's length
    # check (which runs first) called it "length"
    reason = "stop" if kind == "stop" or (ids and ids[-1] in stops) else "length"
    return Generation(token_ids=ids, logprobs=logprobs, finish_reason=reason, cached_tokens=cached)


def common_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two id sequences."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the usual case, compared in C
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if a[:mid] == b[:mid] else (lo, mid)
    return lo


class PrefixRouter:
    """Which server gets each prompt; see the module docstring.

    A radix tree over every prompt routed since the last reset remembers which server first got each
    prefix; its edges are tuples of ids, so a step's bookkeeping grows with the distinct text only.
    """

    def __init__(self, n_servers: int, affinity_tokens: int = 4) -> None:
        self.n, self.affinity = n_servers, affinity_tokens
        self.reset()

    def reset(self) -> None:
        self.root: list = [(), -1, {}]  # node = [edge ids, owner server, children by first id]
        self.shared: tuple[int, ...] | None = None  # the prefix every prompt so far starts with
        self.load = [0] * self.n  # tokens of work sent to each server

    def match(self, ids: tuple[int, ...]) -> tuple[int, int]:
        """(tokens of ``ids`` already routed, the server that got the longest such prefix)."""
        node, i, owner = self.root, 0, -1
        while i < len(ids) and ids[i] in node[2]:
            node = node[2][ids[i]]
            n = common_length(node[0], ids[i:i + len(node[0])])
            i, owner = i + n, node[1]
            if n < len(node[0]):
                break
        return i, owner

    def insert(self, ids: tuple[int, ...], server: int) -> None:
        node, i = self.root, 0
        while i < len(ids):
            child = node[2].get(ids[i])
            if child is None:
                node[2][ids[i]] = [ids[i:], server, {}]
                return
            n = common_length(child[0], ids[i:i + len(child[0])])
            if n < len(child[0]):  # split the edge where the new prompt leaves it
                child[:] = [child[0][:n], child[1], {child[0][n]: [child[0][n:], child[1], child[2]]}]
            node, i = child, i + n

    def assign(self, prompts: list[list[int]], new_tokens: int) -> list[int]:
        seqs = [tuple(p) for p in prompts]
        for s in seqs:  # the shared part is known before any prompt of the batch is placed
            self.shared = s if self.shared is None else self.shared[:common_length(self.shared, s)]
        shared = len(self.shared or ())
        out = []
        for s in seqs:
            matched, server = self.match(s)
            if server < 0 or matched < shared + self.affinity:
                server, matched = min(range(self.n), key=lambda k: self.load[k]), 0
            self.load[server] += len(s) - matched + new_tokens
            self.insert(s, server)
            out.append(server)
        return out


class SGLangEngine(Engine):
    """Engine over SGLang servers; ``engine.kwargs`` are ``SGLangSettings``."""

    name = "sglang"
    Config = SGLangSettings

    def __init__(self, model_path: str | Path, dtype: str = "float32", **kwargs: object) -> None:
        """``model_path``: the policy folder the run starts from (its tokenizer is used here, its weights
        are loaded into the servers); ``dtype`` is unused, each server keeps its own ``--dtype``."""
        self.config = cfg = self.validate_kwargs(kwargs)
        self.tokenizer = load_tokenizer(model_path)
        self.context_length = model_positions(model_path)
        self.stop_ids = stop_ids(self.tokenizer)
        key = api_key_from_env()  # the servers' --api-key, from the environment only: never in a config
        self.servers = [ServerClient(u, cfg.timeout_s, cfg.retries, cfg.retry_backoff_s, key) for u in cfg.urls]
        self.router = PrefixRouter(len(self.servers), cfg.affinity_tokens)
        self.syncer = (DistributedSync if cfg.sync == "distributed" else DiskSync)(self.servers, cfg)
        self.counts = {"requests": 0, "prompt_tokens": 0, "cached_tokens": 0}
        # under `accelerate launch` every process rolls out through the servers, the main one alone
        # loads and pushes weights (the trainer waits for it before any process samples)
        self.rank, self.world = process_rank(), world_size()
        # SGLang's /health generates one token within 20 s; a shorter wait than a batch's catches a wrong host
        health_s = min(cfg.timeout_s, 60.0)
        together([lambda s=s: s.get("/health", health_s, expect_json=False) for s in self.servers])
        self.syncer.check_servers()  # a setting the sync cannot work with is refused before any training
        if cfg.check_weights and self.rank == 0:
            probe_readback(self.servers, model_path, cfg.sync_timeout_s)
        if cfg.load_on_start and self.rank == 0:
            self.syncer.load_folder(model_path)

    # -- generation ------------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 seed: int | None = None) -> list[Generation]:
        if not prompts:
            return []
        stops = list(params.stop_token_ids) or self.stop_ids
        sps = [sampling_params(params, stops, request_seed(seed, i) if seed is not None and self.config.send_seed
                               else None) for i in range(len(prompts))]
        stop_set = set(stops)

        def run(server: ServerClient, idx: list[int]) -> list[Generation]:
            body = {"input_ids": [prompts[i] for i in idx], "sampling_params": [sps[i] for i in idx],
                    "return_logprob": True, "logprob_start_len": -1, "stream": False}
            items = self._batch_reply(server, server.post("/generate", body), len(idx))
            gens = [parse_generation(item, stop_set, server.name) for item in items]
            for i, g in zip(idx, gens):
                if len(g.token_ids) > params.max_new_tokens:
                    raise EngineError(f"{server.name}: sent {len(g.token_ids)} tokens for request {i}, more than "
                                      f"max_new_tokens={params.max_new_tokens}")
            return gens

        results = self._spread(prompts, params.max_new_tokens, run)
        self.counts["requests"] += len(prompts)
        self.counts["prompt_tokens"] += sum(len(p) for p in prompts)
        self.counts["cached_tokens"] += sum(g.cached_tokens for g in results)
        return results

    def logprobs(self, prompts: list[list[int]], completions: list[list[int]]) -> list[np.ndarray]:
        """Log-probs of given completions: a prefill with max_new_tokens=0, reading input_token_logprobs
        from the prompt's last token on. SGLang returns one entry per input token from logprob_start_len,
        the first being None: the log-prob of the token at logprob_start_len is not computed
        (scheduler_components/logprob_result_processor.py:35-38 in 0.5.23), so the request starts one
        token early and that entry is dropped."""
        out: list[np.ndarray] = [np.zeros(0, dtype=np.float32)] * len(prompts)
        todo = [i for i, c in enumerate(completions) if c]
        if not todo:
            return out
        if any(not prompts[i] for i in todo):
            raise EngineError("sglang engine: logprobs needs a prompt of at least one token before a completion")

        def run(server: ServerClient, idx: list[int]) -> list[np.ndarray]:
            real = [todo[k] for k in idx]
            score = {"max_new_tokens": 0, "temperature": 1.0, "top_p": 1.0, "top_k": -1}  # the model's own
            body = {"input_ids": [prompts[i] + completions[i] for i in real], "sampling_params": [score] * len(real),
                    "return_logprob": True, "logprob_start_len": [len(prompts[i]) - 1 for i in real], "stream": False}
            items = self._batch_reply(server, server.post("/generate", body), len(real))
            return [self._scores(server, item, [prompts[i][-1]] + completions[i]) for item, i in zip(items, real)]

        for i, lp in zip(todo, self._spread([prompts[i] for i in todo], 0, run)):
            out[i] = lp
        return out

    def _spread(self, prompts: list[list[int]], new_tokens: int, run: Callable[..., Any]) -> list[Any]:
        """``run(server, indices)`` on each server's share of ``prompts``, concurrently; results in order."""
        owners = self.router.assign(prompts, new_tokens)
        shares = {s: [i for i, o in enumerate(owners) if o == s] for s in sorted(set(owners))}
        parts = together([lambda s=s, idx=idx: run(self.servers[s], idx) for s, idx in shares.items()])
        results: list[Any] = [None] * len(prompts)
        for idx, part in zip(shares.values(), parts):
            for i, r in zip(idx, part):
                results[i] = r
        return results

    @staticmethod
    def _batch_reply(server: ServerClient, reply: Any, n: int) -> list[Any]:
        if n == 1 and isinstance(reply, dict):  # a one-prompt batch may come back unwrapped
            reply = [reply]
        if not isinstance(reply, list) or len(reply) != n:
            got = f"{len(reply)} results" if isinstance(reply, list) else type(reply).__name__
            raise EngineError(f"{server.name}: /generate sent {got} for a batch of {n}")
        return reply

    @staticmethod
    def _scores(server: ServerClient, item: Any, scored: list[int]) -> np.ndarray:
        """The log-probs of ``scored[1:]`` from a scoring result whose input_token_logprobs cover ``scored``
        (the prompt's last token, whose entry is SGLang's leading None, then the completion)."""
        field = "meta_info.input_token_logprobs"
        try:
            entries = item["meta_info"]["input_token_logprobs"]
            ids = [int(e[1]) for e in entries]
            field = "meta_info.input_token_logprobs values"
            values = np.array([float(e[0]) for e in entries[1:]], dtype=np.float32)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise EngineError(f"{server.name}: /generate scoring result field {field} is not SGLang's format "
                              f"({type(exc).__name__}: {str(exc)[:120]})") from exc
        if ids != list(scored):
            raise EngineError(f"{server.name}: scored {len(ids)} tokens that are not the prompt's last and the "
                              f"{len(scored) - 1} completion tokens asked for (logprob_start_len not honored?)")
        return values

    # -- weights and metrics ---------------------------------------------------------------------
    def update_weights(self, learner: WeightSource) -> None:
        """Push the learner's weights to every server. Across processes, every one must call it (FSDP and
        ZeRO-3 gather the full weights from all of them); the main one pushes, and the caller waits for it
        before sampling again."""
        state = learner.policy_state_dict() if self.world > 1 else None
        if self.rank == 0:
            self.syncer.push(learner, state)
            if self.config.check_weights:
                check_weights(self.servers, state or learner.policy_state_dict(), self.config.sync_timeout_s)
        self.router.reset()  # every cache was flushed

    def take_counts(self) -> dict[str, float]:
        """Generation counts since the last call (one training step): requests, prompt tokens and the
        prompt tokens served from the servers' prefix caches (totals), their ratio, and retried calls."""
        c = self.counts
        out = {"cost/engine_requests": float(c["requests"]), "cost/prompt_tokens": float(c["prompt_tokens"]),
               "cost/cached_tokens": float(c["cached_tokens"]),
               "cost/prefill_tokens": float(c["prompt_tokens"] - c["cached_tokens"]),  # as the hf engine names it
               "engine/cached_ratio": c["cached_tokens"] / c["prompt_tokens"] if c["prompt_tokens"] else 0.0,
               "cost/engine_retries": float(sum(s.retried for s in self.servers))}
        self.counts = dict.fromkeys(c, 0)
        for s in self.servers:
            s.retried = 0
        return out

    def close(self) -> None:
        self.syncer.close()
