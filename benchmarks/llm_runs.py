"""Runs of the data-efficiency benchmark: one seed's warm start, and one arm of one seed.

A *warm-start job* trains (or loads) the seed's SFT policy once and evaluates it; every arm of
that seed starts from it, so the SFT is shared and not part of any arm's rollout budget.

An *arm job* runs GRPO from that policy with the arm's task source, in chunks that end at the
evaluation points (cumulative training rollouts); after each chunk the policy is evaluated
greedily on the test and OOD subsets, task by task. The chunks go through the trainer's own
resume path (``grpo_train(..., resume=True)`` from the checkpoint the previous chunk wrote),
so a chunked run is the same run as an unbroken one. The task source is wrapped in a
:class:`RecordingSource` that writes down every observed group (its returns, its variance
``u = 4 * var``, and, for the RODS family, the region the source's detector gave it), which
is where the rollout count, the distinct-task count and the per-group telemetry come from.
"""

from __future__ import annotations

import dataclasses
import json
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
from rods_gym.curricula import DynamicSampling
from rods_gym.trainer.evaluation import summarize
from rods_gym.trainer.loop import evaluation_engine, grpo_train
from rods_gym.trainer.pipeline import env_mode, make_accelerator, warm_start
from rods_gym.trainer.threads import torch_threads
from rods_gym.trainer.policy import Policy, load_policy, make_policy
from rods_gym.trainer.sources import make_source
from rods_gym.curricula import GroupResult, TaskSource
from rods_gym.trainer.tasks import SPREAD_RULE, load_tasks, spread

from _de_stats import group_records  # a sibling module: the benchmarks folder is on sys.path

RUN_FILE = "run.json"
WARM_FILE = "warm_start.json"
DYNAMIC_SAMPLING_ATTRS = frozenset({"refill", "select", "max_refill_rounds"})  # DynamicSampling's members
MAX_CHUNKS_PER_POINT = 16  # dapo's extra rollouts make chunk sizes estimates; bounded retries


@dataclass(frozen=True)
class EvalSpec:
    """The evaluation subsets: ``tasks`` evenly spaced tasks of each split (same for every arm and seed)."""

    splits: tuple[tuple[str, int], ...]  # (split, n); n <= 0 means the whole split
    batch_episodes: int = 256


@dataclass(frozen=True)
class SeedJob:
    seed: int
    train: Mapping[str, Any]  # TrainConfig as a plain mapping (sft, policy, data, ...)
    out_dir: str  # <out>/seed<k>/warm_start
    evals: EvalSpec
    threads: int = 1


@dataclass(frozen=True)
class ArmJob:
    arm: str
    seed: int
    train: Mapping[str, Any]  # TrainConfig of this arm (data.source, data.source_options set)
    out_dir: str  # <out>/seed<k>/<arm>
    warm_start: str | None  # saved policy to start from (None: the config's policy as built)
    eval_points: tuple[int, ...]  # cumulative training rollouts at which to evaluate; the last is the budget
    evals: EvalSpec
    threads: int = 1

    def key(self) -> str:
        """What makes a finished run reusable: everything it was run with."""
        return json.dumps({"arm": self.arm, "seed": self.seed, "train": self.train, "warm_start": self.warm_start,
                           "eval_points": list(self.eval_points), "evals": dataclasses.asdict(self.evals),
                           "eval_selection": SPREAD_RULE},
                          sort_keys=True, default=str)


# -- the recording wrapper -------------------------------------------------------------------
class RecordingSource:
    """A task source that records every group it observes, and otherwise is ``inner``.

    Per group: the training step, the task id, whether the task is one of the seeds, ``mu`` and
    ``u = 4 * var`` of its returns, whether it was silent (all returns equal), its size (the
    rollouts it cost) and, for sources with a RODS detector, the region that detector assigns
    it at this appearance (computed on a copy of the detector, so the source is untouched).
    Attributes the trainer looks up by name (``env_id``, ``env_kwargs``, ``env_options``, ...)
    are the inner source's. Wrapping a dynamic-sampling source (DAPO) gives a
    :class:`DynamicRecordingSource`, which forwards ``refill``/``select``/``max_refill_rounds``
    and so is a :class:`DynamicSampling` source itself; the refill groups pass through
    :meth:`observe` like the others, so they are recorded and counted in :attr:`rollouts`.
    """

    def __new__(cls, inner: Any = None, seed_ids: Any = ()) -> "RecordingSource":  # defaults: copy/pickle
        if cls is RecordingSource and isinstance(inner, DynamicSampling):
            cls = DynamicRecordingSource
        return super().__new__(cls)

    def __init__(self, inner: TaskSource, seed_ids: Sequence[str]) -> None:
        self.inner = inner
        self.name = inner.name
        self.seed_ids = frozenset(seed_ids)
        self.groups: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        if name == "inner" or name in DYNAMIC_SAMPLING_ATTRS:  # not set yet (copy/pickle); or not forwarded
            raise AttributeError(name)
        return getattr(self.inner, name)

    def next_batch(self, step: int, n_tasks: int) -> list[TaskSpec]:
        return self.inner.next_batch(step, n_tasks)

    def observe(self, step: int, groups: Sequence[GroupResult]) -> None:
        self.groups.extend(group_records(step, groups, self.inner, self.seed_ids))
        self.inner.observe(step, groups)

    def telemetry(self) -> dict[str, float]:
        return self.inner.telemetry()

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)

    @property
    def extra_rollouts(self) -> int:
        return int(getattr(self.inner, "extra_rollouts", 0))

    @property
    def rollouts(self) -> int:
        """Training rollouts generated so far (every observed group, refills included)."""
        return sum(g["size"] for g in self.groups)

    @property
    def distinct_tasks(self) -> int:
        return len({g["task"] for g in self.groups})


