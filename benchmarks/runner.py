"""The one runner of the benchmarks: jobs = (arm, seed, learner) with their settings, resumed from per-job JSON
records, run in this process, a local process pool, or on a Ray cluster.

A :class:`Job` is everything a run depends on: its arm, seed and learner plus a JSON-able mapping of settings
(the scale, the env, the learner's config, ...). Its :meth:`Job.key` is that whole content as canonical JSON.
:func:`run_jobs` calls ``fn(job) -> record`` for each job whose record file does not exist yet or was written
under another key (a changed setting reruns; a finished job is never rerun), and writes the record itself, in
this process (atomically: a run that dies leaves no half record), so a sweep resumes wherever its jobs ran.

Executors: ``workers == 1`` runs the jobs here, one after the other; ``workers > 1`` a local process pool (the
``fork`` context by default: workers share the loaded modules); ``ray="local"`` starts a local Ray instance with
``workers`` CPUs, ``ray="ADDRESS"`` joins a running cluster (``ray start --head`` on a machine whose nodes see
this checkout at the same path: the jobs read the repository's task files and write nothing themselves). Each
job asks Ray for one CPU. ``fn`` must be a module-level function of an importable module (Ray and spawned
workers import it by name).
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .provenance import ROOT

Record = dict[str, Any]
JobFn = Callable[["Job"], Record]


@dataclass(frozen=True, eq=False)
class Job:
    """One run: ``arm`` x ``seed`` x ``learner``, with every other setting it depends on in ``settings``."""

    arm: str
    seed: int
    learner: str
    settings: Mapping[str, Any] = field(default_factory=dict)

    def key(self) -> str:
        """The job's whole content as canonical JSON: two jobs with the same key make the same record."""
        return json.dumps({"arm": self.arm, "seed": int(self.seed), "learner": self.learner,
                           "settings": self.settings}, sort_keys=True, default=_plain)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and other.key() == self.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __str__(self) -> str:
        return f"{self.learner} {self.arm} seed {self.seed}"


def _plain(value: Any) -> Any:
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    if hasattr(value, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(value)
    return str(value)


def record_path(out: Path, job: Job) -> Path:
    """Where a job's record lives: ``OUT/runs/LEARNER/ARM/seedK.json``."""
    return Path(out) / "runs" / job.learner / job.arm / f"seed{job.seed}.json"


def load_record(path: Path, job: Job) -> Record | None:
    """The finished record of ``job`` at ``path``, or None when there is none or it was made under another key."""
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    return record if record.get("key") == job.key() else None


def load_records(jobs: Iterable[Job], out: Path | None = None, path_of: Callable[[Job], Path] | None = None
                 ) -> dict[Job, Record]:
    """The jobs' current records (under ``out``, or at ``path_of(job)``), skipping the others: a report without a
    run."""
    where = path_of or (lambda job: record_path(Path(out or "."), job))
    return {job: rec for job in jobs if (rec := load_record(where(job), job)) is not None}


def write_record(path: Path, job: Job, record: Record) -> Record:
    record = {**record, "key": job.key()}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, default=_plain))
    os.replace(tmp, path)
    return record


@dataclass
class RunResult:
    records: dict[Job, Record]  # every job that has a record now (reused or just run)
    ran: list[Job]  # the jobs run by this call
    failures: list[str]  # "JOB: ExceptionType: message" of each job that raised

    def of(self, job: Job) -> Record:
        return self.records[job]


def run_jobs(jobs: Sequence[Job], fn: JobFn, out: Path | None = None, *, workers: int = 1, ray: str | None = None,
             context: str = "fork", initializer: Callable[[], None] | None = None,
             path_of: Callable[[Job], Path] | None = None, log: Callable[[str], None] = print) -> RunResult:
    """Run every job of ``jobs`` without a current record (see the module docstring); returns all records."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if path_of is None:
        if out is None:
            raise ValueError("run_jobs needs out (records go to OUT/runs/...) or path_of")
        path_of = lambda job: record_path(out, job)  # noqa: E731
    if len(set(jobs)) != len(jobs):
        raise ValueError("run_jobs: the same job is listed twice")
    result = RunResult({}, [], [])
    todo = []
    for job in jobs:
        done = load_record(path_of(job), job)
        if done is None:
            todo.append(job)
        else:
            result.records[job] = done
    t0 = time.perf_counter()

    def finished(job: Job, record: Record) -> None:
        result.records[job] = write_record(path_of(job), job, record)
        result.ran.append(job)
        log(f"[{time.perf_counter() - t0:6.0f} s] {job}: done ({len(result.ran)}/{len(todo)})")

    def failed(job: Job, exc: BaseException) -> None:
        result.failures.append(f"{job}: {type(exc).__name__}: {exc}")
        log(f"FAILED {result.failures[-1]}")

    if not todo:
        return result
    if ray is not None:
        _run_ray(todo, fn, ray, workers, finished, failed)
    elif workers == 1:
        if initializer is not None:
            initializer()
        for job in todo:
            try:
                record = fn(job)
            except Exception as exc:  # the other jobs go on; the caller reports the failures
                failed(job, exc)
            else:
                finished(job, record)
    else:
        ctx = multiprocessing.get_context(context)
        with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=initializer) as pool:
            futures = {pool.submit(fn, job): job for job in todo}
            for fut in cf.as_completed(futures):
                try:
                    record = fut.result()
                except Exception as exc:
                    failed(futures[fut], exc)
                else:
                    finished(futures[fut], record)
    return result


def _run_ray(jobs: Iterable[Job], fn: JobFn, address: str, workers: int, finished: Callable[[Job, Record], None],
             failed: Callable[[Job, BaseException], None]) -> None:
    """Each job a Ray task of one CPU: ``address`` "local" starts a local instance of ``workers`` CPUs (shut
    down after), anything else is a running cluster's address (``ray start --head`` prints it)."""
    try:
        import ray
    except ImportError:
        raise ValueError("--ray needs the ray package (pip install ray)") from None
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    started = not ray.is_initialized()
    if started:
        if address == "local":
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=True, runtime_env={"env_vars": env})
        else:
            ray.init(address=address, runtime_env={"env_vars": env})
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        pending = {remote.remote(job): job for job in jobs}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            job = pending.pop(ready[0])
            try:
                record = ray.get(ready[0])
            except Exception as exc:  # a RayTaskError wraps the job's own exception
                failed(job, getattr(exc, "cause", None) or exc)
            else:
                finished(job, record)
    finally:
        if started:
            ray.shutdown()
