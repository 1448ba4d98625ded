"""benchmarks/compare_policies.py: paired per-task comparison of saved policies with bootstrap CIs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import benchmarks_package, easy_seed_tasks, warm_tiny_policy
from rods_gym import write_jsonl

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py


@pytest.fixture(scope="module")
def cp() -> Any:
    with benchmarks_package():
        from benchmarks import compare_policies

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
    pooled = cp.main([str(a), str(b), "--split", str(tmp_path / "tasks.jsonl"), "--samples", "0", "--bootstrap", "200",
                      "--pool", "arm"])
    one = {r["figure"]: r for r in pooled if r["policy"] == "arm (1 seed)"}
    assert set(one) == {"greedy_success", "greedy_progress"}
    for key, r in one.items():  # one seed pooled is that seed
        assert r["diff"] == pytest.approx(other[key]["diff"])


def test_show_flips_prints_the_tasks_whose_greedy_success_differs_with_both_transcripts(cp, tmp_path: Path,
                                                                                         capsys) -> None:
    tasks = easy_seed_tasks()[:6]
    write_jsonl(tasks, tmp_path / "tasks.jsonl")
    a = warm_tiny_policy(tmp_path / "a", sft_steps=30)
    b = warm_tiny_policy(tmp_path / "b", sft_steps=2)
    capsys.readouterr()
    cp.main([str(a), str(b), "--split", str(tmp_path / "tasks.jsonl"), "--samples", "0", "--bootstrap", "10",
             "--show-flips", "2"])
    out = capsys.readouterr().out
    results = {p: cp.per_task(p, tasks, "default", 0, 0.7, 0) for p in (a, b)}
    lost = [t.id for t, x, y in zip(tasks, results[a]["greedy_success"], results[b]["greedy_success"]) if x > y]
    assert lost  # the 2-step warm start loses some of the 30-step one's successes: the check below has something
    assert f"greedy successes lost on {len(lost)} tasks, won on 0" in out
    shown = lost[:2]
    for task_id in shown:
        assert f"{task_id} (" in out and "lost by" in out
    assert out.count("(success):") == len(shown) and out.count("(failure):") == len(shown)  # the replay agrees
    assert out.count("<act>") >= 2 * len(shown)  # decoded transcripts of both policies
    with pytest.raises(SystemExit):
        cp.main([str(a), str(b), "--show-flips", "-1"])


def test_batched_episodes_keep_every_task_in_its_place(cp, tmp_path: Path) -> None:
    """--batch-episodes plays the tasks a few at a time: greedy figures are those of one batch, task by
    task, and the sampled ones cover every task (their stream follows the batching)."""
    tasks = easy_seed_tasks()[:7]
    write_jsonl(tasks, tmp_path / "tasks.jsonl")
    a = warm_tiny_policy(tmp_path / "a", sft_steps=30)
    whole = cp.per_task(a, tasks, "default", 2, 0.7, 0)
    parts = cp.per_task(a, tasks, "default", 2, 0.7, 0, batch_episodes=4)  # 2 tasks x 2 samples per batch
    assert whole["greedy_progress"].any()  # the check below compares something
    assert list(parts["greedy_success"]) == list(whole["greedy_success"])
    assert parts["greedy_progress"] == pytest.approx(whole["greedy_progress"])
    assert parts["sampled_progress"].shape == (7,) and ((0 <= parts["sampled_progress"]) & (parts["sampled_progress"] <= 1)).all()
    with pytest.raises(SystemExit):
        cp.main([str(a), str(a), "--batch-episodes", "-1"])


def test_config_overrides_reach_the_evaluation_environment(cp, tmp_path: Path) -> None:
    tasks = easy_seed_tasks()[:3]
    write_jsonl(tasks, tmp_path / "tasks.jsonl")
    a = warm_tiny_policy(tmp_path / "a", sft_steps=2)
    assert cp.eval_engine(a, "default", 0.7, ["data.slot_ids=shuffled"]).env_kwargs == {"slot_ids": "shuffled"}
    assert cp.eval_engine(a, "default", 0.7).env_kwargs == {}
    rows = cp.main([str(a), str(a), "--split", str(tmp_path / "tasks.jsonl"), "--samples", "0", "--bootstrap", "10",
                    "--set", "data.slot_ids=shuffled", "--set", "rollout.max_turns=3"])
    assert {r["figure"] for r in rows} == {"greedy_success", "greedy_progress"}
    with pytest.raises(ValueError, match="lrr"):
        cp.main([str(a), str(a), "--split", str(tmp_path / "tasks.jsonl"), "--set", "grpo.lrr=1"])


def test_identical_per_task_figures_give_a_zero_interval(cp) -> None:
    import numpy as np

    figs = {"greedy_success": np.array([1.0, 0.0, 0.5])}
    rows = cp.compare({"x": figs, "y": {"greedy_success": figs["greedy_success"].copy()}}, "x", 100, 0)
    y = next(r for r in rows if r["policy"] == "y")
    assert y["diff"] == y["lo"] == y["hi"] == 0.0
    rows = cp.compare({"x": figs, "y": {"greedy_success": np.array([1.0, 1.0, 1.0])}}, "x", 500, 0)
    y = next(r for r in rows if r["policy"] == "y")
    assert y["diff"] == pytest.approx(0.5) and 0.0 <= y["lo"] <= 0.5 <= y["hi"] <= 1.0

def test_pooled_seeds_average_their_differences_and_carry_the_spread_between_seeds(cp) -> None:
    import numpy as np

    base = {"greedy_success": np.array([0.0, 0.0, 1.0, 0.0])}
    same = {"s0": {"greedy_success": np.array([1.0, 0.0, 1.0, 0.0])},  # +0.25 each: no spread between seeds
            "s1": {"greedy_success": np.array([0.0, 1.0, 1.0, 0.0])}}
    row = cp.pooled({"base": base, **same}, "base", "arm", 500, 0)[0]
    assert row["policy"] == "arm (2 seeds)" and row["pooled"] == ["s0", "s1"]
    assert row["diff"] == pytest.approx(0.25) and row["mean"] == pytest.approx(0.5)
    apart = {"s0": {"greedy_success": np.array([1.0, 1.0, 1.0, 1.0])},  # +0.75 and -0.25: the same mean, 0.25,
             "s1": {"greedy_success": np.array([0.0, 0.0, 0.0, 0.0])}}  # but the seeds disagree
    wide = cp.pooled({"base": base, **apart}, "base", "arm", 500, 0)[0]
    narrow = cp.pooled({"base": base, **same}, "base", "arm", 500, 0)[0]
    assert wide["diff"] == pytest.approx(0.25)
    assert wide["hi"] - wide["lo"] > narrow["hi"] - narrow["lo"]  # resampling seeds shows their disagreement
    assert wide["lo"] < 0.0 < wide["hi"]
    with pytest.raises(ValueError, match="besides the base"):
        cp.pooled({"base": base}, "base", "arm", 10, 0)



def test_rejects_a_single_policy(cp) -> None:
    with pytest.raises(SystemExit):
        cp.main(["only_one"])
    with pytest.raises(SystemExit):  # a seed given twice would silently count once
        cp.main(["base", "s0", "s0", "--pool", "arm"])


def test_task_counts_spread_over_the_split_and_negative_ones_are_refused(tmp_path: Path) -> None:
    import argparse

    with benchmarks_package():
        from benchmarks._policy_eval import split_tasks

    args = argparse.Namespace(split="test", config="default", set=[], tasks=10, stratum="")
    picked = split_tasks(args)  # not the first ten (all depth 1, plain): every depth and every turn type
    assert len(picked) == 10 and {t.meta["knobs"]["depth"] for t in picked} == {1, 2, 3, 4, 5}
    assert {t.meta["stratum"] for t in picked} == {"plain", "answer", "multi_turn", "missing_param", "missing_tool"}
    with pytest.raises(ValueError, match="--tasks must be >= 0"):
        split_tasks(argparse.Namespace(**{**vars(args), "tasks": -3}))
    # --stratum: only those turn types (the test split holds 40 tasks with a withheld tool, 60 with two turns)
    picked = split_tasks(argparse.Namespace(**{**vars(args), "tasks": 0, "stratum": "missing_tool,multi_turn"}))
    assert len(picked) == 100 and {t.meta["stratum"] for t in picked} == {"missing_tool", "multi_turn"}
    with pytest.raises(ValueError, match="no task of test is of these turn types"):
        split_tasks(argparse.Namespace(**{**vars(args), "stratum": "missing"}))


def test_benchmark_scripts_name_a_bad_input_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    here = Path(__file__).resolve().parents[1] / "benchmarks"
    for argv, words in ((["compare_policies.py", str(tmp_path / "nope"), str(tmp_path / "nope2"), "--samples", "0"],
                         "compare_policies.py: error: cannot load policy"),
                        (["resample.py", "--repeats", "0"], "--repeats 0: --variants, --naive-variants")):
        done = subprocess.run([sys.executable, str(here / argv[0]), *argv[1:]], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 2 and words in done.stderr, (argv, done.stderr[-800:])
        assert "Traceback" not in done.stderr

