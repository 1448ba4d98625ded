"""Values for a drafted call DAG: stage 2 of sampling (:class:`rods_gym.sampler.TaskSampler`), reused by the
resampler (:class:`rods_gym.resampler.Resampler`) to instantiate an embedded structure on a fresh world.

Calls are instantiated in topological order on a scratch copy of the world: each picks a record consistent with
the values its producers revealed and whose values its consumers (and theirs, down to the sinks) can take, takes
its free arguments from that record (or draws new values for writes), and is executed, so its outputs are real.
A producer must reveal exactly one value (a search feeding a later call must match one record). Mutations never
race with reads: two calls touching the same record must be ordered by a dependency path or by turns
(:meth:`Instantiator.race_free`).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping, Sequence

from .argcheck import ArgChecker
from .domain import EntitySpec, FieldSpec, ToolSpec
from .executor import ToolError
from .suite import Suite
from .task import format_value
from .world import Draw, Rng, WorldState, compile_generator

READS = ("read", "lookup", "search")  # kinds whose outputs are fields of existing records
SELECTS = ("lookup", "search", "aggregate")  # kinds that select records by their arguments' values


@dataclass(slots=True)
class DraftNode:
    """One call of a drafted task: its tool, its turn and (once instantiated) its arguments."""

    tool: str
    turn: int
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class Draft:
    """A task's call DAG before values: nodes and ``(src, dst, param, out field)`` dependencies."""

    nodes: list[DraftNode] = field(default_factory=list)
    deps: list[tuple[int, int, str, str]] = field(default_factory=list)  # src, dst, param, out field

    def bound(self, i: int) -> dict[str, tuple[int, str]]:
        return {p: (s, f) for s, d, p, f in self.deps if d == i}

    def tools(self) -> set[str]:
        return {n.tool for n in self.nodes}


class _CallPlan:
    """What :meth:`Instantiator.call` reads of one tool on every call, derived once: its kind,
    entity, id field, ``param -> field`` map, argument checker, declared output fields and, per
    parameter in order, ``(name, field, always filled from the record)`` (a required or id
    parameter)."""

    __slots__ = ("tool", "kind", "entity", "id_field", "field_of", "checker", "fills", "outputs")

    def __init__(self, tool: ToolSpec, ent: EntitySpec, field_of: dict[str, str], checker: ArgChecker) -> None:
        self.tool, self.kind, self.entity, self.id_field = tool, tool.kind, ent.name, ent.id_field
        self.field_of, self.checker = field_of, checker
        self.fills = tuple((p.name, p.field, p.required or p.field == ent.id_field) for p in tool.params)
        self.outputs = frozenset(f for f, _ in tool.outputs)  # the declared output fields


def _passing(recs: list[dict[str, Any]], precondition: Mapping[str, Collection[Any]]) -> list[dict[str, Any]]:
    """The records of ``recs`` (in order) whose fields all take a value ``precondition`` allows."""
    for f, ok in precondition.items():
        recs = [r for r in recs if r.get(f) in ok]
    return recs


