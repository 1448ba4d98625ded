"""One headline run (a :class:`~benchmarks.runner.Job`): a learner trained from scratch on the features view with one
arm's task source, evaluated greedily at every point of its env-step budget.

Learners (``job.learner``):

- ``ppo``: sb3-contrib MaskablePPO (a critic: a silent group still moves the policy through return - V(s)); the
  task source reaches it through ``CurriculumEnv`` + ``CurriculumCallback``; the budget is a multiple of PPO's
  rollout, so every arm stops at exactly the same env step.
- ``grpo``: the critic-free :class:`~rods_gym.trainer.features_grpo.FeaturesGRPO` (group-normalised advantages: a
  silent group carries exactly zero gradient); it draws B tasks x G episodes per step from the same
  ``TaskSchedule`` contract and stops at the first whole step at or after each point (less than one step over).

Either way the arm's task source comes from the registry (:func:`rods_gym.curricula.make_source`), wrapped in a
:class:`~benchmarks.recording.RecordingSource` that records every group the learner trained on (the curriculum
observes the same returns, no extra episode); the augmented arms train in their source's ``env_id``; evaluation is
always in the plain env (``job.settings["env_id"]``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Mapping

from .evaluator import greedy_evaluate, split_tasks
from .recording import RecordingSource
from .runner import Job

LEARNERS = ("ppo", "grpo")
RODS_FAMILY = ("rods", "replay_only", "naive", "rods_random", "rods_augment")
EVAL_ENVS = 64  # envs stepped in lockstep by the greedy evaluation (one batched predict per step)


def worker_init() -> None:
    """A pool worker: a little lower priority, one OpenMP thread."""
    try:
        os.nice(5)
    except OSError:
        pass
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def make_source(arm: str, seed: int, settings: Mapping[str, Any]) -> Any:
    """The task source of ``arm`` for run ``seed`` (the seeds: the train split), from the curricula registry, with
    the scale's RODSConfig overrides for the RODS family (the replay-only ablation takes no synthesis knobs)."""
    from rods_gym import load_split
    from rods_gym.curricula import make_source as arm_source
    from rods_gym.curricula.registry import SYNTHESIS_FIELDS

    options: dict[str, Any] = {}
    if arm == "offline":
        if not settings.get("offline"):
            raise ValueError("the offline arm needs its synthesized task file")
        options = {"path": str(settings["offline"])}
    elif arm in RODS_FAMILY:
        options = {k: v for k, v in settings["rods"].items() if arm != "replay_only" or k not in SYNTHESIS_FIELDS}
    return arm_source(arm, load_split("train"), seed=seed, group_size=settings["group_size"],
                      env_id=settings["env_id"], options=options)


def offline_set(out: Path, n: int, seed: int = 0) -> Path:
    """The offline arm's task set: ``rods synth --seeds train --n N --seed SEED``, cached under ``out``."""
    from rods_gym import load_split
    from rods_gym.synth import make_resampler, synthesize
    from rods_gym.task import write_jsonl

    path = out / "offline" / f"synth-train-n{n}-seed{seed}.jsonl"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        tasks = synthesize(load_split("train"), n, make_resampler(), seed=seed)
        write_jsonl(tasks, path.with_suffix(".tmp"))
        path.with_suffix(".tmp").rename(path)
        print(f"offline set: {len(tasks)} tasks synthesized in {time.perf_counter() - t0:.0f} s -> {path}", flush=True)
    return path


def run_job(job: Job) -> dict[str, Any]:
    """Train ``job.learner`` on ``job.arm`` with seed ``job.seed`` to the budget, evaluating at every point."""
    import torch

    import rods_gym  # noqa: F401  (registers the env ids)
    from rods_gym import load_split

    if job.learner not in LEARNERS:
        raise ValueError(f"unknown learner {job.learner!r}; choose from {LEARNERS}")
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    s = job.settings
    inner = make_source(job.arm, job.seed, s)
    # the RODS family also records what each trained-on task is (signature, lineage): the structure question
    source = RecordingSource(inner, [t.id for t in load_split("train")], describe=job.arm in RODS_FAMILY)
    env_id = getattr(inner, "env_id", None) or s["env_id"]  # the augmented arms' twin env, else the plain one
    train_kwargs = {**getattr(inner, "env_kwargs", {}), **s["env_kwargs"]}
    sets = split_tasks(s["eval_tasks"])
    train = _ppo if job.learner == "ppo" else _grpo
    record = train(job, source, env_id, train_kwargs, sets)
    record.update({"arm": job.arm, "seed": job.seed, "learner": job.learner, "env_id": env_id,
                   "eval_env_id": s["env_id"], "tasks": {k: [t.id for t in ts] for k, ts in sets.items()},
                   "groups": source.groups, "telemetry": source.telemetry_log, "catalog": source.catalog,
                   "batches_handed_out": int(source.batches), "episodes_observed": int(source.episodes_observed),
                   "distinct_tasks": source.distinct_tasks,
                   "offline_set_size": len(inner.tasks) if job.arm == "offline" else None,
                   "seconds": time.perf_counter() - t_start})
    return record


