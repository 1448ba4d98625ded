"""World generation: deterministic per seed, independent of global RNGs and of generation
order, values valid against their value types; the episode overlay never touches the base."""

from __future__ import annotations

import datetime as dt
import random

import jsonschema
import numpy as np
import pytest

from rods_gym import DIFFICULTIES, Suite, TaskSampler
from rods_gym.executor import SEARCH_LIMIT, ToolError
from rods_gym.world import WorldState


def _tables(world) -> dict:
    return {e: {rid: dict(rec) for rid, rec in t.items()} for e, t in world.tables.items()}


@pytest.fixture(scope="module")
def fresh_suites() -> tuple[Suite, Suite]:
    return Suite.load(), Suite.load()


def test_same_seed_same_tables_across_suites_and_generation_order(fresh_suites) -> None:
    a, b = fresh_suites
    first_a = _tables(a.world(5))  # a's value pools are filled by seed 5 ...
    for s in (0, 1, 2):  # ... b's by other seeds first
        b.world(s)
    assert _tables(b.world(5)) == first_a
    assert _tables(a.world(0)) == _tables(b.world(0))


def test_different_seeds_differ(suite: Suite) -> None:
    w0, w1 = _tables(suite.world(0)), _tables(suite.world(1))
    assert w0 != w1
    # not just one field: every entity table differs
    assert all(w0[e] != w1[e] for e in w0)
    assert len({tuple(sorted(suite.world(s).tables["banking.account"])) for s in range(10)}) == 10


def test_no_global_rng_is_used_or_disturbed() -> None:
    """Seeding (or advancing) the global RNGs does not change worlds or tasks, and
    generating them does not consume the global RNGs."""
    results = []
    for g in (1, 12345):
        random.seed(g)
        np.random.seed(g)
        py_state, np_state = random.getstate(), np.random.get_state()
        s = Suite.load()
        tables = _tables(s.world(3))
        tasks = [t.to_json() for t in TaskSampler(s, DIFFICULTIES["hard"], seed=2).sample_many(15)]
        assert random.getstate() == py_state, "generation consumed Python's global RNG"
        after = np.random.get_state()
        assert after[0] == np_state[0] and np.array_equal(after[1], np_state[1]) and after[2] == np_state[2], \
            "generation consumed numpy's global RNG"
        results.append((tables, tasks))
    assert results[0] == results[1]


def test_world_matches_entity_specs(suite: Suite) -> None:
    for seed in (0, 9, 31):
        world = suite.world(seed)
        assert set(world.tables) == set(suite.entities)
        for name, ent in suite.entities.items():
            table = world.tables[name]
            assert len(table) == ent.count
            for rid, rec in table.items():
                assert rec[ent.id_field] == rid and rid.startswith(ent.id_prefix + "-")
                assert tuple(rec) == ent.field_names
            for f in ent.fields:
                values = [rec[f.name] for rec in table.values()]
                if f.unique:
                    assert len(set(values)) == len(values), f"{name}.{f.name} is not unique"
                if f.ref:  # references point at existing records
                    assert set(values) <= set(world.tables[f.ref]), f"{name}.{f.name} has dangling refs"


def test_every_world_value_is_valid_against_its_type(suite: Suite) -> None:
    validators = {t: jsonschema.Draft202012Validator(dict(vt.schema)) for t, vt in suite.types.items()}
    n = 0
    for seed in (0, 4, 17):
        world = suite.world(seed)
        for name, ent in suite.entities.items():
            for rec in world.tables[name].values():
                for f in ent.fields:
                    v = rec[f.name]
                    errors = list(validators[f.type].iter_errors(v))
                    assert not errors, f"seed {seed} {name}.{f.name} = {v!r}: {errors[0].message}"
                    g = f.generator
                    if "choice" in g:
                        assert v in g["choice"]
                    if "integers" in g:
                        assert g["integers"][0] <= v <= g["integers"][1]
                    if "uniform" in g:
                        assert g["uniform"][0] <= v <= g["uniform"][1]
                    if "dates" in g:
                        assert g["dates"][0] <= v <= g["dates"][1]
                        dt.date.fromisoformat(v)
                    n += 1
    assert n > 3000


