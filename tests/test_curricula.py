"""The comparison arms behind the task-source interface: fixed, augment, offline, dapo,
replay_only and naive (RODS's own tests are in test_rods.py)."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from rods_gym import SamplerConfig, Suite, TaskSampler, TaskSpec, compute_signature, write_jsonl
from rods_gym.curricula import (AUGMENTED_ENV_ID, AugmentedSeeds, DynamicSampling, DynamicSamplingSource, FixedSeeds,
                                GroupResult, NaiveRODSSource, OfflinePipeline, RODSConfig, RODSSource, ReplayOnlySource,
                                TaskSource)
from rods_gym.resampler import NaiveResampler
from rods_gym.synth import make_resampler

G = 8
SILENT = (1.0,) * G
SPREAD = (1.0, 0.0) * (G // 2)


@pytest.fixture(scope="module")
def seeds(suite: Suite) -> list[TaskSpec]:
    return TaskSampler(suite, SamplerConfig(depth=(1, 2), extra_calls=(0, 0)), seed=21).sample_many(20)


def test_every_arm_is_a_task_source(suite: Suite, seeds: list[TaskSpec], tmp_path: Path) -> None:
    write_jsonl(seeds, tmp_path / "offline.jsonl")
    sources = [
        FixedSeeds(seeds, 0), AugmentedSeeds(seeds, 0), OfflinePipeline.from_jsonl(tmp_path / "offline.jsonl", 0),
        RODSSource(seeds, make_resampler(suite, decontaminate=()), RODSConfig(), 0),
        ReplayOnlySource(seeds, RODSConfig(), 0), DynamicSamplingSource(seeds, 0),
        NaiveRODSSource(seeds, make_resampler(suite, decontaminate=(), naive=True), RODSConfig(), 0),
    ]
    assert tuple(s.name for s in sources) == ("fixed", "augment", "offline", "rods", "replay_only", "dapo", "naive")
    for s in sources:
        assert isinstance(s, TaskSource)
        tasks = s.next_batch(0, 4)
        assert len(tasks) == 4 and all(isinstance(t, TaskSpec) for t in tasks)
        s.observe(0, [GroupResult(t, SPREAD) for t in tasks])
        assert s.telemetry()["silent_fraction"] == 0.0 and s.extra_rollouts == 0
        json.dumps(s.state_dict())  # checkpointable as JSON
    assert isinstance(sources[5], DynamicSampling) and not isinstance(sources[0], DynamicSampling)


def test_augment_arm_names_its_env(seeds: list[TaskSpec]) -> None:
    src = AugmentedSeeds(seeds, seed=3)
    assert src.name == "augment" and src.env_id == AUGMENTED_ENV_ID == "rods/ToolChain-Aug-v0"
    # the same task stream as fixed-data RL with the same seed: only the environment differs
    fixed = FixedSeeds(seeds, seed=3)
    assert [t.id for t in src.next_batch(0, 30)] == [t.id for t in fixed.next_batch(0, 30)]


def test_offline_pipeline_epochs_over_its_file(seeds: list[TaskSpec], tmp_path: Path) -> None:
    path = tmp_path / "synth.jsonl"
    write_jsonl(seeds, path)
    src = OfflinePipeline.from_jsonl(path, seed=1)
    first = [t.id for t in src.next_batch(0, 12)] + [t.id for t in src.next_batch(1, 8)]
    assert sorted(first) == sorted(t.id for t in seeds)  # one epoch: every task once
    src.observe(1, [GroupResult(t, SILENT) for t in src.next_batch(2, 5)])
    assert src.telemetry() == {"silent_fraction": 1.0, "tasks_seen": 20.0}
    # a seeded shuffle: same seed, same order; another seed, another order
    again = OfflinePipeline.from_jsonl(path, seed=1)
    assert [t.id for t in again.next_batch(0, 20)] == first
    assert [t.id for t in OfflinePipeline.from_jsonl(path, seed=2).next_batch(0, 20)] != first
    with pytest.raises(FileNotFoundError, match="rods synth"):
        OfflinePipeline.from_jsonl(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="no tasks"):
        OfflinePipeline.from_jsonl(tmp_path / "empty.jsonl")


def test_epoch_sources_resume_exactly(seeds: list[TaskSpec]) -> None:
    for cls in (AugmentedSeeds, OfflinePipeline):
        a = cls(seeds, seed=4)
        head = [t.id for t in a.next_batch(0, 13)]
        b = cls(seeds, seed=4)
        b.load_state_dict(json.loads(json.dumps(a.state_dict())))
        assert [t.id for t in b.next_batch(1, 30)] == [t.id for t in a.next_batch(1, 30)]
        assert head and b.telemetry() == a.telemetry()
    with pytest.raises(ValueError, match="offline"):
        AugmentedSeeds(seeds).load_state_dict(OfflinePipeline(seeds).state_dict())


def test_dapo_replaces_silent_groups_and_counts_their_rollouts(seeds: list[TaskSpec]) -> None:
    informative = {t.id for i, t in enumerate(seeds) if i % 2 == 0}  # half the seeds carry a gradient
    group = lambda t: GroupResult(t, SPREAD if t.id in informative else SILENT)  # noqa: E731
    src = DynamicSamplingSource(seeds, seed=0, max_refill_rounds=3, min_informative_rate=0.25)
    n = 8
    tasks = src.next_batch(0, n)
    groups = [group(t) for t in tasks]
    src.observe(0, groups)
    k = sum(t.id in informative for t in tasks)
    rounds, refill_tasks = 0, 0
    while more := src.refill(0):
        shortfall = n - sum(g.task.id in informative for g in groups)
        rate = sum(g.task.id in informative for g in groups) / len(groups)
        assert len(more) == math.ceil(shortfall / max(rate, 0.25))  # sized by the rate seen so far
        extra = [group(t) for t in more]
        src.observe(0, extra)
        groups += extra
        rounds += 1
        refill_tasks += len(more)
    assert k < n and rounds >= 1 and rounds <= 3
    kept = src.select(groups)
    assert all(np.std(g.returns) > 0 for g in kept) and len(kept) <= n
    assert len(kept) == min(n, sum(g.task.id in informative for g in groups))
    assert src.extra_rollouts == G * refill_tasks  # every refill rollout counted, the first n*G not
    tel = src.telemetry()
    assert tel["refill_rounds"] == rounds and tel["refill_tasks"] == refill_tasks
    assert tel["silent_fraction"] == pytest.approx(1 - sum(np.std(g.returns) > 0 for g in groups) / len(groups))
    # a new step starts afresh; a step with only informative groups asks for nothing
    total = src.extra_rollouts
    tasks = src.next_batch(1, 2)
    src.observe(1, [GroupResult(t, SPREAD) for t in tasks])
    assert src.refill(1) == [] and src.extra_rollouts == total


def test_dapo_refills_are_bounded(seeds: list[TaskSpec]) -> None:
    src = DynamicSamplingSource(seeds, seed=0, max_refill_rounds=2, min_informative_rate=0.5)
    tasks = src.next_batch(0, 4)
    src.observe(0, [GroupResult(t, SILENT) for t in tasks])
    sizes = []
    while more := src.refill(0):
        sizes.append(len(more))
        src.observe(0, [GroupResult(t, SILENT) for t in more])
    assert sizes == [8, 8]  # every group silent: 4 / max(0, .5) per round, 2 rounds
    assert src.select([GroupResult(t, SILENT) for t in tasks]) == []  # nothing to train on this step
    assert src.extra_rollouts == 16 * G
    state = json.loads(json.dumps(src.state_dict()))
    other = DynamicSamplingSource(seeds, seed=0, max_refill_rounds=2, min_informative_rate=0.5)
    other.load_state_dict(state)
    assert other.extra_rollouts == src.extra_rollouts
    assert [t.id for t in other.next_batch(1, 6)] == [t.id for t in src.next_batch(1, 6)]
    with pytest.raises(ValueError, match="max_refill_rounds"):
        DynamicSamplingSource(seeds, max_refill_rounds=-1)


def test_replay_only_never_synthesizes(seeds: list[TaskSpec]) -> None:
    src = ReplayOnlySource(seeds, RODSConfig(synth_every=1, kappa_rule="fixed"), rng_seed=0)
    for step in range(6):
        tasks = src.next_batch(step, 8)
        src.observe(step, [GroupResult(t, SPREAD if i % 2 else SILENT) for i, t in enumerate(tasks)])
    tel = src.telemetry()
    assert tel["synth/active"] == 0.0 and tel["synth/rounds_total"] == 0 and tel["pool/staged"] == 0
    assert len(src.pool) == len(seeds)  # seeds only, prioritized by their variance
    assert "boundary_fraction" in tel and src.resampler is None


def test_naive_ablation_ignores_structure(suite: Suite, seeds: list[TaskSpec]) -> None:
    cfg = RODSConfig(synth_every=1, parents_per_round=4, variants_per_parent=4, kappa_rule="fixed")
    naive = NaiveRODSSource(seeds, NaiveResampler(suite), cfg, rng_seed=0)
    aligned = RODSSource(seeds, make_resampler(suite, decontaminate=()), cfg, rng_seed=0)
    same = {}
    for name, src in (("naive", naive), ("rods", aligned)):
        for step in range(2):
            tasks = src.next_batch(step, 8)
            src.observe(step, [GroupResult(t, SPREAD) for t in tasks])
        variants = [e for e in src.pool.entries.values() if not e.is_seed]
        assert variants
        parents = {e.task.id: e for e in src.pool.entries.values()}
        match = {e.task.id: compute_signature(e.task, suite).same(compute_signature(parents[e.task.meta["parent"]].task,
                                                                                     suite))
                 for e in variants if e.task.meta["parent"] in parents}
        same[name] = sum(match.values()) / len(match)
        if name == "rods":  # exact-tier variants share the signature; fallback tiers may relax it
            assert all(match[e.task.id] for e in variants if e.task.meta.get("tier") == 0 and e.task.id in match)
    assert naive.name == "naive" and same["rods"] >= 0.9 and same["naive"] < 0.5
    print(f"variants sharing their parent's signature: {same}")
    assert Counter(e.task.meta.get("resampler") for e in naive.pool.entries.values() if not e.is_seed) == \
        Counter({"naive": sum(1 for e in naive.pool.entries.values() if not e.is_seed)})


def test_default_resampler_keeps_rods_off_held_out_data(suite: Suite) -> None:
    """RODS on the real seeds with the default resampler: no variant uses an OOD tool or
    repeats a dev/test/OOD task."""
    from rods_gym import load_split
    from rods_gym.resampler import binding_key, content_key
    from rods_gym.tasksets import held_out_tasks, held_out_tools

    held_tools = set(held_out_tools())
    held = held_out_tasks()
    assert held_tools and held
    train = load_split("train")[::10]  # 40 seeds, every depth
    cfg = RODSConfig(synth_every=1, parents_per_round=6, variants_per_parent=4, kappa_rule="fixed")
    src = RODSSource(train, make_resampler(suite), cfg, rng_seed=0, decontaminate=held)
    for step in range(2):
        tasks = src.next_batch(step, 8)
        src.observe(step, [GroupResult(t, SPREAD) for t in tasks])
    variants = [e.task for e in src.pool.entries.values() if not e.is_seed]
    assert len(variants) >= 12
    assert not any(c.tool in held_tools for v in variants for c in v.calls)
    assert not any(d in held_tools for v in variants for d in v.distractors)
    assert not {content_key(v) for v in variants} & {content_key(t) for t in held}
    assert not {binding_key(v) for v in variants} & {binding_key(t) for t in held}


def test_trainer_registry_builds_every_arm(seeds: list[TaskSpec], tmp_path: Path) -> None:
    """``rods_gym.trainer.sources.make_source`` finds every arm here and passes its options."""
    import gymnasium as gym

    from rods_gym.trainer.config import DataConfig, RolloutConfig, TrainConfig
    from rods_gym.trainer.sources import make_source

    write_jsonl(seeds[:5], tmp_path / "offline.jsonl")
    options = {"rods": {"synth_every": 3, "boundary_band": [0.2, 0.4]}, "naive": {}, "replay_only": {"ema_rate": 0.3},
               "augment": {"augment": {"distractors": 1.0, "max_extra_distractors": 2}},
               "offline": {"path": str(tmp_path / "offline.jsonl")}, "dapo": {"max_refill_rounds": 2}, "fixed": {}}

    def cfg(name: str, opts: dict) -> TrainConfig:
        return TrainConfig(data=DataConfig(env_id="rods/ToolChain-Compact-v0", source=name, source_options=opts),
                           rollout=RolloutConfig(group_size=6))

    built = {name: make_source(name, cfg(name, opts), seeds, 3) for name, opts in options.items()}
    assert {n: s.name for n, s in built.items()} == {n: n for n in options}
    rods = built["rods"]
    assert rods.config.synth_every == 3 and rods.config.group_size == 6 and rods.config.boundary_band == (0.2, 0.4)
    assert type(built["naive"].resampler).__name__ == "NaiveResampler"
    assert built["replay_only"].config.ema_rate == 0.3 and built["replay_only"].resampler is None
    assert built["dapo"].max_refill_rounds == 2 and len(built["offline"].tasks) == 5
    aug = built["augment"]
    assert aug.env_id == "rods/ToolChain-Aug-Compact-v0"
    env = gym.make(aug.env_id, **aug.env_kwargs)
    env.reset(seed=0, options={"task": aug.next_batch(0, 1)[0]})
    assert env.unwrapped.mode == "compact"
    with pytest.raises(ValueError, match="data.source=rods\\): unknown option\\(s\\) \\['synth_evry'\\]"):
        make_source("rods", cfg("rods", {"synth_evry": 3}), seeds, 0)
    with pytest.raises(ValueError, match="group_size=8 differs from the host's G=6"):
        make_source("rods", cfg("rods", {"group_size": 8}), seeds, 0)
    with pytest.raises(ValueError, match="path is required"):
        make_source("offline", cfg("offline", {}), seeds, 0)


def test_resume_refuses_another_source_before_any_work(seeds: list[TaskSpec], tmp_path: Path) -> None:
    """``check_source_resumes``: the source a resumed run names must take the checkpoint's state (same curriculum,
    same options); otherwise one ValueError that says so, before the warm start and the evaluation run."""
    import torch

    from rods_gym.trainer.checkpoint import STATE_FILE, check_source_resumes
    from rods_gym.trainer.config import DataConfig, TrainConfig
    from rods_gym.trainer.sources import make_source

    def source(name: str, options: dict) -> TaskSource:
        cfg = TrainConfig(data=DataConfig(env_id="rods/ToolChain-Compact-v0", source=name, source_options=options))
        return make_source(name, cfg, seeds, 0)

    saved = source("rods", {"synth_every": 3})
    saved.next_batch(0, 4)
    check_source_resumes(tmp_path, saved)  # no checkpoint yet: nothing to check
    ckpt = tmp_path / "checkpoints" / "step-000001"
    ckpt.mkdir(parents=True)
    torch.save({"source": saved.state_dict()}, ckpt / STATE_FILE)
    check_source_resumes(tmp_path, source("rods", {"synth_every": 3}))
    with pytest.raises(ValueError, match=r"--resume: checkpoint step-000001 .*different RODSConfig \(fields \['synth_every'\]\)"):
        check_source_resumes(tmp_path, source("rods", {"synth_every": 5}))
    with pytest.raises(ValueError, match="--resume: checkpoint step-000001 holds the state of another task source"):
        check_source_resumes(tmp_path, source("fixed", {}))
    # a checkpoint saved with its config names the source that wrote it
    torch.save({"source": saved.state_dict(), "config": {"data": {"source": "rods"}}}, ckpt / STATE_FILE)
    with pytest.raises(ValueError, match="holds the 'rods' source's state, and this run names 'fixed'"):
        check_source_resumes(tmp_path, source("fixed", {}))
