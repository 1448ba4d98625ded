"""rods_gym.bfcl.trainer: the structure-only task files and the RODS task source on BFCL."""

from __future__ import annotations

import types

import pytest

pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (pip install --no-deps bfcl-eval==2026.3.23: README, BFCL); "
                                        "the BFCL trainer tests need its data and backends")

from rods_gym.bfcl.env import BFCLMultiTurnEnv  # noqa: E402
from rods_gym.bfcl.split import split_ids  # noqa: E402
from rods_gym.bfcl.trainer import TASK_FILES, BFCLRodsSource, structure_only  # noqa: E402
from rods_gym.bfcl.data import tasks_by_id  # noqa: E402
from rods_gym.task import read_jsonl  # noqa: E402


def test_task_files_are_the_splits_structure_only() -> None:
    for split, path in TASK_FILES.items():
        tasks = read_jsonl(path)
        assert [t.id for t in tasks] == list(split_ids(split))
        assert all(not c.args for t in tasks for c in t.calls) and all(not turn.message for t in tasks for turn in t.turns)
        assert tasks[:5] == [structure_only(tasks_by_id()[t.id]) for t in tasks[:5]]  # up to date


def test_rods_source_resamples_boundary_groups_into_the_pool() -> None:
    seeds = read_jsonl(TASK_FILES["train"])
    source = BFCLRodsSource(seeds, seed=0, pool_share=0.5)
    batch = source.next_batch(0, 8)
    assert len(batch) == 8 and not source.pool
    groups = [types.SimpleNamespace(task=t, returns=(0.0, 0.5) if k < 4 else (0.0, 0.0)) for k, t in enumerate(batch)]
    source.observe(0, groups)
    tel = source.telemetry()
    assert tel["boundary_fraction"] == 0.5 and tel["silent_fraction"] == 0.5
    assert tel["pool_size"] == len(source.pool) > 0
    state = source.state_dict()
    nxt = source.next_batch(1, 8)
    pooled = [t for t in nxt if t.id in source.variants]
    assert len(pooled) == 4
    env = BFCLMultiTurnEnv()
    for t in pooled:  # a variant reaches the env through env_options, and its ground truth solves it
        env.reset(options={"task": t, **source.env_options(t)})
        assert env.unwrapped.task.id == t.id
        done = False
        while not done:
            *_, term, trunc, info = env.step(env.oracle_action())
            done = term or trunc
        assert info["success"]
    again = BFCLRodsSource(seeds, seed=5)
    again.load_state_dict(state)
    assert [t.id for t in again.next_batch(1, 8)] == [t.id for t in nxt]
