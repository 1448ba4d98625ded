"""Declarative tool domains: the file format, its validation, and the loaded specs.

A domain file (JSON, one per domain, in ``envs/domains/``) declares value types, entity
types with generated fields, and tools. It is validated twice when loaded: against the
JSON Schema meta-schema ``domain_schema.json`` (structure), then semantically (every
reference resolves, every tool kind has the parts it needs). Either failure raises
:class:`DomainError` naming the file, the path inside it and the reason.

Tools are generic operations over the entity store, one per *kind*:

===========  ==================================================================
lookup       find the one record whose key fields equal the arguments
search       list the records whose fields equal the given filters (bounded)
read         read fields of the record with the given id
create       add a record; arguments set fields, the rest use defaults/generators
update       set fields of the record with the given id
delete       soft-delete (``effect`` sets fields) or remove the record
transact     move ``amount`` of a numeric field from one record to another
aggregate    count/sum/avg/min/max over the records matching the filters
===========  ==================================================================
"""

from __future__ import annotations

import copy
import datetime as _dt
import importlib
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping

import jsonschema

from .argcheck import compile_property

KINDS = ("lookup", "search", "read", "create", "update", "delete", "transact", "aggregate")
#: kinds whose calls change the world
MUTATING_KINDS = frozenset({"create", "update", "delete", "transact"})
#: value-type roles whose values flow between tools (they make API-graph edges)
LINKABLE_ROLES = frozenset({"id", "contact", "name", "amount", "date", "place", "code"})
NUMERIC_ROLES = frozenset({"amount", "count"})
#: Faker providers whose values depend on today's date (worlds must not change from day to day)
TODAY_DEPENDENT_FAKER = frozenset({
    "am_pm", "century", "credit_card_expire", "date", "date_between", "date_between_dates", "date_object",
    "date_of_birth", "date_this_century", "date_this_decade", "date_this_month", "date_this_year", "date_time",
    "date_time_ad", "date_time_between", "date_time_between_dates", "date_time_this_century",
    "date_time_this_decade", "date_time_this_month", "date_time_this_year", "day_of_month", "day_of_week",
    "future_date", "future_datetime", "iso8601", "month", "month_name", "passport_dates", "passport_dob",
    "past_date", "past_datetime", "profile", "simple_profile", "time", "time_delta", "time_object",
    "time_series", "unix_time", "year",
})


class DomainError(ValueError):
    """A domain file is invalid. The message names the file, the path inside it and why."""

    def __init__(self, source: str, path: str, reason: str) -> None:
        self.source, self.path, self.reason = source, path, reason
        super().__init__(f"{source}: at {path or '<root>'}: {reason}")


@dataclass(frozen=True)
class ValueType:
    name: str
    schema: Mapping[str, Any]
    role: str
    description: str = ""

    @property
    def linkable(self) -> bool:
        return self.role in LINKABLE_ROLES

    @property
    def numeric(self) -> bool:
        return self.schema.get("type") in ("number", "integer")


@dataclass(frozen=True)
class FieldSpec:
    name: str
    type: str
    generator: Mapping[str, Any]
    unique: bool = False

    @property
    def ref(self) -> str | None:
        return self.generator.get("ref")


@dataclass(frozen=True)
class EntitySpec:
    name: str  # qualified: "<domain>.<entity>"
    domain: str
    role: str
    count: int
    id_field: str
    id_prefix: str
    fields: tuple[FieldSpec, ...]  # id field first
    description: str = ""

    def field(self, name: str) -> FieldSpec:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"entity {self.name} has no field {name!r}")

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)


@dataclass(frozen=True)
class ParamSpec:
    name: str
    type: str
    field: str  # entity field the parameter reads or writes
    required: bool
    schema: Mapping[str, Any]  # JSON Schema of the parameter (with x-type / x-field)


