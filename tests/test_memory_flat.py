"""benchmarks/memory_flat.py: the smoke scale end to end, and the slope it reports. Whether memory
stays flat is the benchmark's to measure (RESULTS.md), not asserted here."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import benchmarks_on_path

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py


@pytest.fixture(scope="module")
def mf() -> Any:
    with benchmarks_on_path():
        import memory_flat

        yield memory_flat


def test_the_slope_is_fitted_over_the_second_half(mf: Any) -> None:
    # a jump in the first half does not count; the second half rises 2 MB per step
    assert mf.second_half_slope([1, 2, 3, 4, 5, 6], [100, 500, 500, 502, 504, 506]) == pytest.approx(2.0)
    assert mf.second_half_slope([1], [100]) == 0.0
    assert mf.verdict(0.5, 100.0) == "flat" and mf.verdict(1.5, 100.0) == "GROWING"


def test_smoke_measures_every_grpo_step_and_every_chunk_of_episodes(mf: Any, capsys) -> None:
    env = mf.env_memory("smoke")
    n = mf.SCALES["smoke"]["episodes"]
    assert env["episodes"] == list(range(0, n + 1, n // 20)) and len(env["rss_mb"]) == 21
    assert env["steps"] > n and all(r > 0 for r in env["rss_mb"])
    grpo = mf.grpo_memory("smoke")
    assert grpo["steps"] == list(range(1, mf.SCALES["smoke"]["steps"] + 1))
    assert all(r > 50 for r in grpo["rss_mb"])  # a process holding torch and a model: tens of MB at least
    report = mf.markdown(grpo, env, ["--scale", "smoke"])
    assert "| GRPO, main job config | 4 steps" in report and "MB per 10,000 episodes" in report
    capsys.readouterr()
