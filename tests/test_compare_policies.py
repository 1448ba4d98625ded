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

    with benchmarks_on_path():
        from _policy_eval import split_tasks

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
                        (["resample.py", "--repeats", "0"], "--repeats 0: --variants, --naive-variants"),
                        (["recall_probe.py", "--eval-every", "0"], "--eval-every must be >= 1")):
        done = subprocess.run([sys.executable, str(here / argv[0]), *argv[1:]], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 2 and words in done.stderr, (argv, done.stderr[-800:])
        assert "Traceback" not in done.stderr


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


# -- benchmarks/grpo_probe.py: GRPO on fresh tasks, every setting on the same task sequence ----
@pytest.fixture(scope="module")
def gp() -> Any:
    with benchmarks_on_path():
        import grpo_probe

        yield grpo_probe


PROBE_SMOKE = ["--steps", "2", "--eval-tasks", "4", "rollout.tasks_per_step=4", "rollout.group_size=3",
               "rollout.max_turns=4", "eval.samples=1", "grpo.sft_weight=0", "checkpoint_every=0"]


def test_grpo_probe_trains_on_one_fresh_task_sequence_and_lr0_is_the_reference(gp, tmp_path: Path,
                                                                             monkeypatch) -> None:
    import torch

    from rods_gym.trainer.policy import load_policy

    start = warm_tiny_policy(tmp_path / "start", sft_steps=80)
    fresh = gp.demonstration_tasks(3, seed=777)
    assert len(fresh) == 3 and fresh == gp.demonstration_tasks(3, seed=777)  # seeded: the same sequence every run
    # the smoke policy only knows the easy seeds: train on them so that groups have spread (the loop is what is tested)
    monkeypatch.setattr(gp, "demonstration_tasks", lambda n, seed: (easy_seed_tasks() * n)[:n])
    ref = gp.main([str(start), str(tmp_path / "lr0"), *PROBE_SMOKE, "grpo.lr=0"])
    moved = gp.main([str(start), str(tmp_path / "lr1e-2"), *PROBE_SMOKE, "grpo.lr=1e-2"])
    assert [q["steps"] for q in ref["quarters"]] == [[1, 1], [2, 2]] == [q["steps"] for q in moved["quarters"]]
    # step 1 rolls out before any update: the same fresh tasks and episodes in both runs
    assert ref["quarters"][0] == moved["quarters"][0]
    assert ref["test"]["episodes"] == 4 and ref["test"]["sampled"]["samples"] == 1
    assert json.loads((tmp_path / "lr0" / "probe.json").read_text()) == json.loads(json.dumps(ref))
    weights = {name: load_policy(path).model.state_dict() for name, path in
               (("start", start), ("lr0", tmp_path / "lr0" / "checkpoints" / "step-000002" / "policy"),
                ("moved", tmp_path / "lr1e-2" / "checkpoints" / "step-000002" / "policy"))}
    assert all(torch.equal(weights["start"][k], v) for k, v in weights["lr0"].items())  # the reference never moves
    assert any(not torch.equal(weights["start"][k], v) for k, v in weights["moved"].items())


def test_grpo_probe_rejects_the_warm_starts_own_tasks_and_no_steps(gp, tmp_path: Path) -> None:
    for bad in (["--data-seed", "505"], ["--steps", "0"]):
        with pytest.raises(SystemExit):
            gp.main(["unused", str(tmp_path / "x"), *bad])


def test_grpo_probe_never_deletes_what_it_did_not_write(gp, tmp_path: Path) -> None:
    run = tmp_path / "run"
    policy = warm_tiny_policy(run / "sft_policy", sft_steps=2)
    (run / "config.yaml").write_text("name: x\n")
    for out in (run, run / "sft_policy"):  # the run directory, or the policy itself
        with pytest.raises(ValueError, match="holds the policy"):
            gp.probe(policy, out, steps=1, eval_tasks=2)
    with pytest.raises(ValueError, match="holds files a probe does not write \\(config.yaml"):
        gp.clear_output(run, tmp_path / "elsewhere")  # a policy elsewhere, OUT a directory of other files
    earlier = tmp_path / "earlier"
    (earlier / "checkpoints").mkdir(parents=True)
    (earlier / "probe.json").write_text("{}")
    with pytest.raises(FileNotFoundError):  # a mistyped policy path: OUT is untouched
        gp.probe(tmp_path / "nope", earlier, steps=1, eval_tasks=2)
    assert (earlier / "probe.json").exists()
    gp.clear_output(earlier, policy)  # an earlier probe's output is replaced
    assert earlier.is_dir() and not any(earlier.iterdir())
    assert (run / "sft_policy" / "config.json").exists() and (run / "config.yaml").exists()
    with pytest.raises(ValueError, match="--eval-tasks must be >= 1"):
        gp.probe(policy, tmp_path / "new", steps=1, eval_tasks=0)


def test_grpo_probe_fit_trains_on_train_tasks_the_policy_fails(gp, tmp_path: Path, capsys) -> None:
    from rods_gym.trainer.config import load_config
    from rods_gym.trainer.loop import env_kwargs, eval_settings
    from rods_gym.trainer.policy import load_policy

    write_jsonl(easy_seed_tasks(), tmp_path / "train.jsonl")
    weak = warm_tiny_policy(tmp_path / "weak", sft_steps=2)  # fails every easy seed greedily
    split = [f"data.train_split={tmp_path / 'train.jsonl'}"]
    report = gp.main([str(weak), str(tmp_path / "fit"), "--fit", "3", *PROBE_SMOKE, *split, "grpo.lr=1e-3"])
    assert report["fit"]["tasks"] == 3 == report["tasks_per_step"] and 0.0 <= report["fit"]["greedy_success"] <= 1.0
    cfg = load_config("default", ["rollout.max_turns=4", *split])
    engine = gp.RolloutEngine(load_policy(weak), cfg.data.env_id, eval_settings(cfg), env_kwargs(cfg))
    failed = gp.failed_tasks(engine, easy_seed_tasks(), 3)
    assert len(failed) == 3 and not any(t.success for t in engine.run(failed, 1, greedy=True)[0])
    strong = warm_tiny_policy(tmp_path / "strong", sft_steps=80)  # solves most seeds: too few failures to fit 12
    with pytest.raises(SystemExit):
        gp.main([str(strong), str(tmp_path / "x"), "--fit", "12", *PROBE_SMOKE, *split])
    assert "train tasks greedily" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        gp.main([str(weak), str(tmp_path / "x"), "--fit", "-1"])


def test_grpo_probe_strata_pick_the_turn_types_a_run_trains_on(gp, tmp_path: Path) -> None:
    """``--strata``: only those turn types (share 1), or that share of them beside tasks drawn like the seeds."""
    only = gp.fresh_tasks(6, 777, ["missing_tool"])
    assert len(only) == 6 and {t.meta["stratum"] for t in only} == {"missing_tool"}
    assert only == gp.fresh_tasks(6, 777, ["missing_tool"])  # seeded
    half = gp.fresh_tasks(8, 777, ["missing_tool", "multi_turn"], share=0.5)
    assert {t.meta["stratum"] for t in half[:4]} <= {"missing_tool", "multi_turn"}
    assert half[4:] == gp.demonstration_tasks(4, seed=778)
    assert gp.fresh_tasks(5, 777) == gp.demonstration_tasks(5, seed=777)  # no strata: drawn like the seeds
    for kwargs, words in (({"strata": ["missing"]}, "unknown turn type"),
                          ({"strata": ["plain"], "strata_share": 0.0}, "--strata-share must be in"),
                          ({"strata": ["plain"], "fit": 3}, "give one of them"),
                          ({"strata": ["plain"], "strata_share": 0.5, "data_seed": 504}, "sft.data_seed 505")):
        with pytest.raises(ValueError, match=words):
            gp.probe("unused", tmp_path / "x", steps=1, **kwargs)
    assert not (tmp_path / "x").exists()  # refused before anything is written


def test_grpo_probe_low_rank_trains_lora_adapters_and_saves_merged_weights(gp, tmp_path: Path, monkeypatch) -> None:
    import torch

    from rods_gym.trainer.policy import load_policy

    start = warm_tiny_policy(tmp_path / "start", sft_steps=80)  # partial success: GRPO groups have spread
    with pytest.raises(ValueError, match="--lowrank must be >= 0"):
        gp.probe(str(start), tmp_path / "x", steps=1, lowrank=-1)
    # the probe with low-rank updates: only the decoder's linear weights move
    monkeypatch.setattr(gp, "demonstration_tasks", lambda n, seed: (easy_seed_tasks() * n)[:n])
    report = gp.main([str(start), str(tmp_path / "lr"), *PROBE_SMOKE, "grpo.lr=1e-2", "--lowrank", "2"])
    assert report["lowrank"] == 2
    a = load_policy(start).model.state_dict()
    b = load_policy(tmp_path / "lr" / "checkpoints" / "step-000002" / "policy").model.state_dict()
    changed = {k for k in a if not torch.equal(a[k], b[k])}
    assert changed and all(k.startswith("model.layers.") and "norm" not in k for k in changed)
    # merged with a rank-2 update: every changed weight differs from the warm start's by rank <= 2
    assert all(torch.linalg.matrix_rank(b[k] - a[k], atol=1e-6) <= 2 for k in changed)
    assert (tmp_path / "lr" / "checkpoints" / "step-000002" / "policy" / "adapter" / "adapter_config.json").exists()
