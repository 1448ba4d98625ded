"""benchmarks/runner.py: jobs resume from their records (a finished job is not rerun, a changed setting reruns, a
failed job is reported and not recorded), in this process, in a process pool and on a local Ray instance."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import benchmarks_package

with benchmarks_package():
    from benchmarks.runner import Job, load_records, record_path, run_jobs


def square(job: Job) -> dict[str, Any]:
    """A tiny job: the seed squared, the settings echoed, the worker's pid and a call counted in a file."""
    marker = Path(job.settings["calls"])
    with marker.open("a") as fh:
        fh.write(f"{job.arm}:{job.seed}\n")
    if job.settings.get("fail"):
        raise RuntimeError(f"planted failure of seed {job.seed}")
    from benchmarks.stats import rng_for  # the package imports in the worker too

    return {"value": job.seed ** 2, "scale": job.settings["scale"], "pid": os.getpid(),
            "draw": int(rng_for(0, "x").integers(0, 100))}


def _jobs(tmp_path: Path, scale: int = 1, seeds: range = range(3), **extra: Any) -> list[Job]:
    return [Job("fixed", s, "toy", {"scale": scale, "calls": str(tmp_path / "calls.txt"), **extra}) for s in seeds]


def _calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls.txt"
    return path.read_text().split() if path.exists() else []


def test_a_finished_job_is_not_rerun_and_a_changed_setting_reruns(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = run_jobs(_jobs(tmp_path), square, out, log=lambda _: None)
    assert [first.records[j]["value"] for j in _jobs(tmp_path)] == [0, 1, 4] and len(first.ran) == 3
    assert _calls(tmp_path) == ["fixed:0", "fixed:1", "fixed:2"]
    record = json.loads(record_path(out, _jobs(tmp_path)[1]).read_text())
    assert record["key"] == _jobs(tmp_path)[1].key() and record["value"] == 1
    again = run_jobs(_jobs(tmp_path), square, out, log=lambda _: None)
    assert again.ran == [] and len(_calls(tmp_path)) == 3  # every record reused, nothing called
    assert again.records == first.records
    changed = run_jobs(_jobs(tmp_path, scale=2), square, out, log=lambda _: None)  # another setting: another key
    assert len(changed.ran) == 3 and len(_calls(tmp_path)) == 6
    assert {r["scale"] for r in changed.records.values()} == {2}
    assert load_records(_jobs(tmp_path, scale=1), out) == {}  # the old records were replaced
    more = run_jobs(_jobs(tmp_path, scale=2, seeds=range(4)), square, out, log=lambda _: None)
    assert [j.seed for j in more.ran] == [3]  # only the new seed runs


def test_a_failed_job_is_reported_not_recorded_and_the_others_go_on(tmp_path: Path) -> None:
    out = tmp_path / "out"
    jobs = _jobs(tmp_path, seeds=range(2)) + [Job("rods", 0, "toy", {"scale": 1, "calls": str(tmp_path / "calls.txt"),
                                                                     "fail": True})]
    result = run_jobs(jobs, square, out, log=lambda _: None)
    assert len(result.records) == 2 and len(result.failures) == 1
    assert "toy rods seed 0: RuntimeError: planted failure" in result.failures[0]
    assert not record_path(out, jobs[2]).exists()
    with pytest.raises(ValueError, match="twice"):
        run_jobs(jobs + jobs[:1], square, out)
    with pytest.raises(ValueError, match="workers must be >= 1"):
        run_jobs(jobs, square, out, workers=0)


def test_a_record_written_under_another_key_or_half_written_is_not_reused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    job = _jobs(tmp_path, seeds=range(1))[0]
    path = record_path(out, job)
    path.parent.mkdir(parents=True)
    path.write_text('{"key": "something else", "value": 99}')
    assert run_jobs([job], square, out, log=lambda _: None).records[job]["value"] == 0
    path.write_text('{"key": ')  # a torn file
    assert load_records([job], out) == {}


def test_a_process_pool_runs_the_jobs_in_other_processes(tmp_path: Path) -> None:
    result = run_jobs(_jobs(tmp_path, seeds=range(4)), square, tmp_path / "out", workers=2, log=lambda _: None)
    assert sorted(r["value"] for r in result.records.values()) == [0, 1, 4, 9]
    assert os.getpid() not in {r["pid"] for r in result.records.values()}


def test_ray_runs_the_jobs_on_a_local_instance_and_resumes(tmp_path: Path) -> None:
    """``--ray local``: each job a Ray task of one CPU on a local instance (one CPU here); the records are written
    here, so a second call reuses them."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install ray): the Ray executor is untested")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # this test module is not importable there
    out = tmp_path / "out"
    try:
        result = run_jobs(_jobs(tmp_path), square, out, workers=1, ray="local", log=lambda _: None)
    finally:
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert not ray.is_initialized()  # the runner shut down the instance it started
    assert result.failures == [] and [result.records[j]["value"] for j in _jobs(tmp_path)] == [0, 1, 4]
    assert os.getpid() not in {r["pid"] for r in result.records.values()}
    assert {r["draw"] for r in result.records.values()} == {square(_jobs(tmp_path)[0])["draw"]}
    again = run_jobs(_jobs(tmp_path), square, out, ray="local", log=lambda _: None)
    assert again.ran == [] and not ray.is_initialized()  # nothing to run: no instance started
