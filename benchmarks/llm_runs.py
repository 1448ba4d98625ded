"""Runs of the LLM data-efficiency benchmark (benchmarks/data_efficiency.py) as jobs (:class:`~benchmarks.runner.Job`):
one seed's warm start, and one arm of one seed (the runner resumes them from their records, ``run.json`` in the
job's own folder).

A *warm-start job* trains (or loads) the seed's SFT policy once and evaluates it; every arm of
that seed starts from it, so the SFT is shared and not part of any arm's rollout budget.

An *arm job* runs GRPO from that policy with the arm's task source, in chunks that end at the
evaluation points (cumulative training rollouts); after each chunk the policy is evaluated
greedily on the test and OOD subsets, task by task. The chunks go through the trainer's own
resume path (``grpo_train(..., resume=True)`` from the checkpoint the previous chunk wrote),
so a chunked run is the same run as an unbroken one. The task source is wrapped in a
:class:`~benchmarks.recording.RecordingSource` that writes down every observed group (its returns, its variance
``u = 4 * var``, and, for the RODS family, the region the source's detector gave it), which
is where the rollout count, the distinct-task count and the per-group telemetry come from.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from rods_gym import compute_signature, default_suite
from rods_gym.task import TaskSpec
from rods_gym.trainer.config import TrainConfig, load_config, save_config
from rods_gym.trainer.evaluation import summarize
from rods_gym.trainer.loop import evaluation_engine, grpo_train
from rods_gym.trainer.pipeline import env_mode, make_accelerator, warm_start
from rods_gym.trainer.threads import torch_threads
from rods_gym.trainer.policy import Policy, load_policy, make_policy
from rods_gym.trainer.sources import make_source
from rods_gym.trainer.tasks import SPREAD_RULE, load_tasks, spread

from .recording import DynamicRecordingSource, RecordingSource
from .runner import Job

RUN_FILE = "run.json"  # each job's record, in its own folder
WARM_START = "warm_start"  # the warm-start jobs' arm name
LEARNER = "llm"
MAX_CHUNKS_PER_POINT = 16  # dapo's extra rollouts make chunk sizes estimates; bounded retries


@dataclass(frozen=True)
class EvalSpec:
    """The evaluation subsets: ``tasks`` evenly spaced tasks of each split (same for every arm and seed)."""

    splits: tuple[tuple[str, int], ...]  # (split, n); n <= 0 means the whole split
    batch_episodes: int = 256


def warm_start_job(seed: int, train: Mapping[str, Any], out_dir: str, evals: EvalSpec, threads: int = 1) -> Job:
    """The seed's SFT warm start: ``train`` is the TrainConfig as a plain mapping, ``out_dir`` its folder."""
    return Job(WARM_START, seed, LEARNER, {"train": train, "out_dir": out_dir, "evals": dataclasses.asdict(evals),
                                           "eval_selection": SPREAD_RULE, "threads": threads})


def arm_job(arm: str, seed: int, train: Mapping[str, Any], out_dir: str, warm_start: str | None,
            eval_points: Sequence[int], evals: EvalSpec, threads: int = 1) -> Job:
    """GRPO of ``arm`` (``train``: its TrainConfig, data.source set) from ``warm_start`` (a saved policy; None: the
    config's policy as built), evaluated at ``eval_points`` (cumulative training rollouts; the last is the budget)."""
    return Job(arm, seed, LEARNER, {"train": train, "out_dir": out_dir, "warm_start": warm_start,
                                    "eval_points": [int(p) for p in eval_points], "evals": dataclasses.asdict(evals),
                                    "eval_selection": SPREAD_RULE, "threads": threads})


