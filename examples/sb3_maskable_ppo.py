"""Train sb3-contrib MaskablePPO on the structured view of rods-gym and compare it with a
random agent that only takes valid actions (the same action masks).

The structured view gives ``Dict`` observations and a ``MultiDiscrete`` action (action type,
tool, one value slot per parameter) with ``action_masks()``; ``ActionMasker`` hands the masks
to MaskablePPO, so the agent plugs in unchanged. Tasks here are single-call requests
(depth 1, no distractors, no information goal) drawn once into a fixed list: the agent has to
learn which tool the user wants and which of the stated values goes into which parameter.

    python examples/sb3_maskable_ppo.py                       # 30 tasks, 20k steps, a few minutes on a CPU
    python examples/sb3_maskable_ppo.py --tasks 50 --timesteps 50000 --heldout 100
    python examples/sb3_maskable_ppo.py --view features       # the features view (rods_gym.renderers.features)

``--view features`` uses :class:`rods_gym.features_env.FeaturesEnv` (``rods/ToolChain-Features-v0``): a
``Box`` of task-independent features of candidate actions and a ``Discrete`` choice among them (with
``action_masks()``), so the policy is an ``MlpPolicy`` and what it learns carries over to unseen tasks
(benchmarks/ppo_regime.py measures that on the checked-in splits).
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

import numpy as np
import torch
from sb3_contrib import MaskablePPO
from sb3_contrib.common.wrappers import ActionMasker
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import DummyVecEnv

from rods_gym import SamplerConfig, TaskSampler, TaskSpec, ToolChainEnv, default_suite
from rods_gym.features_env import FeaturesEnv

# single-call tasks: the smallest structure, so a few thousand steps of PPO learn it
EASY_CALLS = SamplerConfig(depth=(1, 1), extra_calls=(0, 0), distractors=(0, 0), answer=0.0, cross_domain=0.0)
MAX_STEPS = 6

Policy = Callable[[ToolChainEnv, dict, np.random.Generator], np.ndarray]


def view_env(tasks: list[TaskSpec], view: str = "structured") -> ToolChainEnv:
    if view == "features":
        return FeaturesEnv(task_set=tasks, max_steps=MAX_STEPS, candidate_order="shuffled")
    return ToolChainEnv(mode="structured", task_set=tasks, max_steps=MAX_STEPS)


def make_env(tasks: list[TaskSpec], view: str = "structured") -> ActionMasker:
    return ActionMasker(view_env(tasks, view), lambda e: e.unwrapped.action_masks())


def random_masked_policy(env: ToolChainEnv, obs: dict, rng: np.random.Generator) -> np.ndarray:
    """Uniform over the valid choices of each action dimension (the one dimension of the features view)."""
    masks, out, start = env.action_masks(), [], 0
    if env.mode == "features":
        return np.array(int(rng.choice(np.flatnonzero(masks))))
    for n in env.action_space.nvec:
        out.append(int(rng.choice(np.flatnonzero(masks[start : start + int(n)]))))
        start += int(n)
    return np.array(out)


def model_policy(model: MaskablePPO) -> Policy:
    def act(env: ToolChainEnv, obs: dict, rng: np.random.Generator) -> np.ndarray:
        action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=True)
        return action

    return act


def mean_progress(policy: Policy, tasks: list[TaskSpec], seed: int = 0, view: str = "structured") -> float:
    """Run each task once; the mean final progress (= the mean return)."""
    env = view_env(tasks, view)
    rng = np.random.default_rng(seed)
    progress = []
    for task in tasks:
        obs, _ = env.reset(options={"task": task})
        for _ in range(MAX_STEPS):
            obs, _, terminated, truncated, info = env.step(policy(env, obs, rng))
            if terminated or truncated:
                break
        progress.append(info["progress"])
    return float(np.mean(progress))


def train(tasks: list[TaskSpec], timesteps: int, seed: int, n_envs: int = 4, view: str = "structured") -> MaskablePPO:
    vec = DummyVecEnv([lambda: make_env(tasks, view) for _ in range(n_envs)])
    model = MaskablePPO("MlpPolicy" if view == "features" else "MultiInputPolicy", vec, n_steps=128, batch_size=128, n_epochs=4, learning_rate=1e-3,
                        gamma=0.9, ent_coef=0.01, policy_kwargs={"net_arch": [64, 64]}, seed=seed, device="cpu")
    model.set_logger(Logger(folder=None, output_formats=[]))  # quiet, and no SB3-* folder left in the temp dir
    model.learn(timesteps)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=30, help="training tasks (a fixed list)")
    parser.add_argument("--timesteps", type=int, default=20_000)
    parser.add_argument("--heldout", type=int, default=50, help="unseen tasks of the same kind to evaluate on")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for this small net)")
    parser.add_argument("--view", choices=("structured", "features"), default="structured")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    sampler = TaskSampler(default_suite(), EASY_CALLS, seed=args.seed)
    tasks = sampler.sample_many(args.tasks)
    heldout = sampler.sample_many(args.heldout, start=args.tasks)
    view = args.view
    random_train = np.mean([mean_progress(random_masked_policy, tasks, seed=s, view=view) for s in range(5)])
    random_heldout = np.mean([mean_progress(random_masked_policy, heldout, seed=s, view=view) for s in range(5)])
    print(f"before: random masked agent  mean progress {random_train:.3f} (training tasks), "
          f"{random_heldout:.3f} (held-out tasks)")

    start = time.time()
    model = train(tasks, args.timesteps, args.seed, view=view)
    trained_train = mean_progress(model_policy(model), tasks, view=view)
    trained_heldout = mean_progress(model_policy(model), heldout, view=view)
    print(f"after:  MaskablePPO, {args.timesteps} steps in {time.time() - start:.0f} s  "
          f"mean progress {trained_train:.3f} (training tasks), {trained_heldout:.3f} (held-out tasks)")


if __name__ == "__main__":
    main()