@dataclass(frozen=True)
class ToolSpec:
    name: str
    domain: str
    kind: str
    entity: str  # qualified entity name
    description: str
    phrase: str
    params: tuple[ParamSpec, ...]
    outputs: tuple[tuple[str, str], ...]  # (output name, value type) in return order
    parameters: Mapping[str, Any]  # full JSON Schema object of the arguments
    precondition: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    effect: Mapping[str, Any] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    op: str | None = None
    agg_field: str | None = None
    transfer: tuple[str, str, str] | None = None  # (from param, to param, amount param)
    transfer_field: str | None = None
    record: str | None = None  # qualified entity created by a transact
    hook: Callable[..., Any] | None = None

    def param(self, name: str) -> ParamSpec:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"tool {self.name} has no parameter {name!r}")

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @property
    def mutating(self) -> bool:
        return self.kind in MUTATING_KINDS

    def public_schema(self) -> dict[str, Any]:
        """The tool in Hugging Face chat-template convention (no ``x-`` extension keys)."""
        props = {
            name: {k: v for k, v in spec.items() if not k.startswith("x-")}
            for name, spec in self.parameters["properties"].items()
        }
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": props,
                    "required": list(self.parameters.get("required", [])),
                },
            },
        }


@dataclass(frozen=True)
class Domain:
    name: str
    description: str
    source: str
    types: Mapping[str, ValueType]
    entities: Mapping[str, EntitySpec]  # by qualified name
    tools: tuple[ToolSpec, ...]


def _meta_validator() -> jsonschema.Draft202012Validator:
    text = resources.files("rods_gym").joinpath("domain_schema.json").read_text()
    return jsonschema.Draft202012Validator(json.loads(text))


def _json_path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out.lstrip(".")


def load_domain_file(path: str | Path, known_types: Mapping[str, ValueType] | None = None) -> Domain:
    """Load and validate one domain file; raise :class:`DomainError` on any problem."""
    path = Path(path)
    source = str(path)
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise DomainError(source, f"line {exc.lineno} column {exc.colno}", f"not valid JSON: {exc.msg}") from None
    return parse_domain(raw, source, known_types or {})


