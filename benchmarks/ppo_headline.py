"""The headline comparison with a learner that learns: MaskablePPO (sb3-contrib) from scratch on the
features view (``--env-id`` for another), one curriculum per arm, at equal env-step budgets (README, "Benchmarks").

    python benchmarks/ppo_headline.py --scale smoke          # CI: every arm, tiny, < 2 min
    python benchmarks/ppo_headline.py --scale short          # all arms x 5 seeds, 12,288 steps, ~12 min on 2 cores
    nice -n 5 python benchmarks/ppo_headline.py --scale cpu  # all 9 arms x 5 seeds, 196,608 steps, ~50 min on 2 cores
    python benchmarks/ppo_headline.py --scale gpu --jobs 16  # 10 seeds, 196,608 steps: a 16-core box (SCALES)
    python benchmarks/ppo_headline.py --scale cpu --report-only   # tables and plots from the runs on disk
    python benchmarks/ppo_headline.py --scale cpu --dev --arms rods --rods '{"synth_every": 1}' --out DIR
        # RODS knobs scored on the dev split only (dev_report.md), never on test

Arms (every one through ``CurriculumEnv`` + ``CurriculumCallback``: the task source picks each
batch's tasks, G episodes each, and observes the same returns PPO trained on, no extra episode):

    fixed         the train split's 400 seeds, in shuffled epochs
    rods          RODS: variance boundary -> signature-exact resampling -> replay pool
    augment       environment augmentation (the paper's baseline): the seeds in epochs, every episode in the
                  augmented env (rods/ToolChain-Aug-*), the task instance unchanged (no new samples)
    augment_redraw  augment plus the task's values redrawn on another world per episode (instance resampling)
    offline       uniform epochs over a set synthesized once up front (``rods synth``: 17,000 at cpu scale)
    procedural    a fresh, never-repeated sampler task for every group (the upper reference)
    replay_only   ablation: boundary-prioritized replay of the seeds, no synthesis
    naive         ablation: RODS with the structure-blind resampler
    rods_random   ablation: RODS with synthesis parents drawn at random instead of from the boundary
    rods_augment  both: RODS's task source, every episode in the augment env (does RODS add to augmentation?)

Protocol: the same PPO settings, G, tasks per batch and env-step budget for every arm (the budget is
a multiple of PPO's rollout size, so every arm stops at exactly the same step count); greedy
(``deterministic=True``) evaluation on the test and OOD splits (all 400 / 200 tasks at cpu scale) at
``len(eval_at)`` points of the budget, in the plain (not augmented) env; 95% bootstrap CIs over
seeds x tasks (``_de_stats.bootstrap_ci``). RODS's knobs are the library defaults scaled to the
batch (``rods_config``); none was tuned on test. On dev (``--dev``, RESULTS.md "Choosing RODS's knobs on
dev") only the group size mattered: ``--group-size 2`` is the dev-chosen setting, G = 8 (the paper's) the
scales' default. Per run, every observed group
is recorded (task, seed or not, mu, u = 4 var, silent, the RODS region at that appearance), so the
silent fraction over training, the distinct tasks trained on and the boundary-vs-rest variance ratio
come from the same groups PPO trained on.

Output (``--out``, default ``benchmarks/out/ppo_headline/SCALE``): ``runs/ARM/seedK.json`` (one per
run; reused when its job key matches, so an interrupted run resumes), ``offline/*.jsonl``,
``summary.json``, ``report.md`` (tables + PASS/MISS lines), ``plots/*.png``.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as _dt
import json
import multiprocessing
import os
import platform
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the helper modules next to this script
    sys.path.insert(0, str(HERE))

from _de_stats import (bootstrap_ci, difference_ci, group_records, late_silent_flags, region_variance,  # noqa: E402
                       rng_for, silent_windows)
from _ppo_view import SATURATION_PPO, PPOConfig  # noqa: E402
from _script import run_script  # noqa: E402

ARMS = ("fixed", "rods", "augment", "augment_redraw", "offline", "procedural", "replay_only", "naive", "rods_random",
        "rods_augment")
RODS_FAMILY = ("rods", "replay_only", "naive", "rods_random", "rods_augment")
SPLITS = ("test", "ood")
# the features view (issue 40a: rods_gym.renderers.features; Box observation, Discrete candidate actions);
# ``--env-id rods/ToolChain-Easy-Structured-v0`` is the structured view of examples/sb3_rods.py
DEFAULT_ENV_ID = "rods/ToolChain-Easy-Features-v0"
BOOT = {"samples": 2000, "seed": 0}
EVAL_ENVS = 64  # envs stepped in lockstep by the greedy evaluation (one batched predict per step)
TELEMETRY_KEYS = ("kappa", "variance_ratio", "boundary_fraction", "pool/active_seeds", "pool/active_synthetic",
                  "pool/staged", "pool/quarantined", "pool/archived", "pool/signature_classes",
                  "synth/staged_total", "admission/yield", "admission/admitted_total", "admission/dropped_total",
                  "admission/evicted_total")


# -- settings ------------------------------------------------------------------------------------
# MaskablePPO's knobs, the same for every arm (``_ppo_view.PPOConfig``, shared with ppo_throughput/ppo_regime)
HEADLINE_PPO = PPOConfig(n_envs=4, n_steps=256, batch_size=256, n_epochs=4, learning_rate=1e-3, gamma=0.95,
                         ent_coef=0.01, net_arch=(64, 64))


@dataclass(frozen=True)
class Scale:
    name: str
    seeds: tuple[int, ...]
    budget: int  # env steps per run (a multiple of ppo.rollout)
    n_points: int  # evaluation points, evenly spaced, the last at the budget
    eval_tasks: Mapping[str, int]  # split -> evenly spaced tasks (<= 0: all)
    offline_n: int  # size of the offline arm's synthesized set
    tasks_per_batch: int = 8
    group_size: int = 8
    ppo: PPOConfig = HEADLINE_PPO
    rods: Mapping[str, Any] = field(default_factory=dict)  # RODSConfig overrides

    def eval_at(self) -> list[int]:
        r = self.ppo.rollout
        if self.budget % r:
            raise ValueError(f"scale {self.name}: budget {self.budget} is not a multiple of PPO's rollout size {r}")
        chunks = self.budget // r
        if chunks < self.n_points:
            raise ValueError(f"scale {self.name}: {chunks} PPO rollouts cannot hold {self.n_points} evaluation points")
        return [r * round(chunks * (i + 1) / self.n_points) for i in range(self.n_points)]


SCALES: dict[str, Scale] = {
    "smoke": Scale("smoke", seeds=(0,), budget=2048, n_points=2, eval_tasks={"test": 12, "ood": 6}, offline_n=48,
                   tasks_per_batch=4, group_size=4, ppo=replace(HEADLINE_PPO, n_steps=128),
                   rods={"calibration_groups": 8, "synth_every": 2, "parents_per_round": 4}),
    # a short budget (~12 min on 2 cores): fewer groups than seeds, so the fixed set is not yet the limit
    "short": Scale("short", seeds=(0, 1, 2, 3, 4), budget=12_288, n_points=5, eval_tasks={"test": 0, "ood": 0},
                   offline_n=17_000),
    # 40a's saturation regime, where fixed-400 is the limit (benchmarks/ppo_regime.py: train 0.83 vs test 0.43 at
    # 196,608 steps; procedural 0.57 on test), all 9 arms x 5 seeds in ~50 min on the 2-core CPU (--jobs 2)
    "cpu": Scale("cpu", seeds=(0, 1, 2, 3, 4), budget=196_608, n_points=8, eval_tasks={"test": 0, "ood": 0},
                 offline_n=17_000, ppo=SATURATION_PPO),
    # the same with 10 seeds on a many-core box (the learner is a small MLP: a GPU does not help it): --jobs 16
    "gpu": Scale("gpu", seeds=tuple(range(10)), budget=196_608, n_points=8, eval_tasks={"test": 0, "ood": 0},
                 offline_n=17_000, ppo=SATURATION_PPO),
}


def rods_config(scale: Scale) -> Any:
    from rods_gym.curricula import RODSConfig

    return RODSConfig.from_dict({"group_size": scale.group_size, **dict(scale.rods)})


# -- the task sources ----------------------------------------------------------------------------
class RecordingSource:
    """A task source that records every group it observes (and its telemetry), otherwise ``inner``."""

    def __init__(self, inner: Any, seed_ids: Sequence[str]) -> None:
        self.inner = inner
        self.name = inner.name
        self.config = getattr(inner, "config", None)
        self.seed_ids = frozenset(seed_ids)
        self.groups: list[dict[str, Any]] = []
        self.telemetry_log: list[dict[str, float]] = []
        self.batches = 0

    def next_batch(self, step: int, n_tasks: int) -> list[Any]:
        self.batches += 1
        return self.inner.next_batch(step, n_tasks)

    def observe(self, step: int, groups: Sequence[Any]) -> None:
        self.groups.extend(group_records(step, groups, self.inner, self.seed_ids))
        self.inner.observe(step, groups)
        tel = self.inner.telemetry()
        self.telemetry_log.append({"step": int(step), **{k: float(tel[k]) for k in TELEMETRY_KEYS if k in tel}})

    def telemetry(self) -> dict[str, float]:
        return self.inner.telemetry()

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)

    @property
    def distinct_tasks(self) -> int:
        return len({g["task"] for g in self.groups})

    @property
    def episodes_observed(self) -> int:
        return sum(g["size"] for g in self.groups)


def make_source(arm: str, seed: int, scale: Scale, offline_path: Path | None, env_id: str = DEFAULT_ENV_ID) -> Any:
    """The task source of ``arm`` for run ``seed`` (the seeds: the train split), from the curricula registry."""
    from rods_gym import load_split
    from rods_gym.curricula import make_source as arm_source
    from rods_gym.curricula.registry import SYNTHESIS_FIELDS

    options: dict[str, Any] = {}
    if arm == "offline":
        if offline_path is None:
            raise ValueError("the offline arm needs its synthesized task file")
        options = {"path": str(offline_path)}
    elif arm in RODS_FAMILY:  # the scale's RODSConfig overrides (the replay-only ablation takes no synthesis knobs)
        options = {k: v for k, v in scale.rods.items() if arm != "replay_only" or k not in SYNTHESIS_FIELDS}
    return arm_source(arm, load_split("train"), seed=seed, group_size=scale.group_size, env_id=env_id,
                      options=options)


def offline_set(out: Path, n: int, seed: int = 0) -> Path:
    """The offline arm's task set: ``rods synth --seeds train --n N --seed SEED`` (cached)."""
    from rods_gym import load_split
    from rods_gym.synth import synthesize
    from rods_gym.task import write_jsonl
    from rods_gym.synth import make_resampler

    path = out / "offline" / f"synth-train-n{n}-seed{seed}.jsonl"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        tasks = synthesize(load_split("train"), n, make_resampler(), seed=seed)
        write_jsonl(tasks, path.with_suffix(".tmp"))
        path.with_suffix(".tmp").rename(path)
        print(f"offline set: {len(tasks)} tasks synthesized in {time.perf_counter() - t0:.0f} s -> {path}", flush=True)
    return path


