"""benchmarks/compare_policies.py: paired per-task comparison of saved policies with bootstrap CIs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import benchmarks_on_path, easy_seed_tasks, warm_tiny_policy
from rods_gym import write_jsonl

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py


@pytest.fixture(scope="module")
def cp() -> Any:
    with benchmarks_on_path():
        import compare_policies

        yield compare_policies


def test_a_policy_against_itself_differs_by_zero_and_another_is_compared_per_task(cp, tmp_path: Path, capsys) -> None:
    tasks = easy_seed_tasks()[:6]
    write_jsonl(tasks, tmp_path / "tasks.jsonl")
    a = warm_tiny_policy(tmp_path / "a", sft_steps=30)
    b = warm_tiny_policy(tmp_path / "b", sft_steps=2)
    rows = cp.main([str(a), str(a), str(b), "--split", str(tmp_path / "tasks.jsonl"), "--samples", "2",
                    "--bootstrap", "200", "--out", str(tmp_path / "rows.json")])
    figures = {"greedy_success", "greedy_progress", "sampled_success", "sampled_progress"}
    assert {r["figure"] for r in rows} == figures and len(rows) == 8  # base + one other (a twice is one key)
    # the same directory is the base itself: only the other policy gets a difference
    base = [r for r in rows if r["policy"] == str(a)]
    other = {r["figure"]: r for r in rows if r["policy"] == str(b)}
    assert all("diff" not in r for r in base) and set(other) == figures
    for key, r in other.items():
        base_mean = next(x["mean"] for x in base if x["figure"] == key)
        assert r["diff"] == pytest.approx(r["mean"] - base_mean)
        assert r["lo"] <= r["diff"] <= r["hi"] and 0.0 <= r["mean"] <= 1.0
    assert json.loads((tmp_path / "rows.json").read_text()) == rows
    assert "difference = policy -" in capsys.readouterr().out


def test_identical_per_task_figures_give_a_zero_interval(cp) -> None:
    import numpy as np

    figs = {"greedy_success": np.array([1.0, 0.0, 0.5])}
    rows = cp.compare({"x": figs, "y": {"greedy_success": figs["greedy_success"].copy()}}, "x", 100, 0)
    y = next(r for r in rows if r["policy"] == "y")
    assert y["diff"] == y["lo"] == y["hi"] == 0.0
    rows = cp.compare({"x": figs, "y": {"greedy_success": np.array([1.0, 1.0, 1.0])}}, "x", 500, 0)
    y = next(r for r in rows if r["policy"] == "y")
    assert y["diff"] == pytest.approx(0.5) and 0.0 <= y["lo"] <= 0.5 <= y["hi"] <= 1.0


def test_rejects_a_single_policy(cp) -> None:
    with pytest.raises(SystemExit):
        cp.main(["only_one"])
