"""The compiled argument checker accepts exactly what jsonschema's Draft 2020-12 validator
accepts, for every tool of the suite (hypothesis mixes real world values with junk)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rods_gym import Suite
from rods_gym.argcheck import ArgChecker, compile_property


@pytest.fixture(scope="module")
def validators(suite: Suite) -> dict[str, jsonschema.Draft202012Validator]:
    return {name: jsonschema.Draft202012Validator(dict(t.parameters)) for name, t in suite.tools.items()}


@pytest.fixture(scope="module")
def values_by_type(suite: Suite) -> dict[str, list[Any]]:
    """Real values of every value type, drawn from a few worlds."""
    out: dict[str, list[Any]] = defaultdict(list)
    for seed in (0, 1):
        world = suite.world(seed)
        for name, ent in suite.entities.items():
            for rec in list(world.tables[name].values())[:8]:
                for f in ent.fields:
                    out[f.type].append(rec[f.name])
    return {t: sorted(set(v), key=repr) for t, v in out.items()}


junk = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-10**400, max_value=10**400),
    st.floats(allow_nan=False, allow_infinity=False), st.floats(min_value=-1.0, max_value=1e6 + 1),
    st.text(max_size=30), st.text(alphabet="ACDEFHLMNOPRSTUVXY-0123456789:@.+ \n", max_size=14),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from([0, -0.0, 1e6, 1e6 + 0.01, 0.0, 1, 1.0, 1000, 1001, 1e-300, "", "\n", "2026-01-01\n",
                     "2026-13-45", "+1-555-123-4567", "a@b.co", "open", "OPEN", 10**400]))


def boundary_list(schema: dict[str, Any], real: list[Any]) -> list[Any]:
    """Values at the edges of one parameter's schema: lengths and bounds +- 1, near-miss formats."""
    out: list[Any] = []
    for key in ("minLength", "maxLength"):
        if key in schema:
            for n in (schema[key] - 1, schema[key], schema[key] + 1):
                if n >= 0:
                    out.append("x" * n)
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key in schema:
            b = schema[key]
            out += [b, b - 1, b + 1, b - 0.001, b + 0.001, float(b), int(b)]
    for v in schema.get("enum", []):
        out += [v, v.upper(), v + " ", " " + v]
    for v in real[:3]:
        if isinstance(v, str):
            out += [v + "\n", v + "x", "x" + v, v[:-1], v.lower(), v.upper()]
    return out


def boundary_values(schema: dict[str, Any], real: list[Any]) -> st.SearchStrategy[Any]:
    values = boundary_list(schema, real)
    return st.sampled_from(values) if values else st.nothing()


@st.composite
def tool_args(draw: st.DrawFn, suite: Suite, values_by_type: dict[str, list[Any]]) -> tuple[str, Any]:
    """A tool and an argument object: real world values for its parameters, then up to two
    mutations (a boundary or junk value, a deleted argument, an extra key), so most examples
    sit right at the edge between valid and invalid."""
    name = draw(st.sampled_from(sorted(suite.tools)))
    tool = suite.tools[name]
    if draw(st.integers(0, 19)) == 0:  # not an object at all
        return name, draw(st.one_of(junk, st.lists(junk, max_size=2)))
    args: dict[str, Any] = {}
    for p in tool.params:
        if p.required or draw(st.booleans()):
            real = values_by_type.get(p.type)
            args[p.name] = draw(st.sampled_from(real)) if real else draw(junk)
    for _ in range(draw(st.integers(0, 2))):
        op = draw(st.integers(0, 5))
        if op <= 3:
            p = draw(st.sampled_from(tool.params))
            edge = boundary_values(dict(p.schema), values_by_type.get(p.type, []))
            other = st.sampled_from(sorted(values_by_type)).flatmap(lambda t: st.sampled_from(values_by_type[t]))
            args[p.name] = draw(st.one_of(edge, edge, junk, other))
        elif op == 4 and args:
            del args[draw(st.sampled_from(sorted(args)))]
        else:
            args[draw(st.one_of(st.text(max_size=6), st.sampled_from(["to", "subject", "amount", "id"])))] = draw(junk)
    return name, args