def parse_domain(raw: Any, source: str, known_types: Mapping[str, ValueType]) -> Domain:
    errors = sorted(_meta_validator().iter_errors(raw), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        err = jsonschema.exceptions.best_match(errors)
        raise DomainError(source, _json_path(err.absolute_path), err.message)
    return _Builder(raw, source, known_types).build()


class _Builder:
    """Semantic checks and construction of the frozen specs of one domain."""

    def __init__(self, raw: dict[str, Any], source: str, known_types: Mapping[str, ValueType]) -> None:
        self.raw, self.source, self.known = raw, source, known_types
        self.name: str = raw["name"]
        self._faker: Any = None  # created on first use, to check Faker providers

    def fail(self, path: str, reason: str) -> DomainError:
        return DomainError(self.source, path, reason)

    def build(self) -> Domain:
        types = self._types()
        all_types = {**self.known, **types}
        entities = self._entities(all_types)
        hooks = self._hooks()
        tools = tuple(
            self._tool(i, t, all_types, entities, hooks) for i, t in enumerate(self.raw["tools"])
        )
        names = [t.name for t in tools]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise self.fail("tools", f"duplicate tool names {sorted(dup)}")
        return Domain(self.name, self.raw["description"], self.source, types, entities, tools)

    def _types(self) -> dict[str, ValueType]:
        out = {}
        for name, spec in self.raw["types"].items():
            vt = ValueType(name, spec["schema"], spec["role"], spec.get("description", ""))
            prior = self.known.get(name)
            if prior is not None and (dict(prior.schema) != dict(vt.schema) or prior.role != vt.role):
                raise self.fail(f"types.{name}", "redefines a type another domain declares differently "
                                f"(schema {dict(prior.schema)}, role {prior.role!r})")
            try:
                jsonschema.Draft202012Validator.check_schema(dict(vt.schema))
            except jsonschema.SchemaError as exc:
                raise self.fail(f"types.{name}.schema", f"not a valid JSON Schema: {exc.message}") from None
            out[name] = vt
        return out

    def _qualify(self, entity: str) -> str:
        return entity if "." in entity else f"{self.name}.{entity}"

    def _entities(self, types: Mapping[str, ValueType]) -> dict[str, EntitySpec]:
        raw_entities = self.raw["entities"]
        out: dict[str, EntitySpec] = {}
        for ename, spec in raw_entities.items():
            base = f"entities.{ename}"
            id_field = spec["id"]
            if id_field not in types:
                raise self.fail(f"{base}.id", f"the id type {id_field!r} is not declared under 'types'")
            if types[id_field].role != "id":
                raise self.fail(f"{base}.id", f"type {id_field!r} must have role 'id'")
            fields = [FieldSpec(id_field, id_field, {"id": spec["id_prefix"]}, unique=True)]
            for fname, fspec in spec["fields"].items():
                fpath = f"{base}.fields.{fname}"
                if fname == id_field:
                    raise self.fail(fpath, "the id field is generated; do not list it under 'fields'")
                if fspec["type"] not in types:
                    raise self.fail(f"{fpath}.type", f"unknown value type {fspec['type']!r}")
                gen = {k: v for k, v in fspec.items() if k not in ("type", "unique")}
                if "ref" in gen:
                    target = gen["ref"]
                    local = target.split(".", 1)[-1] if target.startswith(self.name + ".") else target
                    if "." in local:
                        raise self.fail(f"{fpath}.ref", f"refs must name an entity of this domain, got {target!r}")
                    if local not in raw_entities:
                        raise self.fail(f"{fpath}.ref", f"unknown entity {target!r}")
                    if raw_entities[local]["id"] != fspec["type"]:
                        raise self.fail(f"{fpath}.type", f"a ref to {local!r} must have type {raw_entities[local]['id']!r}")
                    gen["ref"] = self._qualify(local)
                if "faker" in gen:
                    self._check_faker(fpath, gen["faker"], gen.get("faker_args"))
                if "dates" in gen:
                    try:
                        lo, hi = (_dt.date.fromisoformat(x) for x in gen["dates"])
                    except ValueError as exc:
                        raise self.fail(f"{fpath}.dates", f"not an ISO date: {exc}") from None
                    if hi < lo:
                        raise self.fail(f"{fpath}.dates", "the last date is before the first")
                if "choice" in gen:
                    validator = jsonschema.Draft202012Validator(dict(types[fspec["type"]].schema))
                    for j, value in enumerate(gen["choice"]):
                        if not validator.is_valid(value):
                            raise self.fail(f"{fpath}.choice[{j}]", f"{value!r} does not match type {fspec['type']!r}")
                if ("integers" in gen or "uniform" in gen) and not types[fspec["type"]].numeric:
                    raise self.fail(f"{fpath}.type", f"a numeric generator needs a numeric type, {fspec['type']!r} is not")
                fields.append(FieldSpec(fname, fspec["type"], gen, bool(fspec.get("unique", False))))
            q = self._qualify(ename)
            out[q] = EntitySpec(q, self.name, spec["role"], spec["count"], id_field, spec["id_prefix"],
                                tuple(fields), spec.get("description", ""))
        self._check_ref_order(out)
        return out

    def _check_faker(self, fpath: str, provider: str, args: Mapping[str, Any] | None) -> None:
        if provider in TODAY_DEPENDENT_FAKER or provider.split("_")[0] in ("date", "time", "past", "future", "unix"):
            raise self.fail(f"{fpath}.faker", f"Faker provider {provider!r} depends on today's date, "
                            "so worlds would change from day to day; use 'dates': [first, last]")
        if self._faker is None:
            from faker import Faker

            self._faker = Faker("en_US")
        fn = getattr(self._faker, provider, None)
        if not callable(fn):
            raise self.fail(f"{fpath}.faker", f"Faker (en_US) has no provider {provider!r}")
        self._faker.seed_instance(0)
        try:
            fn(**(args or {}))
        except Exception as exc:  # any failure of the provider call is the file's fault
            raise self.fail(f"{fpath}.faker_args", f"{provider}(**{args or {}}) fails: {exc}") from None

    def _check_ref_order(self, entities: Mapping[str, EntitySpec]) -> None:
        import networkx as nx

        g = nx.DiGraph()
        for e in entities.values():
            g.add_node(e.name)
            for f in e.fields:
                if f.ref:
                    g.add_edge(f.ref, e.name)
        if not nx.is_directed_acyclic_graph(g):
            cycle = nx.find_cycle(g)
            raise self.fail("entities", f"entity references form a cycle: {cycle}")

    def _hooks(self) -> Any:
        module = self.raw.get("hooks")
        if module is None:
            return None
        try:
            return importlib.import_module(module)
        except ImportError as exc:
            raise self.fail("hooks", f"cannot import hook module {module!r}: {exc}") from None

    def _tool(self, i: int, raw: Mapping[str, Any], types: Mapping[str, ValueType],
              entities: Mapping[str, EntitySpec], hooks: Any) -> ToolSpec:
        base = f"tools[{i}]"
        kind = raw["kind"]
        ename = self._qualify(raw["entity"])
        if ename not in entities:
            raise self.fail(f"{base}.entity", f"unknown entity {raw['entity']!r}")
        ent = entities[ename]
        fields = {f.name: f for f in ent.fields}
        required = list(raw["parameters"].get("required", []))
        props = raw["parameters"]["properties"]
        for r in required:
            if r not in props:
                raise self.fail(f"{base}.parameters.required", f"{r!r} is required but not a property")
        params = []
        full_props = {}
        for pname, pspec in props.items():
            ppath = f"{base}.parameters.properties.{pname}"
            fname = pspec.get("x-field", pname)
            if "x-type" in pspec:
                tname = pspec["x-type"]
                if tname not in types:
                    raise self.fail(f"{ppath}.x-type", f"unknown value type {tname!r}")
            elif fname in fields:
                tname = fields[fname].type
            else:
                raise self.fail(ppath, f"entity {ename} has no field {fname!r}; set 'x-field' or 'x-type'")
            if kind not in ("transact", "create") and fname not in fields:
                raise self.fail(f"{ppath}.x-field", f"entity {ename} has no field {fname!r}")
            schema = copy.deepcopy(dict(types[tname].schema))
            schema.update({k: v for k, v in pspec.items()})
            schema["x-type"], schema["x-field"] = tname, fname
            try:
                jsonschema.Draft202012Validator.check_schema(schema)
            except jsonschema.SchemaError as exc:
                raise self.fail(ppath, f"not a valid JSON Schema: {exc.message}") from None
            try:  # the env checks arguments with a compiled subset of JSON Schema
                compile_property(pname, schema)
            except ValueError as exc:
                raise self.fail(ppath, str(exc)) from None
            full_props[pname] = schema
            params.append(ParamSpec(pname, tname, fname, pname in required, schema))
        parameters = {"type": "object", "properties": full_props, "required": required, "additionalProperties": False}
        by_field = {p.field: p for p in params}

        def need_id_param() -> None:
            p = by_field.get(ent.id_field)
            if p is None or not p.required:
                raise self.fail(f"{base}.parameters", f"a {kind} tool needs a required parameter for {ent.id_field!r}")

        def fields_exist(names: Any, where: str) -> None:
            for n in names:
                if n not in fields:
                    raise self.fail(f"{base}.{where}", f"entity {ename} has no field {n!r}")

        returns = list(raw.get("returns", []))
        fields_exist(returns, "returns")
        outputs: list[tuple[str, str]] = [(r, fields[r].type) for r in returns]
        extra: dict[str, Any] = {}
        if kind in ("lookup", "search"):
            if not required:
                raise self.fail(f"{base}.parameters", f"a {kind} tool needs at least one required parameter")
            if not outputs:
                raise self.fail(f"{base}.returns", f"a {kind} tool must return at least one field")
        elif kind == "read":
            need_id_param()
            if not outputs:
                raise self.fail(f"{base}.returns", "a read tool must return at least one field")
        elif kind == "create":
            for p in params:
                if p.field == ent.id_field:
                    raise self.fail(f"{base}.parameters", "a create tool must not take the new record's id")
            fields_exist(raw.get("defaults", {}), "defaults")
            fields_exist([p.field for p in params], "parameters")
            outputs = [(ent.id_field, ent.id_field)] + [o for o in outputs if o[0] != ent.id_field]
        elif kind == "update":
            need_id_param()
            if len(params) < 2:
                raise self.fail(f"{base}.parameters", "an update tool needs the id and at least one field to set")
        elif kind == "delete":
            need_id_param()
            fields_exist(raw.get("effect", {}), "effect")
        elif kind == "transact":
            src, dst, amount = raw["from"], raw["to"], raw["amount"]
            for key, pname in (("from", src), ("to", dst), ("amount", amount)):
                if pname not in props or pname not in required:
                    raise self.fail(f"{base}.{key}", f"{pname!r} must be a required parameter")
            for key, pname in (("from", src), ("to", dst)):
                if types[full_props[pname]["x-type"]].name != ent.id_field:
                    raise self.fail(f"{base}.{key}", f"parameter {pname!r} must have type {ent.id_field!r}")
            fields_exist([raw["field"]], "field")
            if not types[fields[raw["field"]].type].numeric:
                raise self.fail(f"{base}.field", f"field {raw['field']!r} is not numeric")
            extra["transfer"] = (src, dst, amount)
            extra["transfer_field"] = raw["field"]
            if "record" in raw:
                rec = self._qualify(raw["record"])
                if rec not in entities:
                    raise self.fail(f"{base}.record", f"unknown entity {raw['record']!r}")
                extra["record"] = rec
                rec_ent = entities[rec]
                outputs = [(rec_ent.id_field, rec_ent.id_field)]
            else:
                outputs = [(raw["field"], fields[raw["field"]].type)]
        elif kind == "aggregate":
            fields_exist([p.field for p in params], "parameters")
            if raw["op"] != "count":
                if "field" not in raw:
                    raise self.fail(base, f"aggregate op {raw['op']!r} needs 'field'")
                fields_exist([raw["field"]], "field")
                if not types[fields[raw["field"]].type].numeric:
                    raise self.fail(f"{base}.field", f"field {raw['field']!r} is not numeric")
            out = raw["output"]
            if out["type"] not in types:
                raise self.fail(f"{base}.output.type", f"unknown value type {out['type']!r}")
            outputs = [(out["name"], out["type"])]
            extra["op"], extra["agg_field"] = raw["op"], raw.get("field")
        for key in ("precondition", "effect", "defaults"):
            if key in raw:
                fields_exist(raw[key], key)
        hook = None
        if "hook" in raw:
            if hooks is None or not callable(getattr(hooks, raw["hook"], None)):
                raise self.fail(f"{base}.hook", f"hook {raw['hook']!r} not found in module {self.raw.get('hooks')!r}")
            hook = getattr(hooks, raw["hook"])
        try:
            raw["phrase"].format(**{p.name: "x" for p in params})
        except (KeyError, IndexError, ValueError) as exc:
            raise self.fail(f"{base}.phrase", f"placeholder {exc} is not a parameter of the tool") from None
        return ToolSpec(
            name=raw["name"], domain=self.name, kind=kind, entity=ename, description=raw["description"],
            phrase=raw["phrase"], params=tuple(params), outputs=tuple(outputs), parameters=parameters,
            precondition={k: tuple(v) for k, v in raw.get("precondition", {}).items()},
            effect=dict(raw.get("effect", {})), defaults=dict(raw.get("defaults", {})), hook=hook, **extra,
        )
