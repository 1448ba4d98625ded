"""The headline benchmark (benchmarks/headline.py, ppo_headline.py its old name) for both learners: every arm's
wiring at a tiny scale (equal env-step budgets, the curriculum observing every complete group, greedy
evaluation), the GRPO learner's share of groups carrying gradient, the structure figures, the two new sources
(procedural, RODS with random parents) and the PASS/MISS logic on synthetic numbers."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("sb3_contrib")

from rods_gym import load_split  # noqa: E402
from rods_gym.curricula import RODSConfig  # noqa: E402
from rods_gym.synth import make_resampler  # noqa: E402
from rods_gym.tasksets import held_out_tools  # noqa: E402
from rods_gym.curricula import ProceduralSource  # noqa: E402
from rods_gym.curricula import RandomParentRODSSource  # noqa: E402
from rods_gym.curricula import GroupResult  # noqa: E402

from conftest import benchmarks_package  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py


@pytest.fixture(scope="module")
def ph() -> Any:
    with benchmarks_package():
        from benchmarks import evaluator, headline, headline_summary, learners

        yield type("PH", (), {"headline": headline, "learners": learners, "evaluator": evaluator,
                              "summary": headline_summary, "ARMS": headline.ARMS,
                              "DEFAULT_ENV_ID": headline.DEFAULT_ENV_ID, "main": staticmethod(headline.main)})


TINY_RODS = {"calibration_groups": 4, "synth_every": 1, "parents_per_round": 2, "variants_per_parent": 2}


def _tiny(ph, learner: str, out, arms) -> dict[str, dict[str, Any]]:
    """One tiny run of each arm: 256 env steps, evaluated twice on 4 + 2 tasks."""
    h = ph.headline
    scale = replace(h.load_scale("smoke", learner), budget=256, n_points=2, eval_tasks={"test": 4, "ood": 2},
                    offline_n=8, tasks_per_batch=2, group_size=4, rods=TINY_RODS)
    if learner == "ppo":
        scale = replace(scale, learner_config={**scale.learner_config, "n_envs": 2, "n_steps": 64, "batch_size": 64,
                                               "n_epochs": 1, "net_arch": [16]})
    else:
        scale = replace(scale, learner_config={"n_envs": 4, "epochs": 1, "minibatches": 1, "net_arch": [16]})
    offline = ph.learners.offline_set(out, scale.offline_n)
    return {arm: ph.learners.run_job(h.job_of(arm, 0, scale, ph.DEFAULT_ENV_ID, {}, str(offline))) for arm in arms}


@pytest.fixture(scope="module")
def tiny_runs(ph, tmp_path_factory) -> dict[str, dict[str, Any]]:
    """Every arm under MaskablePPO: 2 rollouts of 128 steps."""
    return _tiny(ph, "ppo", tmp_path_factory.mktemp("headline_ppo"), ph.ARMS)


@pytest.fixture(scope="module")
def grpo_runs(ph, tmp_path_factory) -> dict[str, dict[str, Any]]:
    """The GRPO learner on the arms whose wiring differs (seeds, synthesis, the augmented env, a file, a stream)."""
    return _tiny(ph, "grpo", tmp_path_factory.mktemp("headline_grpo"),
                 ("fixed", "rods", "augment", "offline", "procedural", "naive"))


def test_every_arm_runs_the_same_env_step_budget(ph, tiny_runs) -> None:
    assert set(tiny_runs) == set(ph.ARMS)
    assert {r["env_steps"] for r in tiny_runs.values()} == {256}
    assert {tuple(p["env_steps"] for p in r["points"]) for r in tiny_runs.values()} == {(128, 256)}
    assert tiny_runs["augment"]["env_id"].startswith("rods/ToolChain-Aug-")
    assert tiny_runs["rods_augment"]["env_id"] == tiny_runs["augment"]["env_id"]  # RODS's source, augmented env
    assert all(r["eval_env_id"] == ph.DEFAULT_ENV_ID for r in tiny_runs.values())  # eval never augmented


def test_the_curriculum_observes_every_complete_group(tiny_runs) -> None:
    for arm, r in tiny_runs.items():
        assert r["episodes_callback"] == r["episodes_run"] > 0, arm  # the callback saw every finished episode
        # every finished episode is in an observed group or in a batch still being run
        assert r["episodes_observed"] + r["episodes_pending"] == r["episodes_callback"], arm
        assert r["episodes_observed"] == 4 * len(r["groups"]), arm  # G = 4 per group
        assert r["batches_handed_out"] - r["steps"] <= 2, arm  # at most the batches still running
        assert r["steps"] >= 3, arm


def test_eval_is_greedy_and_complete(tiny_runs) -> None:
    for arm, r in tiny_runs.items():
        assert r["eval_deterministic"] and r["predict_calls"] > 0, arm
        for p in r["points"]:
            assert [len(p["eval"][s]["success"]) for s in ("test", "ood")] == [4, 2], arm


def test_greedy_evaluate_batches_with_deterministic_actions(ph) -> None:
    import gymnasium as gym

    import rods_gym  # noqa: F401

    tasks = load_split("test")[:5]
    envs = [gym.make(ph.DEFAULT_ENV_ID) for _ in range(2)]  # fewer envs than tasks: they take turns
    calls: list[tuple[int, bool]] = []
    nvec = ph.evaluator.action_dims(envs[0].action_space)
    rnd = ph.evaluator.random_masked_predict(0, nvec)

    def spy(obs, action_masks, deterministic):
        calls.append((len(action_masks), deterministic))
        return rnd(obs, action_masks=action_masks, deterministic=deterministic)

    res = ph.evaluator.greedy_evaluate(spy, envs, tasks)
    assert res["ids"] == [t.id for t in tasks] and len(res["success"]) == 5
    assert calls and all(d is True for _, d in calls) and max(n for n, _ in calls) == 2


def test_distinct_tasks_and_what_the_arms_train_on(tiny_runs) -> None:
    seeds = {t.id for t in load_split("train")}
    proc = tiny_runs["procedural"]
    assert proc["distinct_tasks"] == len(proc["groups"])  # never a task twice
    assert not any(g["seed_task"] for g in proc["groups"])
    assert all(g["seed_task"] for g in tiny_runs["fixed"]["groups"])
    assert not any(g["task"] in seeds for g in tiny_runs["offline"]["groups"])
    assert tiny_runs["offline"]["offline_set_size"] == 8
    assert all(g["region"] is not None for g in tiny_runs["rods"]["groups"])
    assert all(g["region"] is None for g in tiny_runs["fixed"]["groups"])


def test_procedural_source_is_fresh_stratified_and_keeps_out_held_out_tools() -> None:
    held = set(held_out_tools())
    assert held
    a, b = ProceduralSource(0), ProceduralSource(1)
    ta, tb = a.next_batch(0, 30), b.next_batch(0, 30)
    assert len({t.id for t in ta}) == 30
    assert [t.calls for t in ta] == [t.calls for t in ProceduralSource(0).next_batch(0, 30)]  # seeded
    assert [t.calls for t in ta] != [t.calls for t in tb]
    assert not any(c.tool in held for t in ta + tb for c in t.calls)
    assert len({t.meta["knobs"]["depth"] for t in ta}) >= 3
    with pytest.raises(ValueError, match="seed"):
        ProceduralSource(-1)


def test_random_parent_rods_draws_parents_outside_the_boundary() -> None:
    seeds = load_split("train")
    cfg = RODSConfig(group_size=4, kappa_rule="fixed", kappa=0.5, synth_every=1, parents_per_round=8,
                     variants_per_parent=1)
    src = RandomParentRODSSource(seeds, make_resampler(), cfg, rng_seed=0)
    tasks = src.next_batch(0, 16)
    src.observe(0, [GroupResult(t, (0.0, 0.0, 0.0, 0.0)) for t in tasks])  # all silent: no boundary at all
    assert src.telemetry()["boundary_fraction"] == 0.0
    assert src.telemetry()["synth/parents"] > 0 and src.telemetry()["synth/staged"] > 0
    from rods_gym.curricula import RODSSource

    plain = RODSSource(seeds, make_resampler(), cfg, rng_seed=0)
    tasks = plain.next_batch(0, 16)
    plain.observe(0, [GroupResult(t, (0.0, 0.0, 0.0, 0.0)) for t in tasks])
    assert plain.telemetry()["synth/parents"] == 0  # RODS itself synthesizes from the boundary only


def test_grpo_runs_every_arm_kind_to_the_budget_and_records_its_steps(grpo_runs) -> None:
    """The GRPO learner through the same registry and schedule: whole steps of B x G episodes to at least the
    budget (less than one step over), every group observed once, greedy evaluation at each point."""
    for arm, r in grpo_runs.items():
        assert r["learner"] == "grpo" and 256 <= r["env_steps"] < 256 + 400, arm
        assert [p["env_steps"] for p in r["points"]] == sorted(p["env_steps"] for p in r["points"]), arm
        assert r["episodes_observed"] == r["episodes_run"] == 4 * len(r["groups"]) == 8 * r["steps"], arm
        assert len(r["log"]) == r["steps"] and r["eval_deterministic"], arm
        # the step log's silent fraction is the recorded groups' (the same groups, the same returns)
        for row in r["log"]:
            mine = [g["silent"] for g in r["groups"] if g["step"] == int(row["step"])]
            assert row["silent_fraction"] == pytest.approx(sum(mine) / len(mine)), arm
    assert grpo_runs["augment"]["env_id"].startswith("rods/ToolChain-Aug-")
    assert grpo_runs["rods"]["catalog"] and not grpo_runs["fixed"]["catalog"]  # the RODS family describes its tasks


def test_summary_reports_gradient_share_and_structure(ph, grpo_runs) -> None:
    runs = {arm: {0: r} for arm, r in grpo_runs.items()}
    sets = ph.evaluator.split_tasks({"test": 4, "ood": 2})
    summary = ph.summary.summarize(runs, ph.summary.task_meta(sets), None)
    for arm, e in summary["arms"].items():
        assert [a + b for a, b in zip(e["gradient_windows"], e["silent_windows"])] == pytest.approx(
            [1.0] * len(e["silent_windows"])), arm
    st = summary["arms"]["rods"]["structure"]
    assert st["groups"]["seed"] + st["groups"]["variant"] == len(grpo_runs["rods"]["groups"])
    assert 0.0 <= st["carry"]["seed"] <= 1.0
    catalog = grpo_runs["rods"]["catalog"]
    kids = [d for d in catalog.values() if d["parent"] in catalog]
    assert st["variants"] == len(kids)
    if kids:  # RODS's tier-0 variants keep their parent's signature class
        assert st["keep_signature"] == pytest.approx(sum(d["sig"] == catalog[d["parent"]]["sig"] for d in kids)
                                                     / len(kids))
    text = ph.summary.report(summary, {"scale": "tiny", "learner": "grpo", "command": "cmd", "date": "d",
                                       "machine": "m", "wall_seconds": 60.0, "env_id": ph.DEFAULT_ENV_ID,
                                       "env_kwargs": {}, "budget": 256, "seeds": [0], "group_size": 4,
                                       "tasks_per_batch": 2})
    assert "groups with return variance > 0" in text and "The structure question" in text



def test_headline_figure_from_the_summaries(ph, grpo_runs, tmp_path) -> None:
    """`python -m benchmarks.plots` draws one panel per learner from the summaries headline.py writes, skips an
    arm a learner did not run, and names a bad argument."""
    import json

    from benchmarks import plots

    runs = {arm: {0: r} for arm, r in grpo_runs.items()}
    summary = ph.summary.summarize(runs, ph.summary.task_meta(ph.evaluator.split_tasks({"test": 4, "ood": 2})), None)
    summary["setup"] = {"group_size": 4}
    for learner in ("grpo", "ppo"):
        (tmp_path / learner).mkdir()
        (tmp_path / learner / "summary.json").write_text(json.dumps(summary, default=float))
    out = tmp_path / "fig.png"
    assert plots.main(["--out", str(out), "--arms", "fixed,rods,not_run",
                       f"grpo={tmp_path / 'grpo'}", f"ppo={tmp_path / 'ppo'}"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit):
        plots.main(["--out", str(out), str(tmp_path / "grpo")])  # no learner= prefix
    with pytest.raises(SystemExit):
        plots.main(["--out", str(out), f"grpo={tmp_path / 'missing'}"])

def _runs_with(successes: dict[str, list[list[float]]], silent: dict[str, list[bool]]) -> dict[str, Any]:
    """Run records with the given final test success matrices ([seeds, tasks]) and second-half silent flags."""
    runs = {}
    for arm, matrix in successes.items():
        flags = silent.get(arm, [False])
        runs[arm] = {s: {"points": [{"env_steps": 1, "eval": {"test": {"success": row}}}], "steps": 2,
                         "groups": [{"step": 1, "silent": f} for f in flags]} for s, row in enumerate(matrix)}
    return runs


def _arms(runs: dict[str, Any], distinct: dict[str, float], ratio: float | None = None) -> dict[str, Any]:
    from benchmarks.recording import late_silent_flags

    arms = {}
    for arm, by_seed in runs.items():
        arms[arm] = {"distinct_tasks": distinct.get(arm, 400), "silent_late": late_silent_flags(by_seed)}
    if ratio is not None:
        arms["rods"]["region_variance"] = {"ratio": {"ratio": ratio, "lo": ratio - 0.1, "hi": ratio + 0.1}}
    arms.get("offline", {})["offline_set_size"] = 17_000
    return arms


def test_targets_pass_on_numbers_that_meet_them(ph) -> None:
    good, poor = [[1.0] * 16 + [0.0] * 4] * 3, [[1.0] * 8 + [0.0] * 12] * 3
    runs = _runs_with({"rods": good, "fixed": poor, "augment": poor, "offline": poor},
                      {"rods": [False] * 90 + [True] * 10, "fixed": [True] * 60 + [False] * 40})
    targets = ph.summary.targets(runs, _arms(runs, {"rods": 600, "offline": 7000}, ratio=2.4))
    assert [t.verdict for t in targets] == ["PASS"] * 5, [t.detail for t in targets]


def test_targets_are_decided_by_the_paired_difference(ph) -> None:
    """Two arms whose own intervals overlap but which differ on the same tasks for every seed: the unpaired
    reading says nothing, the paired difference decides (and the detail shows both)."""
    base = np.random.default_rng(0).random((5, 200)) < 0.5
    better = base.copy()
    better[:, :12] = True  # the same tasks, solved more often: +0.06 on average at most
    runs = _runs_with({"rods": better.astype(float).tolist(), "fixed": base.astype(float).tolist()}, {})
    t = ph.summary.targets(runs, _arms(runs, {}))[0]
    assert t.verdict == "PASS" and t.figures["paired"]["lo"] > 0 and t.figures["unpaired_disjoint"] is False
    assert "CIs overlap" in t.detail


def test_targets_miss_on_numbers_that_do_not(ph) -> None:
    rng = np.random.default_rng(1)
    noisy = (rng.random((3, 40)) < 0.5).astype(float).tolist()
    other = (rng.random((3, 40)) < 0.5).astype(float).tolist()
    better = [[1.0] * 40] * 3
    runs = _runs_with({"rods": noisy, "fixed": other, "augment": better, "offline": better},
                      {"rods": [True] * 6 + [False] * 4, "fixed": [True] * 5 + [False] * 5})
    targets = ph.summary.targets(runs, _arms(runs, {"rods": 1000, "offline": 7000}, ratio=1.5))
    assert [t.verdict for t in targets] == ["MISS"] * 5, [t.detail for t in targets]
    assert "0.059 of offline's 17,000" in targets[2].detail
    only_fixed = {"fixed": runs["fixed"]}
    assert [t.verdict for t in ph.summary.targets(only_fixed, _arms(only_fixed, {}))] == ["N/A"] * 5


def test_bad_arguments_are_named(ph) -> None:
    with pytest.raises(ValueError, match="--arms: unknown"):
        ph.main(["--arms", "fixed,nope"])
    with pytest.raises(ValueError, match="multiple of PPO's rollout size"):
        ph.main(["--budget", "1000"])
    with pytest.raises(ValueError, match="--jobs"):
        ph.main(["--jobs", "3"])
    with pytest.raises(ValueError, match="not a registered environment"):
        ph.main(["--env-id", "rods/Nope-v0"])
    with pytest.raises(ValueError, match=r"unknown fields \['nope'\]"):
        ph.main(["--rods", '{"nope": 1}'])
    with pytest.raises(ValueError, match="--rods must be a JSON object"):
        ph.main(["--rods", "[1]"])
    with pytest.raises(ValueError, match="--group-size must be >= 2"):
        ph.main(["--group-size", "3"])  # smoke: 4 tasks x G=4 = 16 episodes per batch
    with pytest.raises(ValueError, match="--seeds"):
        ph.main(["--seeds", "x"])
    with pytest.raises(ValueError, match="--scale 'nope'"):
        ph.main(["--scale", "nope"])


def test_seeds_and_dev_mode(ph) -> None:
    """``--seeds`` takes N, A-B or a,b,c; ``--dev`` swaps the evaluation sets for the dev split and the seeds for
    the scale's dev seeds, so no test or OOD task is scored, and no reported seed is used, while knobs are chosen."""
    h = ph.headline
    assert h.parse_seeds("3") == (0, 1, 2) and h.parse_seeds("100-102") == (100, 101, 102)
    assert h.parse_seeds("5,7") == (5, 7)
    cpu = h.setup_scale(h.parse_args(["--scale", "cpu", "--learner", "grpo"]))
    dev = h.setup_scale(h.parse_args(["--scale", "cpu", "--learner", "grpo", "--dev"]))
    assert dict(dev.eval_tasks) == {"dev": 0} and set(dev.seeds).isdisjoint(cpu.seeds)
    assert dev.seeds == cpu.dev_seeds
    g = h.setup_scale(h.parse_args(["--scale", "cpu", "--learner", "grpo", "--group-size", "4"]))
    assert g.group_size * g.tasks_per_batch == cpu.group_size * cpu.tasks_per_batch and g.group_size == 4
    sets = ph.evaluator.split_tasks(dev.eval_tasks)
    assert list(sets) == ["dev"] and [t.id for t in sets["dev"]] == [t.id for t in load_split("dev")]


