"""MaskablePPO's and the features-view GRPO learner's throughput on one core, env steps per second including
learning, in the current ``structured`` view and the ``features`` view, in the same run, with where the time goes.

    python benchmarks/ppo_throughput.py [--scale smoke|cpu] [--json OUT]

Rows: each view with the settings of examples/sb3_maskable_ppo.py (4 envs x 128 steps, batch 128,
4 epochs, [64, 64]) and with the fast settings (16 envs x 128 steps, batch 512, 4 epochs, [64, 64]: more
envs per batched forward pass, fewer and larger minibatches), and the critic-free GRPO learner
(``rods_gym.trainer.features_grpo``, its default ``FeaturesGRPOConfig()``, chosen on dev; the fixed-seeds source
over the same tasks) on the features view, all on the
train split's 400 tasks (multi-call, multi-turn) with ``torch.set_num_threads(1)``, in the steady state
of a long run (before the clock starts, every env has reset once on every task, so the env's per-task
compile and signature are cached, as they are after the first few thousand episodes). Each row splits
its wall time into the env (reset + step + action masks, timed inside the vectorized env), the
learner's update (PPO's ``train()``, GRPO's epochs over a step's episodes) and the rest of the rollout (the
policy's forward pass, the observation preprocessing, the buffer). Times are the process's CPU time (``time.process_time``, one thread), so
steps/s is what one core gives this process, whatever else shares the machine; the wall-clock rate
is printed beside it (on a shared, loaded machine it is lower). Targets (issues 40 and 48): >= 2,000 env
steps/s including learning, one core, for MaskablePPO (its best row) and for GRPO; the lines say PASS/MISS,
GRPO's with its ratio to MaskablePPO's fast features row of the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _ppo_view import PPOConfig, make_model, make_view_env  # noqa: E402
from _script import run_script  # noqa: E402
from sb3_contrib.common.wrappers import ActionMasker  # noqa: E402

from rods_gym import TaskSpec, load_split  # noqa: E402
from rods_gym.trainer.features_grpo import FeaturesGRPO, FeaturesGRPOConfig  # noqa: E402
from rods_gym.curricula import FixedSeeds  # noqa: E402

TARGET = 2_000
EXAMPLE = PPOConfig(n_envs=4, n_steps=128, batch_size=128, n_epochs=4, learning_rate=1e-3, gamma=0.9)
FAST = PPOConfig(n_envs=16, n_steps=128, batch_size=512, n_epochs=4)
GRPO = FeaturesGRPOConfig()
SCALES = {"smoke": (2_048, 40), "cpu": (40_960, 400)}  # env steps per row (a multiple of both rollouts), train tasks


@dataclass
class Clock:
    """Seconds spent in the env and in PPO's update."""

    env: float = 0.0
    update: float = 0.0


class Timed(gym.Wrapper):
    """Adds the time of reset and step to ``clock.env``."""

    def __init__(self, env: gym.Env, clock: Clock) -> None:
        super().__init__(env)
        self.clock = clock

    def reset(self, **kwargs: Any) -> Any:
        start = time.process_time()
        out = self.env.reset(**kwargs)
        self.clock.env += time.process_time() - start
        return out

    def step(self, action: Any) -> Any:
        start = time.process_time()
        out = self.env.step(action)
        self.clock.env += time.process_time() - start
        return out


def timed_masks(clock: Clock) -> Any:
    def masks(env: gym.Env) -> np.ndarray:
        start = time.process_time()
        out = env.unwrapped.action_masks()
        clock.env += time.process_time() - start
        return out

    return masks


def timed_env(view: str, tasks: list[TaskSpec], clock: Clock) -> gym.Env:
    return ActionMasker(Timed(make_view_env(view, task_set=tasks), clock), timed_masks(clock))


def warm(envs: list[gym.Env], tasks: list[TaskSpec], clock: Clock) -> None:
    """The steady state of a long run: every env has compiled every task once; the clock starts after."""
    for env in envs:
        for task in tasks:
            env.reset(options={"task": task})
    clock.env = 0.0


def row(view: str, settings: str, config: dict[str, Any], n: int, cpu: float, wall: float, clock: Clock
        ) -> dict[str, Any]:
    return {"view": view, "settings": settings, "config": config, "steps": n,
            "cpu_seconds": round(cpu, 2), "wall_seconds": round(wall, 2), "steps_per_s": round(n / cpu, 1),
            "steps_per_wall_s": round(n / wall, 1),
            "us_per_step": {"env": round(1e6 * clock.env / n, 1), "update": round(1e6 * clock.update / n, 1),
                            "rollout_rest": round(1e6 * (cpu - clock.env - clock.update) / n, 1)}}


