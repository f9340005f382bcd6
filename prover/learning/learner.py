"""The policy-gradient update: PPO epochs over mini-batches of rows, one optimizer step per mini-batch.

The loss (PPO-clip with dual clip, optional KL to the initial policy, entropy) is prover/learning/learner_loss.py's.
``logp_old`` is the log-prob the rollout recorded when it sampled the token (``Turn.logprobs``), never
recomputed here: with asynchronous rollouts (``rollout.max_off_policy_steps``) a row may come from a policy
up to k updates old, and rho is then the importance ratio to that sampling policy, clipped as PPO clips it.
With ``learner.engine_is_cap`` (truncated importance sampling, prover/learning/learner_loss.py) it is the learner's
own (recomputed before the update, or the update's own forward pass when the update is one optimizer step), and
the engine's weighs each token's loss instead. Either way
``learner/engine_*`` measure the engine/learner mismatch on the step's first mini-batch, before its
optimizer step.

The loss is aggregated (``learner.loss_agg``, one of verl's loss_agg_modes) over a whole mini-batch (not per
micro-batch, as verl-agent did), by giving every token a weight. Runs through ``accelerate`` on CPU or GPUs.
The learner never knows which credit method produced the advantages.

Its rows (prover/learning/learner_rows.py) are turn rows, one per turn, and sequence rows: a trajectory whose turns
are append-only (chat prompts) forwarded once, each turn's completion trained at its own positions.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from prover.config import LearnerConfig, LoraConfig
from prover.learning import lora as lora_lib
from prover.learning.frozen_weights import bf16_copies
from prover.learning.learner_loss import UpdateTotals, token_losses
from prover.learning.learner_rows import (
    Row,
    SequenceRow,
    chains_of,
    per_turn,
    row_logits,
    row_token_weights,
    rows_from,
    sequence_rows,
    sft_rows,
    unique_tokens,
)
from prover.learning.logprobs import gather_logprobs
from prover.learning.lora import merged_state_dict, save_adapter
from prover.learning.model_folder import check_model_dir
from prover.learning.modeling import load_policy
from prover.learning.padding import (
    chain_batches,
    length_batches,
    micro_batch_order,
    padding_counts,
    padding_share,
    turn_batches,
)
from prover.learning.sft_pass import SftPass
from prover.types import Advantages, Batch


class Learner:
    """Owns the trainable policy, its optimizer and (with a KL term) the frozen reference. With ``lora``
    (``model.lora``, enabled) the policy is wrapped in LoRA adapters, fresh or loaded from the checkpoint
    ``adapter``, and only they train (see prover/learning/lora.py)."""

    def __init__(self, model_path: str | Path, cfg: LearnerConfig, *, dtype: str = "float32",
                 max_completion_tokens: int = 32, seed: int = 0, lora: LoraConfig | None = None,
                 adapter: Path | None = None) -> None:
        # lazy: accelerate adds about half a second to torch's import; only a built learner needs it
        from accelerate import Accelerator

        self.cfg = cfg
        self.max_len = max_completion_tokens
        self.rng = random.Random(seed)
        self.accelerator = Accelerator(cpu=not torch.cuda.is_available())
        lora = lora if lora is not None and lora.enabled else None
        # a KL term needs a frozen reference; with LoRA the reference is the model itself, adapters off
        with_ref = cfg.kl_coef > 0 and lora is None
        self.tokenizer, model, self.ref = load_policy(
            check_model_dir(model_path), dtype, checkpointing=cfg.gradient_checkpointing,
            ref_device=str(self.accelerator.device) if with_ref else None)
        self.pad_id = self.tokenizer.pad_token_id
        self.lora_scales: dict[str, float] | None = None  # None: every weight trains
        if lora is not None:
            if adapter is not None:
                lora_lib.check_base(adapter, Path(model_path))
            model = lora_lib.wrap(model, lora, adapter)
            self.lora_scales = lora_lib.layer_scales(model)
        model.train()
        # only what trains: with LoRA, AdamW's two moments are the adapters' size, not the model's
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr,
                                      weight_decay=cfg.weight_decay)
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.frozen_bf16 = cfg.frozen_bf16 and cfg.autocast == "bfloat16" and not self._sharded()  # not DTensors

    # -- weights -----------------------------------------------------------------------------------
    def unwrapped(self) -> torch.nn.Module:
        return self.accelerator.unwrap_model(self.model)

    def trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def gathered_state(self) -> dict[str, torch.Tensor]:
        """The model's own state dict (with LoRA: peft's names, adapters included). Across processes every
        one must call it: FSDP and ZeRO-3 gather the shards (and hand them to the main process only)."""
        if self.accelerator.num_processes > 1 or self._sharded():
            return self.accelerator.get_state_dict(self.model)
        return self.unwrapped().state_dict()

    def _sharded(self) -> bool:
        """FSDP2 holds DTensors even in one process, which neither a plain model nor save_pretrained takes."""
        return self.accelerator.distributed_type in ("FSDP", "DEEPSPEED")

    def policy_state_dict(self) -> dict[str, torch.Tensor]:
        """The full weights under the base model's names, what engines load; with LoRA each adapted weight
        merged as W + (alpha/r) B A. Every process must call it, as ``gathered_state``."""
        state = self.gathered_state()
        if self.lora_scales is None or not state:
            return state

        return merged_state_dict(state, self.lora_scales)

    def save_pretrained(self, path: str | Path, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """A Hugging Face folder of the policy (with LoRA, the merged weights). ``state_dict``: the gathered
        ``policy_state_dict()`` when the model is sharded over processes."""
        model = self.unwrapped()
        if self.lora_scales is not None:
            model = model.get_base_model()
        if state_dict is None and (self.lora_scales is not None or self._sharded()):
            state_dict = self.policy_state_dict()
        model.save_pretrained(path, state_dict=state_dict)
        self.tokenizer.save_pretrained(path)

    def save_checkpoint_weights(self, path: Path, state: dict[str, torch.Tensor] | None = None) -> None:
        """What a checkpoint keeps of the model: the Hugging Face folder, or with LoRA the adapter alone
        (the frozen base is rebuilt on resume). ``state``: ``gathered_state()`` across processes."""
        if self.lora_scales is None:
            self.save_pretrained(path, state)
        else:
            save_adapter(self.unwrapped(), path, state)

    def weights_finite(self) -> bool:
        with torch.no_grad():
            return all(bool(torch.isfinite(p).all()) for p in self.model.parameters())

    def optimizer_state(self) -> dict:
        """Under FSDP and DeepSpeed, this process's shard of the torch optimizer's state as plain tensors: a
        checkpoint stores tensors, not DTensors or DeepSpeed's objects (and keeps only the main process's
        shard, which is why --resume needs DDP)."""
        if not self._sharded():
            return self.optimizer.state_dict()
        from torch.distributed.tensor import DTensor  # lazy: only a sharded learner meets DTensors

        inner = self.optimizer
        while hasattr(inner, "optimizer"):  # accelerate's wrapper, DeepSpeed's ZeRO optimizer: the torch one
            inner = inner.optimizer
        state = inner.state_dict()
        local = {k: {n: v.to_local() if isinstance(v, DTensor) else v for n, v in s.items()}
                 for k, s in state.get("state", {}).items()}
        return {**state, "state": local}

    def load_optimizer_state(self, state: dict) -> None:
        self.optimizer.load_state_dict(state)

    @contextlib.contextmanager
    def _reference(self) -> Iterator[torch.nn.Module]:
        """The frozen initial policy: its own copy, or with LoRA the model with its adapters switched off
        (the base never trains), which saves holding the weights twice."""
        if self.ref is not None:
            yield self.ref
        else:
            with self.unwrapped().disable_adapter():
                yield self.unwrapped()

    # -- RL ----------------------------------------------------------------------------------------
    def update(self, batch: Batch, adv: Advantages) -> dict[str, float]:
        """PPO epochs over the batch's rows (turn rows, and a sequence row for each run of append-only turns,
        see prover/learning/learner_rows.py); returns "learner/..." metrics."""
        with bf16_copies(self.unwrapped(), self.frozen_bf16):  # frozen weights cast once for the whole update
            return self._ppo_epochs(batch, adv)

    def _ppo_epochs(self, batch: Batch, adv: Advantages) -> dict[str, float]:
        rows = rows_from(adv.train_batch or batch, adv, self.cfg.skip_zero_advantage_rows)
        finite = [r for r in rows if np.isfinite(r.advantages).all()]  # a NaN advantage never reaches a weight
        dropped, rows = len(rows) - len(finite), finite
        units = sequence_rows(rows, self.cfg.max_row_tokens) if self.cfg.sequence_rows else list(rows)
        totals, on_policy = UpdateTotals(), False
        for epoch in range(self.cfg.ppo_epochs):
            self.rng.shuffle(units)
            chunks = [[units[i] for i in b] for b in turn_batches([len(u.turn_rows) for u in units],
                                                                   self.cfg.mini_batch_rows)]
            n_chunks, n_micro = self._in_step(chunks)  # the same on every process
            if epoch == 0 and self.cfg.engine_is_cap is not None:  # PPO's ratio against the learner's log-probs
                on_policy = self._own_old_logprobs(units, n_chunks)
            chunks += [[self._padding_row()]] * (n_chunks - len(chunks))
            for chunk in chunks:
                stats = self._mini_batch(chunk, n_micro, measure=not totals.mismatch, on_policy=on_policy)
                if not chunk[0].padding:  # only padding: this process learned nothing from it
                    totals.add(stats)
        out = totals.metrics(nonfinite_rows=dropped)
        out["learner/rows"] = float(len(rows))
        out["learner/tokens"] = float(sum(float(r.loss_mask.sum()) for r in rows))
        out["learner/sequence_rows"] = float(sum(isinstance(u, SequenceRow) for u in units))
        out["learner/forwarded_tokens"] = float(sum(len(u.ids) for u in units))  # one epoch's
        out["learner/unique_tokens"] = float(unique_tokens(rows))
        out["learner/updates"] = float(totals.updates)
        return out

    def _own_old_logprobs(self, units: list[Row | SequenceRow], n_chunks: int) -> bool:
        """Give each turn row the learner's own log-probs as PPO's old ones (the engine's kept for the
        importance weight). One epoch of one optimizer step takes its gradient at the very weights that would
        recompute them, so there the pass is skipped and the update's own forward pass gives them, detached
        (verl's dp_actor ``on_policy``; ``token_losses``): returns whether it was."""
        if self.cfg.ppo_epochs == 1 and n_chunks == 1:
            return True
        for unit, logps in zip(units, self.policy_logprobs(units)):
            for row, logp in zip(unit.turn_rows, logps):
                row.engine_logprobs, row.old_logprobs = row.old_logprobs, logp
        return False

    def _in_step(self, chunks: list[list[Row | SequenceRow]]) -> tuple[int, int | None]:
        """Across processes every one must run the same forward and backward passes (each backward
        all-reduces the gradient, each FSDP forward gathers the weights): the most mini-batches any process
        has, and the most micro-batches any of their mini-batches has, which every process then runs,
        filling up with empty rows that weigh nothing. Alone: its own count, and no micro-batch to match."""
        if self.accelerator.num_processes == 1:
            return len(chunks), None
        most_micro = max((len(self._micro_batches(c)) for c in chunks), default=1)
        counts = self.accelerator.gather(torch.tensor([len(chunks), most_micro], device=self.accelerator.device))
        most = counts.reshape(-1, 2).max(dim=0).values
        return int(most[0]), int(most[1])

    def _padding_row(self) -> Row:
        zero = np.zeros(1, np.float32)
        return Row([self.pad_id], [self.pad_id], zero, zero, zero, padding=True)

    def _micro_batches(self, rows: list[Row | SequenceRow]) -> list[list[int]]:
        """A mini-batch's rows (indices) over its micro-batches: real rows by length, padding rows last, in
        micro-batches of ``micro_batch_rows`` turns (``turn_batches``)."""
        real = [i for i, r in enumerate(rows) if not r.padding]
        order = [real[k] for k in micro_batch_order([len(rows[i].ids) for i in real])]
        order += [i for i, r in enumerate(rows) if r.padding]
        return [[order[k] for k in b]
                for b in turn_batches([len(rows[i].turn_rows) for i in order], self.cfg.micro_batch_rows)]

    def _autocast(self) -> contextlib.AbstractContextManager:
        """``learner.autocast``: the forward pass's matrix products in bfloat16, the weights as they are."""
        return torch.autocast(self.accelerator.device.type, dtype=torch.bfloat16, enabled=self.cfg.autocast != "off")

    def _mini_batch(self, rows: list[Row | SequenceRow], n_micro: int | None = None,
                    measure: bool = False, on_policy: bool = False) -> dict[str, float]:
        """One optimizer step on ``rows`` (padding rows last), in at least ``n_micro`` micro-batches; with
        ``measure``, the engine/learner mismatch of its tokens too (``engine_*``, ``mismatch_sums``); with
        ``on_policy``, PPO's old log-probs are the forward pass's own (``_own_old_logprobs``)."""
        plan, rows, weights = self._micro_batch_plan(rows, n_micro)
        stats = dict.fromkeys(("pg_loss", "kl", "entropy", "clipfrac", "ppo_kl", "tokens", "padded_tokens"), 0.0)
        self.optimizer.zero_grad(set_to_none=True)
        for indices in plan:
            micro = [rows[i] for i in indices]
            for k, v in padding_counts([len(r.ids) for r in micro]).items():
                stats[k] += v
            micro_stats = self._micro_backward(micro, [w for i in indices for w in weights[i]], measure, on_policy)
            for k, v in micro_stats.items():
                stats[k] = max(stats.get(k, 0.0), v) if k == "engine_max_abs_log_rho" else stats.get(k, 0.0) + v
        return {**stats, **self._optimizer_step()}

    def _micro_batch_plan(self, rows: list[Row | SequenceRow], n_micro: int | None
                          ) -> tuple[list[list[int]], list[Row | SequenceRow], list[list[np.ndarray]]]:
        """The micro-batches (row indices, ``_micro_batches``), filled up with empty ones (one padding row) to
        ``n_micro`` to match the other processes, the rows they index, and each row's token weights."""
        weights = row_token_weights(rows, self.cfg.loss_agg, self.max_len)
        plan = self._micro_batches(rows)
        for _ in range(len(plan), n_micro or 0):
            plan.append([len(rows)])
            rows, weights = rows + [self._padding_row()], weights + [[np.zeros(1, np.float32)]]
        return plan, rows, weights

    def _micro_backward(self, micro: list[Row | SequenceRow], weights: list[np.ndarray],
                        measure: bool = False, on_policy: bool = False) -> dict[str, float]:
        """Forward and backward of one micro-batch (``weights``: its turn rows' token weights, in order); the
        weighted sums of its loss terms, and with ``measure`` its engine/learner mismatch sums."""
        with self._autocast():
            logits, targets, trained = row_logits(self.model, micro, self.pad_id)  # float32 logits either way
        ref_logp = None
        if self.cfg.kl_coef > 0:
            with torch.no_grad(), self._reference() as ref:
                ref_logp = gather_logprobs(*row_logits(ref, micro, self.pad_id)[:2])
        losses = token_losses(logits, targets, trained, [t for r in micro for t in r.turn_rows], weights, self.cfg,
                              ref_logp, on_policy)
        self.accelerator.backward(losses.loss(self.cfg))
        return {**losses.sums(), **(losses.mismatch(self.cfg) if measure else {})}

    def policy_logprobs(self, units: list[Row | SequenceRow]) -> list[list[np.ndarray]]:
        """The current policy's log-probs of each unit's turn rows' completions, taken as the update's forward
        passes take them (micro-batches of ``micro_batch_rows`` turns, ``learner.autocast``) without a
        gradient. Across processes every one runs as many forward passes (a sharded one gathers weights)."""
        plan, rows = self._micro_batches(units), [*units, self._padding_row()]
        if self.accelerator.num_processes > 1:
            most = self.accelerator.gather(torch.tensor([len(plan)], device=self.accelerator.device)).max()
            plan += [[len(units)]] * (int(most) - len(plan))
        out: list[list[np.ndarray]] = [[] for _ in rows]
        with torch.no_grad(), bf16_copies(self.unwrapped(), self.frozen_bf16):
            for indices in plan:
                micro = [rows[i] for i in indices]
                with self._autocast():
                    logits, targets, _ = row_logits(self.model, micro, self.pad_id)
                for i, logps in zip(indices, per_turn(gather_logprobs(logits, targets), micro)):
                    out[i] = logps
        return out[:len(units)]

    def _optimizer_step(self) -> dict[str, float]:
        """Clip the gradient and step; a NaN or inf loss or gradient skips the step, so the weights stay finite."""
        grad_norm = self.accelerator.clip_grad_norm_(self.trainable(), self.cfg.grad_clip)
        # the norm is of the all-reduced gradient, so every process skips or steps alike
        nonfinite = float(not torch.isfinite(torch.as_tensor(grad_norm)))
        if nonfinite:
            self.optimizer.zero_grad(set_to_none=True)
        else:
            self.optimizer.step()
        return {"nonfinite": nonfinite, "grad_norm": float(grad_norm)}

    # -- SFT ---------------------------------------------------------------------------------------
    def sft(self, rows: list[tuple[list[int], list[int]]], epochs: int, batch_rows: int,
            prompt_weight: float = 0.0, on_batch: Callable[[], None] | None = None) -> dict[str, float]:
        """Behaviour cloning: weighted token-mean negative log-likelihood over each batch of ``batch_rows``
        turn rows.

        Completion tokens weigh 1 and prompt tokens ``prompt_weight``: a tiny model trained from
        scratch learns the env's text (and to copy entities within it) from the prompts far faster
        than from the few completion tokens alone. The reported loss is over completions only.

        With ``prompt_weight`` 0 and ``learner.sequence_rows``, rows that chain (each one's prompt +
        completion the start of the next one's prompt: the turns of a chat warm start) are forwarded once
        per batch as sequence rows (prover/learning/learner_rows.py): the same loss and gradient as one row per
        turn, without forwarding each growing prompt again. Batches still hold ``batch_rows`` turns.
        """
        turn_rows = sft_rows(rows) if prompt_weight == 0 and self.cfg.sequence_rows else []
        chains = chains_of(turn_rows)
        chained = any(len(c) > 1 for c in chains)
        losses, counts = [], {"tokens": 0.0, "padded_tokens": 0.0}
        passes = SftPass(self.model, self.accelerator.backward, self.pad_id, self.cfg.micro_batch_rows, counts)
        lengths = [len(p) + len(c) for p, c in rows]
        for _ in range(epochs):
            batches = (chain_batches(chains, batch_rows, self.rng) if chained
                       else length_batches(lengths, batch_rows, self.rng))
            for batch in batches:
                self.optimizer.zero_grad(set_to_none=True)
                if chained:
                    nll, n = passes.sequences([turn_rows[i] for i in batch])
                else:
                    nll, n = passes.turns([rows[i] for i in batch], prompt_weight)
                losses.append(nll / max(n, 1.0))
                self.accelerator.clip_grad_norm_(self.trainable(), self.cfg.grad_clip)
                self.optimizer.step()
                if on_batch is not None:
                    on_batch()
        return {"sft/loss_first": losses[0] if losses else float("nan"),
                "sft/loss_last": float(np.mean(losses[-10:])) if losses else float("nan"),
                "sft/padding_share": padding_share(counts), "sft/forwarded_tokens": counts["tokens"]}