def test_overlay_never_touches_the_base(suite: Suite) -> None:
    world = suite.world(2)
    before = _tables(world)
    state = WorldState(world)
    ent = suite.entities["banking.account"]
    rid = next(iter(world.tables[ent.name]))
    state.put(ent.name, {**world.tables[ent.name][rid], "balance": -1.0}, ent.id_field)
    state.remove("banking.card", next(iter(world.tables["banking.card"])))
    assert state.changed == 2
    assert state.get(ent.name, rid)["balance"] == -1.0
    fork = state.fork()
    fork.put(ent.name, {**world.tables[ent.name][rid], "balance": -2.0}, ent.id_field)
    assert state.get(ent.name, rid)["balance"] == -1.0  # the fork is independent
    assert len(list(state.records("banking.card"))) == suite.entities["banking.card"].count - 1
    assert _tables(world) == before
    assert WorldState(world).changed == 0


def test_failed_transfer_changes_nothing_and_search_is_bounded(suite: Suite) -> None:
    world = suite.world(0)
    state = WorldState(world)
    accounts = sorted(world.tables["banking.account"].values(), key=lambda r: r["balance"])
    poor, rich = accounts[0], accounts[-1]
    tool = suite.tools["transfer_funds"]
    with pytest.raises(ToolError) as exc:
        suite.executor.run(tool, {"from_account_id": poor["account_id"], "to_account_id": rich["account_id"],
                                  "amount": poor["balance"] + 100.0}, state)
    assert exc.value.code == "insufficient_funds"
    assert state.changed == 0
    out = suite.executor.run(tool, {"from_account_id": rich["account_id"], "to_account_id": poor["account_id"],
                                    "amount": 10.0}, state)
    assert state.changed == 3  # two balances and the new transaction record
    assert out["balance"] == pytest.approx(rich["balance"] - 10.0)
    for t in suite.tools.values():
        if t.kind == "search":
            p = t.params[0]
            value = next(iter(world.tables[t.entity].values()))[p.field]
            res = suite.executor.run(t, {p.name: value}, WorldState(world))
            assert len(res["results"]) <= SEARCH_LIMIT and res["total"] >= len(res["results"])


def test_pyrng_draws_like_a_numpy_generator() -> None:
    """``PyRng`` offers the draws the value generators use, with numpy's ranges and errors, and
    is a pure function of its seed."""
    from rods_gym.world import PyRng

    rng = PyRng("7:3")
    ints = [rng.integers(2, 5) for _ in range(2000)]
    assert set(ints) == {2, 3, 4} and all(type(i) is int for i in ints)
    assert {rng.integers(3) for _ in range(200)} == {0, 1, 2}
    digits = rng.integers(0, 10, 6)
    assert isinstance(digits, np.ndarray) and digits.shape == (6,) and digits.tolist() == [int(d) for d in digits]
    assert all(1.0 <= rng.uniform(1.0, 2.0) < 2.0 for _ in range(100))
    assert rng.below(1 << 40) < 1 << 40  # beyond the scaled-double range: an exact draw
    with pytest.raises(ValueError):
        rng.integers(4, 4)
    a, b = PyRng("7:3"), PyRng("7:3")
    assert [a.below(1000) for _ in range(50)] == [b.below(1000) for _ in range(50)]
    assert [PyRng("7:4").below(1000) for _ in range(5)] != [PyRng("7:3").below(1000) for _ in range(5)]


def test_world_value_sets_and_singled_out_records(suite: Suite) -> None:
    world = suite.world(4)
    orders = world.tables["retail.order"]
    assert world.values("retail.order", "status") == {r["status"] for r in orders.values()}
    fields = ("customer_id", "status")
    single = world.singled_out("retail.order", fields)
    for rid, rec in orders.items():
        twins = [r for r in orders.values() if all(r[f] == rec[f] for f in fields)]
        assert (rid in single) == (len(twins) == 1)
    assert world.singled_out("retail.order", fields) is single  # built once


def test_state_ids_follow_the_overlay(suite: Suite) -> None:
    state = WorldState(suite.world(4))
    ent = suite.entities["retail.order"]
    assert state.ids(ent.name) == list(suite.world(4).tables[ent.name])
    first, second = list(state.records(ent.name))[:2]
    state.remove(ent.name, first[ent.id_field])
    state.put(ent.name, dict(second, status="cancelled"), ent.id_field)
    state.put(ent.name, dict(second, order_id=state.new_id(ent)), ent.id_field)
    assert state.ids(ent.name) == [r[ent.id_field] for r in state.records(ent.name)]
    assert first[ent.id_field] not in state.ids(ent.name) and state.ids(ent.name)[-1].endswith("20001")
    assert state.record_list(ent.name) == list(state.records(ent.name))
