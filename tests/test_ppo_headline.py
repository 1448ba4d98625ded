"""The PPO headline benchmark (benchmarks/ppo_headline.py): every arm's wiring at a tiny scale (equal
env-step budgets, the curriculum observing every complete group, greedy evaluation), the two new
sources (procedural, RODS with random parents) and the PASS/MISS logic on synthetic numbers."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

pytest.importorskip("sb3_contrib")

from rods_gym import load_split  # noqa: E402
from rods_gym.curricula import RODSConfig  # noqa: E402
from rods_gym.synth import make_resampler  # noqa: E402
from rods_gym.tasksets import held_out_tools  # noqa: E402
from rods_gym.curricula import ProceduralSource  # noqa: E402
from rods_gym.curricula import RandomParentRODSSource  # noqa: E402
from rods_gym.curricula import GroupResult  # noqa: E402

from conftest import benchmarks_on_path  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py


@pytest.fixture(scope="module")
def ph() -> Any:
    with benchmarks_on_path():
        import ppo_headline

        yield ppo_headline


@pytest.fixture(scope="module")
def tiny_runs(ph, tmp_path_factory) -> dict[str, dict[str, Any]]:
    """One tiny run of every arm: 2 PPO rollouts of 128 steps, evaluated after each on 4 + 2 tasks."""
    out = tmp_path_factory.mktemp("ppo_headline")
    scale = replace(ph.SCALES["smoke"], budget=256, n_points=2, eval_tasks={"test": 4, "ood": 2}, offline_n=8,
                    tasks_per_batch=2, group_size=4, ppo=replace(ph.HEADLINE_PPO, n_envs=2, n_steps=64, batch_size=64,
                                                                n_epochs=1, net_arch=(16,)),
                    rods={"calibration_groups": 4, "synth_every": 1, "parents_per_round": 2,
                          "variants_per_parent": 2})
    offline = ph.offline_set(out, scale.offline_n)
    runs = {}
    for arm in ph.ARMS:
        job = ph.Job(arm, 0, scale, ph.DEFAULT_ENV_ID, {}, str(out / "runs" / arm / "seed0.json"),
                     str(offline) if arm == "offline" else None)
        runs[arm] = ph.run_job(job)
    return runs


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
    nvec = ph.action_dims(envs[0].action_space)
    rnd = ph.random_masked_predict(0, nvec)

    def spy(obs, action_masks, deterministic):
        calls.append((len(action_masks), deterministic))
        return rnd(obs, action_masks=action_masks, deterministic=deterministic)

    res = ph.greedy_evaluate(spy, envs, tasks)
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


def _arm(mean: float, lo: float, hi: float, distinct: float, silent_late: list[bool], ratio: float | None = None,
         size: int | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"final": {"test": {"success": {"mean": mean, "lo": lo, "hi": hi}}},
                         "distinct_tasks": distinct, "silent_late": silent_late}
    if ratio is not None:
        e["region_variance"] = {"ratio": {"ratio": ratio, "lo": ratio - 0.1, "hi": ratio + 0.1}}
    if size is not None:
        e["offline_set_size"] = size
    return e


def test_targets_pass_on_numbers_that_meet_them(ph) -> None:
    arms = {"rods": _arm(0.5, 0.45, 0.55, 600, [False] * 8 + [True] * 2, ratio=2.4),
            "fixed": _arm(0.3, 0.25, 0.35, 400, [False] * 5 + [True] * 5),
            "augment": _arm(0.35, 0.3, 0.4, 400, [True] * 6),
            "offline": _arm(0.48, 0.44, 0.52, 7000, [True] * 3, size=17_000)}
    targets = ph.check_targets(arms)
    assert [ph.verdict(t) for t in targets] == ["PASS"] * 5, [t["detail"] for t in targets]


def test_targets_miss_on_numbers_that_do_not(ph) -> None:
    arms = {"rods": _arm(0.5, 0.40, 0.60, 1000, [True] * 6 + [False] * 4, ratio=1.5),
            "fixed": _arm(0.45, 0.38, 0.52, 400, [True] * 5 + [False] * 5),  # overlapping CIs
            "augment": _arm(0.55, 0.5, 0.6, 400, [True] * 6),
            "offline": _arm(0.48, 0.44, 0.52, 7000, [True] * 3, size=17_000)}  # 1000 > 17000 / 20
    targets = ph.check_targets(arms)
    assert [ph.verdict(t) for t in targets] == ["MISS"] * 5, [t["detail"] for t in targets]
    assert "0.059 of the offline set's 17000" in targets[2]["detail"]
    assert [ph.verdict(t) for t in ph.check_targets({"fixed": arms["fixed"]})] == ["N/A"] * 5


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


def test_dev_mode_evaluates_on_dev_only_and_reports_it(ph, tiny_runs) -> None:
    """``--dev`` (for choosing RODS's knobs) swaps the evaluation sets for the dev split, so no test or OOD task
    is scored while knobs are chosen; its report reads the dev scores of the runs."""
    scale = replace(ph.SCALES["smoke"], eval_tasks={"dev": 0})
    sets = ph.eval_tasks(scale)
    assert list(sets) == ["dev"] and [t.id for t in sets["dev"]] == [t.id for t in load_split("dev")]
    run = dict(tiny_runs["rods"])
    run["points"] = [{**p, "eval": {"dev": {"success": [1.0, 0.0, 1.0, 1.0], "progress": [1.0, 0.5, 1.0, 1.0]}}}
                     for p in run["points"]]
    text = ph.dev_report({"rods": {0: run}}, scale, "cmd", "abc")
    row = next(ln for ln in text.splitlines() if ln.startswith("| rods |"))
    assert row.startswith("| rods | 1 | 0.750 [") and "| 0.875 |" in row