def test_dev_report_reads_the_dev_scores(ph, tiny_runs) -> None:
    run = dict(tiny_runs["rods"])
    run["points"] = [{**p, "eval": {"dev": {"success": [1.0, 0.0, 1.0, 1.0], "progress": [1.0, 0.5, 1.0, 1.0]}}}
                     for p in run["points"]]
    text = ph.summary.dev_report({"rods": {0: run}}, {"scale": "smoke", "budget": 256, "command": "cmd",
                                                      "date": "d", "code": "abc", "group_size": 4,
                                                      "tasks_per_batch": 2})
    row = next(ln for ln in text.splitlines() if ln.startswith("| rods |"))
    assert row.startswith("| rods | 0 | 0.750 [") and "| 0.875 |" in row


def test_dev_choice_picks_the_best_group_size_on_dev_and_refuses_test_runs(tmp_path) -> None:
    """benchmarks/dev_choice.py: the G with the best mean dev success of fixed and rods; ties to the paper's 8; a
    folder whose runs were scored on test is refused (a choice is never made on test)."""
    with benchmarks_package():
        from benchmarks import dev_choice
        from benchmarks.runner import Job, record_path, write_record

    def folder(g: int, fixed: float, rods: float, split: str = "dev"):
        out = tmp_path / f"g{g}-{split}"
        for arm, p in (("fixed", fixed), ("rods", rods)):
            for seed in (0, 1):
                job = Job(arm, seed, "grpo", {"group_size": g, "eval_tasks": {split: 0}})
                success = [1.0] * int(100 * p) + [0.0] * (100 - int(100 * p))
                write_record(record_path(out, job), job, {"arm": arm, "seed": seed, "distinct_tasks": 400,
                                                          "groups": [{"silent": False}],
                                                          "points": [{"eval": {split: {"success": success}}}]})
        return out

    got = dev_choice.choose([folder(4, 0.30, 0.40), folder(8, 0.30, 0.30), folder(16, 0.20, 0.20)], "grpo")
    assert got["chosen"] == 4 and got["scores"] == {4: pytest.approx(0.35), 8: pytest.approx(0.30),
                                                     16: pytest.approx(0.20)}
    assert dev_choice.choose([folder(4, 0.30, 0.30), folder(8, 0.30, 0.30)], "grpo")["chosen"] == 8  # a tie
    with pytest.raises(ValueError, match="dev split only"):
        dev_choice.choose([folder(2, 0.5, 0.5, split="test")], "grpo")
