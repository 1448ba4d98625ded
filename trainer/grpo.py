"""The GRPO objective, as small functions over tensors.

For a task with G rollouts and returns R_1..R_G, the advantage of rollout i is
``(R_i - mean R) / (std R + eps)`` (``scale="group"``; std with Bessel's correction, as in
TRL) or ``R_i - mean R`` (``scale="none"``, Dr.GRPO). Every generated token of rollout i
carries A_i. With ratio ``r = exp(logp - logp_old)`` the per-token loss is

    -min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A)  +  beta * k3(logp, logp_ref)

with ``k3 = exp(ref - logp) - (ref - logp) - 1`` (Schulman's unbiased, positive KL estimator).
Aggregation over a batch (``normalizer`` lets micro-batches add up to the full batch):

- ``token``: sum over all generated tokens / number of generated tokens (DAPO);
- ``sequence``: per-sequence token mean, then mean over sequences (the original GRPO);
- ``dr_grpo``: sum over all generated tokens / (number of sequences * max completion length).

A rollout of a multi-turn episode is all of its actions' tokens (environment and user tokens are masked).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from transformers import modeling_utils

from .generation import forward_parameters, no_cache

SCALES = ("group", "none")
AGGREGATIONS = ("token", "sequence", "dr_grpo")


def group_advantages(returns: torch.Tensor, scale: str = "group", eps: float = 1e-4) -> torch.Tensor:
    """``returns``: [n_groups, G] -> advantages of the same shape: each return minus its group's mean,
    divided by the group's std + ``eps`` (``scale="group"``) or not at all (``"none"``, Dr.GRPO)."""
    if scale not in SCALES:
        raise ValueError(f"unknown advantage scale {scale!r}; choose one of {SCALES}")
    if returns.dim() != 2:
        raise ValueError(f"returns must be [n_groups, G], got shape {tuple(returns.shape)}")
    centered = returns - returns.mean(dim=1, keepdim=True)
    if scale == "none":
        return centered
    std = returns.std(dim=1, keepdim=True) if returns.shape[1] > 1 else torch.zeros_like(returns[:, :1])
    return centered / (std + eps)


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, eps_low: float,
                      eps_high: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token PPO-clip loss; ``advantages`` broadcast to the token shape.

    Returns (loss, low_clipped, high_clipped): the masks mark tokens where the clip bound is
    the active term (ratio below 1 - eps_low with A < 0, or above 1 + eps_high with A > 0).
    """
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    loss = -torch.minimum(unclipped, clipped)
    low = (ratio < 1.0 - eps_low) & (advantages < 0)
    high = (ratio > 1.0 + eps_high) & (advantages > 0)
    return loss, low, high


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || pi_ref): exp(d) - d - 1 with d = ref - logp (>= 0)."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, how: str, *, n_tokens: float | None = None,
              n_seqs: float | None = None, max_len: int | None = None) -> torch.Tensor:
    """Reduce a [B, T] per-token quantity over ``mask`` to a scalar.

    ``n_tokens``/``n_seqs`` default to this batch's counts; pass the full batch's counts when
    accumulating micro-batches so their sum equals the full-batch loss.
    """
    mask = mask.to(per_token.dtype)
    if how == "token":
        denom = float(n_tokens) if n_tokens is not None else mask.sum().clamp(min=1.0)
        return (per_token * mask).sum() / denom
    seqs = float(n_seqs) if n_seqs is not None else float(per_token.shape[0])
    if how == "sequence":
        per_seq = (per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        return per_seq.sum() / seqs
    if how == "dr_grpo":
        if max_len is None:
            raise ValueError("dr_grpo aggregation needs max_len (the maximum completion length)")
        return (per_token * mask).sum() / (seqs * max_len)
    raise ValueError(f"unknown aggregation {how!r}; choose one of {AGGREGATIONS}")


def _keeps_masked_logits(model: torch.nn.Module) -> bool:
    """Whether ``model`` (or the module a DDP wrapper holds) takes ``logits_to_keep``, and this
    transformers slices it with ``slice_logits_to_keep`` (which accepts a boolean [B, T] mask)."""
    if not hasattr(modeling_utils, "slice_logits_to_keep"):
        return False
    return "logits_to_keep" in forward_parameters(model)


def _target_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float,
                     with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of each target under ``softmax(logits / temperature)`` over the last dim, and the entropy."""
    logp_all = F.log_softmax(logits.float() / temperature, dim=-1)
    logp = logp_all.gather(-1, targets[..., None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
    return logp, entropy


def token_logprobs(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   temperature: float = 1.0, with_entropy: bool = False,
                   needed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of ``input_ids[:, 1:]`` under ``softmax(logits / temperature)`` (right-padded batch), [B, T-1].

    ``needed`` ([B, T-1], nonzero where a log-prob is used, e.g. the action mask): when the model
    takes a boolean ``logits_to_keep``, logits (the vocabulary projection, softmax and entropy)
    are computed only at those positions and every other entry of the results is 0; the needed
    entries equal the full computation's up to float rounding.
    """
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    targets = input_ids[:, 1:]
    if needed is not None and _keeps_masked_logits(model):
        keep = needed.bool()
        if bool(keep.any()):
            keep_logits = torch.cat([keep, keep.new_zeros((keep.shape[0], 1))], dim=1)  # position t predicts t + 1
            logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                           logits_to_keep=keep_logits, **no_cache(model)).logits
            if logits.dim() == 2 and logits.shape[0] == int(keep.sum()):  # else: a model that slices otherwise
                lp, ent = _target_logprobs(logits, targets[keep], temperature, with_entropy)
                zeros = torch.zeros(keep.shape, dtype=lp.dtype, device=lp.device)
                return zeros.masked_scatter(keep, lp), None if ent is None else zeros.masked_scatter(keep, ent)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, **no_cache(model)).logits
    return _target_logprobs(logits[:, :-1], targets, temperature, with_entropy)


@dataclass
class Batch:
    """Right-padded rollouts; per-token fields are aligned with the targets ``input_ids[:, 1:]``."""

    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    action_mask: torch.Tensor  # [B, T-1], 1 on generated tokens
    old_logp: torch.Tensor  # [B, T-1], sampling log-probs
    advantages: torch.Tensor  # [B] (one per sequence) or [B, T-1] (per token, aligned like action_mask)
    ref_logp: torch.Tensor | None = None  # [B, T-1]

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, idx: torch.Tensor | Sequence[int]) -> "Batch":
        idx = torch.as_tensor(idx, dtype=torch.long)
        width = int(self.attention_mask[idx].sum(1).max())  # trim padding for this subset
        return Batch(self.input_ids[idx, :width], self.attention_mask[idx, :width], self.action_mask[idx, : width - 1],
                     self.old_logp[idx, : width - 1],
                     self.advantages[idx] if self.advantages.dim() == 1 else self.advantages[idx, : width - 1],
                     None if self.ref_logp is None else self.ref_logp[idx, : width - 1])


def make_batch(ids: Sequence[Sequence[int]], action_masks: Sequence[Sequence[int]], logprobs: Sequence[Sequence[float]],
               advantages: Sequence[float] | Sequence[Sequence[float]], pad_id: int) -> Batch:
    """Right-pad ``ids``; ``advantages`` holds one value per sequence, or one per token of each sequence."""
    n, width = len(ids), max(len(x) for x in ids)
    per_token = n > 0 and not isinstance(advantages[0], (int, float))
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    amask = torch.zeros((n, width), dtype=torch.float32)
    old = torch.zeros((n, width), dtype=torch.float32)
    for i, (x, m, lp) in enumerate(zip(ids, action_masks, logprobs)):
        k = len(x)
        input_ids[i, :k] = torch.as_tensor(list(x), dtype=torch.long)
        attn[i, :k] = 1
        amask[i, :k] = torch.as_tensor(list(m), dtype=torch.float32)
        old[i, :k] = torch.as_tensor(list(lp), dtype=torch.float32)
    if per_token:
        adv = torch.zeros((n, width), dtype=torch.float32)
        for i, a in enumerate(advantages):
            if len(a) != len(ids[i]):
                raise ValueError(f"sequence {i}: {len(a)} token advantages for {len(ids[i])} tokens")
            adv[i, : len(a)] = torch.as_tensor(list(a), dtype=torch.float32)
        return Batch(input_ids, attn, amask[:, 1:], old[:, 1:], adv[:, 1:])
    return Batch(input_ids, attn, amask[:, 1:], old[:, 1:], torch.as_tensor(list(advantages), dtype=torch.float32))


@dataclass(frozen=True)
class LossSettings:
    eps_low: float = 0.2
    eps_high: float = 0.28
    beta: float = 0.0
    aggregation: str = "token"
    temperature: float = 1.0
    max_len: int | None = None  # dr_grpo normalizer


def grpo_loss(model: torch.nn.Module, batch: Batch, settings: LossSettings, *, n_tokens: float | None = None,
              n_seqs: float | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of one (micro-)batch and its statistics (summed over tokens, for averaging by the caller)."""
    device = next(model.parameters()).device
    ids, attn = batch.input_ids.to(device), batch.attention_mask.to(device)
    mask, old = batch.action_mask.to(device), batch.old_logp.to(device)
    adv = batch.advantages.to(device)
    adv = adv[:, None] if adv.dim() == 1 else adv
    # log-probs are needed only at generated tokens: logits are computed there only (when the model allows)
    logp, entropy = token_logprobs(model, ids, attn, settings.temperature, with_entropy=True, needed=mask)
    per_token, low, high = clipped_surrogate(logp, old, adv, settings.eps_low, settings.eps_high)
    kl = None
    if settings.beta > 0:
        if batch.ref_logp is None:
            raise ValueError("beta > 0 needs reference log-probs in the batch")
        kl = k3_kl(logp, batch.ref_logp.to(device))
        per_token = per_token + settings.beta * kl
    loss = aggregate(per_token, mask, settings.aggregation, n_tokens=n_tokens, n_seqs=n_seqs, max_len=settings.max_len)
    with torch.no_grad():
        m = mask.bool()
        stats = {
            "tokens": float(m.sum()),
            "clip_low": float(low[m].sum()),
            "clip_high": float(high[m].sum()),
            "entropy": float(entropy[m].sum()) if entropy is not None else 0.0,
            "kl": float(kl[m].sum()) if kl is not None else 0.0,
            "kl_old": float(k3_kl(logp, old)[m].sum()),  # drift from the sampling policy
            "ratio": float(torch.exp(logp - old)[m].sum()),
        }
    return loss, stats