class Instantiator:
    """Values for a drafted call DAG (stage 2 of sampling; the resampler reuses it).

    Calls run in the given order on a scratch :class:`WorldState` of the world seed: each
    picks a record consistent with what its producers revealed, takes its free arguments
    from it (or draws new values for writes) and is executed, so its outputs are real.
    """

    def __init__(self, suite: Suite, lookahead: bool = False) -> None:
        """``lookahead``: a call that feeds later ones picks only among records that can work:
        a producing search only records its filters single out, and a record only when every
        value it feeds a later call is one that call can take (:meth:`_acceptance`, worked out
        backwards from the sinks: a value a lookup/search/aggregate finds in its table, the id
        of a record that passes a precondition, a value a later producer's usable records
        hold). The sampler and the resampler both turn it on (without it a draft fails more
        often). ``rng`` in the methods below: a numpy ``Generator`` or a :class:`PyRng`."""
        self.suite = suite
        self.lookahead = lookahead
        self._field_of: dict[str, dict[str, str]] = {}  # tool -> param -> entity field
        self._draws: dict[tuple[str, str], Draw] = {}  # (entity, field) -> compiled generator
        self._plans: dict[str, _CallPlan] = {}  # tool -> what :meth:`call` reads of it
        self._id_params: dict[str, str] = {}  # tool -> its id parameter (read, update, delete)

    def _matching(self, state: WorldState, entity: str, filters: list[tuple[str, Any]]) -> list[dict[str, Any]]:
        """Records of ``entity`` whose fields equal ``filters``, in table order (a scan, or an
        index lookup on an untouched table: the same records either way)."""
        if not filters:
            return state.record_list(entity)
        index = state.base_index(entity, filters[0][0])  # None once the episode wrote to the entity
        if index is None:
            return [r for r in state.records(entity) if _all_equal(r, filters)]
        first = filters[0][1]
        try:
            bucket = index.get(first, ())
        except TypeError:  # an unhashable value cannot match a stored one
            return [r for r in state.records(entity) if _all_equal(r, filters)]
        if type(first) in (str, int, bool):  # the bucket's records equal it (a float NaN is found by identity alone)
            filters = filters[1:]
            if not filters:
                return list(bucket)
        return [r for r in bucket if _all_equal(r, filters)]

    def _fields(self, tool: ToolSpec) -> dict[str, str]:
        """``param -> entity field`` of a tool (built once per tool)."""
        out = self._field_of.get(tool.name)
        if out is None:
            out = self._field_of[tool.name] = {p.name: p.field for p in tool.params}
        return out

    def _plan(self, tool_name: str) -> _CallPlan:
        """What :meth:`call` reads of a tool on every call (built once per tool)."""
        plan = self._plans.get(tool_name)
        if plan is None:
            tool = self.suite.tools[tool_name]
            plan = self._plans[tool_name] = _CallPlan(tool, self.suite.entities[tool.entity], self._fields(tool),
                                                      self.suite.checkers[tool_name])
        return plan

    def _draw(self, entity: str, fspec: FieldSpec) -> Draw:
        """The compiled generator of a field (see :func:`compile_generator`), built once."""
        draw = self._draws.get((entity, fspec.name))
        if draw is None:
            draw = self._draws[(entity, fspec.name)] = compile_generator(fspec)
        return draw

    def instantiate(self, draft: Draft, order: Sequence[int], world_seed: int,
                    rng: Rng) -> dict[int, dict[str, Any]] | None:
        """Fill ``draft.nodes[i].args`` for every node; return each call's outputs, or ``None``
        when the draft cannot be instantiated on this world (a record is missing, a producer
        does not reveal exactly one value, calls would race, or two calls coincide)."""
        state = WorldState(self.suite.world(world_seed))
        outputs: dict[int, dict[str, Any]] = {}
        touched: dict[int, set[tuple[str, str]]] = {}
        bound: dict[int, dict[str, tuple[int, str]]] = {i: {} for i in range(len(draft.nodes))}
        for s, d, p, f in draft.deps:  # as draft.bound(d), for every node at once
            bound.setdefault(d, {})[p] = (s, f)
        producers = {s for s, _, _, _ in draft.deps}
        accept = self._acceptance(draft, order, state) if self.lookahead else {}
        for i in order:
            if not self.call(draft, i, state, rng, outputs, touched, bound[i], i in producers, accept):
                return None
        if not self.order_independent(draft, touched):
            return None
        tools = {n.tool for n in draft.nodes}
        if len(tools) < len(draft.nodes):  # two calls of one tool must differ in their arguments
            keys = [(n.tool, json.dumps(n.args, sort_keys=True)) for n in draft.nodes]
            if len(set(keys)) != len(keys):
                return None
        return outputs

    @staticmethod
    def stated(draft: Draft) -> set[str]:
        """The draft's argument values as the user would state them (see :meth:`answer_fields`)."""
        return {format_value(v) for n in draft.nodes for v in n.args.values()}

    def answer_fields(self, draft: Draft, i: int, outputs: Mapping[int, Mapping[str, Any]],
                      stated: Collection[str] | None = None) -> list[str]:
        """Output fields of call ``i`` that can be an answer: declared, and not a value the user
        states (``stated``: :meth:`stated` of the draft, when the caller has it)."""
        if stated is None:
            stated = self.stated(draft)
        declared = self._plan(draft.nodes[i].tool).outputs
        return [f for f, v in outputs[i].items() if f in declared and format_value(v) not in stated]

    def call(self, draft: Draft, i: int, state: WorldState, rng: Rng,
             outputs: dict[int, dict[str, Any]], touched: dict[int, set[tuple[str, str]]],
             bound: Mapping[str, tuple[int, str]] | None = None, is_producer: bool | None = None,
             accept: Mapping[tuple[int, str], Collection[Any]] | None = None) -> bool:
        """Instantiate and run call ``i`` (``bound``/``is_producer``: ``draft.bound(i)`` and
        whether ``i`` feeds another call, when the caller has them; ``accept``: what each
        consumer can take, see :meth:`_acceptance`)."""
        node = draft.nodes[i]
        plan = self._plans.get(node.tool) or self._plan(node.tool)
        tool = plan.tool
        if bound is None:
            bound = draft.bound(i)
        if is_producer is None:
            is_producer = any(s == i for s, _, _, _ in draft.deps)
        args: dict[str, Any] = {p: outputs[s][f] for p, (s, f) in bound.items()}
        kind = plan.kind
        if kind == "create":
            if not self._fill_create(tool, args, state, rng):
                return False
        elif kind == "transact":
            if not self._fill_transact(tool, args, state, rng):
                return False
        else:
            field_of, id_field = plan.field_of, plan.id_field
            if kind in ("update", "delete"):  # only their id selects the record
                filters = [(field_of[p], v) for p, v in args.items() if field_of[p] == id_field]
            else:
                filters = [(field_of[p], v) for p, v in args.items()]
            by_id = [v for f, v in filters if f == id_field]
            if by_id:  # ids are unique: one lookup instead of a scan (same candidates)
                rec = state.get(plan.entity, by_id[0])
                cands = [rec] if rec is not None and _all_equal(rec, filters) else []
            else:
                cands = self._matching(state, plan.entity, filters)
            if self.lookahead and is_producer and cands:
                cands = self._promising(draft, i, tool, cands, state, accept or {})
            if tool.precondition:
                cands = _passing(cands, tool.precondition)
            if not cands:
                return False
            rec = cands[int(rng.integers(0, len(cands)))]
            for name, fld, needed in plan.fills:
                if name in args:
                    continue
                if kind == "update" and fld != id_field:
                    value = self._new_value(tool, name, rec, state, rng)
                    if value is None:
                        return False
                    args[name] = value
                elif needed or (kind == "search" and (is_producer or rng.random() < 0.4)) \
                        or (kind == "aggregate" and rng.random() < 0.4):
                    args[name] = rec[fld]
        if plan.checker.check(args) is not None:
            return False
        try:
            result = self.suite.executor.run(tool, args, state)
        except ToolError:
            return False
        if kind == "search":
            if is_producer and result["total"] != 1:
                return False
            if result["total"] == 0:
                return False
            outputs[i] = result["results"][0] if result["total"] == 1 else {}
        else:
            outputs[i] = result
        node.args = args
        touched[i] = self._touched(tool, args, result)
        return True

    def _promising(self, draft: Draft, i: int, tool: ToolSpec, cands: list[dict[str, Any]], state: WorldState,
                   accept: Mapping[tuple[int, str], Collection[Any]]) -> list[dict[str, Any]]:
        """The candidate records of producer ``i`` whose outputs its consumers can take
        (``accept``: see :meth:`_acceptance`)."""
        id_field = self.suite.entities[tool.entity].id_field
        if tool.kind == "search":  # a producing search must single out one record
            names = tuple(self._fields(tool).values())
            # the records equal to a candidate on every filter field are candidates too
            single = state.base_singled_out(tool.entity, names)
            if single is not None:
                cands = [r for r in cands if r[id_field] in single]
            else:
                shared = Counter(tuple(r.get(f) for f in names) for r in cands)
                cands = [r for r in cands if shared[tuple(r.get(f) for f in names)] == 1]
        for s, d, param, f in draft.deps:  # a read record's fields are its outputs, a write's id is
            values = accept.get((d, param)) if s == i and (tool.kind in READS or f == id_field) else None
            if values is not None:
                cands = [r for r in cands if r.get(f) in values]
        return cands

    def _acceptance(self, draft: Draft, order: Sequence[int], state: WorldState) -> dict[tuple[int, str], Collection[Any]]:
        """Per dependency ``(consumer, param)``: the values the consumer can take, worked out
        backwards from the sinks on the world before the first call. A consumer that selects
        records by the value (lookup, search, aggregate) or takes a record's id (read, update,
        delete) can take what its usable records hold there: records that pass its
        precondition and, when it reads records for later calls, whose fields its own
        consumers can take (a producing search: records its filters single out). A
        dependency left out takes any value (the consumer writes it, any id of a table without
        a precondition works, or a value is unhashable)."""
        feeds: dict[int, list[tuple[int, str, str]]] = {}
        takes: dict[int, list[str]] = {}
        for s, d, p, f in draft.deps:
            feeds.setdefault(s, []).append((d, p, f))
            takes.setdefault(d, []).append(p)
        accept: dict[tuple[int, str], Collection[Any]] = {}
        for d in reversed(order):
            tool = self.suite.tools[draft.nodes[d].tool]
            if d not in takes or tool.kind in ("create", "transact"):
                continue
            # whether its consumers leave some of the records it reads unusable
            reads = tool.kind in READS and d in feeds and (
                tool.kind == "search" or any((c, p) in accept for c, p, _ in feeds[d]))
            if not (reads or tool.precondition or tool.kind in SELECTS):
                continue  # any id of its table works
            field_of = self._fields(tool)
            id_field = self.suite.entities[tool.entity].id_field
            params = [p for p in takes[d] if tool.kind in SELECTS or field_of[p] == id_field]
            if not (reads or tool.precondition):  # every record can be used: the table's values
                for p in params:
                    values = state.world.values(tool.entity, field_of[p])
                    if values is not None:
                        accept[(d, p)] = values
                continue
            recs = state.record_list(tool.entity)
            if tool.precondition:
                recs = _passing(recs, tool.precondition)
            if reads:
                recs = self._promising(draft, d, tool, recs, state, accept)
            for p in params:
                try:
                    accept[(d, p)] = {r.get(field_of[p]) for r in recs}
                except TypeError:  # an unhashable value: leave the dependency unchecked
                    pass
        return accept

    def _new_value(self, tool: ToolSpec, pname: str, rec: Mapping[str, Any], state: WorldState,
                   rng: Rng) -> Any:
        p = tool.param(pname)
        target = self.suite.id_entity.get(p.type)
        if target is not None:  # the state does not change while drawing
            ids = state.ids(target)
        else:
            draw = self._draw(tool.entity, self.suite.entities[tool.entity].field(p.field))
        for _ in range(8):
            if target is not None:
                value = ids[int(rng.integers(0, len(ids)))]
            else:
                value = draw(rng, self.suite.pools, 0, {})
            if value != rec.get(p.field):
                return value
        return None

    def _fill_create(self, tool: ToolSpec, args: dict[str, Any], state: WorldState, rng: Rng) -> bool:
        ent = self.suite.entities[tool.entity]
        id_entity, pools = self.suite.id_entity, self.suite.pools
        for p in tool.params:
            if p.name in args or not (p.required or rng.random() < 0.3):
                continue
            target = id_entity.get(p.type)
            if target is not None:
                ids = state.ids(target)
                if not ids:
                    return False
                args[p.name] = ids[int(rng.integers(0, len(ids)))]
            else:
                fspec = ent.field(p.field)
                tables = {fspec.ref: state.ids(fspec.ref)} if fspec.ref else {}
                args[p.name] = self._draw(ent.name, fspec)(rng, pools, 0, tables)
        return True

    def _fill_transact(self, tool: ToolSpec, args: dict[str, Any], state: WorldState, rng: Rng) -> bool:
        assert tool.transfer is not None and tool.transfer_field is not None
        src_p, dst_p, amt_p = tool.transfer
        ent = self.suite.entities[tool.entity]
        bal = tool.transfer_field
        recs = [r for r in state.records(ent.name)
                if all(r.get(f) in ok for f, ok in tool.precondition.items())]
        need = float(args[amt_p]) if amt_p in args else 1.0
        if src_p not in args:
            rich = [r for r in recs if float(r[bal]) >= need and r[ent.id_field] != args.get(dst_p)]
            if not rich:
                return False
            args[src_p] = rich[int(rng.integers(0, len(rich)))][ent.id_field]
        if dst_p not in args:
            others = [r for r in state.records(ent.name) if r[ent.id_field] != args[src_p]]
            if not others:
                return False
            args[dst_p] = others[int(rng.integers(0, len(others)))][ent.id_field]
        if amt_p not in args:
            src = state.get(ent.name, args[src_p])
            if src is None or float(src[bal]) < 1.0:
                return False
            args[amt_p] = round(float(rng.uniform(1.0, min(float(src[bal]), 500.0))), 2)
        for p in tool.params:
            if p.name not in args and p.required:
                if tool.record is not None and p.field in self.suite.entities[tool.record].field_names:
                    fspec = self.suite.entities[tool.record].field(p.field)
                    args[p.name] = self._draw(tool.record, fspec)(rng, self.suite.pools, 0, {})
                else:
                    return False
        return True

    def _touched(self, tool: ToolSpec, args: Mapping[str, Any], result: Mapping[str, Any]) -> set[tuple[str, str]]:
        ent = self.suite.entities[tool.entity]
        if tool.kind in ("search", "aggregate"):
            return {(ent.name, "*")}
        if tool.kind == "transact":
            assert tool.transfer is not None
            return {(ent.name, args[tool.transfer[0]]), (ent.name, args[tool.transfer[1]])}
        if tool.kind == "create":
            return {(ent.name, result[ent.id_field])}
        if tool.kind == "lookup":
            return {(ent.name, "*")}
        id_param = self._id_params.get(tool.name)
        if id_param is None:
            id_param = self._id_params[tool.name] = next(p.name for p in tool.params if p.field == ent.id_field)
        return {(ent.name, args[id_param])}

    def order_independent(self, draft: Draft, touched: Mapping[int, set[tuple[str, str]]]) -> bool:
        """Every pair of same-turn calls where one mutates what the other touches is ordered
        by a dependency path, so any valid call order gives the same outcome."""
        tools = self.suite.tools
        mutating = [tools[n.tool].mutating for n in draft.nodes]
        if not any(mutating):
            return True
        succ: dict[int, list[int]] = {}
        for s, d, _, _ in draft.deps:
            succ.setdefault(s, []).append(d)
        for i, a in enumerate(draft.nodes):
            if not mutating[i]:
                continue
            for j, b in enumerate(draft.nodes):
                if i == j or a.turn != b.turn:
                    continue
                if mutating[j] and j < i:
                    continue  # each mutating pair checked once
                if _conflict(touched[i], touched[j]) and not (_reaches(succ, i, j) or _reaches(succ, j, i)):
                    return False
        return True


def _all_equal(rec: Mapping[str, Any], filters: list[tuple[str, Any]]) -> bool:
    for f, v in filters:
        if rec.get(f) != v:
            return False
    return True


def _reaches(succ: Mapping[int, list[int]], a: int, b: int) -> bool:
    """Whether a dependency path leads from ``a`` to ``b`` (bounded by the number of edges)."""
    stack, seen = [a], {a}
    while stack:
        for nxt in succ.get(stack.pop(), ()):
            if nxt == b:
                return True
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False


def _conflict(a: set[tuple[str, str]], b: set[tuple[str, str]]) -> bool:
    for ent, rid in a:
        for ent2, rid2 in b:
            if ent == ent2 and (rid == rid2 or rid == "*" or rid2 == "*"):
                return True
    return False
