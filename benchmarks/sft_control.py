"""The SFT control for a GRPO run: continue imitation from a saved policy, with no RL.

    python benchmarks/sft_control.py runs/default/sft_policy /tmp/sft_control --steps 60 --lr 5e-5
    python benchmarks/compare_policies.py runs/default/sft_policy /tmp/sft_control runs/default/checkpoints/step-000060/policy

GRPO moves a warm start away from where its SFT schedule left it. Whether a GRPO run's held-out
change is RL's doing or the effect of more optimizer steps is answered by this control: the same
number of optimizer steps, batch size, learning rate and schedule (AdamW, betas 0.9/0.99, gradient
norm clip 1.0, as ``grpo_train``), each step one PPO-ptx batch of the config's own warm-start
demonstrations (``sft.data`` / ``sft.demos`` of ``--config``), and nothing else. Batches are
drawn from ``np.random.default_rng([seed, step])``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

import rods_gym.trainer  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)
import numpy as np
import torch

from rods_gym.trainer.config import load_config
from rods_gym.trainer.policy import load_policy, save_policy
from rods_gym.trainer.sft import demonstrations, sft_batch_loss
from rods_gym.trainer.tasks import load_tasks

SCHEDULES = ("constant", "linear")


def continue_sft(policy_dir: str | Path, out: str | Path, *, steps: int, lr: float, schedule: str = "constant",
                 batch: int = 32, config: str = "default", overrides: Sequence[str] = (), seed: int = 0) -> list[float]:
    """Continue SFT of ``policy_dir`` for ``steps`` batches; save to ``out``; return the per-step losses."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule {schedule!r}: choose one of {SCHEDULES}")
    if steps < 1 or lr <= 0 or batch < 1:
        raise ValueError(f"steps ({steps}) and batch ({batch}) must be >= 1 and lr ({lr}) > 0")
    cfg = load_config(config, list(overrides))
    policy = load_policy(policy_dir)
    demos = demonstrations(cfg, policy, load_tasks(cfg.data.train_split, cfg.data))
    opt = torch.optim.AdamW(policy.model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.0)
    decay = torch.optim.lr_scheduler.LambdaLR(opt, (lambda s: 1.0) if schedule == "constant" else
                                              (lambda s: 1.0 - s / steps))
    policy.model.train()
    losses = []
    for step in range(steps):
        loss = sft_batch_loss(policy.model, policy.pad_id, demos, batch, np.random.default_rng([seed, step]))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        decay.step()
        losses.append(float(loss.detach()))
    policy.model.eval()
    save_policy(policy, out)
    return losses


def main(argv: Sequence[str] | None = None) -> list[float]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("policy", help="the warm start (a save_pretrained directory)")
    ap.add_argument("out", help="where to save the continued policy")
    ap.add_argument("--steps", type=int, default=60, help="optimizer steps (the GRPO run's; default: the main job's)")
    ap.add_argument("--lr", type=float, default=5e-5, help="the GRPO run's learning rate (default: the main job's)")
    ap.add_argument("--schedule", choices=SCHEDULES, default="constant")
    ap.add_argument("--batch", type=int, default=32, help="demonstrations per step (grpo.sft_batch)")
    ap.add_argument("--config", default="default",
                    help="training config whose demonstrations to imitate (the default's teacher skips last calls, "
                         "sft.skip_last_call; the figures in RESULTS.md from before 2026-12-04 used a perfect one, "
                         "--config oracle now)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = ap.parse_intermixed_args(argv)  # overrides may follow the options
    torch.set_num_threads(args.threads)
    try:
        losses = continue_sft(args.policy, args.out, steps=args.steps, lr=args.lr, schedule=args.schedule,
                              batch=args.batch, config=args.config, overrides=args.overrides, seed=args.seed)
    except ValueError as exc:
        ap.error(str(exc))
    print(f"{len(losses)} SFT steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}; saved {args.out}")
    return losses


if __name__ == "__main__":
    from _script import run_script

    run_script(main)
