"""Train an sb3-contrib MaskablePPO agent on the structured view with the RODS curriculum.

The curriculum is agent-agnostic: ``CurriculumEnv`` runs each episode on the task the RODS
source picks (G episodes per task), and ``CurriculumCallback`` feeds the episode returns back,
so the detector, synthesis and replay pool work for a classic RL agent exactly as for GRPO.

    python examples/sb3_rods.py --timesteps 20000             # RODS
    python examples/sb3_rods.py --timesteps 20000 --source fixed   # fixed-seed baseline
    tensorboard --logdir runs/sb3_rods                        # curriculum/* and rollout/* curves
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from sb3_contrib import MaskablePPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure

from rods_gym import TaskSpec, compute_signature, default_suite, load_split
from rods_gym.curricula import CurriculumEnv, FixedSeeds, RODSConfig, RODSSource, TaskSchedule, TaskSource
from rods_gym.synth import make_resampler
from rods_gym.trainer.sb3 import CurriculumCallback

ENV_ID = "rods/ToolChain-Easy-Structured-v0"


def shallow(tasks: list[TaskSpec], max_depth: int) -> list[TaskSpec]:
    suite = default_suite()
    return [t for t in tasks if compute_signature(t, suite).depth <= max_depth]


def evaluate(model: MaskablePPO, tasks: list[TaskSpec], seed: int) -> dict[str, float]:
    """Greedy masked actions, one episode per task: mean final progress and success rate."""
    env = gym.make(ENV_ID)
    progress, success = [], []
    for i, task in enumerate(tasks):
        obs, info = env.reset(seed=seed + i, options={"task": task})
        for _ in range(200):  # the env truncates long before
            action, _ = model.predict(obs, action_masks=env.unwrapped.action_masks(), deterministic=True)
            obs, _, term, trunc, info = env.step(action)
            if term or trunc:
                break
        progress.append(info["progress"])
        success.append(info["success"])
    return {"progress": float(np.mean(progress)), "success": float(np.mean(success))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", choices=("rods", "fixed"), default="rods")
    ap.add_argument("--timesteps", type=int, default=20_000)
    ap.add_argument("--max-depth", type=int, default=2, help="seeds and eval tasks up to this depth")
    ap.add_argument("--tasks-per-batch", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--n-envs", type=int, default=2)
    ap.add_argument("--eval-tasks", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--logdir", default="runs/sb3_rods")
    args = ap.parse_args()
    torch.set_num_threads(1)  # tiny networks: one thread is fastest on a CPU

    suite = default_suite()
    seeds = shallow(load_split("train"), args.max_depth)
    dev = shallow(load_split("dev"), args.max_depth)[: args.eval_tasks]
    config = RODSConfig(group_size=args.group_size, synth_every=2, parents_per_round=4, variants_per_parent=4)
    source: TaskSource
    if args.source == "rods":
        source = RODSSource(seeds, make_resampler(suite), config, rng_seed=args.seed)
    else:
        source = FixedSeeds(seeds, seed=args.seed)
    schedule = TaskSchedule(source, tasks_per_batch=args.tasks_per_batch, group_size=args.group_size)
    env = make_vec_env(lambda: CurriculumEnv(gym.make(ENV_ID), schedule), n_envs=args.n_envs, seed=args.seed)

    logdir = Path(args.logdir) / f"{args.source}-{args.seed}"
    formats = ["stdout", "csv"]
    try:
        import tensorboard  # noqa: F401

        formats.append("tensorboard")
    except ImportError:
        pass
    model = MaskablePPO("MultiInputPolicy", env, n_steps=512, batch_size=256, seed=args.seed, device="cpu",
                        policy_kwargs={"net_arch": [128, 128]}, verbose=0)
    model.set_logger(configure(str(logdir), formats))
    print(f"{len(seeds)} seeds (depth <= {args.max_depth}), {len(dev)} dev tasks; before training: "
          f"{evaluate(model, dev, 10_000)}")
    callback = CurriculumCallback(schedule)
    model.learn(total_timesteps=args.timesteps, callback=callback)
    result = {"source": args.source, "timesteps": model.num_timesteps, "episodes": callback.episodes,
              "curriculum_steps": callback.observed_batches, "dev": evaluate(model, dev, 10_000)}
    tel = source.telemetry()
    result["curriculum"] = {k: tel[k] for k in sorted(tel) if k.split("/")[0] in
                            ("boundary_fraction", "silent_fraction", "kappa", "tasks_seen", "pool", "admission")}
    print(json.dumps(result, indent=1))
    (logdir / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
