"""MaskablePPO on the features view: the batched vector env (rods_gym.features_vector through
rods_gym.trainer.sb3_vector) against the DummyVecEnv path the headline uses today, in the same run, and the
headline table's wall time extrapolated from the figures.

    python benchmarks/vector_throughput.py [--scale smoke|cpu] [--arms fixed,procedural] [--json OUT]

Paths (the headline's MaskablePPO settings, ``configs/ppo_regime.yaml``'s cpu scale: 8 envs x 256 steps, batch 512,
4 epochs, 128x128; G = 2, 32 tasks per batch, its env ``rods/ToolChain-Easy-Features-v0``; one torch thread):

- ``before``: ``DummyVecEnv`` of ``Monitor(CurriculumEnv(gym.make(env_id), schedule))`` as benchmarks/learners.py
  builds it, with the features renderer the incremental one replaced (tests/features_reference.py);
- ``dummy``: the same with today's renderer;
- ``vector``: ``VecMonitor(FeaturesVecEnv(gym.make_vec(env_id, num_envs=8, schedule=schedule)))``.

Per arm (its task source from the curricula registry, as the headline builds it) and path: env steps per CPU second
of the vector env alone (random masked actions through SB3's VecEnv interface, masks asked every step, the
ended episodes reported to the schedule: what MaskablePPO's rollout does but the policy) and of ``learn()``
(rollouts + updates); the paths alternate in rounds and each figure is the median over the rounds, the ratios
the median of the per-round ratios (same run, same load). Then one greedy evaluation of the headline's sets (all
400 test and 200 OOD tasks, 64 envs) with the last model, and the extrapolation of the headline's full table:
``runs x (budget / learn rate + points x evaluation seconds) / cores`` (10 seeds x 10 arms, 196,608 env steps,
8 evaluation points, 2 cores; each arm at the mean rate of the arms measured). Last, a cProfile of one rollout and
update on the vector path: where the time goes now. Times are the process's CPU time (``time.process_time``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

if __name__ == "__main__" and not __package__:  # run as a file: import the package, not its modules by name
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from benchmarks.env_throughput import reference_renderer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "rods/ToolChain-Easy-Features-v0"
PATHS = ("before", "dummy", "vector")
SCALES: dict[str, dict[str, Any]] = {
    # rollouts per timed learn() and per env-only pass, rounds; eval tasks per split (0: all)
    "smoke": {"rollouts": 1, "rounds": 1, "eval": {"test": 16, "ood": 8}, "ppo": {"n_envs": 4, "n_steps": 64,
                                                                                 "batch_size": 128, "n_epochs": 1}},
    "cpu": {"rollouts": 2, "rounds": 3, "eval": {"test": 0, "ood": 0}, "ppo": {}},
}
TABLE = {"seeds": 10, "arms": 10, "budget": 196_608, "points": 8, "cores": 2}
TARGET_MINUTES = 60


def ppo_settings(overrides: dict[str, Any]) -> dict[str, Any]:
    """The headline's MaskablePPO settings (configs/ppo_regime.yaml, cpu), with ``overrides``."""
    config = yaml.safe_load((ROOT / "benchmarks" / "configs" / "ppo_regime.yaml").read_text())
    return {**config["cpu"]["ppo"], **overrides}


def make_schedule(arm: str, seed: int) -> Any:
    from benchmarks.learners import make_source
    from rods_gym.curricula import TaskSchedule

    source = make_source(arm, seed, {"group_size": 2, "env_id": ENV_ID, "rods": {}})
    return TaskSchedule(source, tasks_per_batch=32, group_size=2), getattr(source, "env_id", None) or ENV_ID, \
        getattr(source, "env_kwargs", {})


