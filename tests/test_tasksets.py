"""The checked-in task sets: sizes, stratification, disjointness, OOD hold-out, solvability, reproducibility."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from rods_gym import compute_signature, default_suite, load_split
from rods_gym.envs import TASKSETS_DIR
from rods_gym.tasksets import SPLITS, build_split, pick_held_out_tools, quotas, split_key


@pytest.fixture(scope="module")
def splits():
    return {s: load_split(s) for s in ("train", "dev", "test", "ood")}


def test_sizes_and_unique_ids(splits):
    assert {k: len(v) for k, v in splits.items()} == {"train": 400, "dev": 100, "test": 400, "ood": 200}
    ids = [t.id for ts in splits.values() for t in ts]
    assert len(ids) == len(set(ids))


def test_stratified_over_depth_and_turn_types(splits):
    for name, tasks in splits.items():
        depth = Counter(compute_signature(t, default_suite()).depth for t in tasks)
        assert set(depth) == {1, 2, 3, 4, 5}, name
        assert max(depth.values()) - min(depth.values()) <= 1, (name, depth)
        kinds = Counter(k for t in tasks for turn in t.turn_types() for k in turn)
        for k in ("plain", "missing_param", "missing_tool", "answer"):
            assert kinds[k] > 0, (name, k)
        assert any(len(t.turns) > 1 for t in tasks), name


def test_splits_disjoint_by_signature_and_bindings(splits):
    suite = default_suite()
    seen: dict[tuple[str, str], str] = {}
    for name, tasks in splits.items():
        for t in tasks:
            key = split_key(t, suite)
            assert key not in seen, f"{t.id} repeats a task of {seen[key]}"
            seen[key] = name


def test_ood_tools_never_in_train_dev_test(splits):
    held = set(json.loads((TASKSETS_DIR / "held_out_tools.json").read_text()))
    assert held == set(pick_held_out_tools(default_suite()))
    for name in ("train", "dev", "test"):
        used = {c.tool for t in splits[name] for c in t.calls} | {d for t in splits[name] for d in t.distractors}
        assert not used & held, (name, used & held)
    assert all(any(c.tool in held for c in t.calls) for t in splits["ood"])


@pytest.mark.parametrize("view", [{"mode": "chat"}, {"mode": "compact", "slot_ids": "typed"}])
def test_every_task_solvable_by_the_oracle(splits, view):
    """In the chat view, and in the compact view's typed ids (every value it needs has a name there)."""
    import rods_gym

    env = rods_gym.ToolChainEnv(**view)
    for tasks in splits.values():
        for t in tasks:
            env.reset(options={"task": t})
            ret, info = rods_gym.solve(env)
            assert info["success"] and abs(ret - 1.0) < 1e-9, t.id


def test_quotas_sum_to_size():
    for n in (1, 7, 100, 400):
        assert sum(c for _, _, c in quotas(n)) == n


def test_build_is_reproducible(splits):
    """Rebuilding a split from its spec gives exactly the checked-in file (dev: the smallest)."""
    suite = default_suite()
    taken = {split_key(t, suite) for name in ("test",) for t in splits[name]}
    spec = next(s for s in SPLITS if s.name == "dev")
    rebuilt = build_split(spec, suite, pick_held_out_tools(suite), taken)
    assert [t.to_json() for t in rebuilt] == [t.to_json() for t in splits["dev"]]


def test_demonstration_tasks_are_fresh_stratified_and_deterministic(splits):
    """Warm-start tasks: drawn like the seeds, never a checked-in task, no held-out tool, solvable."""
    import rods_gym
    from rods_gym.tasksets import demonstration_tasks

    suite = default_suite()
    tasks = demonstration_tasks(60, seed=505)
    assert len(tasks) == 60 and [t.to_json() for t in demonstration_tasks(60, seed=505)] == [t.to_json() for t in tasks]
    assert [t.to_json() for t in demonstration_tasks(60, seed=506)] != [t.to_json() for t in tasks]
    taken = {split_key(t, suite) for ts in splits.values() for t in ts}
    assert not {split_key(t, suite) for t in tasks} & taken
    held = set(pick_held_out_tools(suite))
    assert not {c.tool for t in tasks for c in t.calls} & held
    assert set(Counter(t.meta["knobs"]["depth"] for t in tasks)) == {1, 2, 3, 4, 5}
    env = rods_gym.ToolChainEnv(mode="compact")
    for t in tasks:
        env.reset(options={"task": t})
        assert rods_gym.solve(env)[1]["success"], t.id


def test_show_describes_task_sets_built_elsewhere(tmp_path, capsys) -> None:
    import shutil

    from rods_gym.cli import main
    from rods_gym.envs import SPLITS as NAMES, TASKSETS_DIR

    assert main(["tasksets", "show"]) == 0
    shipped = capsys.readouterr().out
    for name in NAMES:
        shutil.copy(TASKSETS_DIR / f"{name}.jsonl", tmp_path / f"{name}.jsonl")
    assert main(["tasksets", "show", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out == shipped
    (tmp_path / "dev.jsonl").unlink()
    assert main(["tasksets", "show", "--out", str(tmp_path)]) == 2
    assert "has no dev.jsonl" in capsys.readouterr().err


def test_a_small_evaluation_keeps_every_turn_type_in_proportion(splits) -> None:
    """``tasks.spread`` (eval.tasks, rods evaluate --tasks): evenly spaced over the list alone, 10, 20 or 40 tasks
    fell in step with the turn types' cycle and left whole types out."""
    from collections import Counter

    from rods_gym.trainer.tasks import spread

    test = splits["test"]
    share = Counter(t.meta["stratum"] for t in test)
    for n in (8, 10, 20, 40, 100):
        picked = spread(test, n)
        assert len(picked) == n and len({t.id for t in picked}) == n
        assert [t.id for t in picked] == [t.id for t in test if t in picked]  # in the set's order
        counts = Counter(t.meta["stratum"] for t in picked)
        assert set(counts) == set(share), (n, counts)
        assert all(abs(counts[s] - n * share[s] / len(test)) <= 1 for s in share), (n, counts)
    plain = [t.with_meta(stratum=None, knobs=None) for t in test[:40]]  # no record of turn types: the list's order
    assert [t.id for t in spread(plain, 4)] == [plain[i].id for i in (0, 10, 20, 30)]
