"""Execution of a validated tool call against a :class:`WorldState`.

Each kind is a pure-Python state transition. Every check happens before the first write,
so a call that fails changes nothing. Outputs are bounded (searches return at most
``SEARCH_LIMIT`` records).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .domain import EntitySpec, ToolSpec
from .world import Record, ValuePools, WorldState, generate_value

SEARCH_LIMIT = 10


class ToolError(Exception):
    """A call the simulated API refuses (not found, precondition, funds...)."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


def _num_eq(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        if isinstance(a, int) and isinstance(b, int):
            return a == b  # exact, and float() of a huge int would overflow
        try:
            return abs(a - b) <= 1e-6
        except OverflowError:  # an int beyond float range is never within 1e-6 of a float
            return False
    return a == b


def values_equal(a: Any, b: Any) -> bool:
    """Argument equality used everywhere a call is compared: numbers within 1e-6."""
    return _num_eq(a, b)


def _matches(rec: Record, filters: list[tuple[str, Any]]) -> bool:
    for f, v in filters:
        if not _num_eq(rec.get(f), v):
            return False
    return True


def _label(ent: EntitySpec) -> str:
    return ent.name.split(".", 1)[1].replace("_", " ")


class Executor:
    """Runs tools of a suite. Stateless apart from the suite's specs."""

    def __init__(self, entities: Mapping[str, EntitySpec], id_entity: Mapping[str, str], pools: ValuePools) -> None:
        self.entities = entities
        self.id_entity = id_entity  # id value type -> qualified entity
        self.pools = pools

    def run(self, tool: ToolSpec, args: Mapping[str, Any], state: WorldState) -> dict[str, Any]:
        if tool.hook is not None:
            return tool.hook(tool, dict(args), state, self)
        return getattr(self, "_" + tool.kind)(tool, args, state)

    # -- helpers -----------------------------------------------------------------------
    def _filters(self, tool: ToolSpec, args: Mapping[str, Any]) -> list[tuple[str, Any]]:
        return [(tool.param(k).field, v) for k, v in args.items()]

    def _target(self, tool: ToolSpec, args: Mapping[str, Any], state: WorldState) -> tuple[EntitySpec, Record]:
        ent = self.entities[tool.entity]
        pname = next(p.name for p in tool.params if p.field == ent.id_field)
        rec = state.get(ent.name, args[pname])
        if rec is None:
            raise ToolError("not_found", f"no {_label(ent)} with {ent.id_field} {args[pname]!r}")
        return ent, rec

    def _check_pre(self, tool: ToolSpec, ent: EntitySpec, rec: Record) -> None:
        for f, allowed in tool.precondition.items():
            if rec.get(f) not in allowed:
                raise ToolError("precondition_failed",
                                f"{_label(ent)} {rec[ent.id_field]} has {f} {rec.get(f)!r}; "
                                f"{tool.name} needs {f} in {list(allowed)}")

    def _check_refs(self, tool: ToolSpec, args: Mapping[str, Any], state: WorldState, skip: tuple[str, ...] = ()) -> None:
        for p in tool.params:
            target = self.id_entity.get(p.type)
            if target is not None and p.name in args and p.name not in skip:
                if state.get(target, args[p.name]) is None:
                    raise ToolError("not_found", f"no {_label(self.entities[target])} with id {args[p.name]!r}")

    def _new_record(self, ent: EntitySpec, values: Mapping[str, Any], state: WorldState) -> Record:
        rid = state.new_id(ent)
        rng = np.random.default_rng([state.world.seed, sum(map(ord, rid)), len(rid)])
        rec: Record = {ent.id_field: rid}
        tables = {e: {r[self.entities[e].id_field]: r for r in state.records(e)}
                  for e in {f.ref for f in ent.fields[1:] if f.ref and f.name not in values}}
        for f in ent.fields[1:]:
            rec[f.name] = values[f.name] if f.name in values else generate_value(f, rng, self.pools, 0, tables)
        return rec

    # -- kinds -------------------------------------------------------------------------
    def _lookup(self, tool: ToolSpec, args: Mapping[str, Any], state: WorldState) -> dict[str, Any]:
        ent = self.entities[tool.entity]
        filters = self._filters(tool, args)
        found = [r for r in state.records(ent.name) if _matches(r, filters)]
        if not found:
            desc = ", ".join(f"{f} {v!r}" for f, v in filters)
            raise ToolError("not_found", f"no {_label(ent)} with {desc}")
        if len(found) > 1:
            raise ToolError("ambiguous", f"{len(found)} {_label(ent)} records match; give more details")
        return {f: found[0][f] for f, _ in tool.outputs}

    def _search(self, tool: ToolSpec, args: Mapping[str, Any], state: WorldState) -> dict[str, Any]:
        ent = self.entities[tool.entity]
        filters = self._filters(tool, args)
        found = sorted((r for r in state.records(ent.name) if _matches(r, filters)), key=lambda r: r[ent.id_field])
        return {"results": [{f: r[f] for f, _ in tool.outputs} for r in found[:SEARCH_LIMIT]], "total": len(found)}

    def _read(self, tool: ToolSpec, args: Mapping[str, Any], state: WorldState) -> dict[str, Any]:
        _, rec = self._target(tool, args, state)
        return {f: rec[f] for f, _ in tool.outputs}

    def _create(self, tool: ToolSpec, args: Mapping[str, Any], state: WorldState) -> dict[str, Any]:
        ent = self.entities[tool.entity]
        self._check_refs(tool, args, state)
        values = dict(tool.defaults)
        values.update({tool.param(k).field: v for k, v in args.items()})
        rec = self._new_record(ent, values, state)
        state.put(ent.name, rec, ent.id_field)
        return {f: rec[f] for f, _ in tool.outputs}

    def _update(self, tool: ToolSpec, args: Mapping[str, Any], state: WorldState) -> dict[str, Any]:
        ent, rec = self._target(tool, args, state)
        self._check_pre(tool, ent, rec)
        self._check_refs(tool, args, state, skip=tuple(p.name for p in tool.params if p.field == ent.id_field))
        new = dict(rec)
        for k, v in args.items():
            new[tool.param(k).field] = v
        state.put(ent.name, new, ent.id_field)
        return {ent.id_field: new[ent.id_field], **{f: new[f] for f, _ in tool.outputs}}

    def _delete(self, tool: ToolSpec, args: Mapping[str, Any], state: WorldState) -> dict[str, Any]:
        ent, rec = self._target(tool, args, state)
        self._check_pre(tool, ent, rec)
        if tool.effect:
            new = {**rec, **tool.effect}
            state.put(ent.name, new, ent.id_field)
            return {ent.id_field: new[ent.id_field], **{f: new[f] for f, _ in tool.outputs}}
        state.remove(ent.name, rec[ent.id_field])
        return {ent.id_field: rec[ent.id_field], "deleted": True}

    def _transact(self, tool: ToolSpec, args: Mapping[str, Any], state: WorldState) -> dict[str, Any]:
        assert tool.transfer is not None and tool.transfer_field is not None
        ent = self.entities[tool.entity]
        src_p, dst_p, amt_p = tool.transfer
        field = tool.transfer_field
        src, dst, amount = state.get(ent.name, args[src_p]), state.get(ent.name, args[dst_p]), float(args[amt_p])
        for name, rec in ((src_p, src), (dst_p, dst)):
            if rec is None:
                raise ToolError("not_found", f"no {_label(ent)} with id {args[name]!r}")
        assert src is not None and dst is not None
        if src is dst or src[ent.id_field] == dst[ent.id_field]:
            raise ToolError("invalid_request", f"{src_p} and {dst_p} must be different")
        if amount <= 0:
            raise ToolError("invalid_request", f"{amt_p} must be positive")
        self._check_pre(tool, ent, src)
        if float(src[field]) + 1e-9 < amount:
            raise ToolError("insufficient_funds", f"{_label(ent)} {src[ent.id_field]} has only {src[field]} {field}")
        record = None
        if tool.record is not None:
            rent = self.entities[tool.record]
            values = {f.name: args[f.name] for f in rent.fields[1:] if f.name in args}
            record = self._new_record(rent, values, state)
        new_src = {**src, field: round(float(src[field]) - amount, 2)}
        new_dst = {**dst, field: round(float(dst[field]) + amount, 2)}
        state.put(ent.name, new_src, ent.id_field)
        state.put(ent.name, new_dst, ent.id_field)
        if record is not None:
            rent = self.entities[tool.record]  # type: ignore[index]
            state.put(rent.name, record, rent.id_field)
            return {rent.id_field: record[rent.id_field], field: new_src[field]}
        return {field: new_src[field]}

    def _aggregate(self, tool: ToolSpec, args: Mapping[str, Any], state: WorldState) -> dict[str, Any]:
        ent = self.entities[tool.entity]
        filters = self._filters(tool, args)
        found = [r for r in state.records(ent.name) if _matches(r, filters)]
        name = tool.outputs[0][0]
        if tool.op == "count":
            return {name: len(found)}
        values = [float(r[tool.agg_field]) for r in found]  # type: ignore[index]
        if not values:
            return {name: 0}
        result = {"sum": sum, "min": min, "max": max, "avg": lambda v: sum(v) / len(v)}[tool.op](values)  # type: ignore[index]
        return {name: round(result, 2)}