def measure(view: str, ppo: PPOConfig, tasks: list[TaskSpec], steps: int, seed: int = 0) -> dict[str, Any]:
    """One row: MaskablePPO from scratch for ``steps`` env steps; steps/s and the split of the time."""
    clock = Clock()
    model = make_model(view, [lambda: timed_env(view, tasks, clock) for _ in range(ppo.n_envs)], ppo, seed)
    update = model.train

    def timed_update() -> None:
        start = time.process_time()
        update()
        clock.update += time.process_time() - start

    model.train = timed_update  # type: ignore[method-assign]
    warm(model.env.envs, tasks, clock)  # building the model and the warm-up are not part of the run
    start, wall_start = time.process_time(), time.perf_counter()
    model.learn(steps)
    cpu, wall = time.process_time() - start, time.perf_counter() - wall_start
    return row(view, "example" if ppo == EXAMPLE else "fast", asdict(ppo), int(model.num_timesteps), cpu, wall,
               clock)


def measure_grpo(config: FeaturesGRPOConfig, tasks: list[TaskSpec], steps: int, seed: int = 0) -> dict[str, Any]:
    """One row: the features-view GRPO learner from scratch, fixed seeds over ``tasks``, until the first whole
    step (B x G episodes) at or after ``steps`` env steps; its update time is the learner's own per-step log."""
    clock = Clock()
    envs = [timed_env("features", tasks, clock) for _ in range(config.n_envs)]
    learner = FeaturesGRPO("rods/ToolChain-Features-v0", FixedSeeds(tasks, seed), config, seed=seed, envs=envs)
    warm(envs, tasks, clock)
    start, wall_start = time.process_time(), time.perf_counter()
    learner.learn(steps)
    cpu, wall = time.process_time() - start, time.perf_counter() - wall_start
    clock.update = sum(r["update_s"] for r in learner.log)
    return row("features", "grpo", asdict(config), learner.num_timesteps, cpu, wall, clock)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=sorted(SCALES), default="smoke")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    steps, n_tasks = SCALES[args.scale]
    tasks = load_split("train")
    tasks = [tasks[int(i)] for i in np.linspace(0, len(tasks) - 1, n_tasks)]  # spread over the strata
    rows = []
    print(f"ppo_throughput ({args.scale}: {steps} env steps per row, {n_tasks} train tasks, 1 torch thread, "
          f"{platform.processor() or platform.machine()}, load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    print(f"  {'view':10s} {'settings':8s} {'steps/s':>8s} {'(wall)':>7s}   CPU us per step: {'env':>5s} {'update':>7s} "
          f"{'rollout':>8s}")
    runs = [(view, ppo) for view in ("structured", "features") for ppo in (EXAMPLE, FAST)] + [("features", GRPO)]
    for view, settings in runs:
        r = measure_grpo(settings, tasks, steps) if settings is GRPO else measure(view, settings, tasks, steps)
        rows.append(r)
        us = r["us_per_step"]
        print(f"  {view:10s} {r['settings']:8s} {r['steps_per_s']:8.0f} {r['steps_per_wall_s']:7.0f}   "
              f"{'':17s}{us['env']:5.0f} {us['update']:7.0f} {us['rollout_rest']:8.0f}", flush=True)
    base = rows[0]["steps_per_s"]
    ppo_rows = [r for r in rows if r["settings"] != "grpo"]
    best = max(ppo_rows, key=lambda r: r["steps_per_s"])
    verdict = "PASS" if best["steps_per_s"] >= TARGET else "MISS"
    print(f"  {verdict} >= {TARGET} env steps/s including learning, one core: MaskablePPO {best['view']} / "
          f"{best['settings']} {best['steps_per_s']:.0f} steps per CPU second ({best['steps_per_s'] / base:.1f}x the "
          f"structured view's {base:.0f} with the example's settings; load {os.getloadavg()[0]:.1f})")
    grpo, fast = rows[-1], next(r for r in rows if (r["view"], r["settings"]) == ("features", "fast"))
    verdict = "PASS" if grpo["steps_per_s"] >= TARGET else "MISS"
    print(f"  {verdict} >= {TARGET} env steps/s including learning, one core: GRPO (features, FeaturesGRPOConfig()) "
          f"{grpo['steps_per_s']:.0f} steps per CPU second, {grpo['steps_per_s'] / fast['steps_per_s']:.2f}x "
          f"MaskablePPO's fast features row in this run")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"scale": args.scale, "rows": rows, "load": os.getloadavg()[0]}, indent=1))
    return 0


if __name__ == "__main__":
    run_script(main)