class DynamicRecordingSource(RecordingSource):
    """A :class:`RecordingSource` around a dynamic-sampling source: its refills and selection are the inner's,
    except that with ``budget`` set (the rollouts the arm may reach, ``group_size`` each refill task) a
    refill round gets only the tasks that still fit, so that DAPO's refills keep to the equal rollout
    budget every arm has."""

    budget: int | None = None
    group_size: int = 1

    @property
    def max_refill_rounds(self) -> int:
        return int(self.inner.max_refill_rounds)

    def refill(self, step: int) -> list[TaskSpec]:
        more = self.inner.refill(step)
        if self.budget is None:
            return more
        return more[:max(0, (self.budget - self.rollouts) // max(self.group_size, 1))]

    def select(self, groups: Sequence[GroupResult]) -> list[GroupResult]:
        return self.inner.select(groups)


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
def run_warm_start(job: SeedJob) -> dict[str, Any]:
    """The seed's SFT warm start (reused when already saved) and its evaluation (rollouts 0)."""
    out = Path(job.out_dir)
    done = out / WARM_FILE
    if done.exists():
        record = json.loads(done.read_text())
        if record.get("train") == json.loads(json.dumps(job.train)) and record.get("eval_selection") == SPREAD_RULE:
            return record
    if out.exists():  # made with another config: its saved policy must not be reused
        shutil.rmtree(out)
    with torch_threads(max(1, job.threads)):  # restored after: tests run in-process
        t0 = time.perf_counter()
        cfg = load_config(None, {**job.train, "run_dir": str(out), "seed": job.seed})
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
        sets = eval_tasks(cfg, job.evals)
        t1 = time.perf_counter()
        evaluation = evaluate_per_task(policy, cfg, sets, job.evals.batch_episodes)
        record = {"seed": job.seed, "train": job.train, "eval_selection": SPREAD_RULE, "policy_dir": policy_dir, "sft": sft,
                  "tasks": task_table(sets), "eval": evaluation, "eval_seconds": time.perf_counter() - t1,
                  "seconds": time.perf_counter() - t0}
    done.write_text(json.dumps(record))
    return record


def _chunk_steps(target: int, used: int, steps: int, per_step: int) -> int:
    """GRPO steps to reach ``target`` rollouts at the rate seen so far (at least one)."""
    rate = used / steps if steps else per_step
    return max(1, math.ceil((target - used) / max(rate, 1e-9) - 1e-9))


def run_arm(job: ArmJob) -> dict[str, Any]:
    """GRPO for one arm and seed up to the budget, evaluated at every point; writes ``run.json``."""
    out = Path(job.out_dir)
    done = out / RUN_FILE
    if done.exists():
        record = json.loads(done.read_text())
        if record.get("key") == job.key():
            return record
    if out.exists():  # a stale or unfinished run: its checkpoints must not be resumed
        shutil.rmtree(out)
    out.mkdir(parents=True)
    with torch_threads(max(1, job.threads)):  # restored after: tests run in-process
        t0 = time.perf_counter()
        cfg = load_config(None, {**job.train, "run_dir": str(out / "train"), "seed": job.seed})
        save_config(cfg, out / "config.yaml")
        accelerator = make_accelerator(cfg.deterministic)
        seeds = load_tasks(cfg.data.train_split, cfg.data)
        if job.warm_start is not None:
            policy = load_policy(job.warm_start, local_files_only=True, dtype=cfg.policy.dtype)
        else:
            policy = make_policy(cfg.policy, env_mode(cfg.data.env_id), slot_ids=cfg.data.slot_ids)
        source = RecordingSource(make_source(cfg.data.source, cfg, seeds, rng_seed=cfg.seed), [t.id for t in seeds])
        sets = eval_tasks(cfg, job.evals)
        per_step = cfg.rollout.tasks_per_step * cfg.rollout.group_size
        steps, points, history = 0, [], []
        train_seconds = eval_seconds = 0.0
        for target in job.eval_points:
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
            evaluation = evaluate_per_task(policy, cfg, sets, job.evals.batch_episodes)
            eval_seconds += time.perf_counter() - t1
            points.append({"target": int(target), "step": steps, "rollouts": source.rollouts,
                           "loop_rollouts": int(sum(h["rollouts"] for h in history)),
                           "distinct_tasks": source.distinct_tasks, "eval": evaluation})
        record = {"key": job.key(), "arm": job.arm, "seed": job.seed, "source": type(source.inner).__name__,
                  "env_id": str(getattr(source, "env_id", None) or cfg.data.env_id), "points": points,
                  "groups": source.groups, "history": _plain(history), "steps": steps,
                  "train_seconds": train_seconds, "eval_seconds": eval_seconds,
                  "seconds": time.perf_counter() - t0}
    done.write_text(json.dumps(record))
    return record


def _plain(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{k: (float(v) if isinstance(v, (int, float, np.floating)) and not isinstance(v, bool) else v)
             for k, v in h.items()} for h in history]