def eval_envs(settings: Mapping[str, Any], sets: Mapping[str, list]) -> list:
    """The plain env, as many as the largest split needs up to ``EVAL_ENVS`` (made once, after the learner)."""
    import gymnasium as gym

    n = min(EVAL_ENVS, max(len(ts) for ts in sets.values()))
    return [gym.make(settings["env_id"], **settings["env_kwargs"]) for _ in range(n)]


def _evaluate(predict: Any, envs: list, sets: Mapping[str, list]) -> dict[str, dict[str, list]]:
    ev = {k: greedy_evaluate(predict, envs, ts) for k, ts in sets.items()}
    return {k: {"success": e["success"], "progress": e["progress"]} for k, e in ev.items()}


def _ppo(job: Job, source: RecordingSource, env_id: str, train_kwargs: dict, sets: Mapping[str, list]
         ) -> dict[str, Any]:
    import gymnasium as gym
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from rods_gym.curricula import CurriculumEnv, TaskSchedule
    from rods_gym.trainer.sb3 import CurriculumCallback

    s, ppo = job.settings, job.settings["learner_config"]
    schedule = TaskSchedule(source, tasks_per_batch=s["tasks_per_batch"], group_size=s["group_size"])
    monitors = [Monitor(CurriculumEnv(gym.make(env_id, **train_kwargs), schedule)) for _ in range(ppo["n_envs"])]
    vec = DummyVecEnv([lambda m=m: m for m in monitors])
    vec.seed(job.seed)
    policy = "MultiInputPolicy" if isinstance(vec.observation_space, gym.spaces.Dict) else "MlpPolicy"
    model = MaskablePPO(policy, vec, n_steps=ppo["n_steps"], batch_size=ppo["batch_size"], n_epochs=ppo["n_epochs"],
                        learning_rate=ppo["learning_rate"], gamma=ppo["gamma"], ent_coef=ppo["ent_coef"],
                        policy_kwargs={"net_arch": list(ppo["net_arch"])}, seed=job.seed, device="cpu")
    model.set_logger(Logger(folder=None, output_formats=[]))
    callback = CurriculumCallback(schedule)
    envs = eval_envs(s, sets)
    predict_calls: list[bool] = []

    def predict(obs: Any, action_masks: Any, deterministic: bool) -> Any:
        predict_calls.append(bool(deterministic))
        return model.predict(obs, action_masks=action_masks, deterministic=deterministic)

    points, train_s, eval_s = [], 0.0, 0.0
    for target in s["eval_at"]:
        t0 = time.perf_counter()
        model.learn(target - model.num_timesteps, callback=callback, reset_num_timesteps=False)
        train_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        ev = _evaluate(predict, envs, sets)
        eval_s += time.perf_counter() - t0
        points.append({"env_steps": int(model.num_timesteps), "episodes": callback.episodes,
                       "distinct_tasks": source.distinct_tasks, "groups": len(source.groups), "eval": ev})
    return {"points": points, "steps": int(callback.observed_batches),  # curriculum steps (batches) observed
            "env_steps": int(model.num_timesteps), "episodes_callback": int(callback.episodes),
            "episodes_run": int(sum(len(m.get_episode_rewards()) for m in monitors)),
            "episodes_pending": int(callback.episodes) - int(source.episodes_observed),  # in an unfinished batch
            "eval_deterministic": bool(predict_calls) and all(predict_calls), "predict_calls": len(predict_calls),
            "train_seconds": train_s, "eval_seconds": eval_s}


def _grpo(job: Job, source: RecordingSource, env_id: str, train_kwargs: dict, sets: Mapping[str, list]
          ) -> dict[str, Any]:
    from dataclasses import replace

    from rods_gym.trainer.features_grpo import FeaturesGRPO, FeaturesGRPOConfig

    s = job.settings
    config = replace(FeaturesGRPOConfig(**{k: tuple(v) if isinstance(v, list) else v
                                           for k, v in s["learner_config"].items()}),
                     group_size=s["group_size"], tasks_per_step=s["tasks_per_batch"])
    # the learner trains in the source's env (the augmented twin for the augmentation arms) by itself
    learner = FeaturesGRPO(s["env_id"], source, config, seed=job.seed, env_kwargs=s["env_kwargs"])
    if learner.train_env_id != env_id:
        raise RuntimeError(f"{job}: the GRPO learner trains in {learner.train_env_id}, the arm's env is {env_id}")
    envs = eval_envs(s, sets)
    points, train_s, eval_s = [], 0.0, 0.0
    for target in s["eval_at"]:
        t0 = time.perf_counter()
        learner.learn(max(0, target - learner.target_timesteps))
        train_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        ev = _evaluate(learner.predict, envs, sets)
        eval_s += time.perf_counter() - t0
        points.append({"env_steps": int(learner.num_timesteps), "episodes": int(learner.episodes),
                       "distinct_tasks": source.distinct_tasks, "groups": len(source.groups), "eval": ev})
    return {"points": points, "steps": len(learner.log), "env_steps": int(learner.num_timesteps),
            "episodes_run": int(learner.episodes), "eval_deterministic": True,
            "log": [{k: round(float(v), 6) for k, v in row.items()} for row in learner.log],
            "train_seconds": train_s, "eval_seconds": eval_s}
