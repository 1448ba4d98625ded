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

The ratio is per token (``importance="token"``, PPO/GRPO) or per sequence (``importance="sequence"``,
GSPO, Zheng et al. 2025): ``s_i = exp(mean_t (logp_t - logp_old_t))`` over rollout i's generated tokens,
the same for every token of the rollout and clipped as a whole, with gradient ``s_i * grad logp_t`` on
each token (GSPO-token's form, so per-token advantages still apply). A rollout of a multi-turn episode is
all of its actions' tokens. GSPO's paper clips at eps_low 3e-4, eps_high 4e-4 with sequence aggregation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

import torch
import torch.nn.functional as F
from transformers import modeling_utils

from .generation import forward_parameters, no_cache

SCALES = ("group", "none")  # per-action advantages (state_advantages): within a group, or not scaled
EPISODE_SCALES = ("group", "batch", "none")  # group_advantages also takes the step's batch std (TRL's "batch")
AGGREGATIONS = ("token", "sequence", "dr_grpo")
IMPORTANCE_LEVELS = ("token", "sequence")


def group_advantages(returns: torch.Tensor, scale: str = "group", eps: float = 1e-4,
                     baseline: torch.Tensor | None = None, batch_std: float | None = None) -> torch.Tensor:
    """``returns``: [n_groups, G] -> advantages of the same shape: each return minus its group's mean,
    divided by the group's std + ``eps`` (``scale="group"``), by ``batch_std`` + ``eps`` (``"batch"``: the std
    of every return of the training step, which the caller computes over all processes' groups), or not
    at all (``"none"``, Dr.GRPO).

    ``baseline`` ([n_groups]): a return to compare each group's rollouts with instead of the group's mean
    (ReMax: the task's greedy episode's); with ``scale="group"`` the std is then that of the group's
    returns and the baseline together (G + 1 values), which is never 0 where some advantage is not, so
    a group whose rollouts all beat (or all lose to) the baseline gets bounded advantages (at most
    sqrt(G + 1) in size)."""
    if scale not in EPISODE_SCALES:
        raise ValueError(f"unknown advantage scale {scale!r}; choose one of {EPISODE_SCALES}")
    if (scale == "batch") != (batch_std is not None):
        raise ValueError("batch_std is the scale of scale='batch' (the std of the step's returns), and only of it")
    if returns.dim() != 2:
        raise ValueError(f"returns must be [n_groups, G], got shape {tuple(returns.shape)}")
    if baseline is None:
        centered, spread = returns - returns.mean(dim=1, keepdim=True), returns
    else:
        if baseline.shape != returns.shape[:1]:
            raise ValueError(f"baseline must be [n_groups] = [{returns.shape[0]}], got shape {tuple(baseline.shape)}")
        centered, spread = returns - baseline[:, None], torch.cat([returns, baseline[:, None]], dim=1)
    if scale == "none":
        return centered
    if scale == "batch":
        return centered / (float(batch_std) + eps)
    std = spread.std(dim=1, keepdim=True) if spread.shape[1] > 1 else torch.zeros_like(spread[:, :1])
    return centered / (std + eps)


def standardized(values: torch.Tensor, scale: str = "group", eps: float = 1e-4) -> torch.Tensor:
    """``values`` minus their mean, divided by their std + ``eps`` with ``scale="group"``; all zeros
    when fewer than two values or they all agree (no signal)."""
    if values.numel() < 2 or float(values.std()) == 0.0:
        return torch.zeros_like(values)
    centered = values - values.mean()
    return centered / (values.std() + eps) if scale == "group" else centered


def weigh_negatives(advantages: torch.Tensor, weight: float) -> torch.Tensor:
    """Scale the negative advantages by ``weight`` (1: plain GRPO; 0: learn only from rollouts
    better than their group's mean, positive-sample reinforcement)."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"negative advantage weight must be in [0, 1], got {weight}")
    return torch.where(advantages < 0, advantages * weight, advantages)


def action_advantages(groups: Sequence[Sequence[Sequence[float]]], eps: float = 1e-4) -> list[list[list[float]]]:
    """Per-action advantages from per-action rewards: each action's reward standardized over all
    actions of its group (every rollout of the same task). ``groups[g][i][t]`` is the reward of
    action ``t`` of rollout ``i``; the result has the same nesting. A group whose actions all
    earned the same reward gets zeros."""
    out = []
    for group in groups:
        flat = standardized(torch.tensor([r for rewards in group for r in rewards], dtype=torch.float32), eps=eps)
        values = iter(flat.tolist())
        out.append([[next(values) for _ in rewards] for rewards in group])
    return out


def returns_to_go(rewards: Sequence[float], gamma: float) -> list[float]:
    """``G_t = r_t + gamma * G_{t+1}`` for every action ``t`` of one rollout."""
    out, acc = [0.0] * len(rewards), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        acc = rewards[t] + gamma * acc
        out[t] = acc
    return out


def discounted_return(rewards: Sequence[float], gamma: float) -> float:
    """``sum_t gamma**t * r_t``: the first return-to-go (the plain sum when ``gamma`` is 1)."""
    return returns_to_go(rewards, gamma)[0] if rewards else 0.0


def state_advantages(groups: Sequence[Sequence[tuple[Sequence[Hashable], Sequence[float]]]], gamma: float = 0.95,
                     scale: str = "group", eps: float = 1e-4) -> list[list[list[float]]]:
    """Step advantages grouped by identical states (GiGPO's anchor states, Feng et al. 2025).

    ``groups[g][i] = (states, rewards)`` for rollout ``i`` of task ``g``: the state each action was
    taken from (any hashable key; equal keys mean the agent saw exactly the same history) and each
    action's reward. Within a group, the actions taken from one state form a step group; an
    action's advantage is its discounted return-to-go minus the step group's mean (divided by its
    std with ``scale="group"``). Actions from a state no other rollout of the group visited, and
    step groups whose returns all agree, get 0. The result is nested like ``groups``' rewards.
    """
    if scale not in SCALES:
        raise ValueError(f"unknown advantage scale {scale!r}; choose one of {SCALES}")
    out: list[list[list[float]]] = []
    for group in groups:
        rtg = [returns_to_go(rewards, gamma) for _, rewards in group]
        by_state: dict[Hashable, list[tuple[int, int]]] = {}
        for i, (states, rewards) in enumerate(group):
            if len(states) != len(rewards):
                raise ValueError(f"rollout {i}: {len(states)} states for {len(rewards)} rewards")
            for t, key in enumerate(states):
                by_state.setdefault(key, []).append((i, t))
        adv = [[0.0] * len(g) for g in rtg]
        for members in by_state.values():
            if len(members) < 2:
                continue
            centered = standardized(torch.tensor([rtg[i][t] for i, t in members], dtype=torch.float64), scale, eps)
            for (i, t), a in zip(members, centered.tolist()):
                adv[i][t] = a
        out.append(adv)
    return out


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


def sequence_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO's log importance ratio on every token: each row's mean of ``logp - old_logp`` over ``mask``
    (its value on every token of the row), carrying the gradient of the token's own ``logp`` ([B, T])."""
    m = mask.to(logp.dtype)
    seq = ((logp - old_logp) * m).sum(dim=1, keepdim=True) / m.sum(dim=1, keepdim=True).clamp(min=1.0)
    return seq.detach() + logp - logp.detach()


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
    importance: str = "token"  # token: PPO's per-token ratio; sequence: GSPO's per-rollout ratio


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
    if settings.importance == "sequence":  # GSPO: the ratio of the whole rollout on each of its tokens
        log_ratio = sequence_log_ratio(logp, old, mask)
    elif settings.importance == "token":
        log_ratio = logp - old
    else:
        raise ValueError(f"unknown importance level {settings.importance!r}; choose one of {IMPORTANCE_LEVELS}")
    per_token, low, high = clipped_surrogate(log_ratio, torch.zeros_like(log_ratio), adv, settings.eps_low,
                                             settings.eps_high)
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
            "ratio": float(torch.exp(log_ratio)[m].sum()),  # the ratio the surrogate used (GSPO: its rollout's)
        }
    return loss, stats
