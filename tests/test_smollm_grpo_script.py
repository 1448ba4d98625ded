"""benchmarks/smollm_grpo.py's protocol, on the embedded tiny model (``--config default``): one shared warm start,
the arm x seed runs in parallel processes (``--jobs``), each paired with the warm start and RODS with fixed, and a
``--report-only`` that rebuilds the same tables from the saved runs. The SmolLM2 figures are in benchmarks/RESULTS.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import benchmarks_on_path, benchmarks_package

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py

TINY = ["--config", "default", "--steps", "1", "--eval-tasks", "3", "--set", "sft.steps=4", "--set",
        "rollout.tasks_per_step=2", "--set", "rollout.group_size=2", "--set", "rollout.max_turns=4"]


def test_parallel_runs_share_one_warm_start_and_report_only_repeats_the_tables(tmp_path: Path) -> None:
    out = tmp_path / "grpo"
    with benchmarks_package(), benchmarks_on_path():
        import smollm_grpo

        argv = [*TINY, "--arms", "rods,fixed", "--seeds", "0,1", "--jobs", "2", "--threads", "2", "--out", str(out)]
        assert smollm_grpo.main(argv) == 0
        first = json.loads((out / "summary.json").read_text())["summary"]
        warm = json.loads((out / "warm_start" / "warm_start.json").read_text())
        runs = {(arm, s): json.loads((out / f"seed{s}" / arm / "run.json").read_text())
                for arm in ("rods", "fixed") for s in (0, 1)}
        assert smollm_grpo.main([*argv, "--report-only"]) == 0
        again = json.loads((out / "summary.json").read_text())["summary"]
        with pytest.raises(SystemExit):  # --jobs 0 is refused by the parser, naming the flag
            smollm_grpo.main([*TINY, "--jobs", "0", "--out", str(out)])

    assert again == first
    for (arm, seed), rec in runs.items():
        assert rec["steps"] == 1, (arm, seed)
        settings = json.loads(rec["key"])["settings"]  # two runs at a time share --threads 2: one thread each
        assert settings["threads"] == settings["train"]["threads"] == 1, (arm, seed)
        assert len(rec["points"][-1]["eval"]["test"]["success"]) == 3
        assert settings["warm_start"] == warm["policy_dir"]
    test = first["splits"]["test"]
    assert set(test["arms"]) == {"rods", "fixed"} and test["arms"]["rods"]["seeds"] == [0, 1]
    assert "rods_minus_fixed" in test and len(warm["eval"]["test"]["success"]) == 3
    for arm, entry in test["arms"].items():  # each arm's difference is paired with the one shared warm start
        after = sum(entry["per_seed"]) / 2
        before = sum(warm["eval"]["test"]["success"]) / 3
        assert entry["minus_warm_start"]["mean"] == pytest.approx(after - before), arm
    by_type = test["per_turn_type"]  # the same tasks, split by turn type: the counts and the weighted means add up
    assert sum(row["n"] for row in by_type.values()) == 3
    for key, overall in (("warm_start", sum(warm["eval"]["test"]["success"]) / 3),
                         ("rods", sum(test["arms"]["rods"]["per_seed"]) / 2)):
        assert sum(row["n"] * row[key] for row in by_type.values()) / 3 == pytest.approx(overall), key
