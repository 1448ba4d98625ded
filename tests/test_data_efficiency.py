"""benchmarks/data_efficiency.py: its targets, its recording of the curricula, and a tiny
end-to-end run (every arm kind, two seeds, chunked GRPO, CIs, plots, the RESULTS section)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from rods_gym.trainer.config import DataConfig
from rods_gym.curricula import RODSConfig, ReplayOnlySource
from rods_gym.curricula import FixedSeeds, GroupResult
from rods_gym.trainer.tasks import load_tasks

from conftest import BENCHMARKS_DIR, benchmarks_package

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py


@pytest.fixture(scope="module")
def de() -> Any:
    """The benchmark modules, imported from benchmarks/ (sys.path restored after the module)."""
    with benchmarks_package():
        from benchmarks import data_efficiency, llm_runs, llm_summary, recording, report, stats

        yield type("DE", (), {"main": data_efficiency, "stats": stats, "summary": llm_summary, "recording": recording,
                              "runs": llm_runs, "report": report})


# -- statistics (the bootstrap itself: tests/test_benchmark_stats.py) ----------------------------------
def _run(groups: list[dict[str, Any]], successes: list[list[float]], rollouts: list[int], steps: int) -> dict[str, Any]:
    points = [{"target": r, "step": r // 4, "rollouts": r, "distinct_tasks": r // 4,
               "eval": {"test": {"success": s, "progress": s}}} for r, s in zip(rollouts, successes)]
    return {"points": points, "groups": groups, "history": [], "steps": steps, "train_seconds": 1.0,
            "eval_seconds": 1.0}


def _groups(steps: int, silent_every: int, region: str | None = None) -> list[dict[str, Any]]:
    out = []
    for step in range(steps):
        for k in range(4):
            silent = (step * 4 + k) % silent_every == 0
            u = 0.0 if silent else 0.8
            reg = None if region is None else ("boundary" if u >= 0.5 else "hard")
            out.append({"step": step, "task": f"t{step}-{k}", "seed_task": True, "mu": 0.5, "u": u, "silent": silent,
                        "size": 4, "region": reg})
    return out


def test_targets_pass_miss_and_vacuous(de) -> None:
    tasks = {"test": {"ids": [f"x{i}" for i in range(10)], "depth": [1] * 5 + [2] * 5}}
    warm = {s: {"eval": {"test": {"success": [0.0] * 10, "progress": [0.0] * 10}}, "tasks": tasks} for s in (0, 1)}
    good = [[1.0] * 8 + [0.0] * 2]
    mid = [[1.0] * 5 + [0.0] * 5]
    runs = {
        # rods reaches 0.5 (offline's final) at its first point: 4 of offline's 100 rollouts
        "rods": {s: _run(_groups(4, 4, region="x"), [mid[0], good[0]], [4, 100], 4) for s in (0, 1)},
        "offline": {s: _run(_groups(4, 2), [[0.0] * 10, mid[0]], [4, 100], 4) for s in (0, 1)},
        "fixed": {s: _run(_groups(4, 2), [[0.0] * 10, [0.0] * 10], [4, 100], 4) for s in (0, 1)},
        "augment": {s: _run(_groups(4, 2), [[0.0] * 10, good[0]], [4, 100], 4) for s in (0, 1)},
    }
    summary = de.summary.summarize_benchmark(warm, runs, {"samples": 300, "seed": 0})
    reach, fixed, augment, ratio, silent = summary["targets"]
    assert reach["passed"] is True and reach["fraction"] == pytest.approx(4 / 100)
    assert "fixed" in fixed["name"] and fixed["passed"] is True  # 0.8 vs 0.0 on every seed and task: paired > 0
    assert fixed["paired"]["diff"] == pytest.approx(0.8) and fixed["unpaired_disjoint"] is True
    assert "augment" in augment["name"] and augment["passed"] is False  # equal on every task: the difference is 0
    assert augment["paired"] == {"diff": 0.0, "lo": 0.0, "hi": 0.0}
    assert ratio["passed"] is None and "not measured" in ratio["detail"]  # the other groups all have u = 0: n/a
    assert silent["difference"]["diff"] == pytest.approx(0.25 - 0.5)  # second half: rods 0.25, fixed 0.5 silent
    assert silent["passed"] is (silent["difference"]["hi"] < 0)
    per_depth = summary["arms"]["rods"]["final"]["test"]["per_depth"]
    assert per_depth["1"]["success"]["mean"] == 1.0 and per_depth["2"]["success"]["mean"] == pytest.approx(0.6)
    # offline that never improves on the warm start makes target 1 vacuous, not passed
    runs["offline"] = {s: _run(_groups(4, 2), [[0.0] * 10, [0.0] * 10], [4, 100], 4) for s in (0, 1)}
    again = de.summary.summarize_benchmark(warm, runs, {"samples": 300, "seed": 0})
    assert again["targets"][0]["passed"] is None and "vacuous" in again["targets"][0]["detail"]


def test_region_variance_ratio_and_one_appearance_ahead(de) -> None:
    groups = []
    for step in range(6):  # task a: boundary with u 0.8; task b: plateau with u 0.2, both every step
        groups.append({"step": step, "task": "a", "seed_task": True, "mu": 0.5, "u": 0.8, "silent": False, "size": 4,
                       "region": "boundary"})
        groups.append({"step": step, "task": "b", "seed_task": True, "mu": 0.5, "u": 0.2, "silent": False, "size": 4,
                       "region": "plateau"})
    rv = de.recording.region_variance({0: {"groups": groups}}, {"samples": 300, "seed": 0}, "rods")
    assert rv["ratio"]["ratio"] == pytest.approx(4.0)
    assert rv["ratio"]["lo"] == pytest.approx(4.0) and rv["ratio"]["hi"] == pytest.approx(4.0)
    assert rv["ratio_next_appearance"]["n_boundary"] == 5  # first appearances have no earlier region
    assert rv["regions"]["boundary"]["mean"] == pytest.approx(0.8)
    assert rv["regions"]["mastered"]["n"] == 0


# -- recording the curricula -----------------------------------------------------------------------
def _returns(rng: np.random.Generator, g: int) -> tuple[float, ...]:
    kind = int(rng.integers(0, 4))
    if kind == 0:
        return tuple(float(x) for x in rng.integers(0, 2, size=g))
    return tuple([0.0, 1.0, 0.5][kind - 1] for _ in range(g))


def test_recording_source_sees_the_sources_own_regions_and_changes_nothing(de) -> None:
    seeds = load_tasks("train", DataConfig())[:24]
    config = RODSConfig(group_size=4, calibration_groups=4)
    plain, inner = ReplayOnlySource(seeds, config, 3), ReplayOnlySource(seeds, config, 3)
    rec = de.recording.RecordingSource(inner, [t.id for t in seeds])
    rng = np.random.default_rng(0)
    for step in range(8):
        tasks = rec.next_batch(step, 6)
        assert [t.id for t in tasks] == [t.id for t in plain.next_batch(step, 6)]
        groups = [GroupResult(t, _returns(rng, 4)) for t in tasks]
        rec.observe(step, groups)
        plain.observe(step, groups)
        mine = [g for g in rec.groups if g["step"] == step]
        tel = plain.telemetry()
        for region in ("boundary", "mastered", "hard", "plateau"):
            assert sum(g["region"] == region for g in mine) / 6 == pytest.approx(tel[f"region/{region}"])
        assert sum(g["silent"] for g in mine) / 6 == pytest.approx(tel["silent_fraction"])
    assert json.dumps(rec.state_dict(), sort_keys=True, default=str) == \
        json.dumps(plain.state_dict(), sort_keys=True, default=str)
    assert rec.rollouts == 8 * 6 * 4
    assert rec.distinct_tasks == len({g["task"] for g in rec.groups}) <= 24
    fixed = de.recording.RecordingSource(FixedSeeds(seeds, 0), [t.id for t in seeds])
    fixed.observe(0, [GroupResult(t, (0.0, 0.0)) for t in fixed.next_batch(0, 3)])
    assert [g["region"] for g in fixed.groups] == [None] * 3 and fixed.extra_rollouts == 0
    assert getattr(fixed, "env_id", None) is None  # lookups the trainer makes fall through to the source


def test_write_section_replaces_only_its_own_block(de, tmp_path: Path) -> None:
    path = tmp_path / "RESULTS.md"
    path.write_text("# Results\n\nother benchmark text\n")
    de.report.write_section(path, "data_efficiency:smoke", "first")
    de.report.write_section(path, "data_efficiency:cpu", "cpu text")
    de.report.write_section(path, "data_efficiency:smoke", "second")
    text = path.read_text()
    assert "other benchmark text" in text and "cpu text" in text and "second" in text and "first" not in text
    assert text.count("<!-- data_efficiency:smoke -->") == 1 and text.count("<!-- /data_efficiency:smoke -->") == 1


def test_scale_files_are_valid_and_errors_name_the_problem(de, tmp_path: Path) -> None:
    for name in ("smoke", "cpu", "gpu"):
        scale = de.main.load_scale(name)
        assert scale.eval_at[-1] == scale.rollout_budget
    cpu = de.main.load_scale("cpu")
    # the headline's protocol (issue 40): its four arms, >= 5 seeds, >= 5 evaluation points; ablations by --arms
    assert len(cpu.seeds) >= 5 and len(cpu.eval_at) >= 5
    assert set(cpu.arms) == {"fixed", "rods", "augment", "offline"} and set(cpu.arms) <= set(de.main.ARMS)
    assert cpu.eval_at[0] * 20 <= cpu.rollout_budget  # target 1 (<= 1/20 of the trajectories) is checkable
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"arms": ["fixed", "magic"], "seeds": [0], "rollout_budget": 8, "eval_at": [8],
                                   "eval_tasks": {"test": 2}}))
    with pytest.raises(ValueError, match="magic"):
        de.main.load_scale(str(bad))
    bad.write_text(yaml.safe_dump({"arms": ["fixed"], "seeds": [0], "rollout_budget": 8, "eval_at": [4, 6],
                                   "eval_tasks": {"test": 2}}))
    with pytest.raises(ValueError, match="ending at the budget"):
        de.main.load_scale(str(bad))


def test_command_line_options_are_applied_or_refused(de, tmp_path: Path) -> None:
    """An option given is applied, 0 and '' included (never taken as "not given"); what the scale cannot take is
    a ValueError naming it."""
    smoke = de.main.load_scale("smoke")

    def scale(*argv: str):
        return de.main.apply_args(smoke, de.main.parse_args(list(argv)))

    assert scale("--budget", "16").rollout_budget == 16 and scale("--jobs", "2").jobs == 2
    for argv, words in ((["--budget", "0"], "--budget must be >= 1"), (["--jobs", "0"], "jobs and threads must be >= 1"),
                        (["--seeds", ""], "seeds must be a non-empty list"), (["--seeds", "a,b"], "comma-separated integers"),
                        (["--arms", "rods,rods"], "arms must be distinct")):
        with pytest.raises(ValueError, match=words):
            scale(*argv)
    with pytest.raises(ValueError, match="--report-only: .* holds no finished warm start"):
        de.main.run_benchmark(smoke, tmp_path / "empty", report_only=True)


# -- end to end ------------------------------------------------------------------------------------
def _tiny_scale(tmp_path: Path, arms: list[str], seeds: list[int], eval_at: list[int]) -> Path:
    smoke = yaml.safe_load((BENCHMARKS_DIR / "configs" / "smoke.yaml").read_text())
    smoke.update(arms=arms, seeds=seeds, rollout_budget=eval_at[-1], eval_at=eval_at,
                 eval_tasks={"test": 4, "ood": 3}, offline={"tasks": 12, "synth_seed": 0},
                 bootstrap={"samples": 200, "seed": 0}, scale="tiny")
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(smoke))
    return path


@pytest.mark.slow
def test_end_to_end_tiny_scale(de, tmp_path: Path) -> None:
    scale = _tiny_scale(tmp_path, ["fixed", "augment", "offline", "rods"], [0, 1], [4, 8])
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\nkeep me\n")
    out = tmp_path / "out"
    argv = ["--scale", str(scale), "--out", str(out), "--results", str(results)]
    assert de.main.main(argv) == 0
    summary = json.loads((out / "results.json").read_text())
    arms = summary["summary"]["arms"]
    assert set(arms) == {"fixed", "augment", "offline", "rods"}
    for arm, entry in arms.items():
        assert entry["seeds"] == [0, 1]
        assert [p["rollouts_mean"] for p in entry["curve"]] == [0, 4, 8]  # warm start, then the two points
        final = entry["final"]
        for split in ("test", "ood"):
            ci = final[split]["success"]
            assert 0.0 <= ci["lo"] <= ci["mean"] <= ci["hi"] <= 1.0
            assert sum(v["n"] for v in final[split]["per_depth"].values()) == {"test": 4, "ood": 3}[split]
        assert 0 < final["distinct_tasks_mean"] <= 4
    run = json.loads((out / "seed1" / "rods" / "run.json").read_text())
    assert run["steps"] == 2 and len(run["groups"]) == 4 and len(run["history"]) == 2
    assert all(g["region"] in ("boundary", "mastered", "hard", "plateau") for g in run["groups"])
    assert run["points"][-1]["loop_rollouts"] == run["points"][-1]["rollouts"] == 8
    assert json.loads((out / "seed0" / "augment" / "run.json").read_text())["env_id"].startswith("rods/ToolChain-Aug")
    offline = list((out / "offline").glob("synth-*-n12-seed0.jsonl"))
    assert len(offline) == 1 and sum(1 for _ in offline[0].open()) == 12
    for png in ("success_vs_rollouts", "success_vs_tasks", "rods_pool_composition", "rods_variance_by_region",
                "silent_fraction"):
        assert (out / "plots" / f"{png}.png").stat().st_size > 5000
    text = results.read_text()
    assert "keep me" in text and "<!-- data_efficiency:tiny -->" in text
    for row in ("| fixed | 2 |", "| rods | 2 |", "| warm start (SFT) | 2 |", "Targets", "--scale"):
        assert row in text
    # a second invocation reuses every finished run and reports the same numbers
    first = arms["rods"]["final"]["test"]["success"]
    assert de.main.main(argv) == 0
    again = json.loads((out / "results.json").read_text())["summary"]["arms"]["rods"]["final"]["test"]["success"]
    assert again == first


@pytest.mark.slow
def test_chunked_training_equals_one_unbroken_run(de, tmp_path: Path) -> None:
    """Evaluating between chunks (resume from the chunk's checkpoint) does not change the run."""
    scale = de.main.load_scale(str(_tiny_scale(tmp_path, ["rods"], [0], [8])))
    base = de.main.base_train(scale)
    train = de.main.arm_train(base, "rods", scale, None)
    evals = de.runs.EvalSpec((("test", 3),), 64)
    warm = de.runs.run_warm_start(de.runs.warm_start_job(0, base, str(tmp_path / "warm"), evals))
    runs = [de.runs.run_arm(de.runs.arm_job("rods", 0, train, str(tmp_path / name), warm["policy_dir"], points, evals))
            for name, points in (("chunked", (4, 8, 12)), ("whole", (12,)))]
    chunked, whole = runs
    assert chunked["steps"] == whole["steps"] == 3
    assert [(g["task"], g["mu"], g["u"]) for g in chunked["groups"]] == [(g["task"], g["mu"], g["u"]) for g in whole["groups"]]
    assert chunked["points"][-1]["eval"] == whole["points"][-1]["eval"]