# -- environments and evaluation -----------------------------------------------------------------
def eval_tasks(scale: Scale) -> dict[str, list[Any]]:
    """Evenly spaced tasks of each split (all of them when the scale asks for <= 0)."""
    from rods_gym import load_split

    out = {}
    for split, k in scale.eval_tasks.items():  # test and ood; dev alone under --dev
        tasks = load_split(split)
        if 0 < k < len(tasks):
            tasks = [tasks[int(i)] for i in np.linspace(0, len(tasks) - 1, k).round().astype(int)]
        out[split] = tasks
    return out


Predict = Callable[..., Any]


def greedy_evaluate(predict: Predict, envs: Sequence[Any], tasks: Sequence[Any], seed: int = 10_000
                    ) -> dict[str, list]:
    """One greedy episode per task. The ``envs`` (reused across calls; any number) run tasks in order, each
    taking the next task when its episode ends, and their observations are batched into one
    ``predict(obs, action_masks=..., deterministic=True)`` call per step (``MaskablePPO.predict``).
    Task ``i`` is reset with seed ``seed + i``. Returns per task: id, success, final progress."""
    if not envs:
        raise ValueError("greedy_evaluate needs at least one env")
    success = [False] * len(tasks)
    progress = [0.0] * len(tasks)
    running: dict[int, tuple[int, Any]] = {}  # env index -> (task index, observation)
    next_task = 0

    def start(e: int) -> None:
        nonlocal next_task
        if next_task < len(tasks):
            o, _ = envs[e].reset(seed=seed + next_task, options={"task": tasks[next_task]})
            running[e] = (next_task, o)
            next_task += 1

    for e in range(len(envs)):
        start(e)
    while running:
        live = sorted(running)
        batch = stack_obs([running[e][1] for e in live])
        masks = np.stack([envs[e].unwrapped.action_masks() for e in live])
        actions, _ = predict(batch, action_masks=masks, deterministic=True)
        for j, e in enumerate(live):
            i = running[e][0]
            o, _, term, trunc, info = envs[e].step(actions[j])
            if term or trunc:
                success[i], progress[i] = bool(info.get("success", False)), float(info.get("progress", 0.0))
                del running[e]
                start(e)
            else:
                running[e] = (i, o)
    return {"ids": [t.id for t in tasks], "success": success, "progress": progress}


