"""The curricula registry (``rods_gym.curricula``): every arm by name for every host, typed options, named
mistakes, the schedules' feedback contract, and the old import paths kept for one release."""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path

import gymnasium as gym
import pytest

import rods_gym  # noqa: F401  (registers the env ids)
from rods_gym import SamplerConfig, Suite, TaskSampler, TaskSpec, write_jsonl
from rods_gym.curricula import (ARMS, Arm, GroupResult, RODSOptions, TaskSchedule, TaskSource, arm_names,
                                augmented_env_id, make_source)
from rods_gym.curricula import registry

G = 4
SPREAD = (1.0, 0.0) * (G // 2)


@pytest.fixture(scope="module")
def seeds(suite: Suite) -> list[TaskSpec]:
    return TaskSampler(suite, SamplerConfig(depth=(1, 2), extra_calls=(0, 0)), seed=21).sample_many(12)


def options_for(arm: str, tmp: Path, seeds: list[TaskSpec]) -> dict:
    if arm == "offline":
        write_jsonl(seeds[:5], tmp / "offline.jsonl")
        return {"path": str(tmp / "offline.jsonl")}
    if arm in ("rods", "naive", "rods_random", "rods_augment"):
        return {"calibration_groups": 2, "synth_every": 1}
    return {}


SUITE_ARMS = [a for a in sorted(ARMS) if a != "bfcl_rods"]


@pytest.mark.parametrize("arm", SUITE_ARMS)
def test_every_arm_builds_by_name_and_is_a_task_source(arm: str, seeds: list[TaskSpec], tmp_path: Path) -> None:
    source = make_source(arm, seeds, seed=3, group_size=G, env_id="rods/ToolChain-Features-v0",
                         options=options_for(arm, tmp_path, seeds))
    assert source.name == arm and isinstance(source, TaskSource)
    tasks = source.next_batch(0, 4)
    assert len(tasks) == 4 and all(isinstance(t, TaskSpec) for t in tasks)
    source.observe(0, [GroupResult(t, SPREAD) for t in tasks])
    assert "silent_fraction" in source.telemetry()
    json.dumps(source.state_dict())  # checkpointable as JSON
    if ARMS[arm].trains_augmented:  # it names the features view's augmented twin and the env's settings
        assert source.env_id == "rods/ToolChain-Aug-Features-v0" and "augment" in source.env_kwargs
        gym.make(source.env_id, **source.env_kwargs).reset(seed=0, options={"task": tasks[0]})


def test_the_registry_is_one_immutable_table_with_a_typed_options_class_per_arm() -> None:
    assert set(arm_names()) >= {"fixed", "augment", "augment_redraw", "offline", "procedural", "rods", "replay_only",
                                "naive", "rods_random", "rods_augment", "dapo", "bfcl_rods"}
    with pytest.raises(TypeError):
        ARMS["mine"] = ARMS["fixed"]  # type: ignore[index]
    for arm in ARMS.values():
        assert dataclasses.is_dataclass(arm.options) and arm.options.__dataclass_params__.frozen
        assert callable(getattr(arm.options, "from_mapping"))


def test_augmentation_arms_differ_only_by_the_redraw(seeds: list[TaskSpec]) -> None:
    faithful = make_source("augment", seeds, env_id="rods/ToolChain-Compact-v0")
    redraw = make_source("augment_redraw", seeds, env_id="rods/ToolChain-Compact-v0")
    assert faithful.env_id == redraw.env_id == "rods/ToolChain-Aug-Compact-v0"
    a, b = faithful.env_kwargs["augment"], redraw.env_kwargs["augment"]
    assert a["redraw_world"] == 0.0 and b["redraw_world"] > 0.0
    assert {k: v for k, v in a.items() if k != "redraw_world"} == {k: v for k, v in b.items() if k != "redraw_world"}
    tuned = make_source("augment", seeds, options={"augment": {"distractors": 1.0}})
    assert tuned.env_kwargs["augment"]["distractors"] == 1.0 and tuned.env_kwargs["augment"]["redraw_world"] == 0.0
    assert tuned.env_id == "rods/ToolChain-Aug-v0"  # no env_id: the chat view's twin


def test_augmented_twins_keep_the_view() -> None:
    assert augmented_env_id("rods/ToolChain-v0") == "rods/ToolChain-Aug-v0"
    assert augmented_env_id("rods/ToolChain-Easy-Structured-v0") == "rods/ToolChain-Aug-Structured-v0"
    assert augmented_env_id("rods/ToolChain-Easy-Features-v0") == "rods/ToolChain-Aug-Features-v0"
    assert augmented_env_id("rods/ToolChain-Aug-Compact-v0") == "rods/ToolChain-Aug-Compact-v0"
    with pytest.raises(ValueError, match="no augmented twin"):
        augmented_env_id("rods/BFCL-MultiTurn-v0")
    with pytest.raises(ValueError, match="not a registered"):
        augmented_env_id("rods/Nope-v0")


def test_mistakes_name_the_arm_and_the_field(seeds: list[TaskSpec]) -> None:
    with pytest.raises(ValueError, match="unknown curriculum arm 'rodz'; choose one of .*'rods'"):
        make_source("rodz", seeds)
    with pytest.raises(ValueError, match=r"options of arm 'rods': unknown option\(s\) \['synth_evry'\]"):
        make_source("rods", seeds, options={"synth_evry": 2})
    with pytest.raises(ValueError, match=r"options of arm 'rods': RODSConfig.synth_every must be int"):
        make_source("rods", seeds, options={"synth_every": "2"})
    with pytest.raises(ValueError, match="group_size=8 differs from the host's G=4"):
        make_source("rods", seeds, group_size=4, options={"group_size": 8})
    with pytest.raises(ValueError, match="replay_only ablation never synthesizes, so \\['synth_every'\\]"):
        make_source("replay_only", seeds, options={"synth_every": 2})
    with pytest.raises(ValueError, match="augment: unknown option\\(s\\) \\['hints'\\]"):
        make_source("augment", seeds, options={"augment": {"hints": 1.0}})
    with pytest.raises(ValueError, match="must lie in \\[0, 1\\]"):
        make_source("augment", seeds, options={"augment": {"distractors": 2.0}})
    with pytest.raises(ValueError, match="path is required"):
        make_source("offline", seeds)
    with pytest.raises(ValueError, match="options of arm 'dapo': max_refill_rounds must be int, got '3'"):
        make_source("dapo", seeds, options={"max_refill_rounds": "3"})
    with pytest.raises(ValueError, match="takes no options"):
        make_source("fixed", seeds, options={"x": 1})
    with pytest.raises(ValueError, match="neither a split .* nor an existing JSONL"):
        make_source("rods", seeds, options={"decontaminate": ["tset"]})
    with pytest.raises(ValueError, match="needs at least one seed"):
        make_source("fixed", [])


def test_options_come_as_a_mapping_or_as_the_dataclass(seeds: list[TaskSpec]) -> None:
    from rods_gym.curricula import RODSConfig

    opts = RODSOptions(RODSConfig(group_size=G, synth_every=7), decontaminate=())
    source = make_source("rods", seeds, group_size=G, options=opts)
    assert source.config.synth_every == 7
    by_map = make_source("rods", seeds, group_size=G, options={"synth_every": 7, "decontaminate": []})
    assert by_map.config == source.config


def test_an_arm_of_another_package_joins_through_an_entry_point(seeds: list[TaskSpec],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    mine = Arm("mine", "a test arm", registry.NoOptions, lambda ctx, o: registry.FixedSeeds(ctx.seeds, ctx.seed))

    class EP:
        name = "mine"

        def load(self) -> Arm:
            return mine

    monkeypatch.setattr(registry, "entry_points", lambda group: [EP()] if group == "rods_gym.arms" else [])
    assert "mine" in arm_names() and make_source("mine", seeds).tasks == seeds
    EP.name = "yours"  # an entry point must name its Arm
    with pytest.raises(TypeError, match="must name an Arm called 'yours'"):
        arm_names()


def test_the_task_schedule_observes_each_complete_batch_once_in_slot_order(seeds: list[TaskSpec]) -> None:
    seen: list[tuple[int, list[str], list[tuple[float, ...]]]] = []
    source = make_source("fixed", seeds, seed=1)
    observe = source.observe
    source.observe = lambda step, groups: (seen.append((step, [g.task.id for g in groups],  # type: ignore[method-assign]
                                                        [g.returns for g in groups])), observe(step, groups))
    schedule = TaskSchedule(source, tasks_per_batch=2, group_size=3)
    episodes = [schedule.next_episode() for _ in range(6)]
    assert [(s, slot) for s, slot, _ in episodes] == [(0, 0)] * 3 + [(0, 1)] * 3
    more = schedule.next_episode()  # batch 1 is drawn before batch 0 is observed (envs run ahead)
    assert more[0] == 1
    # report batch 0 out of order: observed once, when the last return arrives, groups in slot order
    order = [5, 0, 3, 1, 4]
    assert not any(schedule.report(*episodes[i][:2], float(i)) for i in order)
    assert schedule.report(*episodes[2][:2], 2.0) and len(seen) == 1
    step, ids, returns = seen[0]
    assert step == 0 and ids == [episodes[0][2].id, episodes[3][2].id]
    assert returns == [(0.0, 1.0, 2.0), (5.0, 3.0, 4.0)]
    with pytest.raises(ValueError, match="already observed"):
        schedule.report(0, 0, 1.0)
    # a schedule's state resumes the same episodes
    state = json.loads(json.dumps(schedule.state_dict()))
    twin = TaskSchedule(make_source("fixed", seeds, seed=1), tasks_per_batch=2, group_size=3)
    twin.source.load_state_dict(source.state_dict())
    twin.load_state_dict(state)
    assert [twin.next_episode() for _ in range(8)] == [schedule.next_episode() for _ in range(8)]


def test_hosts_that_run_only_planned_rollouts_refuse_dynamic_sampling(seeds: list[TaskSpec]) -> None:
    with pytest.raises(ValueError, match="refills groups with extra rollouts"):
        TaskSchedule(make_source("dapo", seeds), tasks_per_batch=2, group_size=2)


@pytest.mark.parametrize("old, names", [
    ("rods_gym.trainer.curricula", ["RODSSource", "RODSConfig", "FixedSeeds", "AugmentedSeeds", "default_resampler",
                                    "ReplayOnlySource", "NaiveRODSSource", "DynamicSamplingSource", "OfflinePipeline"]),
    ("rods_gym.trainer.task_source", ["TaskSource", "GroupResult", "FixedSeeds", "check_task_source"]),
    ("rods_gym.trainer.sources", ["make_source", "available_sources", "source_env_options"]),
    ("rods_gym.trainer.sb3", ["TaskSchedule", "CurriculumEnv", "CurriculumCallback"]),
    ("rods_gym.integrations.sources", ["make_source", "SOURCE_NAMES"]),
    ("rods_gym.integrations.schedule", ["SlotSchedule", "Rollout"]),
])
def test_old_import_paths_still_work(old: str, names: list[str]) -> None:
    if old.endswith("sb3"):
        pytest.importorskip("stable_baselines3")
    module = importlib.import_module(old)
    assert all(hasattr(module, n) for n in names)


def test_the_old_integrations_make_source_is_the_registry(seeds: list[TaskSpec]) -> None:
    from rods_gym.integrations.sources import make_source as old

    source = old("replay_only", seeds, seed=0, group_size=G, options={"ema_rate": 0.3})
    assert source.name == "replay_only" and source.config.ema_rate == 0.3 and source.config.group_size == G
