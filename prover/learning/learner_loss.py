"""The learner's loss on one micro-batch: PPO-clip with dual clip, optional KL to the initial policy, entropy.

Per token k of a turn row, with rho = exp(logp - logp_old) and advantage A (verl's core_algos):

    L1 = -A rho,   L2 = -A clip(rho, 1 - clip_low, 1 + clip_high),   Lclip = max(L1, L2)
    L  = min(Lclip, -A c) if A < 0 else Lclip                   (dual clip, c = dual_clip_c)
    loss = agg(L) + kl_coef agg(KL(logp, logp_ref)) - entropy_coef agg(H)

``agg`` sums each token's term times its weight (``learner_rows.token_weights``, which spread one of verl's
loss_agg_modes over the whole mini-batch), over the tokens the rows train. prover/learning/learner.py runs the
forward passes, the backward and the optimizer step around it.

With ``learner.engine_is_cap`` C (truncated importance sampling, TIS), ``logp_old`` is the learner's own
log-prob of the token, recomputed before the update, and each token's L is weighted by

    w = min(exp(logp_old - logp_engine), C)                      (no gradient through w)

where logp_engine is what the engine recorded when it sampled the token. This is verl's
``compute_policy_loss_vanilla`` (verl/trainer/ppo/core_algos.py: ``tis_imp_ratio = exp(old_log_prob -
rollout_log_probs)``, clamped above by ``tis_imp_ratio_cap``, times ``pg_losses`` after the dual clip), after
Yao et al., "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training" (2025,
https://fengyao.notion.site/off-policy-rl): the tokens were
drawn from the engine's distribution, not the learner's, and w reweighs them towards the learner's; the cap
bounds the variance a rare token with a large ratio would add.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from prover.config import LearnerConfig
from prover.learning.learner_rows import Row
from prover.learning.padding import padding_share


def kl_penalty(logp: torch.Tensor, ref: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "k1":
        return logp - ref
    if kind == "k2":
        return 0.5 * (logp - ref) ** 2
    if kind == "abs":
        return (logp - ref).abs()
    d = (ref - logp).clamp(-20, 20)  # k3, verl's low_var_kl; clamping d first keeps exp finite
    return (torch.exp(d) - d - 1).clamp(-10, 10)


def ppo_token_loss(logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor,
                   cfg: LearnerConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Dual-clip PPO loss per token, and where the clipped term won (for ``clipfrac``)."""
    ratio = torch.exp((logp - old).clamp(-20, 20))  # clamped as upstream verl does
    l1 = -adv * ratio
    l2 = -adv * ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high)
    lclip = torch.maximum(l1, l2)
    return torch.where(adv < 0, torch.minimum(lclip, -adv * cfg.dual_clip_c), lclip), l2 > l1


def engine_is_weights(learner_old: torch.Tensor, engine: torch.Tensor, cap: float) -> torch.Tensor:
    """The truncated importance weight per token, min(exp(logp_old_learner - logp_engine), cap)."""
    return torch.exp(learner_old - engine).clamp(max=cap)


def mismatch_sums(log_rho: torch.Tensor, cfg: LearnerConfig) -> dict[str, float]:
    """What the log-ratios ``log_rho`` = logp_learner - logp_engine of some tokens say about the engine/learner
    mismatch: their count, the sum of |log rho|, how many have rho outside PPO's clip range
    [1 - clip_low, 1 + clip_high], and the largest |log rho|."""
    rho = log_rho.double().exp()
    outside = (rho < 1 - cfg.clip_low) | (rho > 1 + cfg.clip_high)
    return {"engine_tokens": float(log_rho.numel()), "engine_abs_log_rho": float(log_rho.abs().sum()),
            "engine_outside_clip": float(outside.sum()),
            "engine_max_abs_log_rho": float(log_rho.abs().max()) if log_rho.numel() else 0.0}


def mismatch_metrics(sums: dict[str, float]) -> dict[str, float]:
    """``mismatch_sums`` as the learner logs them: mean |log rho|, the share of tokens outside the clip range,
    the largest |log rho| (all 0 without tokens)."""
    n = sums.get("engine_tokens", 0.0)
    return {"learner/engine_abs_log_rho": sums["engine_abs_log_rho"] / n if n else 0.0,
            "learner/engine_outside_clip": sums["engine_outside_clip"] / n if n else 0.0,
            "learner/engine_max_abs_log_rho": sums.get("engine_max_abs_log_rho", 0.0)}


COUNTED = ("tokens", "padded_tokens", "nonfinite")  # a mini-batch's stats that add up, not average


