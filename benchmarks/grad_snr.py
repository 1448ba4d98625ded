"""How much of one GRPO batch's gradient is signal: the gradient's signal-to-noise ratio per batch.

    python benchmarks/grad_snr.py runs/default/sft_policy --batches 16

From one policy (never updated), ``--batches`` independent GRPO batches are rolled out, each on its own
``rollout.tasks_per_step`` fresh tasks (drawn like the seeds from ``--data-seed``) with
``rollout.group_size`` episodes per task, exactly as a training step builds them (group advantages,
the clipped token-level loss at the rollout temperature). Each batch's gradient is g_k = mu + e_k, with
mu the expected gradient and e_k zero-mean noise, so over pairs of distinct batches E[g_i . g_j] =
|mu|^2 and E[|g_k|^2] = |mu|^2 + E|e|^2. ``snr_estimate`` returns |mu|^2 / E|e|^2 per batch: the
number of batches whose mean gradient has as much signal as noise is its inverse. Overrides are the
training config's (e.g. ``rollout.tasks_per_step=32``).
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Sequence

import rods_gym.trainer  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)
import numpy as np
import torch

from rods_gym.envs.build_tasksets import demonstration_tasks
from rods_gym.trainer.config import load_config
from rods_gym.trainer.grpo import LossSettings, group_advantages, grpo_loss, make_batch, weigh_negatives
from rods_gym.trainer.config import GRPOConfig
from rods_gym.trainer.loop import env_kwargs, grpo_loss_settings, rollout_settings
from rods_gym.trainer.policy import load_policy
from rods_gym.trainer.rollout import RolloutEngine


def snr_estimate(grads: torch.Tensor) -> dict[str, float]:
    """Signal (|mu|^2, the mean dot product of distinct rows), noise (E|e|^2) and their ratio, from
    ``grads`` [K, P]: K >= 2 independent gradient estimates of one expected gradient mu."""
    k = grads.shape[0]
    if k < 2:
        raise ValueError(f"need at least 2 gradients to separate signal from noise, got {k}")
    gram = grads.double() @ grads.double().T
    self_ = float(gram.diag().mean())
    cross = float((gram.sum() - gram.diag().sum()) / (k * (k - 1)))
    noise = self_ - cross
    return {"signal2": cross, "noise2": noise, "snr_per_batch": cross / noise if noise > 0 else float("inf")}


def batch_gradient(model: torch.nn.Module, engine: RolloutEngine, tasks: Sequence[Any], group_size: int,
                   grpo: GRPOConfig, settings: LossSettings, *, generator: torch.Generator, seed: int, pad_id: int,
                   micro: int = 16) -> tuple[torch.Tensor, dict[str, float]]:
    """The flattened GRPO gradient of one batch of ``tasks`` (``group_size`` rollouts each), and its rewards.
    Episode advantages as the training loop weighs them (``grpo.scale_rewards``, ``adv_eps``,
    ``negative_weight``, ``episode_weight``)."""
    trajs, _ = engine.run(tasks, group_size, generator=generator, seed=seed)
    rets = torch.tensor([[t.ret for t in trajs[i * group_size:(i + 1) * group_size]] for i in range(len(tasks))])
    adv = grpo.episode_weight * weigh_negatives(group_advantages(rets, grpo.scale_rewards, grpo.adv_eps),
                                                grpo.negative_weight)
    batch = make_batch([t.transcript.ids for t in trajs], [t.transcript.action_mask for t in trajs],
                       [t.transcript.logprobs for t in trajs], adv.view(-1).tolist(), pad_id)
    n_tokens = float(batch.action_mask.sum())
    model.zero_grad(set_to_none=True)
    model.train()
    for s in range(0, len(batch), micro):
        loss, _ = grpo_loss(model, batch.select(list(range(s, min(s + micro, len(batch))))), settings, n_tokens=n_tokens)
        loss.backward()
    model.eval()
    flat = torch.cat([p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel())
                      for p in model.parameters() if p.requires_grad])
    return flat, {"reward_mean": float(rets.mean()), "zero_std_frac": float((rets.std(1) == 0).float().mean())}


def measure(policy_dir: str, *, batches: int, data_seed: int = 777, config: str = "default",
            overrides: Sequence[str] = (), threads: int = 1) -> dict[str, Any]:
    """``snr_estimate`` over ``batches`` GRPO batch gradients of the policy at ``policy_dir``."""
    if batches < 2:
        raise ValueError(f"--batches must be >= 2, got {batches}")
    cfg = load_config(config, list(overrides))
    r, g = cfg.rollout, cfg.grpo
    if g.beta > 0 or g.action_weight > 0 or g.miss_credit != "episode" or g.gamma != 1.0 or r.branch_size > 0:
        raise ValueError("grad_snr measures the plain episode-advantage loss: it takes no KL reference (grpo.beta), "
                         "per-action advantages (grpo.action_weight, grpo.miss_credit), discounting (grpo.gamma) "
                         "or greedy branches (rollout.branch_size)")
    torch.set_num_threads(threads)
    policy = load_policy(policy_dir, dtype=cfg.policy.dtype)
    engine = RolloutEngine(policy, cfg.data.env_id, rollout_settings(cfg), env_kwargs(cfg))
    settings = grpo_loss_settings(cfg)
    tasks = demonstration_tasks(batches * r.tasks_per_step, seed=data_seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    grads, stats = [], []
    for k in range(batches):
        grad, st = batch_gradient(policy.model, engine, tasks[k * r.tasks_per_step:(k + 1) * r.tasks_per_step],
                                  r.group_size, g, settings, generator=generator, seed=k * 10_000, pad_id=policy.pad_id)
        grads.append(grad)
        stats.append(st)
    est = snr_estimate(torch.stack(grads))
    return {"policy": policy_dir, "overrides": list(overrides), "batches": batches,
            "episodes_per_batch": r.tasks_per_step * r.group_size, **est,
            "batches_for_snr_1": 1.0 / est["snr_per_batch"] if est["snr_per_batch"] > 0 else float("inf"),
            **{k: float(np.mean([s[k] for s in stats])) for k in stats[0]}}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("policy", help="the policy (a save_pretrained directory, e.g. a run's sft_policy)")
    ap.add_argument("--batches", type=int, default=16, help="independent GRPO batches (>= 2)")
    ap.add_argument("--data-seed", type=int, default=777, help="sampler seed of the fresh tasks")
    ap.add_argument("--config", default="default")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = ap.parse_intermixed_args(argv)
    try:
        report = measure(args.policy, batches=args.batches, data_seed=args.data_seed, config=args.config,
                         overrides=args.overrides, threads=args.threads)
    except ValueError as exc:
        ap.error(str(exc))
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    from _script import run_script

    run_script(main)