def quiet() -> None:
    """No per-file progress bars from transformers (model loads/saves) in the benchmark's log: a pool initializer."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def record_file(job: Job) -> Path:
    """Where the runner keeps a job's record: ``run.json`` in the job's folder."""
    return Path(job.settings["out_dir"]) / RUN_FILE


def _evals(job: Job) -> EvalSpec:
    e = job.settings["evals"]
    return EvalSpec(tuple((str(s), int(n)) for s, n in e["splits"]), int(e["batch_episodes"]))


# -- evaluation --------------------------------------------------------------------------------
def eval_tasks(cfg: TrainConfig, spec: EvalSpec) -> dict[str, list[TaskSpec]]:
    return {split: spread(load_tasks(split, cfg.data), n) for split, n in spec.splits}


def evaluate_per_task(policy: Policy, cfg: TrainConfig, sets: Mapping[str, Sequence[TaskSpec]],
                      batch_episodes: int) -> dict[str, dict[str, Any]]:
    """Greedy episodes on the base environment, one per task: per-task success/progress plus the summary."""
    engine = evaluation_engine(cfg, policy)
    out: dict[str, dict[str, Any]] = {}
    for split, tasks in sets.items():
        trajs = []
        for start in range(0, len(tasks), batch_episodes):
            chunk, _ = engine.run(list(tasks[start:start + batch_episodes]), 1, greedy=True, seed=start,
                                  model=policy.model)
            trajs.extend(chunk)
        summary = summarize(trajs)
        out[split] = {"success": [float(t.success) for t in trajs], "progress": [float(t.progress) for t in trajs],
                      "mean_success": summary["success"], "mean_progress": summary["progress"],
                      "turns": summary["turns"], "tool_error_rate": summary["tool_error_rate"],
                      "per_depth": {str(d): v for d, v in summary["per_depth"].items()}}
    for env in engine.envs:
        env.close()
    return out


def task_table(sets: Mapping[str, Sequence[TaskSpec]]) -> dict[str, dict[str, list]]:
    """Ids and depths of the evaluation tasks, in evaluation order."""
    suite = default_suite()
    return {split: {"ids": [t.id for t in tasks], "depth": [compute_signature(t, suite).depth for t in tasks]}
            for split, tasks in sets.items()}


# -- jobs ---------------------------------------------------------------------------------------
def run_warm_start(job: Job) -> dict[str, Any]:
    """The seed's SFT warm start and its evaluation (rollouts 0). The runner calls it only when the job has no
    current record, so whatever is in its folder was made under other settings and is removed first."""
    out, train, evals = Path(job.settings["out_dir"]), job.settings["train"], _evals(job)
    if out.exists():  # made with another config: its saved policy must not be reused
        shutil.rmtree(out)
    with torch_threads(max(1, int(job.settings["threads"]))):  # restored after: tests run in-process
        t0 = time.perf_counter()
        cfg = load_config(None, {**train, "run_dir": str(out), "seed": job.seed})
        out.mkdir(parents=True, exist_ok=True)
        save_config(cfg, out / "config.yaml")
        accelerator = make_accelerator(cfg.deterministic)
        seeds = load_tasks(cfg.data.train_split, cfg.data)
        policy = make_policy(cfg.policy, env_mode(cfg.data.env_id), slot_ids=cfg.data.slot_ids)
        sft: dict[str, Any] = {}
        policy_dir = None
        if cfg.sft.enabled:
            sft = warm_start(cfg, policy, seeds, accelerator, out, False, lambda *a: None)
            policy_dir = str(out / "sft_policy")
        sets = eval_tasks(cfg, evals)
        t1 = time.perf_counter()
        evaluation = evaluate_per_task(policy, cfg, sets, evals.batch_episodes)
        return {"seed": job.seed, "policy_dir": policy_dir, "sft": sft, "tasks": task_table(sets), "eval": evaluation,
                "eval_seconds": time.perf_counter() - t1, "seconds": time.perf_counter() - t0}


def _chunk_steps(target: int, used: int, steps: int, per_step: int) -> int:
    """GRPO steps to reach ``target`` rollouts at the rate seen so far (at least one)."""
    rate = used / steps if steps else per_step
    return max(1, math.ceil((target - used) / max(rate, 1e-9) - 1e-9))


def run_arm(job: Job) -> dict[str, Any]:
    """GRPO for one arm and seed up to the budget, evaluated at every point (the runner writes ``run.json``)."""
    out, evals = Path(job.settings["out_dir"]), _evals(job)
    if out.exists():  # a stale or unfinished run: its checkpoints must not be resumed
        shutil.rmtree(out)
    out.mkdir(parents=True)
    warm = job.settings["warm_start"]
    with torch_threads(max(1, int(job.settings["threads"]))):  # restored after: tests run in-process
        t0 = time.perf_counter()
        cfg = load_config(None, {**job.settings["train"], "run_dir": str(out / "train"), "seed": job.seed})
        save_config(cfg, out / "config.yaml")
        accelerator = make_accelerator(cfg.deterministic)
        seeds = load_tasks(cfg.data.train_split, cfg.data)
        if warm is not None:
            policy = load_policy(warm, local_files_only=True, dtype=cfg.policy.dtype)
        else:
            policy = make_policy(cfg.policy, env_mode(cfg.data.env_id), slot_ids=cfg.data.slot_ids)
        source = RecordingSource(make_source(cfg.data.source, cfg, seeds, rng_seed=cfg.seed), [t.id for t in seeds])
        sets = eval_tasks(cfg, evals)
        per_step = cfg.rollout.tasks_per_step * cfg.rollout.group_size
        steps, points, history = 0, [], []
        train_seconds = eval_seconds = 0.0
        for target in job.settings["eval_points"]:
            for _ in range(MAX_CHUNKS_PER_POINT):
                if source.rollouts >= target:
                    break
                n = _chunk_steps(target, source.rollouts, steps, per_step)
                if isinstance(source, DynamicRecordingSource):  # refills stop at the budget
                    source.budget, source.group_size = int(target), cfg.rollout.group_size
                t1 = time.perf_counter()
                result = grpo_train(dataclasses.replace(cfg, steps=steps + n), policy, seeds,
                                    run_dir=cfg.run_dir, accelerator=accelerator, resume=steps > 0, source=source)
                train_seconds += time.perf_counter() - t1
                if result.steps_done <= steps:
                    raise RuntimeError(f"{job.arm} seed {job.seed}: GRPO made no progress at step {steps}")
                steps, history = result.steps_done, result.history
            t1 = time.perf_counter()
            evaluation = evaluate_per_task(policy, cfg, sets, evals.batch_episodes)
            eval_seconds += time.perf_counter() - t1
            points.append({"target": int(target), "step": steps, "rollouts": source.rollouts,
                           "loop_rollouts": int(sum(h["rollouts"] for h in history)),
                           "distinct_tasks": source.distinct_tasks, "eval": evaluation})
        return {"arm": job.arm, "seed": job.seed, "source": type(source.inner).__name__,
                "env_id": str(getattr(source, "env_id", None) or cfg.data.env_id), "points": points,
                "groups": source.groups, "history": _plain(history), "steps": steps,
                "train_seconds": train_seconds, "eval_seconds": eval_seconds, "seconds": time.perf_counter() - t0}


def _plain(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{k: (float(v) if isinstance(v, (int, float, np.floating)) and not isinstance(v, bool) else v)
             for k, v in h.items()} for h in history]