@dataclass
class UpdateTotals:
    """What the optimizer steps of one ``Learner.update`` add up to, by kind: each loss term and the gradient
    norm summed to be averaged over the steps, the token counts and the skipped steps totalled, and the
    engine/learner mismatch of the one mini-batch that measured it."""

    averaged: dict[str, float] = field(default_factory=dict)  # pg_loss, kl, entropy, clipfrac, ppo_kl, grad_norm
    tokens: float = 0.0  # tokens forwarded, padding aside
    padded_tokens: float = 0.0  # tokens forwarded, padding included
    nonfinite: float = 0.0  # optimizer steps skipped for a NaN or inf loss or gradient
    mismatch: dict[str, float] = field(default_factory=dict)  # ``mismatch_sums`` of the measured mini-batch
    updates: int = 0  # optimizer steps on real rows

    def add(self, stats: dict[str, float]) -> None:
        """One optimizer step's stats (``Learner._mini_batch``): its ``engine_*`` sums, when it measured them,
        become the mismatch; the rest add up."""
        if not self.mismatch:
            self.mismatch = {k: v for k, v in stats.items() if k.startswith("engine_")}
        for k, v in stats.items():
            if k in COUNTED:
                setattr(self, k, getattr(self, k) + v)
            elif not k.startswith("engine_"):
                self.averaged[k] = self.averaged.get(k, 0.0) + v
        self.updates += 1

    def metrics(self, nonfinite_rows: int) -> dict[str, float]:
        """``learner/<term>`` averaged over the steps, the mismatch, the share of padding, the rows left out for
        a NaN or inf advantage (``nonfinite_rows``, counted by the caller) and the skipped steps."""
        out = {f"learner/{k}": v / max(self.updates, 1) for k, v in self.averaged.items()}
        out.update(mismatch_metrics(self.mismatch))
        out["learner/padding_share"] = padding_share({"tokens": self.tokens, "padded_tokens": self.padded_tokens})
        out["learner/nonfinite_rows"] = float(nonfinite_rows)
        out["learner/nonfinite_updates"] = self.nonfinite
        return out


def right_aligned(arrays: list[np.ndarray], width: int, device: torch.device | str) -> torch.Tensor:
    """Each array at the end of a row of ``width`` zeros (completions end at the last column)."""
    out = torch.zeros((len(arrays), width), dtype=torch.float32)
    for i, a in enumerate(arrays):
        out[i, width - len(a):] = torch.from_numpy(np.asarray(a, np.float32))
    return out.to(device)


@dataclass
class TokenLosses:
    """One micro-batch's loss terms per token, (rows, width), and which tokens count with what weight."""

    trained: torch.Tensor  # bool: the completion tokens the rows train
    weight: torch.Tensor  # each token's share of the mini-batch's loss (learner.loss_agg)
    pg: torch.Tensor  # the dual-clip PPO loss
    clipped: torch.Tensor  # bool: the clipped term won
    entropy: torch.Tensor
    kl: torch.Tensor  # KL to the reference; zeros without a KL term
    logp: torch.Tensor  # the policy's log-probs of the targets
    old: torch.Tensor  # PPO's old log-probs: the sampling policy's (Turn.logprobs), or the learner's with TIS
    engine: torch.Tensor  # the sampling policy's (Turn.logprobs)

    def weighted_sum(self, x: torch.Tensor) -> torch.Tensor:
        """agg(x): the sum over trained tokens of x times the token's weight."""
        return torch.where(self.trained, x * self.weight, torch.zeros_like(x)).sum()

    def loss(self, cfg: LearnerConfig) -> torch.Tensor:
        """What the backward pass differentiates: agg(L) - entropy_coef agg(H) + kl_coef agg(KL)."""
        total = self.pg
        if cfg.entropy_coef > 0:
            total = total - cfg.entropy_coef * self.entropy
        if cfg.kl_coef > 0:
            total = total + cfg.kl_coef * self.kl
        return self.weighted_sum(total)

    def sums(self) -> dict[str, float]:
        """The weighted sums the learner logs (summed over micro-batches, they are the mini-batch's)."""
        with torch.no_grad():
            return {"pg_loss": float(self.weighted_sum(self.pg)), "kl": float(self.weighted_sum(self.kl)),
                    "entropy": float(self.weighted_sum(self.entropy)),
                    "clipfrac": float(self.weighted_sum(self.clipped.float())),
                    "ppo_kl": float(self.weighted_sum(self.old - self.logp))}

    def mismatch(self, cfg: LearnerConfig) -> dict[str, float]:
        """``mismatch_sums`` of the policy's log-probs against the engine's, over the tokens the loss trains."""
        with torch.no_grad():
            return mismatch_sums((self.logp - self.engine)[self.trained & (self.weight > 0)], cfg)


def token_losses(logits: torch.Tensor, targets: torch.Tensor, trained: torch.Tensor, turns: list[Row],
                 weights: list[np.ndarray], cfg: LearnerConfig, ref_logp: torch.Tensor | None,
                 on_policy: bool = False) -> TokenLosses:
    """The loss terms of the micro-batch whose policy logits are ``logits`` (``learner_rows.row_logits``);
    ``turns`` are its turn rows in order, ``weights`` theirs, ``ref_logp`` the reference's log-probs of the
    targets (None without a KL term); with ``on_policy`` the old log-probs are ``logp`` itself, detached (the
    learner's own at the weights it differentiates, ``Learner._own_old_logprobs``)."""
    dev, width = logits.device, logits.shape[1]
    logp_all = torch.log_softmax(logits, dim=-1)  # once, for the log-probs and the entropy
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    old = logp.detach() if on_policy else right_aligned([t.old_logprobs for t in turns], width, dev)
    adv = right_aligned([t.advantages for t in turns], width, dev)
    engine = right_aligned([t.old_logprobs if t.engine_logprobs is None else t.engine_logprobs for t in turns],
                           width, dev)
    pg, clipped = ppo_token_loss(torch.where(trained, logp, old), old, adv, cfg)
    if cfg.engine_is_cap is not None:
        pg = pg * engine_is_weights(old, engine, cfg.engine_is_cap)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    kl = kl_penalty(logp, ref_logp, cfg.kl_type) if ref_logp is not None else torch.zeros_like(pg)
    return TokenLosses(trained, right_aligned(weights, width, dev), pg, clipped, entropy, kl, logp, old, engine)