def make_vec(path: str, arm: str, n_envs: int, seed: int) -> tuple[Any, Any]:
    """The VecEnv of ``path`` for ``arm`` (and its schedule), seeded."""
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

    from rods_gym.curricula import CurriculumEnv
    from rods_gym.trainer.sb3_vector import FeaturesVecEnv

    schedule, env_id, env_kwargs = make_schedule(arm, seed)
    if path == "vector":
        vec: Any = VecMonitor(FeaturesVecEnv(gym.make_vec(env_id, num_envs=n_envs, schedule=schedule, **env_kwargs)))
    else:
        monitors = [Monitor(CurriculumEnv(gym.make(env_id, **env_kwargs), schedule)) for _ in range(n_envs)]
        if path == "before":
            old = reference_renderer()
            for m in monitors:
                base = m.unwrapped
                base.renderer = old(base.suite, base.renderer.candidate_order)
        vec = DummyVecEnv([lambda m=m: m for m in monitors])
    vec.seed(seed)
    return vec, schedule


def env_rate(vec: Any, schedule: Any, steps: int, seed: int) -> float:
    """Env steps per CPU second of random masked actions through the VecEnv, masks every step, ended episodes
    reported to the schedule."""
    from sb3_contrib.common.maskable.utils import get_action_masks

    rng = np.random.default_rng(seed)
    vec.reset()
    n = vec.num_envs
    start = time.process_time()
    for _ in range(steps // n):
        masks = get_action_masks(vec)
        actions = np.argmax(rng.random(masks.shape) * masks, axis=1)  # uniform over the valid candidates
        _, _, _, infos = vec.step(actions)
        for info in infos:
            if "curriculum" in info:
                schedule.report_info(info["curriculum"])
    return (steps // n) * n / (time.process_time() - start)


def make_model(vec: Any, ppo: dict[str, Any], seed: int) -> Any:
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.logger import Logger

    model = MaskablePPO("MlpPolicy", vec, n_steps=ppo["n_steps"], batch_size=ppo["batch_size"],
                        n_epochs=ppo["n_epochs"], learning_rate=ppo["learning_rate"], gamma=ppo["gamma"],
                        ent_coef=ppo["ent_coef"], policy_kwargs={"net_arch": list(ppo["net_arch"])}, seed=seed,
                        device="cpu")
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def measure_arm(arm: str, scale: dict[str, Any], ppo: dict[str, Any], seed: int) -> dict[str, Any]:
    from rods_gym.trainer.sb3 import CurriculumCallback

    rollout = ppo["n_envs"] * ppo["n_steps"]
    steps = scale["rollouts"] * rollout
    runs: dict[str, Any] = {}
    for path in PATHS:
        vec, schedule = make_vec(path, arm, ppo["n_envs"], seed)
        model = make_model(vec, ppo, seed)
        callback = CurriculumCallback(schedule)
        model.learn(rollout, callback=callback)  # warm: every env reset, the first rollout and update done
        runs[path] = (vec, schedule, model, callback)
    rates: dict[str, list[float]] = {f"{p}_{k}": [] for p in PATHS for k in ("env", "learn")}
    for _ in range(scale["rounds"]):
        for path, (vec, schedule, model, callback) in runs.items():
            rates[f"{path}_env"].append(env_rate(vec, schedule, steps, seed))
            start = time.process_time()
            model.learn(steps, callback=callback, reset_num_timesteps=False)
            rates[f"{path}_learn"].append(steps / (time.process_time() - start))
    out: dict[str, Any] = {k: float(statistics.median(v)) for k, v in rates.items()}
    for kind in ("env", "learn"):
        for base in ("before", "dummy"):
            out[f"vector_over_{base}_{kind}"] = float(statistics.median(
                a / b for a, b in zip(rates[f"vector_{kind}"], rates[f"{base}_{kind}"])))
    out["model"] = runs["vector"][2]
    return out


def eval_seconds(model: Any, scale: dict[str, Any]) -> float:
    """CPU seconds of one greedy evaluation of the headline's sets (benchmarks/evaluator.py, 64 plain envs)."""
    from benchmarks.learners import eval_envs
    from benchmarks.evaluator import greedy_evaluate, split_tasks

    sets = split_tasks(scale["eval"])
    envs = eval_envs({"env_id": ENV_ID, "env_kwargs": {}}, sets)
    start = time.process_time()
    for tasks in sets.values():
        greedy_evaluate(lambda o, action_masks, deterministic: model.predict(o, action_masks=action_masks,
                                                                             deterministic=deterministic), envs, tasks)
    return time.process_time() - start


def profile(arm: str, ppo: dict[str, Any], seed: int, top: int = 25) -> str:
    """cProfile of one rollout + update on the vector path (after a warm one): the top functions by own time."""
    from rods_gym.trainer.sb3 import CurriculumCallback

    vec, schedule = make_vec("vector", arm, ppo["n_envs"], seed)
    model = make_model(vec, ppo, seed)
    callback = CurriculumCallback(schedule)
    model.learn(ppo["n_envs"] * ppo["n_steps"], callback=callback)
    prof = cProfile.Profile()
    prof.enable()
    model.learn(ppo["n_envs"] * ppo["n_steps"], callback=callback, reset_num_timesteps=False)
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def main() -> int:
    from benchmarks.provenance import provenance

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--scale", choices=sorted(SCALES), default="cpu")
    parser.add_argument("--arms", default="fixed,procedural", help="comma-separated headline arms to time")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    scale = SCALES[args.scale]
    ppo = ppo_settings(scale["ppo"])
    arms = [a for a in args.arms.split(",") if a]
    if reference_renderer() is None:
        raise ValueError("tests/features_reference.py is needed for the 'before' path (run from a checkout)")
    prov = provenance()
    print(f"vector_throughput ({args.scale}): {prov['date']}, {prov['machine']}, code {prov['code']}")
    print(f"  MaskablePPO {ppo}; G = 2, 32 tasks per batch; {ENV_ID}; CPU seconds of this process")
    results: dict[str, Any] = {"scale": args.scale, "ppo": ppo, "provenance": prov, "arms": {}}
    model = None
    for arm in arms:
        res = measure_arm(arm, scale, ppo, args.seed)
        model = res.pop("model")
        results["arms"][arm] = res
        print(f"  {arm:11s} env steps/s   before {res['before_env']:8,.0f}  dummy {res['dummy_env']:8,.0f}  "
              f"vector {res['vector_env']:8,.0f}  (vector/before {res['vector_over_before_env']:.2f}, "
              f"vector/dummy {res['vector_over_dummy_env']:.2f})")
        print(f"  {arm:11s} learn steps/s before {res['before_learn']:8,.0f}  dummy {res['dummy_learn']:8,.0f}  "
              f"vector {res['vector_learn']:8,.0f}  (vector/before {res['vector_over_before_learn']:.2f}, "
              f"vector/dummy {res['vector_over_dummy_learn']:.2f})", flush=True)
    results["eval_seconds"] = ev = eval_seconds(model, scale)
    print(f"  one greedy evaluation (test + ood, {scale['eval']}): {ev:.1f} CPU s")
    runs = TABLE["seeds"] * TABLE["arms"]
    table: dict[str, float] = {}
    for path in PATHS:
        rate = statistics.mean(results["arms"][a][f"{path}_learn"] for a in arms)
        table[path] = runs * (TABLE["budget"] / rate + TABLE["points"] * ev) / TABLE["cores"] / 60
    results["table_minutes"] = table
    print(f"  headline table ({TABLE['seeds']} seeds x {TABLE['arms']} arms x {TABLE['budget']:,} steps, "
          f"{TABLE['points']} evaluations, {TABLE['cores']} cores), extrapolated: " +
          ", ".join(f"{p} {m:.0f} min" for p, m in table.items()))
    ok = table["vector"] <= TARGET_MINUTES
    print(f"  {'PASS' if ok else 'MISS'} headline table <= {TARGET_MINUTES} min with the vector env "
          f"({table['vector']:.0f} min)")
    results["profile"] = profile(arms[0], ppo, args.seed)
    print("  where one vector-path rollout + update spends its time (cProfile, own time):")
    print("\n".join("    " + line for line in results["profile"].splitlines()[:45]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    from benchmarks._script import run_script

    run_script(main)
