"""Trainer throughput: rollout and update tokens/s, and the step-time breakdown, on a CPU.

    python benchmarks/trainer_throughput.py                        # prints a Markdown report
    python benchmarks/trainer_throughput.py --out benchmarks/RESULTS_trainer.md
    python benchmarks/trainer_throughput.py --policy runs/default/sft_policy --steps 8

1. **Multi-turn GRPO** (the default job's workload): the default tiny Llama, warm-started by a
   short SFT on the seed tasks (or ``--policy``), ``--steps`` GRPO steps of the default config
   (8 tasks x G=8, up to 16 turns); rollout tokens/s (generated tokens per second of
   generation), update tokens/s (sequence tokens through forward+backward per second of
   update), and where a step's time goes (generation / environment / update).
2. **Single-turn, against TRL** (when ``trl`` is installed): the same policy weights, prompts
   (the first observation of each seed task), reward (the environment's progress after the
   one action), G, batch, completion length, temperature, loss (token-level "dapo"), clip
   range, beta and learning rate, through our loop (``rollout.max_turns=1``) and through
   ``trl.GRPOTrainer``. Throughput = completion tokens per second of step time, after a
   warm-up step; the ratio is ours / TRL's.

Timings on a shared CPU vary with the load; the report prints the machine and date.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import rods_gym.trainer  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)
import numpy as np
import torch

import rods_gym
from rods_gym.trainer.config import TrainConfig, load_config
from rods_gym.trainer.loop import grpo_train
from rods_gym.trainer.pipeline import make_accelerator
from rods_gym.trainer.policy import Policy, load_policy, make_policy, save_policy
from rods_gym.trainer.sft import make_demonstrations, train_sft
from rods_gym.trainer.tasks import load_tasks

WARMUP_STEPS = 1


def warm_policy(cfg: TrainConfig, seeds: list, sft_steps: int, path: str | None) -> Policy:
    if path:
        return load_policy(path, dtype=cfg.policy.dtype)
    policy = make_policy(cfg.policy, "compact")
    if sft_steps > 0:
        demos = make_demonstrations(policy, seeds, cfg.data.env_id)
        train_sft(policy, demos, cfg.sft.__class__(**{**cfg.sft.__dict__, "steps": sft_steps}), seed=cfg.seed)
    return policy


def our_run(cfg: TrainConfig, policy_dir: Path, seeds: list, run_dir: Path) -> list[dict[str, Any]]:
    policy = load_policy(policy_dir, dtype=cfg.policy.dtype)
    result = grpo_train(cfg, policy, seeds, run_dir=run_dir, accelerator=make_accelerator())
    return result.history


def summarize_ours(history: list[dict[str, Any]]) -> dict[str, float]:
    h = history[WARMUP_STEPS:] or history
    gen_tok = sum(r["gen_tokens"] for r in h)
    t_gen, t_env, t_upd = (sum(r[k] for r in h) for k in ("time_gen", "time_env", "time_update"))
    t_step = sum(r["time_step"] for r in h)
    upd_tok = sum(r["update_tokens_per_s"] * r["time_update"] for r in h)
    return {"steps": len(h), "gen_tokens_per_step": gen_tok / len(h), "rollout_tok_s": gen_tok / t_gen,
            "update_tok_s": upd_tok / t_upd, "completion_tok_s": gen_tok / t_step, "step_s": t_step / len(h),
            "gen_s": t_gen / len(h), "env_s": t_env / len(h), "update_s": t_upd / len(h),
            "other_s": (t_step - t_gen - t_env - t_upd) / len(h),
            "turns": float(np.mean([r["turns"] for r in h])), "reward": float(np.mean([r["reward_mean"] for r in h]))}


def trl_run(cfg: TrainConfig, policy_dir: Path, seeds: list, steps: int, out_dir: Path) -> dict[str, float]:
    """The single-turn workload through trl.GRPOTrainer with the same settings."""
    import gymnasium as gym
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    policy = load_policy(policy_dir, dtype=cfg.policy.dtype)
    env = gym.make(cfg.data.env_id)
    by_id = {t.id: t for t in seeds}
    rows = []
    for t in seeds:
        obs, _ = env.reset(options={"task": t})
        rows.append({"prompt": [{"role": "user", "content": obs}], "task_id": t.id})
    dataset = Dataset.from_list(rows)

    def progress_reward(prompts: list, completions: list, task_id: list, **_: Any) -> list[float]:
        out = []
        for comp, tid in zip(completions, task_id):
            text = comp[0]["content"] if isinstance(comp, list) else comp
            env.reset(options={"task": by_id[tid]})
            _, reward, *_ = env.step(text.strip())
            out.append(float(reward))
        return out

    class Timer(TrainerCallback):
        def __init__(self) -> None:
            self.starts: list[float] = []
            self.ends: list[float] = []
            self.logs: list[dict[str, float]] = []

        def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001
            self.starts.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            self.ends.append(time.perf_counter())

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001
            if logs:
                self.logs.append(dict(logs))

    r, g = cfg.rollout, cfg.grpo
    args = GRPOConfig(
        output_dir=str(out_dir), use_cpu=True, report_to="none", save_strategy="no", logging_steps=1,
        max_steps=steps, per_device_train_batch_size=r.tasks_per_step * r.group_size, num_generations=r.group_size,
        gradient_accumulation_steps=1, max_completion_length=r.max_action_tokens, temperature=r.temperature,
        top_k=0, top_p=1.0, learning_rate=g.lr, lr_scheduler_type="constant", warmup_steps=0, beta=g.beta,
        epsilon=g.eps_low, epsilon_high=g.eps_high, loss_type="dapo", scale_rewards="group", num_iterations=1,
        max_grad_norm=g.max_grad_norm, adam_beta1=g.adam_betas[0], adam_beta2=g.adam_betas[1], weight_decay=0.0,
        seed=cfg.seed, shuffle_dataset=True, bf16=False, disable_tqdm=True,
    )
    timer = Timer()
    trainer = GRPOTrainer(model=policy.model, reward_funcs=[progress_reward], args=args, train_dataset=dataset,
                          processing_class=policy.tokenizer, callbacks=[timer])
    trainer.train()
    durations = [e - s for s, e in zip(timer.starts, timer.ends)][WARMUP_STEPS:]
    step_logs = [lg for lg in timer.logs if "completions/mean_length" in lg][WARMUP_STEPS:]
    n_comp = r.tasks_per_step * r.group_size
    tokens = [lg["completions/mean_length"] * n_comp for lg in step_logs]
    return {"steps": len(durations), "step_s": float(np.mean(durations)), "gen_tokens_per_step": float(np.mean(tokens)),
            "completion_tok_s": float(sum(tokens) / sum(durations)),
            "reward": float(np.mean([lg.get("reward", 0.0) for lg in step_logs]))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="default")
    ap.add_argument("--steps", type=int, default=6, help="GRPO steps per measurement (the first is warm-up)")
    ap.add_argument("--sft-steps", type=int, default=150, help="warm start before measuring (0: untrained policy)")
    ap.add_argument("--policy", default=None, help="a saved policy to measure instead (skips the warm start)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a shared 2-core CPU)")
    ap.add_argument("--no-trl", action="store_true", help="skip the TRL comparison")
    ap.add_argument("--out", default=None, help="write the Markdown report here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = load_config(args.config, [f"steps={args.steps}", "time_limit_min=0", "checkpoint_every=0",
                                    "tensorboard=false", "progress_bar=false", f"threads={args.threads}"])
    seeds = load_tasks(cfg.data.train_split, cfg.data)
    lines = [f"# Trainer throughput ({_dt.date.today().isoformat()})", "",
             f"Machine: {os.cpu_count()}-core CPU ({platform.processor() or platform.machine()}), "
             f"torch {torch.__version__}, {args.threads} thread(s); shared with other jobs, so figures vary with load.",
             f"Command: `python benchmarks/trainer_throughput.py {' '.join(argv if argv is not None else sys.argv[1:])}`", ""]
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        t0 = time.perf_counter()
        policy = warm_policy(cfg, seeds, args.sft_steps, args.policy)
        warm_s = time.perf_counter() - t0
        policy_dir = save_policy(policy, tmp_path / "policy")
        n_params = sum(p.numel() for p in policy.model.parameters())

        ours = summarize_ours(our_run(cfg, policy_dir, seeds, tmp_path / "multi"))
        lines += [f"Policy: {policy.name}, {n_params / 1e6:.2f}M parameters "
                  + (f"(from {args.policy})" if args.policy else f"(SFT warm start: {args.sft_steps} steps, {warm_s:.0f}s)"),
                  "", "## 1. Multi-turn GRPO (default config)", "",
                  f"{cfg.rollout.tasks_per_step} tasks x G={cfg.rollout.group_size}, up to {cfg.rollout.max_turns} turns "
                  f"of up to {cfg.rollout.max_action_tokens} tokens; {ours['steps']} measured steps "
                  f"(mean turns/episode {ours['turns']:.1f}, mean reward {ours['reward']:.3f}).", "",
                  "| metric | value |", "|---|---|",
                  f"| rollout tokens/s (generated tokens / generation time) | {ours['rollout_tok_s']:.0f} |",
                  f"| update tokens/s (sequence tokens / update time) | {ours['update_tok_s']:.0f} |",
                  f"| generated tokens per step | {ours['gen_tokens_per_step']:.0f} |",
                  f"| step time (s) | {ours['step_s']:.2f} |",
                  f"| - generation | {ours['gen_s']:.2f} ({100 * ours['gen_s'] / ours['step_s']:.0f}%) |",
                  f"| - environment + tokenizing observations | {ours['env_s']:.2f} ({100 * ours['env_s'] / ours['step_s']:.0f}%) |",
                  f"| - update | {ours['update_s']:.2f} ({100 * ours['update_s'] / ours['step_s']:.0f}%) |",
                  f"| - other (source, gathering, logging) | {ours['other_s']:.2f} |", ""]
        print("\n".join(lines), flush=True)

        single = load_config(args.config, [f"steps={args.steps}", "time_limit_min=0", "checkpoint_every=0",
                                           "tensorboard=false", "progress_bar=false", "rollout.max_turns=1",
                                           "grpo.micro_batch_size=64", "grpo.aggregation=token", "grpo.beta=0.0"])
        ours1 = summarize_ours(our_run(single, policy_dir, seeds, tmp_path / "single"))
        block = ["## 2. Single-turn GRPO: ours vs TRL", "",
                 f"Same weights, prompts, reward, G={single.rollout.group_size}, {single.rollout.tasks_per_step} prompts/step "
                 f"({single.rollout.tasks_per_step * single.rollout.group_size} completions, one forward/backward), "
                 f"max {single.rollout.max_action_tokens} completion tokens, temperature {single.rollout.temperature}, "
                 f"token-level loss (TRL loss_type='dapo'), eps {single.grpo.eps_low}/{single.grpo.eps_high}, "
                 f"beta {single.grpo.beta}, lr {single.grpo.lr}; {args.steps - WARMUP_STEPS} measured steps each.", "",
                 "| trainer | step time (s) | completion tokens/step | completion tokens/s | mean reward |",
                 "|---|---|---|---|---|",
                 f"| rods_gym.trainer | {ours1['step_s']:.3f} | {ours1['gen_tokens_per_step']:.0f} | "
                 f"{ours1['completion_tok_s']:.0f} | {ours1['reward']:.3f} |"]
        if args.no_trl:
            block += ["", "TRL comparison skipped (--no-trl)."]
        else:
            try:
                import trl
            except ImportError:
                block += ["", "TRL is not installed (pip install 'rods-gym[trl]'); comparison skipped."]
            else:
                theirs = trl_run(single, policy_dir, seeds, args.steps, tmp_path / "trl")
                ratio = ours1["completion_tok_s"] / theirs["completion_tok_s"]
                block += [f"| trl {trl.__version__} GRPOTrainer | {theirs['step_s']:.3f} | "
                          f"{theirs['gen_tokens_per_step']:.0f} | {theirs['completion_tok_s']:.0f} | "
                          f"{theirs['reward']:.3f} |", "",
                          f"**Throughput ratio (ours / TRL, completion tokens/s): {ratio:.2f}x** "
                          f"(step-time ratio TRL/ours: {theirs['step_s'] / ours1['step_s']:.2f}x)."]
        print("\n".join(block), flush=True)
        lines += block
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
