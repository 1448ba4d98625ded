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


# -- benchmarks/sft_control.py: the no-RL control for a GRPO run ---------------------------

@pytest.fixture(scope="module")
def sc() -> Any:
    with benchmarks_on_path():
        import sft_control

        yield sft_control


def test_sft_control_continues_imitation_and_is_reproducible(sc, tmp_path: Path) -> None:
    import torch

    from rods_gym.trainer.policy import load_policy

    warm = warm_tiny_policy(tmp_path / "warm", sft_steps=5)
    small = ["sft.data=seeds", "sft.demos=6"]  # imitate 6 seed demonstrations, not the default 9,600
    kw = dict(steps=12, lr=5e-3, batch=4, overrides=small)
    losses = sc.continue_sft(warm, tmp_path / "a", **kw)
    again = sc.continue_sft(warm, tmp_path / "b", **kw)
    assert len(losses) == 12 and losses == again  # same seed: same batches, same losses
    assert sum(losses[-3:]) < sum(losses[:3])  # it imitates: the loss falls from the short warm start's
    a, b, w = (load_policy(p).model.state_dict() for p in (tmp_path / "a", tmp_path / "b", warm))
    assert all(torch.equal(a[k], b[k]) for k in a) and any(not torch.equal(a[k], w[k]) for k in a)
    decayed = sc.continue_sft(warm, tmp_path / "c", **{**kw, "steps": 2}, schedule="linear")
    assert decayed[0] == losses[0]  # the first batch and weights are the same under either schedule


def test_sft_control_rejects_bad_settings(sc, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="schedule"):
        sc.continue_sft(tmp_path, tmp_path / "x", steps=1, lr=1e-3, schedule="cosine")
    with pytest.raises(ValueError, match="steps"):
        sc.continue_sft(tmp_path, tmp_path / "x", steps=0, lr=1e-3)
    with pytest.raises(SystemExit):
        sc.main([str(tmp_path), str(tmp_path / "x"), "--lr", "-1"])