@given(data=st.data())
@settings(max_examples=600, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_argchecker_agrees_with_jsonschema(suite, validators, values_by_type, data) -> None:
    name, args = data.draw(tool_args(suite, values_by_type))
    expected = validators[name].is_valid(args)
    problem = suite.checkers[name].check(args)
    assert (problem is None) == expected, (name, args, problem)
    if problem is not None:
        assert isinstance(problem, str) and problem  # a message, naming the problem


def test_argchecker_agrees_at_every_boundary(suite, validators, values_by_type) -> None:
    """Exhaustive: every tool, every parameter, every boundary value, in otherwise valid args."""
    n = 0
    for name, tool in suite.tools.items():
        base = {p.name: values_by_type[p.type][0] for p in tool.params if p.required}
        assert validators[name].is_valid(base) and suite.checkers[name].check(base) is None, name
        for p in tool.params:
            for value in boundary_list(dict(p.schema), values_by_type[p.type]):
                args = {**base, p.name: value}
                assert (suite.checkers[name].check(args) is None) == validators[name].is_valid(args), (name, args)
                n += 1
            rest = {k: v for k, v in base.items() if k != p.name}
            assert (suite.checkers[name].check(rest) is None) == validators[name].is_valid(rest), (name, rest)
    assert n > 2000


def test_both_accept_every_sampled_call(suite, validators, task_pool) -> None:
    """Every argument set the sampler produced is valid for both checkers."""
    n = 0
    for tasks in task_pool.values():
        for t in tasks[:150]:
            for c in t.calls:
                assert validators[c.tool].is_valid(dict(c.args)), (t.id, c)
                assert suite.checkers[c.tool].check(dict(c.args)) is None, (t.id, c)
                n += 1
    assert n > 1000


def test_messages_name_the_problem(suite) -> None:
    check = suite.checkers["transfer_funds"].check
    good = {"from_account_id": "ACC-1000", "to_account_id": "ACC-2000", "amount": 5.0}
    assert check(good) is None
    assert check({**good, "amount": 0}) == "'amount' must be > 0, got 0"
    assert check({**good, "amount": 10**400}).startswith("'amount' must be <= 1e+06, got 1000")
    assert check({**good, "amount": float("inf")}).startswith("'amount' must be number")  # not JSON anyway
    assert check({**good, "amount": float("nan")}).startswith("'amount' must be number")
    assert "missing required argument(s) ['to_account_id']" in check({k: v for k, v in good.items()
                                                                      if k != "to_account_id"})
    assert "has no parameter 'memo'" in check({**good, "memo": 1})
    assert "'from_account_id' has the wrong format 'ACC-'" in check({**good, "from_account_id": "ACC-"})
    assert "must be a JSON object" in check("amount=5")


def test_enum_and_bool_are_not_numbers() -> None:
    """As in JSON Schema: true is not 1, 1.0 is the integer 1."""
    assert compile_property("x", {"enum": [1, 2]})(True) is not None
    assert compile_property("x", {"enum": [1, 2]})(1.0) is None
    assert compile_property("x", {"type": "integer"})(1.0) is None
    assert compile_property("x", {"type": "integer"})(True) is not None
    assert compile_property("x", {"type": "number", "maximum": 3})(10**400) is not None
    for schema, value in [({"enum": [1, 2]}, True), ({"enum": [1, 2]}, 1.0), ({"type": "integer"}, 1.0),
                          ({"type": "integer"}, True), ({"type": "number", "maximum": 3}, 10**400)]:
        jsonschema_ok = jsonschema.Draft202012Validator(schema).is_valid(value)
        assert (compile_property("x", schema)(value) is None) == jsonschema_ok


@pytest.mark.parametrize("schema, message", [
    ({"type": "string", "anyOf": [{"type": "string"}]}, "unsupported JSON Schema keywords ['anyOf']"),
    ({"type": "array"}, "unsupported type 'array'"),
    ({"type": ["string", "null"]}, "unsupported type"),
])
def test_unsupported_schemas_are_refused_at_compile_time(schema, message) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        compile_property("x", schema)
    with pytest.raises(ValueError):
        ArgChecker("t", {"type": "object", "properties": {"x": schema}})
