"""Tasks: exact JSON-lines round trip, derived views, and readable errors for bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rods_gym import TaskSpec, default_suite, load_split, read_jsonl, write_jsonl
from rods_gym.envs import SPLITS, taskset_path
from rods_gym.task import Answer, Call, Dep, Turn, iter_jsonl


def _hand_task() -> TaskSpec:
    """find customer by email -> customer id -> count their orders; then, in turn 2, read a product."""
    return TaskSpec(
        id="hand-1", world_seed=3,
        calls=(Call("c0", "find_customer_by_email", {"email": "a@b.co"}, 0),
               Call("c1", "count_customer_orders", {"customer_id": "CUS-1001", "status": "shipped"}, 0),
               Call("c2", "get_product", {"product_id": "PRD-1002"}, 1)),
        deps=(Dep("c0", "c1", "customer_id", "customer_id"),),
        turns=(Turn("first", locked=("count_customer_orders",)), Turn("second", withheld=(("c2", "product_id"),))),
        distractors=("get_order", "find_customer_by_email"),
        answer=Answer("c2", "price", "12.5"),
        meta={"source": "hand", "nested": {"x": [1, 2.5, None, True]}},
    )


def test_roundtrip_thousands_of_sampled_tasks(task_pool, tmp_path: Path) -> None:
    tasks = [t for ts in task_pool.values() for t in ts]
    assert len(tasks) >= 1500
    path = tmp_path / "pool.jsonl"
    assert write_jsonl(tasks, path) == len(tasks)
    back = read_jsonl(path)
    assert back == tasks
    assert [t.to_json() for t in back] == [t.to_json() for t in tasks]  # also catches 1.0 -> 1 drift
    assert path.read_text() == "".join(t.to_json() + "\n" for t in back)
    for t in tasks[::7]:
        assert TaskSpec.from_dict(json.loads(json.dumps(t.to_dict()))) == t
        assert TaskSpec.from_json(t.to_json()).to_dict() == t.to_dict()
    # the pool really spans the knobs, so the round trip covers every part of a task
    assert any(t.answer for t in tasks) and any(t.distractors for t in tasks)
    assert any(tt.withheld for t in tasks for tt in t.turns) and any(tt.locked for t in tasks for tt in t.turns)
    assert any(len(t.turns) == 3 for t in tasks) and any(isinstance(v, float) for t in tasks for c in t.calls
                                                          for v in c.args.values())


def test_read_back_task_looks_the_same_to_the_agent(task_pool) -> None:
    """JSON sorts a call's argument keys; a task read back must still render, and be solved, exactly
    as the freshly sampled one (an earlier bug: sampled demonstrations listed arguments in schema
    order, checked-in task sets alphabetically, so a policy trained on one misread the other)."""
    import gymnasium as gym
    tasks = [t for ts in task_pool.values() for t in ts][::25]
    assert any(list(c.args) != [p.name for p in default_suite().tools[c.tool].params if p.name in c.args]
               for t in tasks for c in t.calls)  # some schema orders are not alphabetical
    for mode in ("compact", "chat", "structured"):
        env = gym.make(f"rods/ToolChain-Easy-{mode.capitalize()}-v0")
        for t in tasks:
            for task in (t, TaskSpec.from_json(t.to_json())):
                assert all(list(c.args) == sorted(c.args) for c in task.calls)
            seen = []
            for task in (t, TaskSpec.from_json(t.to_json())):
                obs, _ = env.reset(seed=0, options={"task": task})
                first = env.unwrapped.oracle_action()
                seen.append((repr(obs), repr(first), repr(env.unwrapped.messages) if mode == "chat" else ""))
            assert seen[0] == seen[1], (mode, t.id)


@pytest.mark.parametrize("split", SPLITS)
def test_checked_in_task_sets_roundtrip(split: str, tmp_path: Path) -> None:
    path = taskset_path(split)
    if not path.exists():
        pytest.fail(f"task set {split} is missing at {path}")
    tasks = load_split(split)
    assert len(tasks) >= 100
    assert len({t.id for t in tasks}) == len(tasks)
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    assert [t.to_json() for t in tasks] == [json.dumps(json.loads(x), sort_keys=True, separators=(",", ":"))
                                            for x in lines]
    write_jsonl(tasks, tmp_path / "x.jsonl")
    assert read_jsonl(tmp_path / "x.jsonl") == tasks


def test_hand_built_task_views_and_roundtrip() -> None:
    t = _hand_task()
    assert TaskSpec.from_json(t.to_json()) == t
    assert TaskSpec.from_json(t.to_json()).meta == t.meta
    assert t.bound("c1") == {"customer_id": Dep("c0", "c1", "customer_id", "customer_id")}
    assert t.bound("c0") == {}
    assert t.facts() == [("c0", "email", "a@b.co"), ("c1", "status", "shipped"), ("c2", "product_id", "PRD-1002")]
    assert t.facts(turn=1) == [("c2", "product_id", "PRD-1002")]
    assert t.tools == ("find_customer_by_email", "count_customer_orders", "get_product", "get_order")
    assert t.turn_types() == (("missing_tool",), ("answer", "missing_param"))
    assert t.call("c2").tool == "get_product"
    with pytest.raises(KeyError):
        t.call("c9")
    assert t.with_meta(split="dev").meta == {**t.meta, "split": "dev"}
    assert t.meta.get("split") is None  # frozen: with_meta returns a copy


def test_bad_task_data_is_reported(tmp_path: Path) -> None:
    d = _hand_task().to_dict()
    with pytest.raises(ValueError, match=r"unknown task keys \['colour'\]"):
        TaskSpec.from_dict({**d, "colour": "red"})
    with pytest.raises(ValueError, match="malformed task 'hand-1'"):
        TaskSpec.from_dict({k: v for k, v in d.items() if k != "calls"})
    path = tmp_path / "bad.jsonl"
    path.write_text(_hand_task().to_json() + "\n\n" + json.dumps({**d, "turns": 5}) + "\n")
    with pytest.raises(ValueError, match=rf"{path}:3: malformed task"):
        read_jsonl(path)
    it = iter_jsonl(path)
    assert next(it) == _hand_task()  # lines before the bad one still load, lazily
