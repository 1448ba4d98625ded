"""Execution of a validated tool call against a :class:`WorldState`.

Each kind is a pure-Python state transition. Every check happens before the first write,
so a call that fails changes nothing. Outputs are bounded (searches return at most
``SEARCH_LIMIT`` records).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Mapping

import numpy as np

from .domain import EntitySpec, ToolSpec
from .world import Draw, Record, ValuePools, WorldState, compile_generator

SEARCH_LIMIT = 10
SEED_CACHE = 4096  # seeded generator states kept for created records
DRAWN_CACHE = 8192  # drawn field values kept for created records


class ToolError(Exception):
    """A call the simulated API refuses (not found, precondition, funds...); ``params`` names the
    call's parameters the refusal concerns (empty when none does, e.g. a precondition on state)."""

    def __init__(self, code: str, message: str, params: tuple[str, ...] = ()) -> None:
        self.code = code
        self.params = params
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


def _found(state: WorldState, entity: str, filters: list[tuple[str, Any]]) -> list[Record]:
    """Records of ``entity`` matching ``filters``, in ``state.records`` order. A text filter on
    a table the episode has not written reads the world's value index (a text value only ever
    equals the same text, so the index bucket holds exactly the candidates, in table order)."""
    for k, (f, v) in enumerate(filters):
        if type(v) is str:
            index = state.base_index(entity, f)
            if index is not None:
                rest = filters[:k] + filters[k + 1 :]  # the bucket's records match filter k
                bucket = index.get(v, ())
                return [r for r in bucket if _matches(r, rest)] if rest else list(bucket)
            break
    return [r for r in state.records(entity) if _matches(r, filters)]


def _label(ent: EntitySpec) -> str:
    return ent.name.split(".", 1)[1].replace("_", " ")


class _ToolPlan:
    """Per-tool lookups the kinds need on every call, derived once from the spec."""

    __slots__ = ("tool", "field_of", "id_param", "outputs")

    def __init__(self, tool: ToolSpec, ent: EntitySpec | None) -> None:
        self.tool = tool
        self.field_of = {p.name: p.field for p in tool.params}
        ids = [p.name for p in tool.params if ent is not None and p.field == ent.id_field]
        self.id_param = ids[0] if ids else None
        self.outputs = tuple(f for f, _ in tool.outputs)


