"""Domains: the built-in files validate; broken files fail with DomainError naming the file,
the path inside it and the reason; a new domain needs no code change."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from rods_gym import DomainError, SamplerConfig, Suite, TaskSampler, ToolChainEnv, compute_signature
from rods_gym.domain import KINDS, load_domain_file
from rods_gym.suite import load_value_types

from conftest import LIBRARY_TOOLS, run_oracle

DOMAIN_DIR = Path(str(resources.files("rods_gym.envs"))) / "domains"
BUILTIN_FILES = sorted(DOMAIN_DIR.glob("*.json"))


def _meta_schema() -> dict:
    return json.loads(resources.files("rods_gym").joinpath("domain_schema.json").read_text())


@pytest.mark.parametrize("path", BUILTIN_FILES, ids=lambda p: p.stem)
def test_builtin_domain_validates(path: Path, suite: Suite) -> None:
    raw = json.loads(path.read_text())
    jsonschema.Draft202012Validator(_meta_schema()).validate(raw)  # structure
    domain = load_domain_file(path, suite.types)  # structure + semantics
    assert domain.name == raw["name"] == path.stem
    assert [t.name for t in domain.tools] == [t["name"] for t in raw["tools"]]
    assert all(t.kind in KINDS for t in domain.tools)
    # every tool's public schema is a valid JSON Schema without the x- extension keys
    for t in domain.tools:
        schema = t.public_schema()["function"]["parameters"]
        jsonschema.Draft202012Validator.check_schema(schema)
        assert not any(k.startswith("x-") for p in schema["properties"].values() for k in p)


def test_meta_schema_is_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(_meta_schema())


def _expect_error(path: Path, exc: pytest.ExceptionInfo, where: str, reason: str) -> None:
    err = exc.value
    assert err.source == str(path)
    assert err.path == where
    assert reason in err.reason
    assert str(path) in str(err) and where in str(err)  # the message a user sees names all three


def _load_broken(write_domain, raw, **kw):
    path = write_domain(raw, **kw)
    with pytest.raises(DomainError) as exc:
        Suite.load(extra_dirs=[path.parent])
    return path, exc


def test_library_domain_is_valid(library_suite: Suite) -> None:
    assert set(LIBRARY_TOOLS) <= set(library_suite.tools)
    assert "library" in {d.name for d in library_suite.domains}


def test_bad_json(write_domain) -> None:
    path, exc = _load_broken(write_domain, '{"name": "library",\n  "description": oops}')
    _expect_error(path, exc, "line 2 column 18", "not valid JSON")


def test_schema_violation_deep_inside_a_tool(write_domain, library_domain) -> None:
    del library_domain["tools"][2]["parameters"]["properties"]["status"]["description"]
    path, exc = _load_broken(write_domain, library_domain)
    _expect_error(path, exc, "tools[2].parameters.properties.status", "'description' is a required property")


def test_schema_violation_wrong_type(write_domain, library_domain) -> None:
    library_domain["tools"][3]["parameters"]["properties"]["loan_id"]["description"] = 5
    path, exc = _load_broken(write_domain, library_domain)
    _expect_error(path, exc, "tools[3].parameters.properties.loan_id.description", "5 is not of type 'string'")


def test_schema_violation_unknown_kind(write_domain, library_domain) -> None:
    library_domain["tools"][1]["kind"] = "fetch"
    path, exc = _load_broken(write_domain, library_domain)
    _expect_error(path, exc, "tools[1].kind", "'fetch' is not one of")


def test_aggregate_without_op(write_domain, library_domain) -> None:
    del library_domain["tools"][6]["op"]
    path, exc = _load_broken(write_domain, library_domain)
    _expect_error(path, exc, "tools[6]", "'op' is a required property")


@pytest.mark.parametrize("mutate, where, reason", [
    (lambda d: d["tools"][0].__setitem__("entity", "patron"), "tools[0].entity", "unknown entity 'patron'"),
    (lambda d: d["entities"]["loan"]["fields"]["patron_id"].__setitem__("ref", "borrower"),
     "entities.loan.fields.patron_id.ref", "unknown entity 'borrower'"),
    (lambda d: d["entities"]["loan"]["fields"]["due"].__setitem__("type", "isbn"),
     "entities.loan.fields.due.type", "unknown value type 'isbn'"),
    (lambda d: d["tools"][2]["parameters"]["properties"]["status"].__setitem__("x-type", "nope"),
     "tools[2].parameters.properties.status.x-type", "unknown value type 'nope'"),
    (lambda d: d["tools"][3]["parameters"]["properties"].__setitem__("shelf", {"description": "where"}),
     "tools[3].parameters.properties.shelf", "has no field 'shelf'"),
    (lambda d: d["tools"][3].__setitem__("returns", ["loan_id", "colour"]), "tools[3].returns", "no field 'colour'"),
    (lambda d: d["tools"][4]["parameters"]["required"].append("zzz"), "tools[4].parameters.required",
     "'zzz' is required but not a property"),
    (lambda d: d["tools"][4].__setitem__("phrase", "move loan {loan_id} to {when}"), "tools[4].phrase",
     "placeholder 'when'"),
    (lambda d: d["entities"]["member"]["fields"].__setitem__("fav", {"type": "patron_id", "ref": "loan"}),
     "entities.member.fields.fav.type", "must have type 'loan_id'"),
    (lambda d: d["entities"]["member"]["fields"].__setitem__("last", {"type": "loan_id", "ref": "loan"}),
     "entities", "cycle"),
    (lambda d: d["entities"]["member"]["fields"].__setitem__("s", {"type": "loan_status", "choice": ["out", "gone"]}),
     "entities.member.fields.s.choice[1]", "'gone' does not match type 'loan_status'"),
    (lambda d: d["entities"]["member"]["fields"].__setitem__("d", {"type": "date", "dates": ["2026-05-01", "2026-01-01"]}),
     "entities.member.fields.d.dates", "before the first"),
    (lambda d: d["types"]["patron_id"].__setitem__("schema", {"type": "strin"}), "types.patron_id.schema",
     "not a valid JSON Schema"),
    (lambda d: d["types"].__setitem__("email", {"schema": {"type": "string"}, "role": "contact"}), "types.email",
     "redefines a type"),
    (lambda d: d["tools"][2]["parameters"]["properties"]["status"].__setitem__("anyOf", [{"const": "out"}]),
     "tools[2].parameters.properties.status", "unsupported JSON Schema keywords ['anyOf']"),
    (lambda d: d["tools"].append(dict(d["tools"][0])), "tools", "duplicate tool names ['find_library_member']"),
])
def test_semantic_errors(write_domain, library_domain, mutate, where, reason) -> None:
    mutate(library_domain)
    path, exc = _load_broken(write_domain, library_domain)
    _expect_error(path, exc, where, reason)


@pytest.mark.parametrize("provider", ["date_of_birth", "past_date", "date_this_year", "year", "iso8601", "unix_time"])
def test_faker_provider_that_depends_on_today_is_rejected(write_domain, library_domain, provider) -> None:
    library_domain["entities"]["member"]["fields"]["born"] = {"type": "date", "faker": provider}
    path, exc = _load_broken(write_domain, library_domain)
    _expect_error(path, exc, "entities.member.fields.born.faker", "depends on today's date")


def test_unknown_faker_provider_and_bad_args(write_domain, library_domain) -> None:
    library_domain["entities"]["member"]["fields"]["motto"] = {"type": "text", "faker": "no_such_provider"}
    path, exc = _load_broken(write_domain, library_domain)
    _expect_error(path, exc, "entities.member.fields.motto.faker", "no provider 'no_such_provider'")
    library_domain["entities"]["member"]["fields"]["motto"] = {"type": "text", "faker": "word", "faker_args": {"bogus": 1}}
    path, exc = _load_broken(write_domain, library_domain, subdir="extra2")
    _expect_error(path, exc, "entities.member.fields.motto.faker_args", "bogus")


def test_duplicate_tool_name_across_files(write_domain, library_domain) -> None:
    library_domain["tools"][1]["name"] = "get_holder"  # a banking tool
    path, exc = _load_broken(write_domain, library_domain)
    _expect_error(path, exc, "tools", "tool 'get_holder' is already defined in")
    assert "banking.json" in exc.value.reason


def test_duplicate_tool_name_across_two_extra_files(write_domain, library_domain) -> None:
    write_domain(library_domain, name="a_library.json")
    other = dict(library_domain, name="library_annex", tools=[library_domain["tools"][1]],
                 types={"annex_code": {"schema": {"type": "string"}, "role": "code"}})
    other["entities"] = library_domain["entities"]
    path, exc = _load_broken(write_domain, other, name="b_annex.json")
    _expect_error(path, exc, "tools", "tool 'get_library_member' is already defined in")
    assert "a_library.json" in exc.value.reason


def test_empty_domain_directory(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(DomainError, match="no domain files"):
        Suite.load(extra_dirs=[tmp_path / "empty"])
    with pytest.raises(DomainError, match="nowhere.*no such directory"):
        Suite.load(extra_dirs=[tmp_path / "nowhere"])
    # one directory as a plain string is that directory, not a sequence of one-letter paths ("/" included)
    with pytest.raises(DomainError, match="nowhere.*no such directory"):
        Suite.load(extra_dirs=str(tmp_path / "nowhere"))
    (tmp_path / "file.json").write_text("{}")
    with pytest.raises(DomainError, match="file.json.*not a directory"):
        Suite.load(tmp_path / "file.json")


def test_the_command_line_names_a_broken_domain_in_one_line(tmp_path: Path, capsys) -> None:
    from rods_gym.cli import main

    (tmp_path / "broken.json").write_text('{"name": 3}')
    for command in (["skills"], ["graph", "--out", str(tmp_path / "g")], ["synth", "--n", "1", "--out", str(tmp_path / "s.jsonl")]):
        assert main([*command, "--domains", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"rods {command[0]}: error: ") and "broken.json" in err and "Traceback" not in err


def test_adding_a_domain_needs_no_code_change(library_suite: Suite) -> None:
    """The library domain, written as data only, joins the graph, is sampled and is solved."""
    g = library_suite.graph
    assert set(LIBRARY_TOOLS) <= set(g.nodes)
    # it links to the built-in domains through shared value types (email, date...)
    cross = [(u, v, k) for u, v, k, d in g.edges(keys=True, data=True)
             if d["cross_domain"] and (u in LIBRARY_TOOLS) != (v in LIBRARY_TOOLS)]
    assert any(v == "find_library_member" and k == "email" for _, v, k in cross)
    # its own dependency chain: find member -> member id -> loans
    assert g.has_edge("find_library_member", "list_member_loans", key="patron_id")

    cfg = SamplerConfig(tools=LIBRARY_TOOLS, depth=(1, 3), extra_calls=(0, 1), distractors=(0, 2),
                        missing_param=0.3, missing_tool=0.2, user_turns=(1, 2))
    tasks = TaskSampler(library_suite, cfg, seed=5).sample_many(60)
    used = {c.tool for t in tasks for c in t.calls} | {d for t in tasks for d in t.distractors}
    assert used <= set(LIBRARY_TOOLS)
    assert len({c.tool for t in tasks for c in t.calls}) >= 6  # most of the new tools get used
    assert max(compute_signature(t, library_suite).depth for t in tasks) >= 2
    for mode in ("chat", "compact", "structured"):
        env = ToolChainEnv(mode=mode, suite=library_suite, task_set=tasks)
        for task in tasks:
            env.reset(options={"task": task})
            ret, info, term, trunc = run_oracle(env)
            assert info["success"] and term and not trunc, (mode, task.id)
            assert ret == pytest.approx(1.0)


def test_suite_from_only_an_extra_directory(write_domain, library_domain) -> None:
    """A suite made of one new domain (plus the shared value types) stands on its own."""
    path = write_domain(library_domain)
    suite = Suite.load(path.parent)
    assert [d.name for d in suite.domains] == ["library"]
    assert set(suite.tools) == set(LIBRARY_TOOLS)
    tasks = TaskSampler(suite, SamplerConfig(depth=(1, 2)), seed=0).sample_many(20)
    env = ToolChainEnv(mode="chat", suite=suite, task_set=tasks)
    for task in tasks:
        env.reset(options={"task": task})
        ret, info, _, _ = run_oracle(env)
        assert info["success"] and ret == pytest.approx(1.0)


def test_value_types_file_is_valid() -> None:
    types = load_value_types()
    assert {"email", "date", "money", "person_name"} <= set(types)
    for vt in types.values():
        jsonschema.Draft202012Validator.check_schema(dict(vt.schema))
