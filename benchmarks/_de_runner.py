"""The LLM runs' old job API, for the scripts that still import it by name (benchmarks/smollm_grpo.py): a
``SeedJob`` / ``ArmJob`` runs through :mod:`benchmarks.llm_runs` and is resumed from its record by
:mod:`benchmarks.runner` (``warm_start.json`` / ``run.json`` in the job's folder, as before). New code uses
``benchmarks.llm_runs.warm_start_job`` / ``arm_job`` with ``benchmarks.runner.run_jobs``."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

if str(Path(__file__).resolve().parents[1]) not in sys.path:  # imported by name from a script in benchmarks/
    sys.path.append(str(Path(__file__).resolve().parents[1]))

from benchmarks import llm_runs  # noqa: E402
from benchmarks.llm_runs import RUN_FILE, EvalSpec  # noqa: E402,F401
from benchmarks.runner import Job, load_record, write_record  # noqa: E402

WARM_FILE = "warm_start.json"


@dataclass(frozen=True)
class SeedJob:
    seed: int
    train: Mapping[str, Any]
    out_dir: str
    evals: EvalSpec
    threads: int = 1

    def job(self) -> Job:
        return llm_runs.warm_start_job(self.seed, self.train, self.out_dir, self.evals, self.threads)


@dataclass(frozen=True)
class ArmJob:
    arm: str
    seed: int
    train: Mapping[str, Any]
    out_dir: str
    warm_start: str | None
    eval_points: tuple[int, ...]
    evals: EvalSpec
    threads: int = 1

    def job(self) -> Job:
        return llm_runs.arm_job(self.arm, self.seed, self.train, self.out_dir, self.warm_start, self.eval_points,
                                self.evals, self.threads)


def _resumed(job: Job, path: Path, fn: Any) -> dict[str, Any]:
    done = load_record(path, job)
    return done if done is not None else write_record(path, job, fn(job))


def run_warm_start(job: SeedJob) -> dict[str, Any]:
    return _resumed(job.job(), Path(job.out_dir) / WARM_FILE, llm_runs.run_warm_start)


def run_arm(job: ArmJob) -> dict[str, Any]:
    return _resumed(job.job(), Path(job.out_dir) / RUN_FILE, llm_runs.run_arm)