def stack_obs(obs: Sequence[Any]) -> Any:
    """A batch of observations: stacked per key for ``Dict`` spaces, stacked arrays otherwise."""
    if isinstance(obs[0], Mapping):
        return {k: np.stack([o[k] for o in obs]) for k in obs[0]}
    return np.stack(obs)


def action_dims(space: Any) -> list[int]:
    """The sizes of an action space's dimensions: ``MultiDiscrete``'s nvec, or ``[n]`` for ``Discrete``."""
    return [int(n) for n in space.nvec] if hasattr(space, "nvec") else [int(space.n)]


def random_masked_predict(seed: int, nvec: Sequence[int]) -> Predict:
    """A random agent that takes only valid actions (uniform per action dimension), as a ``predict``."""
    rng = np.random.default_rng(seed)

    def predict(obs: Mapping[str, np.ndarray], action_masks: np.ndarray, deterministic: bool = True) -> Any:
        acts = np.array([_random_action(m, nvec, rng) for m in action_masks])
        return (acts if len(nvec) > 1 else acts[:, 0]), None

    return predict


def _random_action(mask: np.ndarray, nvec: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    out, start = [], 0
    for n in nvec:
        valid = np.flatnonzero(mask[start:start + int(n)])
        out.append(int(rng.choice(valid)) if valid.size else 0)  # a dimension the action type does not use
        start += int(n)
    return np.array(out)


# -- one run -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    arm: str
    seed: int
    scale: Scale
    env_id: str
    env_kwargs: Mapping[str, Any]
    out: str  # the run's JSON file
    offline_path: str | None = None

    def key(self) -> str:
        return json.dumps({"arm": self.arm, "seed": self.seed, "scale": asdict(self.scale), "env_id": self.env_id,
                           "env_kwargs": dict(self.env_kwargs), "offline": self.offline_path}, sort_keys=True,
                          default=str)


def run_job(job: Job) -> dict[str, Any]:
    """Train one arm x seed to the budget, evaluating at every point; write and return its record."""
    import gymnasium as gym
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    import rods_gym  # noqa: F401  (registers the env ids)
    from rods_gym import load_split
    from rods_gym.curricula import CurriculumEnv, TaskSchedule
    from rods_gym.trainer.sb3 import CurriculumCallback

    path = Path(job.out)
    if path.exists():
        done = json.loads(path.read_text())
        if done.get("key") == job.key():
            return done
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    scale, ppo = job.scale, job.scale.ppo
    offline = Path(job.offline_path) if job.offline_path else None
    inner = make_source(job.arm, job.seed, scale, offline, job.env_id)
    source = RecordingSource(inner, [t.id for t in load_split("train")])
    schedule = TaskSchedule(source, tasks_per_batch=scale.tasks_per_batch, group_size=scale.group_size)
    env_id = getattr(inner, "env_id", None) or job.env_id  # the augmented arms' twin env, else the plain one
    train_kwargs = {**getattr(inner, "env_kwargs", {}), **job.env_kwargs}
    monitors = [Monitor(CurriculumEnv(gym.make(env_id, **train_kwargs), schedule)) for _ in range(ppo.n_envs)]
    vec = DummyVecEnv([lambda m=m: m for m in monitors])
    vec.seed(job.seed)
    policy = "MultiInputPolicy" if isinstance(vec.observation_space, gym.spaces.Dict) else "MlpPolicy"
    model = MaskablePPO(policy, vec, n_steps=ppo.n_steps, batch_size=ppo.batch_size,
                        n_epochs=ppo.n_epochs, learning_rate=ppo.learning_rate, gamma=ppo.gamma,
                        ent_coef=ppo.ent_coef, policy_kwargs={"net_arch": list(ppo.net_arch)}, seed=job.seed,
                        device="cpu")
    model.set_logger(Logger(folder=None, output_formats=[]))
    callback = CurriculumCallback(schedule)
    sets = eval_tasks(scale)
    eval_envs = [gym.make(job.env_id, **job.env_kwargs)
                 for _ in range(min(EVAL_ENVS, max(len(ts) for ts in sets.values())))]
    predict_calls: list[bool] = []

    def predict(obs: Any, action_masks: Any, deterministic: bool) -> Any:
        predict_calls.append(bool(deterministic))
        return model.predict(obs, action_masks=action_masks, deterministic=deterministic)

    points, train_s, eval_s = [], 0.0, 0.0
    for target in scale.eval_at():
        t0 = time.perf_counter()
        model.learn(target - model.num_timesteps, callback=callback, reset_num_timesteps=False)
        train_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        ev = {s: greedy_evaluate(predict, eval_envs, ts) for s, ts in sets.items()}
        eval_s += time.perf_counter() - t0
        points.append({"env_steps": int(model.num_timesteps), "episodes": callback.episodes,
                       "distinct_tasks": source.distinct_tasks, "groups": len(source.groups),
                       "eval": {s: {"success": e["success"], "progress": e["progress"]} for s, e in ev.items()}})
    pending = int(callback.episodes) - int(source.episodes_observed)  # finished, in a batch not yet complete
    record = {
        "key": job.key(), "arm": job.arm, "seed": job.seed, "env_id": env_id, "eval_env_id": job.env_id,
        "tasks": {s: [t.id for t in ts] for s, ts in sets.items()},
        "points": points, "groups": source.groups, "telemetry": source.telemetry_log,
        "steps": int(callback.observed_batches),  # curriculum steps (batches) observed
        "batches_handed_out": int(source.batches),
        "env_steps": int(model.num_timesteps), "episodes_callback": int(callback.episodes),
        "episodes_run": int(sum(len(m.get_episode_rewards()) for m in monitors)),
        "episodes_observed": int(source.episodes_observed), "episodes_pending": int(pending),
        "eval_deterministic": bool(predict_calls) and all(predict_calls), "predict_calls": len(predict_calls),
        "distinct_tasks": source.distinct_tasks, "offline_set_size": len(source.inner.tasks) if job.arm == "offline"
        else None, "train_seconds": train_s, "eval_seconds": eval_s,
        "seconds": time.perf_counter() - t_start,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return record


def random_baseline(scale: Scale, env_id: str, env_kwargs: Mapping[str, Any], seeds: Sequence[int]) -> dict[str, Any]:
    """The random masked agent on the evaluation tasks, one pass per seed."""
    import gymnasium as gym

    import rods_gym  # noqa: F401

    sets = eval_tasks(scale)
    out: dict[str, Any] = {"tasks": {s: [t.id for t in ts] for s, ts in sets.items()}, "eval": {}}
    for s, ts in sets.items():
        envs = [gym.make(env_id, **env_kwargs) for _ in range(min(EVAL_ENVS, len(ts)))]
        nvec = action_dims(envs[0].action_space)
        out["eval"][s] = [greedy_evaluate(random_masked_predict(k, nvec), envs, ts) for k in seeds]
    return out


def _worker_init() -> None:
    try:
        os.nice(5)
    except OSError:
        pass
    os.environ.setdefault("OMP_NUM_THREADS", "1")


# -- summary -------------------------------------------------------------------------------------
def task_meta(scale: Scale) -> dict[str, dict[str, list]]:
    """Depth and turn type of every evaluation task, per split, in evaluation order."""
    sets = eval_tasks(scale)
    return {s: {"depth": [int(t.meta["knobs"]["depth"]) for t in ts], "stratum": [t.meta.get("stratum") for t in ts]}
            for s, ts in sets.items()}


def _ci(matrix: np.ndarray, label: str) -> dict[str, float]:
    return bootstrap_ci(matrix, rng_for(BOOT["seed"], label), BOOT["samples"])


def summarize(runs: Mapping[str, Mapping[int, Mapping[str, Any]]], meta: Mapping[str, Mapping[str, list]],
              baseline: Mapping[str, Any] | None) -> dict[str, Any]:
    arms: dict[str, Any] = {}
    for arm, by_seed in runs.items():
        if not by_seed:
            continue
        seeds = sorted(by_seed)
        n_points = min(len(by_seed[s]["points"]) for s in seeds)
        curve = []
        for i in range(n_points):
            pts = [by_seed[s]["points"][i] for s in seeds]
            p: dict[str, Any] = {"env_steps": float(np.mean([q["env_steps"] for q in pts])),
                                 "distinct_tasks": float(np.mean([q["distinct_tasks"] for q in pts]))}
            for split in SPLITS:
                p[split] = {k: _ci(np.array([q["eval"][split][k] for q in pts], dtype=np.float64),
                                   f"{arm}/{i}/{split}/{k}") for k in ("success", "progress")}
            curve.append(p)
        final = [by_seed[s]["points"][n_points - 1] for s in seeds]
        breakdown: dict[str, Any] = {}
        for split in SPLITS:
            m = np.array([q["eval"][split]["success"] for q in final], dtype=np.float64)
            for kind in ("depth", "stratum"):
                cells = sorted(set(meta[split][kind]), key=str)
                breakdown[f"{split}/{kind}"] = {
                    str(c): {**_ci(m[:, [j for j, v in enumerate(meta[split][kind]) if v == c]],
                                   f"{arm}/{split}/{kind}/{c}"),
                             "n": meta[split][kind].count(c)} for c in cells}
        entry: dict[str, Any] = {
            "seeds": seeds, "curve": curve, "final": curve[-1], "breakdown": breakdown,
            "env_steps": [int(by_seed[s]["env_steps"]) for s in seeds],
            "distinct_tasks": float(np.mean([by_seed[s]["distinct_tasks"] for s in seeds])),
            "silent_windows": silent_windows(by_seed), "silent_late": late_silent_flags(by_seed),
            "silent_fraction": float(np.mean([g["silent"] for s in seeds for g in by_seed[s]["groups"]])),
            "seed_task_share": float(np.mean([g["seed_task"] for s in seeds for g in by_seed[s]["groups"]])),
            "seconds": float(np.mean([by_seed[s]["seconds"] for s in seeds])),
            "train_seconds": float(np.mean([by_seed[s]["train_seconds"] for s in seeds])),
            "eval_seconds": float(np.mean([by_seed[s]["eval_seconds"] for s in seeds])),
        }
        offline_sizes = [by_seed[s].get("offline_set_size") for s in seeds if by_seed[s].get("offline_set_size")]
        if offline_sizes:
            entry["offline_set_size"] = int(offline_sizes[0])
        entry["profile"] = {k: group_profile(by_seed, k) for k in ("depth", "stratum")}
        if arm in RODS_FAMILY:
            entry["region_variance"] = region_variance(by_seed, BOOT, arm)
            entry["regions"] = _region_shares(by_seed)
            entry["pool_end"] = _mean_last_telemetry(by_seed)
        arms[arm] = entry
    summary: dict[str, Any] = {"arms": arms, "tasks": {s: len(meta[s]["depth"]) for s in SPLITS}}
    if baseline is not None:
        summary["random"] = {s: _ci(np.array([e["success"] for e in baseline["eval"][s]], dtype=np.float64),
                                    f"random/{s}") for s in SPLITS}
    summary["targets"] = check_targets(arms)
    summary["differences"] = {f"{a} - {b}": curve_differences(runs, a, b) for a in ("rods", "naive", "rods_augment")
                              for b in ("fixed", "augment", "offline", "procedural") if a in runs and b in runs}
    return summary


def curve_differences(runs: Mapping[str, Mapping[int, Mapping[str, Any]]], a: str, b: str, split: str = "test"
                      ) -> list[dict[str, float]]:
    """At every evaluation point, success(a) - success(b) with a 95% bootstrap interval: seeds of each arm
    drawn with replacement on their own, evaluation tasks drawn once for both (they share the tasks)."""
    if a not in runs or b not in runs:
        return []
    n_points = min(len(r["points"]) for arm in (a, b) for r in runs[arm].values())
    rng = rng_for(BOOT["seed"], f"diff/{a}/{b}/{split}")
    out = []
    for i in range(n_points):
        ma, mb = (np.array([r["points"][i]["eval"][split]["success"] for r in runs[arm].values()], dtype=np.float64)
                  for arm in (a, b))
        k = BOOT["samples"]
        ti = rng.integers(0, ma.shape[1], size=(k, ma.shape[1]))
        sa = rng.integers(0, ma.shape[0], size=(k, ma.shape[0]))
        sb = rng.integers(0, mb.shape[0], size=(k, mb.shape[0]))
        d = ma[sa[:, :, None], ti[:, None, :]].mean(axis=(1, 2)) - mb[sb[:, :, None], ti[:, None, :]].mean(axis=(1, 2))
        lo, hi = np.quantile(d, [0.025, 0.975])
        steps = float(np.mean([r["points"][i]["env_steps"] for r in runs[a].values()]))
        out.append({"env_steps": steps, "diff": float(ma.mean() - mb.mean()), "lo": float(lo), "hi": float(hi)})
    return out


def _region_shares(by_seed: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """Share of groups per region, and of the boundary groups that are seeds, first vs second half."""
    out: dict[str, Any] = {}
    for half in ("first", "second"):
        gs = [g for r in by_seed.values() for g in r["groups"]
              if (2 * int(g["step"]) >= int(r["steps"])) == (half == "second") and g["region"] is not None]
        n = max(1, len(gs))
        out[half] = {reg: sum(g["region"] == reg for g in gs) / n for reg in ("boundary", "plateau", "mastered", "hard")}
        b = [g for g in gs if g["region"] == "boundary"]
        out[half]["boundary_seed_share"] = float(np.mean([g["seed_task"] for g in b])) if b else float("nan")
        out[half]["mu_mean"] = float(np.mean([g["mu"] for g in gs])) if gs else float("nan")
    return out


def root_id(task_id: str) -> str:
    """The seed a task descends from: synthetic ids are ``ROOT~HASH`` (possibly repeated)."""
    return task_id.split("~", 1)[0]


def group_profile(by_seed: Mapping[int, Mapping[str, Any]], kind: str) -> dict[str, dict[str, float]]:
    """Per depth or turn type (``kind``) of each group's root seed (train split; other tasks: "other"): the
    share of all groups, of the boundary groups, mean mu, and the silent fraction in the second half."""
    from rods_gym import load_split

    meta = {t.id: (str(t.meta["knobs"]["depth"]) if kind == "depth" else str(t.meta.get("stratum")))
            for t in load_split("train")}
    groups = [(g, 2 * int(g["step"]) >= int(r["steps"])) for r in by_seed.values() for g in r["groups"]]
    cell = [meta.get(root_id(g["task"]), "other") for g, _ in groups]
    n_all = max(1, len(groups))
    n_b = max(1, sum(g["region"] == "boundary" for g, _ in groups))
    out = {}
    for c in sorted(set(cell)):
        mine = [(g, late) for (g, late), k in zip(groups, cell) if k == c]
        late = [g["silent"] for g, lt in mine if lt]
        out[c] = {"groups": len(mine) / n_all, "boundary": sum(g["region"] == "boundary" for g, _ in mine) / n_b,
                  "mu": float(np.mean([g["mu"] for g, _ in mine])),
                  "silent_late": float(np.mean(late)) if late else float("nan")}
    return out


def _mean_last_telemetry(by_seed: Mapping[int, Mapping[str, Any]]) -> dict[str, float]:
    lasts = [r["telemetry"][-1] for r in by_seed.values() if r["telemetry"]]
    keys = sorted({k for t in lasts for k in t if k != "step"})
    return {k: float(np.mean([t[k] for t in lasts if k in t])) for k in keys}


def check_targets(arms: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The targets of issue 40, each with passed True / False (None: not measured) and a detail line.

    ``arms[a]`` needs ``final.test.success`` ({mean, lo, hi}) and ``distinct_tasks``; "offline" also
    ``offline_set_size``; "rods" ``region_variance.ratio.ratio`` and ``silent_late`` (flags of the second
    half's groups), as "fixed" does."""
    out: list[dict[str, Any]] = []
    rods = arms.get("rods")
    for other in ("fixed", "augment"):
        t: dict[str, Any] = {"name": f"RODS > {other} on test success, disjoint 95% CIs"}
        if rods and other in arms:
            a, b = rods["final"]["test"]["success"], arms[other]["final"]["test"]["success"]
            t["passed"] = bool(a["lo"] > b["hi"])
            t["detail"] = (f"RODS {a['mean']:.3f} [{a['lo']:.3f}, {a['hi']:.3f}] vs {other} {b['mean']:.3f} "
                           f"[{b['lo']:.3f}, {b['hi']:.3f}]; CI gap {a['lo'] - b['hi']:+.3f} (needs > 0)")
        else:
            t.update(passed=None, detail=f"not measured (needs the rods and {other} arms)")
        out.append(t)
    t = {"name": "RODS >= offline on test success with <= 1/20 of its distinct tasks"}
    off = arms.get("offline")
    if rods and off:
        a, b = rods["final"]["test"]["success"], off["final"]["test"]["success"]
        size = off.get("offline_set_size") or off["distinct_tasks"]
        frac = rods["distinct_tasks"] / size if size else float("nan")
        t["passed"] = bool(a["mean"] >= b["mean"] and frac <= 1 / 20)
        t["detail"] = (f"RODS {a['mean']:.3f} [{a['lo']:.3f}, {a['hi']:.3f}] vs offline {b['mean']:.3f} "
                       f"[{b['lo']:.3f}, {b['hi']:.3f}]; RODS trained on {rods['distinct_tasks']:.0f} distinct tasks = "
                       f"{frac:.3f} of the offline set's {size} (needs <= 0.050; offline itself trained on "
                       f"{off['distinct_tasks']:.0f})")
    else:
        t.update(passed=None, detail="not measured (needs the rods and offline arms)")
    out.append(t)
    t = {"name": "boundary-vs-rest variance ratio >= 2 (RODS)"}
    rv = rods.get("region_variance") if rods else None
    if rv is not None and np.isfinite(rv["ratio"]["ratio"]):
        r = rv["ratio"]
        t["passed"] = bool(r["ratio"] >= 2.0)
        t["detail"] = (f"ratio {r['ratio']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}] over {r.get('n_boundary', '?')} "
                       f"boundary and {r.get('n_rest', '?')} other groups")
        ahead = rv.get("ratio_next_appearance")
        if ahead is not None and np.isfinite(ahead["ratio"]):
            t["detail"] += f"; one appearance ahead {ahead['ratio']:.2f} [{ahead['lo']:.2f}, {ahead['hi']:.2f}]"
    else:
        t.update(passed=None, detail="not measured (needs rods groups in and out of the boundary)")
    out.append(t)
    t = {"name": "silent-group fraction lower under RODS than fixed in the second half"}
    if rods and "fixed" in arms and rods["silent_late"] and arms["fixed"]["silent_late"]:
        lr, lf = float(np.mean(rods["silent_late"])), float(np.mean(arms["fixed"]["silent_late"]))
        d = difference_ci(rods["silent_late"], arms["fixed"]["silent_late"], rng_for(BOOT["seed"], "silent_late"),
                          BOOT["samples"])
        t["passed"] = bool(lr < lf)
        t["detail"] = (f"RODS {lr:.3f} vs fixed {lf:.3f} (difference {d['diff']:+.3f}, 95% CI over groups "
                       f"[{d['lo']:+.3f}, {d['hi']:+.3f}])")
    else:
        t.update(passed=None, detail="not measured (needs the rods and fixed arms)")
    out.append(t)
    return out


def verdict(t: Mapping[str, Any]) -> str:
    return {True: "PASS", False: "MISS", None: "N/A"}[t["passed"]]


# -- report --------------------------------------------------------------------------------------
def _fmt(ci: Mapping[str, float]) -> str:
    return f"{ci['mean']:.3f} [{ci['lo']:.3f}, {ci['hi']:.3f}]"


def report(summary: Mapping[str, Any], setup: Mapping[str, Any]) -> str:
    arms = summary["arms"]
    lines = [f"### PPO headline ({setup['scale']} scale)", "",
             f"Command: `{setup['command']}`  ", f"Date: {setup['date']}; machine: {setup['machine']}; "
             f"wall time {setup['wall_seconds'] / 60:.1f} min; code {setup.get('code', '?')}", "",
             f"MaskablePPO from scratch on `{setup['env_id']}` {setup['env_kwargs'] or ''}; "
             f"{setup['budget']:,} env steps per run; {len(setup['seeds'])} seeds per arm; G={setup['group_size']}, "
             f"{setup['tasks_per_batch']} tasks per batch; greedy success on {summary['tasks']['test']} test and "
             f"{summary['tasks']['ood']} OOD tasks, mean [95% CI over seeds x tasks].", "",
             "| arm | test success | OOD success | test progress | distinct tasks | silent (all / 2nd half) | env steps |",
             "|---|---|---|---|---|---|---|"]
    if "random" in summary:
        r = summary["random"]
        lines.append(f"| random masked agent | {_fmt(r['test'])} | {_fmt(r['ood'])} | | 0 | | 0 |")
    for arm, e in arms.items():
        f = e["final"]
        late = float(np.mean(e["silent_late"])) if e["silent_late"] else float("nan")
        steps = sorted(set(e["env_steps"]))
        lines.append(f"| {arm} | {_fmt(f['test']['success'])} | {_fmt(f['ood']['success'])} | "
                     f"{f['test']['progress']['mean']:.3f} | {e['distinct_tasks']:.0f} | "
                     f"{e['silent_fraction']:.3f} / {late:.3f} | {', '.join(f'{s:,}' for s in steps)} |")
    lines += ["", "Targets:", ""]
    lines += [f"- **{verdict(t)}** {t['name']}: {t['detail']}" for t in summary["targets"]]
    diffs = summary.get("differences", {})
    if diffs:
        first = next(iter(diffs.values()))
        lines += ["", "Test success differences along the budget, mean [95% CI] (not a target: the targets are "
                  "checked at the final point):", "",
                  "| pair | " + " | ".join(f"{int(p['env_steps']):,}" for p in first) + " |",
                  "|---|" + "---|" * len(first)]
        for pair, ds in diffs.items():
            lines.append(f"| {pair} | " + " | ".join(f"{d['diff']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"
                                                     for d in ds) + " |")
    for split in SPLITS:
        for kind in ("depth", "stratum"):
            any_arm = next(iter(arms.values()))
            cells = list(any_arm["breakdown"][f"{split}/{kind}"])
            ns = [any_arm["breakdown"][f"{split}/{kind}"][c]["n"] for c in cells]
            lines += ["", f"{split} success by {'depth' if kind == 'depth' else 'turn type'} (final point):", "",
                      "| arm | " + " | ".join(f"{c} (n={n})" for c, n in zip(cells, ns)) + " |",
                      "|---|" + "---|" * len(cells)]
            for arm, e in arms.items():
                b = e["breakdown"][f"{split}/{kind}"]
                lines.append(f"| {arm} | " + " | ".join(f"{b[c]['mean']:.3f} [{b[c]['lo']:.2f}, {b[c]['hi']:.2f}]"
                                                         for c in cells) + " |")
    lines += ["", "Test success along the budget (mean over seeds; distinct tasks in parentheses):", "",
              "| arm | " + " | ".join(f"{int(p['env_steps']):,}" for p in next(iter(arms.values()))["curve"]) + " |",
              "|---|" + "---|" * len(next(iter(arms.values()))["curve"])]
    for arm, e in arms.items():
        lines.append(f"| {arm} | " + " | ".join(f"{p['test']['success']['mean']:.3f} ({p['distinct_tasks']:.0f})"
                                                 for p in e["curve"]) + " |")
    lines += ["", "Silent-group fraction per quarter of training:", "", "| arm | Q1 | Q2 | Q3 | Q4 |", "|---|---|---|---|---|"]
    for arm, e in arms.items():
        lines.append(f"| {arm} | " + " | ".join(f"{x:.3f}" for x in e["silent_windows"]) + " |")
    fam = [a for a in arms if a in RODS_FAMILY]
    if fam:
        lines += ["", "RODS family: regions (share of groups, first / second half), boundary groups that are seeds, "
                  "pool at the end (mean over seeds):", "",
                  "| arm | boundary | mastered | hard | plateau | boundary seeds | active seeds / synthetic | staged "
                  "total (admitted / dropped / evicted) | kappa | variance ratio (same / next appearance) |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for arm in fam:
            e, rg = arms[arm], arms[arm]["regions"]
            pe = e["pool_end"]
            two = lambda k: f"{rg['first'][k]:.2f} / {rg['second'][k]:.2f}"  # noqa: E731
            ratio = e["region_variance"]["ratio"]
            lines.append(f"| {arm} | {two('boundary')} | {two('mastered')} | {two('hard')} | {two('plateau')} | "
                         f"{two('boundary_seed_share')} | {pe.get('pool/active_seeds', float('nan')):.0f} / "
                         f"{pe.get('pool/active_synthetic', float('nan')):.0f} | "
                         f"{pe.get('synth/staged_total', 0):.0f} ({pe.get('admission/admitted_total', 0):.0f} / "
                         f"{pe.get('admission/dropped_total', 0):.0f} / {pe.get('admission/evicted_total', 0):.0f}) | "
                         f"{pe.get('kappa', float('nan')):.3f} | {ratio['ratio']:.2f} / "
                         f"{e['region_variance']['ratio_next_appearance']['ratio']:.2f} |")
    for kind in ("depth", "stratum"):
        cells = sorted({c for e in arms.values() for c in e["profile"][kind]})
        lines += ["", f"Training groups by the {'depth' if kind == 'depth' else 'turn type'} of their root seed: share of "
                  "groups / share of boundary groups (RODS family) / mean mu / silent fraction in the second half:", "",
                  "| arm | " + " | ".join(cells) + " |", "|---|" + "---|" * len(cells)]
        for arm, e in arms.items():
            pr = e["profile"][kind]
            cell = lambda c: ("" if c not in pr else f"{pr[c]['groups']:.2f} / "  # noqa: E731
                              + (f"{pr[c]['boundary']:.2f}" if arm in RODS_FAMILY else "-")
                              + f" / {pr[c]['mu']:.2f} / {pr[c]['silent_late']:.2f}")
            lines.append(f"| {arm} | " + " | ".join(cell(c) for c in cells) + " |")
    lines += ["", "Time per run (mean): " + ", ".join(f"{a} {e['seconds']:.0f} s (eval {e['eval_seconds']:.0f} s)"
                                                   for a, e in arms.items()), ""]
    return "\n".join(lines)


def plots(summary: Mapping[str, Any], out: Path) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from _de_plots import success_curves

    out.mkdir(parents=True, exist_ok=True)
    files = {"success_vs_env_steps": str(success_curves(summary, out / "success_vs_env_steps.png", x="env_steps",
                                                        xlabel="env steps")),
             "success_vs_distinct_tasks": str(success_curves(summary, out / "success_vs_distinct_tasks.png",
                                                             x="distinct_tasks", xlabel="distinct tasks trained on"))}
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for arm, e in summary["arms"].items():
        w = e["silent_windows"]
        ax.plot(range(1, len(w) + 1), w, marker="o", label=arm)
    ax.set_xlabel("quarter of training")
    ax.set_ylabel("silent (zero-variance) group fraction")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "silent_fraction.png", dpi=110)
    plt.close(fig)
    files["silent_fraction"] = str(out / "silent_fraction.png")
    return files


def dev_report(runs: Mapping[str, Mapping[int, Mapping[str, Any]]], scale: Scale, command: str, code: str) -> str:
    """``--dev``: final greedy success on the dev split per arm (95% CI over seeds x tasks), for choosing knobs."""
    lines = [f"# PPO headline, dev split only ({scale.name} scale, {scale.budget:,} env steps)", "",
             f"Command: `{command}`; code {code}; RODS overrides: {json.dumps(dict(scale.rods))}", "",
             "| arm | seeds | dev success [95% CI] | dev progress | distinct tasks | silent fraction |",
             "|---|---|---|---|---|---|"]
    for arm, by_seed in runs.items():
        last = [by_seed[s]["points"][-1] for s in sorted(by_seed)]
        ci = _ci(np.array([q["eval"]["dev"]["success"] for q in last], dtype=np.float64), f"{arm}/dev")
        progress = float(np.mean([q["eval"]["dev"]["progress"] for q in last]))
        silent = float(np.mean([g["silent"] for r in by_seed.values() for g in r["groups"]]))
        lines.append(f"| {arm} | {len(last)} | {_fmt(ci)} | {progress:.3f} | "
                     f"{np.mean([r['distinct_tasks'] for r in by_seed.values()]):.0f} | {silent:.3f} |")
    return "\n".join(lines)


# -- main ----------------------------------------------------------------------------------------
def code_version() -> str:
    """The commit the code ran at, and whether rods_gym/ or trainer/ had uncommitted changes."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "rods_gym", "trainer"], cwd=HERE.parent,
                               capture_output=True, text=True, check=True).stdout.rstrip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + (" + uncommitted changes in " + ", ".join(sorted({ln[3:] for ln in dirty.splitlines()}))
                   if dirty else "")


def load_runs(out: Path, arms: Sequence[str], seeds: Sequence[int]) -> dict[str, dict[int, dict[str, Any]]]:
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for arm in arms:
        for s in seeds:
            p = out / "runs" / arm / f"seed{s}.json"
            if p.exists():
                runs.setdefault(arm, {})[s] = json.loads(p.read_text())
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--scale", choices=sorted(SCALES), default="smoke")
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated arms (default: all)")
    ap.add_argument("--seeds", type=int, default=None, help="number of seeds (default: the scale's)")
    ap.add_argument("--budget", type=int, default=None, help="env steps per run (a multiple of PPO's rollout size)")
    ap.add_argument("--env-id", default=DEFAULT_ENV_ID, help="the view to train and evaluate on")
    ap.add_argument("--env-kwargs", default="{}", help="JSON dict passed to gym.make (training and evaluation)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (at most 2 on the 2-core CPU machine)")
    ap.add_argument("--out", type=Path, default=None, help="default benchmarks/out/ppo_headline/SCALE")
    ap.add_argument("--report-only", action="store_true", help="summarize the runs on disk, train nothing")
    ap.add_argument("--dev", action="store_true",
                    help="evaluate on the dev split only (for choosing RODS's knobs; test and OOD are not touched)")
    ap.add_argument("--rods", default="{}", help="JSON dict of RODSConfig overrides for the RODS-family arms")
    ap.add_argument("--group-size", type=int, default=None,
                    help="G, episodes per task appearance, for every arm; tasks per batch becomes "
                         "(the scale's G x tasks per batch) // G, so a batch keeps its episode count")
    args = ap.parse_args(argv)

    scale = SCALES[args.scale]
    if args.seeds is not None:
        if args.seeds < 1:
            raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
        scale = replace(scale, seeds=tuple(range(args.seeds)))
    if args.budget is not None:
        scale = replace(scale, budget=args.budget)
    if args.group_size is not None:
        episodes = scale.group_size * scale.tasks_per_batch
        if args.group_size < 2 or episodes % args.group_size:
            raise ValueError(f"--group-size must be >= 2 (a group needs a variance) and divide the batch's "
                             f"{episodes} episodes, got {args.group_size}")
        scale = replace(scale, group_size=args.group_size, tasks_per_batch=episodes // args.group_size)
    overrides = json.loads(args.rods)
    if not isinstance(overrides, dict):
        raise ValueError(f"--rods must be a JSON object of RODSConfig fields, got {args.rods!r}")
    if overrides:
        scale = replace(scale, rods={**scale.rods, **overrides})
        rods_config(scale)  # names a bad field or value now, not in a worker
    if args.dev:
        scale = replace(scale, eval_tasks={"dev": 0})
    scale.eval_at()  # checks the budget
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise ValueError(f"--arms: unknown {unknown}; choose from {', '.join(ARMS)}")
    if args.jobs < 1 or (args.jobs > 2 and args.scale != "gpu"):
        raise ValueError(f"--jobs must be 1 or 2 at {args.scale} scale (the CPU machine has 2 cores), got {args.jobs}")
    env_kwargs = json.loads(args.env_kwargs)
    if not isinstance(env_kwargs, dict):
        raise ValueError(f"--env-kwargs must be a JSON object, got {args.env_kwargs!r}")
    import gymnasium as gym

    import rods_gym  # noqa: F401

    if args.env_id not in gym.registry:
        raise ValueError(f"--env-id {args.env_id!r} is not a registered environment")
    gym.make(args.env_id, **env_kwargs).close()  # the view's modules load now, before the workers fork
    out = args.out or HERE / "out" / "ppo_headline" / args.scale
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    offline = str(offline_set(out, scale.offline_n)) if "offline" in arms and not args.report_only else None
    if args.report_only and "offline" in arms:
        offline = str(out / "offline" / f"synth-train-n{scale.offline_n}-seed0.jsonl")
    # slowest first, so that the pool ends together
    order = sorted(arms, key=lambda a: (a not in RODS_FAMILY, a != "procedural"))
    jobs = [Job(a, s, scale, args.env_id, env_kwargs, str(out / "runs" / a / f"seed{s}.json"),
                offline if a == "offline" else None) for a in order for s in scale.seeds]
    if not args.report_only:
        ctx = multiprocessing.get_context("fork")
        with cf.ProcessPoolExecutor(max_workers=args.jobs, mp_context=ctx, initializer=_worker_init) as pool:
            futures = {pool.submit(run_job, j): j for j in jobs}
            for fut in cf.as_completed(futures):
                j, r = futures[fut], fut.result()
                last = r["points"][-1]["eval"]
                print(f"{j.arm:12s} seed {j.seed}: " + " ".join(f"{s} {np.mean(e['success']):.3f}"
                                                                  for s, e in last.items())
                      + f", {r['distinct_tasks']} distinct tasks, {r['seconds']:.0f} s "
                      f"({time.perf_counter() - t0:.0f} s so far)", flush=True)
    runs = load_runs(out, arms, scale.seeds)
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    if args.dev:
        text = dev_report(runs, scale, command, code_version())
        (out / "dev_report.md").write_text(text + "\n")
        print(text)
        return 0
    base_path = out / "random_baseline.json"
    if base_path.exists():
        baseline = json.loads(base_path.read_text())
    else:
        baseline = random_baseline(scale, args.env_id, env_kwargs, scale.seeds)
        base_path.write_text(json.dumps(baseline))
    summary = summarize(runs, task_meta(scale), baseline)
    setup = {"scale": args.scale, "command": command,
             "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
             "machine": f"{platform.machine()}, {os.cpu_count()} cores ({platform.node()})",
             "wall_seconds": time.perf_counter() - t0, "env_id": args.env_id, "env_kwargs": env_kwargs,
             "budget": scale.budget, "seeds": list(scale.seeds), "group_size": scale.group_size,
             "tasks_per_batch": scale.tasks_per_batch, "ppo": asdict(scale.ppo), "rods": dict(scale.rods),
             "code": code_version()}
    previous = out / "summary.json"
    if args.report_only and previous.exists():  # the run's command, date and wall time, not this report's
        ran = json.loads(previous.read_text()).get("setup", {})
        if ran.get("command"):
            setup.update({k: ran[k] for k in ("command", "date", "machine", "wall_seconds") if k in ran})
            setup["report_regenerated"] = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    summary["plots"] = plots(summary, out / "plots")
    summary["setup"] = setup
    text = report(summary, setup)
    (out / "report.md").write_text(text + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=float))
    print(text)
    return 0


if __name__ == "__main__":
    run_script(main)