class Executor:
    """Runs tools of a suite. Stateless apart from the suite's specs and caches derived from
    them (per-tool lookups, compiled field generators, seeded generator states)."""

    def __init__(self, entities: Mapping[str, EntitySpec], id_entity: Mapping[str, str], pools: ValuePools) -> None:
        self.entities = entities
        self.id_entity = id_entity  # id value type -> qualified entity
        self.pools = pools
        self._plans: dict[str, _ToolPlan] = {}
        self._draws: dict[str, tuple[EntitySpec, list[tuple[str, str | None, Draw]]]] = {}
        self._seeded: OrderedDict[tuple[int, int, int], dict[str, Any]] = OrderedDict()
        self._drawn: OrderedDict[tuple[Any, ...], tuple[Any, ...]] = OrderedDict()
        self._local = threading.local()  # one scratch generator per thread, re-seeded per record
        self._kinds: dict[str, Any] = {}  # kind -> the bound method that runs it

    def __getstate__(self) -> dict[str, Any]:  # caches (and the thread-local) stay behind
        return {"entities": self.entities, "id_entity": self.id_entity, "pools": self.pools}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["entities"], state["id_entity"], state["pools"])  # type: ignore[misc]

    def run(self, tool: ToolSpec, args: Mapping[str, Any], state: WorldState) -> dict[str, Any]:
        if tool.hook is not None:
            return tool.hook(tool, dict(args), state, self)
        run_kind = self._kinds.get(tool.kind)
        if run_kind is None:
            run_kind = self._kinds[tool.kind] = getattr(self, "_" + tool.kind)
        return run_kind(tool, args, state)

    # -- helpers -----------------------------------------------------------------------
    def _plan(self, tool: ToolSpec) -> _ToolPlan:
        plan = self._plans.get(tool.name)
        if plan is None or plan.tool is not tool:
            plan = _ToolPlan(tool, self.entities.get(tool.entity))
            self._plans[tool.name] = plan
        return plan

    def _filters(self, tool: ToolSpec, args: Mapping[str, Any]) -> list[tuple[str, Any]]:
        field_of = self._plan(tool).field_of
        return [(field_of[k] if k in field_of else tool.param(k).field, v) for k, v in args.items()]

    def _target(self, tool: ToolSpec, args: Mapping[str, Any], state: WorldState) -> tuple[EntitySpec, Record]:
        ent = self.entities[tool.entity]
        pname = self._plan(tool).id_param
        if pname is None:  # a tool without an id parameter (domain loading rules this out)
            raise StopIteration
        rec = state.get(ent.name, args[pname])
        if rec is None:
            raise ToolError("not_found", f"no {_label(ent)} with {ent.id_field} {args[pname]!r}", (pname,))
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
                    raise ToolError("not_found", f"no {_label(self.entities[target])} with id {args[p.name]!r}",
                                    (p.name,))

    def _record_rng(self, world_seed: int, rid: str) -> np.random.Generator:
        """The generator ``np.random.default_rng([world_seed, sum(map(ord, rid)), len(rid)])``,
        in its freshly seeded state. Seeding costs ~10 µs, so the seeded state is cached per
        key and loaded into a per-thread scratch generator (the same draws follow)."""
        key = (world_seed, sum(map(ord, rid)), len(rid))
        state = self._seeded.get(key)
        if state is None:
            state = np.random.PCG64(list(key)).state  # default_rng's bit generator, without the Generator
            self._seeded[key] = state
            if len(self._seeded) > SEED_CACHE:
                self._seeded.popitem(last=False)
        rng = getattr(self._local, "rng", None)
        if rng is None:
            rng = self._local.rng = np.random.default_rng(0)
        rng.bit_generator.state = state
        return rng

    def _field_draws(self, ent: EntitySpec) -> list[tuple[str, str | None, Draw]]:
        hit = self._draws.get(ent.name)
        if hit is None or hit[0] is not ent:
            if hit is not None:  # another spec under this name: forget what the old one drew
                self._drawn.clear()
            hit = (ent, [(f.name, f.ref, compile_generator(f)) for f in ent.fields[1:]])
            self._draws[ent.name] = hit
        return hit[1]

    def _new_record(self, ent: EntitySpec, values: Mapping[str, Any], state: WorldState) -> Record:
        """A created record: given ``values``, the rest drawn with a generator seeded by the
        world and the new id. The draws are a pure function of the world seed, the id, which
        fields are given and the ids of the referenced tables, so they are memoized on those
        (episodes that replay a task create the same records)."""
        rid = state.new_id(ent)
        draws = self._field_draws(ent)
        missing = tuple(name for name, _, _ in draws if name not in values)
        drawn: tuple[Any, ...] = ()
        if missing:
            tables: dict[str, tuple[Any, ...]] = {}  # ids of the referenced tables, as they are now
            for name, ref, _ in draws:
                if ref and name not in values and ref not in tables:
                    id_field = self.entities[ref].id_field
                    tables[ref] = tuple(r[id_field] for r in state.records(ref))
            key = (ent.name, state.world.seed, rid, missing, tuple(tables.items()))
            hit = self._drawn.get(key)
            if hit is None:
                rng = self._record_rng(state.world.seed, rid)
                hit = tuple(draw(rng, self.pools, 0, tables) for name, _, draw in draws if name not in values)
                self._drawn[key] = hit
                if len(self._drawn) > DRAWN_CACHE:
                    self._drawn.popitem(last=False)
            drawn = hit
        rec: Record = {ent.id_field: rid}
        k = 0
        for name, _, _ in draws:
            if name in values:
                rec[name] = values[name]
            else:
                rec[name] = drawn[k]
                k += 1
        return rec

    # -- kinds -------------------------------------------------------------------------
    def _lookup(self, tool: ToolSpec, args: Mapping[str, Any], state: WorldState) -> dict[str, Any]:
        ent = self.entities[tool.entity]
        filters = self._filters(tool, args)
        found = _found(state, ent.name, filters)
        if not found:
            desc = ", ".join(f"{f} {v!r}" for f, v in filters)
            raise ToolError("not_found", f"no {_label(ent)} with {desc}", tuple(args))
        if len(found) > 1:
            raise ToolError("ambiguous", f"{len(found)} {_label(ent)} records match; give more details", tuple(args))
        rec = found[0]
        return {f: rec[f] for f in self._plan(tool).outputs}

    def _search(self, tool: ToolSpec, args: Mapping[str, Any], state: WorldState) -> dict[str, Any]:
        ent = self.entities[tool.entity]
        filters = self._filters(tool, args)
        id_field = ent.id_field
        found = sorted(_found(state, ent.name, filters), key=lambda r: r[id_field])
        outputs = self._plan(tool).outputs
        return {"results": [{f: r[f] for f in outputs} for r in found[:SEARCH_LIMIT]], "total": len(found)}

    def _read(self, tool: ToolSpec, args: Mapping[str, Any], state: WorldState) -> dict[str, Any]:
        _, rec = self._target(tool, args, state)
        return {f: rec[f] for f in self._plan(tool).outputs}

    def _create(self, tool: ToolSpec, args: Mapping[str, Any], state: WorldState) -> dict[str, Any]:
        ent = self.entities[tool.entity]
        self._check_refs(tool, args, state)
        values = dict(tool.defaults)
        values.update(self._filters(tool, args))
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
                raise ToolError("not_found", f"no {_label(ent)} with id {args[name]!r}", (name,))
        assert src is not None and dst is not None
        if src is dst or src[ent.id_field] == dst[ent.id_field]:
            raise ToolError("invalid_request", f"{src_p} and {dst_p} must be different", (src_p, dst_p))
        if amount <= 0:
            raise ToolError("invalid_request", f"{amt_p} must be positive", (amt_p,))
        self._check_pre(tool, ent, src)
        if float(src[field]) + 1e-9 < amount:
            raise ToolError("insufficient_funds", f"{_label(ent)} {src[ent.id_field]} has only {src[field]} {field}",
                            (amt_p,))
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
        found = _found(state, ent.name, filters)
        name = tool.outputs[0][0]
        if tool.op == "count":
            return {name: len(found)}
        values = [float(r[tool.agg_field]) for r in found]  # type: ignore[index]
        if not values:
            return {name: 0}
        result = {"sum": sum, "min": min, "max": max, "avg": lambda v: sum(v) / len(v)}[tool.op](values)  # type: ignore[index]
        return {name: round(result, 2)}
