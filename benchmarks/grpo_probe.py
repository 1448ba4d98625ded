"""GRPO on fresh tasks: does RL improve a policy beyond the tasks it sees again?

    python benchmarks/grpo_probe.py runs/default/sft_policy /tmp/probe/lr0 --steps 60 grpo.lr=0
    python benchmarks/grpo_probe.py runs/default/sft_policy /tmp/probe/lr3e-4 --steps 60 grpo.lr=3e-4 grpo.sft_weight=0

A curriculum that replays tasks (fixed seeds, RODS's pool) lets a small policy raise its training
reward by learning those tasks. Here every GRPO step trains on tasks never seen before: ``steps *
rollout.tasks_per_step`` tasks drawn like the seeds (``envs.build_tasksets.demonstration_tasks`` with
``--data-seed``, its own world range, none equal to a checked-in task), taken in a fixed order, so
the training reward can only rise through skills that transfer. Every setting trains on the same
task sequence: ``grpo.lr=0`` is the reference run (the policy never changes), and the per-quarter
training figures of any other setting compare with it quarter by quarter. After training, the test
split is evaluated as the main job does (greedy, plus ``eval.samples`` episodes per task at the
rollout temperature). Overrides are the training config's (``--config``, default the main job's).
Writes ``OUT/probe.json``; GRPO checkpoints land in ``OUT/checkpoints``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any, Sequence

import rods_gym.trainer  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)
import numpy as np
import torch
from accelerate import Accelerator

from rods_gym.envs.build_tasksets import demonstration_tasks
from rods_gym.trainer.config import load_config
from rods_gym.trainer.evaluation import figures_line
from rods_gym.trainer.loop import env_kwargs, eval_settings, evaluate_sets, grpo_train
from rods_gym.trainer.policy import load_policy
from rods_gym.trainer.rollout import RolloutEngine
from rods_gym.trainer.task_source import FixedSeeds
from rods_gym.trainer.tasks import load_tasks, spread

QUARTER_METRICS = ("success", "progress", "tool_error_rate", "turns", "entropy", "zero_std_frac")


def quarters(history: Sequence[dict[str, Any]], parts: int = 4) -> list[dict[str, float]]:
    """The mean of ``QUARTER_METRICS`` over ``parts`` consecutive, near-equal blocks of steps."""
    out = []
    for block in np.array_split(np.arange(len(history)), min(parts, len(history))):
        rows = [history[i] for i in block]
        out.append({"steps": [int(rows[0]["step"]), int(rows[-1]["step"])],
                    **{m: float(np.mean([r[m] for r in rows])) for m in QUARTER_METRICS}})
    return out


def probe(policy_dir: str | Path, out: str | Path, *, steps: int, data_seed: int = 777, config: str = "default",
          overrides: Sequence[str] = (), eval_tasks: int = 400, threads: int = 1) -> dict[str, Any]:
    """GRPO from ``policy_dir`` for ``steps`` steps on fresh tasks; the run's quarters and test figures."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    out = Path(out)
    base = load_config(config, list(overrides))
    if base.sft.data == "sampled" and data_seed == base.sft.data_seed:
        raise ValueError(f"--data-seed {data_seed} is the warm start's own sft.data_seed: its demonstrations "
                         "would be the training tasks; pick another seed")
    cfg = load_config(config, [*overrides, f"run_dir={out}", f"steps={steps}", "time_limit_min=0", "progress_bar=false",
                               "tensorboard=false", "eval.every=0"])
    torch.set_num_threads(threads)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    tasks = demonstration_tasks(steps * cfg.rollout.tasks_per_step, seed=data_seed)
    policy = load_policy(policy_dir, dtype=cfg.policy.dtype)
    accelerator = Accelerator(cpu=True)
    t0 = time.perf_counter()
    result = grpo_train(cfg, policy, load_tasks(cfg.data.train_split, cfg.data), run_dir=out, accelerator=accelerator,
                        source=FixedSeeds(tasks, seed=cfg.seed))
    seconds = time.perf_counter() - t0
    engine = RolloutEngine(policy, cfg.data.env_id, eval_settings(cfg), env_kwargs(cfg))
    test = spread(load_tasks("test", cfg.data), eval_tasks)
    figures = evaluate_sets(engine, {"test": test}, accelerator, cfg.eval.batch_episodes, policy.model,
                            cfg.eval.samples, cfg.seed)["test"]
    report = {"policy": str(policy_dir), "overrides": list(overrides), "steps": result.steps_done,
              "tasks_per_step": cfg.rollout.tasks_per_step, "group_size": cfg.rollout.group_size,
              "data_seed": data_seed, "grpo_seconds": seconds, "quarters": quarters(result.history), "test": figures}
    (out / "probe.json").write_text(json.dumps(report, indent=2))
    return report


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("policy", help="the starting policy (a save_pretrained directory, e.g. a run's sft_policy)")
    ap.add_argument("out", help="output directory (replaced)")
    ap.add_argument("--steps", type=int, default=60, help="GRPO steps (each on rollout.tasks_per_step new tasks)")
    ap.add_argument("--data-seed", type=int, default=777, help="sampler seed of the fresh training tasks")
    ap.add_argument("--config", default="default", help="training config (default: the main job's)")
    ap.add_argument("--eval-tasks", type=int, default=400, help="test tasks evaluated after training")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("overrides", nargs="*", help="config overrides, key=value (e.g. grpo.lr=3e-4)")
    args = ap.parse_intermixed_args(argv)  # overrides may follow the options
    try:
        report = probe(args.policy, args.out, steps=args.steps, data_seed=args.data_seed, config=args.config,
                       overrides=args.overrides, eval_tasks=args.eval_tasks, threads=args.threads)
    except ValueError as exc:
        ap.error(str(exc))
    for q in report["quarters"]:
        print(f"steps {q['steps'][0]}-{q['steps'][1]}: success {q['success']:.3f} progress {q['progress']:.3f} "
              f"tool errors/action {q['tool_error_rate']:.3f} entropy {q['entropy']:.3f}")
    print(f"test ({report['test']['episodes']} tasks): greedy {figures_line(report['test'])}; "
          f"GRPO {report['grpo_seconds']:.0f}s")
    return report


if __name__ == "__main__":
    main()
