"""Task sampling from the API graph, by difficulty knobs, random-access by ``(seed, index)``.

A task is drawn in two stages, each with bounded attempts:

1. **Structure.** Per turn, a sink tool, then a dependency chain walked backwards through
   the API graph (never reusing a value type along the chain, never reusing a tool), then
   extra calls: producers for free parameters (branching), consumers of existing outputs
   (fan-out), or independent sinks. Later turns may consume an output of an earlier turn.
2. **Values.** Calls are instantiated in topological order on a scratch copy of the world:
   each picks a record consistent with the values its producers revealed, takes its free
   arguments from that record (or draws new values for writes), and is executed, so its
   outputs are real. A producer must reveal exactly one value (a search feeding a later
   call must match one record).

Mutations never race with reads: two calls touching the same record (or a search/aggregate
over an entity another call mutates) must be ordered by a dependency path or by turns, so
every valid order of the agent's calls gives the same outcome.
"""

from __future__ import annotations

import heapq
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Collection, Iterator, Mapping, Sequence

import numpy as np

from .domain import FieldSpec, ToolSpec
from .executor import ToolError
from .instructions import render_turn_messages
from .suite import Suite
from .task import Answer, Call, Dep, TaskSpec, Turn, format_value
from .world import Draw, WorldState, compile_generator

Range = tuple[int, int]


@dataclass(frozen=True)
class SamplerConfig:
    """Difficulty knobs. Ranges are inclusive; probabilities are per task."""

    depth: Range = (1, 3)
    extra_calls: Range = (0, 1)
    branching: int = 2
    cross_domain: float = 0.25
    user_turns: Range = (1, 1)
    missing_param: float = 0.0
    missing_tool: float = 0.0
    distractors: Range = (0, 2)
    answer: float = 0.5
    world_pool: int = 32
    world_offset: int = 0
    tools: tuple[str, ...] | None = None
    exclude_tools: tuple[str, ...] = ()
    max_attempts: int = 60

    def __post_init__(self) -> None:
        for name in ("depth", "extra_calls", "user_turns", "distractors"):
            lo, hi = getattr(self, name)
            if not 0 <= lo <= hi:
                raise ValueError(f"SamplerConfig.{name}: need 0 <= low <= high, got {(lo, hi)}")
        if self.depth[0] < 1 or self.depth[1] > 8:
            raise ValueError(f"SamplerConfig.depth must lie in [1, 8], got {self.depth}")
        if self.user_turns[0] < 1 or self.user_turns[1] > 4:
            raise ValueError(f"SamplerConfig.user_turns must lie in [1, 4], got {self.user_turns}")
        for name in ("cross_domain", "missing_param", "missing_tool", "answer"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"SamplerConfig.{name} must be a probability, got {getattr(self, name)}")
        if self.world_pool < 1 or self.branching < 1 or self.max_attempts < 1:
            raise ValueError("SamplerConfig.world_pool, branching and max_attempts must be >= 1")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


DIFFICULTIES: dict[str, SamplerConfig] = {
    "easy": SamplerConfig(depth=(1, 2), extra_calls=(0, 0), distractors=(0, 1), cross_domain=0.1),
    "medium": SamplerConfig(depth=(1, 4), extra_calls=(0, 2), user_turns=(1, 2), missing_param=0.2,
                            missing_tool=0.1, distractors=(1, 3), cross_domain=0.3),
    "hard": SamplerConfig(depth=(3, 6), extra_calls=(1, 3), user_turns=(1, 3), missing_param=0.3,
                          missing_tool=0.2, distractors=(2, 5), cross_domain=0.5),
}


class SamplingError(RuntimeError):
    pass


@dataclass
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


class TaskSampler:
    """Draws tasks from a suite's API graph. ``sample(i)`` is a pure function of (seed, i)."""

    def __init__(self, suite: Suite, config: SamplerConfig = SamplerConfig(), seed: int = 0,
                 id_prefix: str = "task") -> None:
        self.suite, self.config, self.seed, self.id_prefix = suite, config, seed, id_prefix
        allowed = set(config.tools) if config.tools is not None else set(suite.tools)
        allowed -= set(config.exclude_tools)
        unknown = allowed - set(suite.tools)
        if unknown:
            raise ValueError(f"SamplerConfig.tools names unknown tools {sorted(unknown)}")
        self.allowed = sorted(allowed)
        g = suite.graph.subgraph(self.allowed)
        # producers[tool][param] -> [(src tool, out field, value type)]
        self.producers: dict[str, dict[str, list[tuple[str, str, str]]]] = {t: {} for t in self.allowed}
        for src, dst, param, d in g.edges(keys=True, data=True):
            for f in d["fields"]:
                self.producers[dst].setdefault(param, []).append((src, f, d["type"]))
        self.consumers: dict[str, list[tuple[str, str]]] = {}
        for t in self.allowed:
            for p in suite.tools[t].params:
                if suite.types[p.type].linkable:
                    self.consumers.setdefault(p.type, []).append((t, p.name))
        self.param_types = {t: {p.type for p in suite.tools[t].params} for t in self.allowed}
        self.answerable = [t for t in self.allowed if suite.tools[t].kind in ("read", "lookup", "aggregate")]
        self.values = Instantiator(suite)
        if not self.allowed:
            raise ValueError("no tools left to sample from")
        # lookups the structure stage reads on every attempt, derived once per sampler
        tools = suite.tools
        # per tool: (param, required, its producers) in parameter order
        self._param_producers = {t: [(p.name, p.required, self.producers[t].get(p.name, ())) for p in tools[t].params]
                                 for t in self.allowed}
        # a lookup of entity E must not be fed by a call that consumes E's id (see _producer_options)
        self._loop_type = {t: suite.entities[tools[t].entity].id_field if tools[t].kind == "lookup" else None
                           for t in self.allowed}
        self._required_consumers = {vtype: [(t, p) for t, p in cs if tools[t].param(p).required]
                                    for vtype, cs in self.consumers.items()}
        self._not_aggregate = [t for t in self.allowed if tools[t].kind != "aggregate"]
        self._domain = {t: spec.domain for t, spec in tools.items()}
        self._distractor_index = DistractorIndex(suite, self.allowed)

    # -- public ------------------------------------------------------------------------
    def sample(self, index: int) -> TaskSpec:
        if index < 0:
            raise IndexError(f"task index must be >= 0, got {index}")
        rng = np.random.default_rng([self.seed, index, 0x5EED])
        cfg = self.config
        for attempt in range(cfg.max_attempts):
            task = self._attempt(rng, index, relax=attempt >= cfg.max_attempts // 2)
            if task is not None:
                return task
        # bounded fallback, still inside every range of the config: no extra calls, no
        # cross-domain requirement, the fewest user turns, the shallowest depth last
        for attempt in range(cfg.max_attempts):
            task = self._attempt(rng, index, relax=True, simple=True, shallow=attempt >= cfg.max_attempts // 2)
            if task is not None:
                return task
        raise SamplingError(f"could not sample task {index} with seed {self.seed} and {cfg} "
                            f"in {2 * cfg.max_attempts} attempts; widen the knobs or allow more tools")

    def __iter__(self) -> Iterator[TaskSpec]:
        i = 0
        while True:
            yield self.sample(i)
            i += 1

    def sample_many(self, n: int, start: int = 0) -> list[TaskSpec]:
        return [self.sample(i) for i in range(start, start + n)]

    # -- one attempt -------------------------------------------------------------------
    def _rint(self, rng: np.random.Generator, r: Range) -> int:
        return int(rng.integers(r[0], r[1] + 1))

    def _attempt(self, rng: np.random.Generator, index: int, relax: bool, simple: bool = False,
                 shallow: bool = False) -> TaskSpec | None:
        cfg = self.config
        if simple:
            depth = cfg.depth[0] if shallow else self._rint(rng, cfg.depth)
            n_turns, extra = cfg.user_turns[0], cfg.extra_calls[0]
        else:
            depth, n_turns, extra = self._rint(rng, cfg.depth), self._rint(rng, cfg.user_turns), self._rint(rng, cfg.extra_calls)
        want_cross = (not relax) and rng.random() < cfg.cross_domain
        want_answer = rng.random() < cfg.answer
        draft = Draft()
        for turn in range(n_turns):
            turn_depth = depth if turn == 0 else self._rint(rng, (1, depth))
            turn_extra = extra if turn == 0 else 0
            answer_turn = want_answer and turn == n_turns - 1
            if not self._structure(draft, rng, turn, turn_depth, turn_extra, answer_turn):
                return None
            if turn > 0 and rng.random() < 0.5:
                self._link_turns(draft, rng, turn)
        order, got_depth = _order_and_depth(draft)
        if order is None or got_depth != depth:
            return None
        domain = self._domain
        if want_cross and not any(domain[draft.nodes[s].tool] != domain[draft.nodes[d].tool] for s, d, _, _ in draft.deps):
            return None
        world_seed = cfg.world_offset + int(rng.integers(0, cfg.world_pool))
        outputs = self.values.instantiate(draft, order, world_seed, rng)
        if outputs is None:
            return None
        return self._finish(draft, order, outputs, rng, index, world_seed, want_answer, n_turns, depth)

    # -- structure ---------------------------------------------------------------------
    def _producer_options(self, draft: Draft, i: int, used_types: set[str]) -> list[tuple[str, str, str, str]]:
        return self._options(draft.nodes[i].tool, draft.tools(), draft.bound(i), used_types)

    def _options(self, tool: str, taken: Collection[str], bound: Collection[str],
                 used_types: set[str]) -> list[tuple[str, str, str, str]]:
        """``(param, src tool, out field, type)`` producers that can feed a free required
        parameter of ``tool``: a type not used along the chain, a tool not yet taken."""
        # a lookup of entity E fed by a call that already consumes E's id is a loop
        # ("read the traveler to get their email, then find the traveler by email")
        loop_type = self._loop_type[tool]
        param_types = self.param_types
        out = []
        for pname, required, producers in self._param_producers[tool]:
            if not required or pname in bound:
                continue
            for src, f, vtype in producers:
                if vtype not in used_types and src not in taken and loop_type not in param_types[src]:
                    out.append((pname, src, f, vtype))
        return out

    def _structure(self, draft: Draft, rng: np.random.Generator, turn: int, depth: int, extra: int,
                   answer: bool) -> bool:
        taken = draft.tools()  # kept up to date as nodes are added
        bound: dict[int, set[str]] = {}  # node -> its bound parameters, kept up to date
        for _, d, p, _ in draft.deps:
            bound.setdefault(d, set()).add(p)
        no_params: set[str] = set()
        pool = self.answerable if answer else self.allowed
        if taken:
            pool = [t for t in pool if t not in taken]
        if not pool:
            return False
        sink = len(draft.nodes)
        draft.nodes.append(DraftNode(pool[int(rng.integers(0, len(pool)))], turn))
        taken.add(draft.nodes[sink].tool)
        dist = {sink: 0}
        chain_types: dict[int, set[str]] = {sink: set()}
        cur = sink
        for _ in range(depth - 1):
            opts = self._options(draft.nodes[cur].tool, taken, bound.get(cur, no_params), chain_types[cur])
            if not opts:
                return False
            param, src, f, vtype = opts[int(rng.integers(0, len(opts)))]
            j = len(draft.nodes)
            draft.nodes.append(DraftNode(src, turn))
            draft.deps.append((j, cur, param, f))
            taken.add(src)
            bound.setdefault(cur, set()).add(param)
            dist[j] = dist[cur] + 1
            chain_types[j] = chain_types[cur] | {vtype}
            cur = j
        for _ in range(extra):
            mode = int(rng.integers(0, 3))
            if mode == 0:  # another producer for a free parameter (branching)
                cands = [i for i in dist if dist[i] < depth - 1 and len(bound.get(i, no_params)) < self.config.branching
                         and self._options(draft.nodes[i].tool, taken, bound.get(i, no_params), chain_types[i])]
                if not cands:
                    continue
                i = cands[int(rng.integers(0, len(cands)))]
                opts = self._options(draft.nodes[i].tool, taken, bound.get(i, no_params), chain_types[i])
                param, src, f, vtype = opts[int(rng.integers(0, len(opts)))]
                j = len(draft.nodes)
                draft.nodes.append(DraftNode(src, turn))
                draft.deps.append((j, i, param, f))
                taken.add(src)
                bound.setdefault(i, set()).add(param)
                dist[j] = dist[i] + 1
                chain_types[j] = chain_types[i] | {vtype}
            elif mode == 1:  # a second consumer of an existing output (fan-out)
                cands = []
                for i in dist:
                    types_i = chain_types[i]
                    for f, vtype in self.suite.ports[draft.nodes[i].tool]:
                        if vtype in types_i:
                            continue
                        for t, p in self._required_consumers.get(vtype, ()):
                            if t not in taken:
                                cands.append((i, f, vtype, t, p))
                if not cands:
                    continue
                i, f, vtype, t, p = cands[int(rng.integers(0, len(cands)))]
                j = len(draft.nodes)
                draft.nodes.append(DraftNode(t, turn))
                draft.deps.append((i, j, p, f))
                taken.add(t)
                bound.setdefault(j, set()).add(p)
                dist[j] = 0
                chain_types[j] = chain_types[i] | {vtype}
            else:  # an independent request in the same turn
                free = [t for t in self._not_aggregate if t not in taken]
                if not free:
                    continue
                j = len(draft.nodes)
                draft.nodes.append(DraftNode(free[int(rng.integers(0, len(free)))], turn))
                taken.add(draft.nodes[j].tool)
                dist[j] = 0
                chain_types[j] = set()
        return True

    def _link_turns(self, draft: Draft, rng: np.random.Generator, turn: int) -> None:
        """Let a call of ``turn`` consume an output of an earlier turn (the agent must remember it)."""
        cands = []
        for j, node in enumerate(draft.nodes):
            if node.turn != turn:
                continue
            bound = draft.bound(j)
            for p in self.suite.tools[node.tool].params:
                if not p.required or p.name in bound:
                    continue
                for i, prev in enumerate(draft.nodes):
                    if prev.turn < turn:
                        for f, vtype in self.suite.ports[prev.tool]:
                            if vtype == p.type:
                                cands.append((i, j, p.name, f))
        if cands:
            draft.deps.append(cands[int(rng.integers(0, len(cands)))])

    # -- finishing ---------------------------------------------------------------------
    def _finish(self, draft: Draft, order: list[int], outputs: Mapping[int, Mapping[str, Any]],
                rng: np.random.Generator, index: int, world_seed: int, want_answer: bool, n_turns: int,
                depth: int) -> TaskSpec | None:
        cfg = self.config
        ids = {i: f"c{k}" for k, i in enumerate(order)}
        calls = tuple(Call(ids[i], draft.nodes[i].tool, dict(draft.nodes[i].args), draft.nodes[i].turn) for i in order)
        deps = tuple(sorted((Dep(ids[s], ids[d], p, f) for s, d, p, f in draft.deps), key=lambda d: (d.dst, d.param)))
        answer = None
        if want_answer:
            producers = {s for s, _, _, _ in draft.deps}
            sinks = [i for i in order if draft.nodes[i].turn == n_turns - 1
                     and self.suite.tools[draft.nodes[i].tool].kind in ("read", "lookup", "aggregate")
                     and i not in producers]
            options = [(i, f) for i in sinks for f in self.values.answer_fields(draft, i, outputs)]
            if not options:
                return None
            i, f = options[int(rng.integers(0, len(options)))]
            answer = Answer(ids[i], f, format_value(outputs[i][f]))
        # withheld facts and locked tools
        probe = TaskSpec("probe", world_seed, calls, deps, tuple(Turn("") for _ in range(n_turns)))
        withheld: dict[int, tuple[tuple[str, str], ...]] = {}
        locked: dict[int, tuple[str, ...]] = {}
        if rng.random() < cfg.missing_param:
            facts = probe.facts()
            if facts:
                cid, p, _ = facts[int(rng.integers(0, len(facts)))]
                withheld[probe.call(cid).turn] = ((cid, p),)
        if rng.random() < cfg.missing_tool:
            c = calls[int(rng.integers(0, len(calls)))]
            locked[c.turn] = (c.tool,)
        n_distract = self._rint(rng, cfg.distractors)
        distractors = self._distractors(calls, n_distract, rng)
        knobs = {"depth": depth, "calls": len(calls), "turns": n_turns,
                 "cross_domain": len({self._domain[c.tool] for c in calls}) > 1}
        turns = tuple(Turn("", locked.get(t, ()), withheld.get(t, ())) for t in range(n_turns))
        task_id = f"{self.id_prefix}-{self.seed}-{index}"
        meta = {"source": "sampler", "seed": self.seed, "index": index, "knobs": knobs}
        task = TaskSpec(task_id, world_seed, calls, deps, turns, distractors, answer, meta)
        messages = render_turn_messages(task, self.suite)
        turns = tuple(Turn(m, t.locked, t.withheld) for t, m in zip(turns, messages))
        return TaskSpec(task_id, world_seed, calls, deps, turns, distractors, answer, meta)

    def _distractors(self, calls: Sequence[Call], k: int, rng: np.random.Generator) -> tuple[str, ...]:
        return pick_distractors(self.suite, self.allowed, calls, k, rng, self._distractor_index)


class DistractorIndex:
    """The ``allowed`` tools grouped by domain and by kind (as positions in ``allowed``), for
    :func:`pick_distractors`."""

    def __init__(self, suite: Suite, allowed: Sequence[str]) -> None:
        self.allowed = allowed  # the sequence it was built from (identity is checked)
        self.positions: dict[str, list[int]] = {}
        self.by_domain: dict[str, set[int]] = {}
        self.by_kind: dict[str, set[int]] = {}
        for i, t in enumerate(allowed):
            self.positions.setdefault(t, []).append(i)
            self.by_domain.setdefault(suite.tools[t].domain, set()).add(i)
            self.by_kind.setdefault(suite.tools[t].kind, set()).add(i)

    def similar(self, suite: Suite, used: set[str]) -> list[str]:
        """Allowed tools not in ``used`` sharing a domain or a kind with one of them, in ``allowed`` order."""
        near: set[int] = set()
        for t in used:
            spec = suite.tools[t]
            near |= self.by_domain.get(spec.domain, set())
            near |= self.by_kind.get(spec.kind, set())
        for t in used:
            near.difference_update(self.positions.get(t, ()))
        allowed = self.allowed
        return [allowed[i] for i in sorted(near)]


def pick_distractors(suite: Suite, allowed: Sequence[str], calls: Sequence[Call], k: int,
                     rng: np.random.Generator, index: DistractorIndex | None = None) -> tuple[str, ...]:
    """``k`` tools the task does not need, preferring its domains and kinds (sorted ``allowed`` order).
    ``index``: a :class:`DistractorIndex` of ``allowed`` (built here when not given)."""
    if k <= 0:
        return ()
    used = {c.tool for c in calls}
    if index is None or index.allowed is not allowed:
        index = DistractorIndex(suite, allowed)
    similar = index.similar(suite, used)
    if len(similar) < k:
        similar = [t for t in allowed if t not in used]
    k = min(k, len(similar))
    picks = rng.choice(len(similar), size=k, replace=False)
    return tuple(similar[int(j)] for j in sorted(picks))


class Instantiator:
    """Values for a drafted call DAG (stage 2 of sampling; the resampler reuses it).

    Calls run in the given order on a scratch :class:`WorldState` of the world seed: each
    picks a record consistent with what its producers revealed, takes its free arguments
    from it (or draws new values for writes) and is executed, so its outputs are real.
    """

    def __init__(self, suite: Suite, lookahead: bool = False) -> None:
        """``lookahead``: a call that feeds later ones picks only among records that can work:
        a producing search only records its filters single out, and a record whose field
        feeds a later lookup/search/aggregate only when that value occurs in the consumer's
        entity. The sampler leaves this off (it retries with another structure instead); the
        resampler, which must keep a given structure, turns it on."""
        self.suite = suite
        self.lookahead = lookahead
        self._field_of: dict[str, dict[str, str]] = {}  # tool -> param -> entity field
        self._draws: dict[tuple[str, str], Draw] = {}  # (entity, field) -> compiled generator

    def _table_index(self, state: WorldState, entity: str, field_name: str) -> Mapping[Any, list[dict[str, Any]]] | None:
        """``value -> records`` of an entity in the base world (``None`` once the episode wrote to it)."""
        return state.base_index(entity, field_name)

    def _matching(self, state: WorldState, entity: str, filters: list[tuple[str, Any]]) -> list[dict[str, Any]]:
        """Records of ``entity`` whose fields equal ``filters``, in table order (a scan, or an
        index lookup on an untouched table: the same records either way)."""
        index = self._table_index(state, entity, filters[0][0]) if filters else None
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

    def _draw(self, entity: str, fspec: FieldSpec) -> Draw:
        """The compiled generator of a field (see :func:`compile_generator`), built once."""
        draw = self._draws.get((entity, fspec.name))
        if draw is None:
            draw = self._draws[(entity, fspec.name)] = compile_generator(fspec)
        return draw

    def _values(self, state: WorldState, entity: str, field_name: str) -> Collection[Any]:
        index = self._table_index(state, entity, field_name)
        return index.keys() if index is not None else {r.get(field_name) for r in state.records(entity)}

    def instantiate(self, draft: Draft, order: Sequence[int], world_seed: int,
                    rng: np.random.Generator) -> dict[int, dict[str, Any]] | None:
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
        for i in order:
            if not self.call(draft, i, state, rng, outputs, touched, bound[i], i in producers):
                return None
        if not self.order_independent(draft, touched):
            return None
        tools = {n.tool for n in draft.nodes}
        if len(tools) < len(draft.nodes):  # two calls of one tool must differ in their arguments
            keys = [(n.tool, json.dumps(n.args, sort_keys=True)) for n in draft.nodes]
            if len(set(keys)) != len(keys):
                return None
        return outputs

    def answer_fields(self, draft: Draft, i: int, outputs: Mapping[int, Mapping[str, Any]]) -> list[str]:
        """Output fields of call ``i`` that can be an answer: declared, and not a value the user states."""
        stated = {format_value(v) for n in draft.nodes for v in n.args.values()}
        declared = dict(self.suite.tools[draft.nodes[i].tool].outputs)
        return [f for f, v in outputs[i].items() if format_value(v) not in stated and f in declared]

    def call(self, draft: Draft, i: int, state: WorldState, rng: np.random.Generator,
             outputs: dict[int, dict[str, Any]], touched: dict[int, set[tuple[str, str]]],
             bound: Mapping[str, tuple[int, str]] | None = None, is_producer: bool | None = None) -> bool:
        """Instantiate and run call ``i`` (``bound``/``is_producer``: ``draft.bound(i)`` and
        whether ``i`` feeds another call, when the caller has them)."""
        node = draft.nodes[i]
        tool = self.suite.tools[node.tool]
        ent = self.suite.entities[tool.entity]
        if bound is None:
            bound = draft.bound(i)
        if is_producer is None:
            is_producer = any(s == i for s, _, _, _ in draft.deps)
        args: dict[str, Any] = {p: outputs[s][f] for p, (s, f) in bound.items()}
        kind = tool.kind
        if kind == "create":
            if not self._fill_create(tool, args, state, rng):
                return False
        elif kind == "transact":
            if not self._fill_transact(tool, args, state, rng):
                return False
        else:
            field_of = self._fields(tool)
            selectors = {p: v for p, v in args.items()
                         if kind not in ("update", "delete") or field_of[p] == ent.id_field}
            filters = [(field_of[p], v) for p, v in selectors.items()]
            by_id = [v for f, v in filters if f == ent.id_field]
            if by_id:  # ids are unique: one lookup instead of a scan (same candidates)
                rec = state.get(ent.name, by_id[0])
                cands = [rec] if rec is not None and _all_equal(rec, filters) else []
            else:
                cands = self._matching(state, ent.name, filters)
            if self.lookahead and is_producer and cands:
                cands = self._promising(draft, i, tool, cands, state)
            if tool.precondition:
                cands = [r for r in cands if all(r.get(f) in ok for f, ok in tool.precondition.items())]
            if not cands:
                return False
            rec = cands[int(rng.integers(0, len(cands)))]
            for p in tool.params:
                if p.name in args:
                    continue
                if kind in ("update",) and p.field != ent.id_field:
                    value = self._new_value(tool, p.name, rec, state, rng)
                    if value is None:
                        return False
                    args[p.name] = value
                elif p.required or p.field == ent.id_field or (kind == "search" and (is_producer or rng.random() < 0.4)) \
                        or (kind == "aggregate" and rng.random() < 0.4):
                    args[p.name] = rec[p.field]
        if self.suite.checkers[tool.name].check(args) is not None:
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

    def _promising(self, draft: Draft, i: int, tool: ToolSpec, cands: list[dict[str, Any]],
                   state: WorldState) -> list[dict[str, Any]]:
        """The candidate records of producer ``i`` whose outputs its consumers can use."""
        if tool.kind == "search":  # a producing search must single out one record
            names = [p.field for p in tool.params]
            shared = Counter(tuple(r.get(f) for f in names) for r in cands)
            cands = [r for r in cands if shared[tuple(r.get(f) for f in names)] == 1]
        for s, d, param, f in draft.deps:
            if s != i or not cands or f not in cands[0]:
                continue
            dst = self.suite.tools[draft.nodes[d].tool]
            if dst.kind not in ("lookup", "search", "aggregate"):
                continue
            want = dst.param(param).field
            present = self._values(state, dst.entity, want)
            cands = [r for r in cands if r.get(f) in present]
        return cands

    def _new_value(self, tool: ToolSpec, pname: str, rec: Mapping[str, Any], state: WorldState,
                   rng: np.random.Generator) -> Any:
        p = tool.param(pname)
        target = self.suite.id_entity.get(p.type)
        if target is not None:  # the state does not change while drawing
            id_field = self.suite.entities[target].id_field
            ids = [r[id_field] for r in state.records(target)]
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

    def _fill_create(self, tool: ToolSpec, args: dict[str, Any], state: WorldState, rng: np.random.Generator) -> bool:
        ent = self.suite.entities[tool.entity]
        for p in tool.params:
            if p.name in args or not (p.required or rng.random() < 0.3):
                continue
            target = self.suite.id_entity.get(p.type)
            if target is not None:
                ids = [r[self.suite.entities[target].id_field] for r in state.records(target)]
                if not ids:
                    return False
                args[p.name] = ids[int(rng.integers(0, len(ids)))]
            else:
                fspec = ent.field(p.field)
                tables = {fspec.ref: [r[self.suite.entities[fspec.ref].id_field] for r in state.records(fspec.ref)]} \
                    if fspec.ref else {}
                args[p.name] = self._draw(ent.name, fspec)(rng, self.suite.pools, 0, tables)
        return True

    def _fill_transact(self, tool: ToolSpec, args: dict[str, Any], state: WorldState, rng: np.random.Generator) -> bool:
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
        id_param = next(p.name for p in tool.params if p.field == ent.id_field)
        return {(ent.name, args[id_param])}

    def order_independent(self, draft: Draft, touched: Mapping[int, set[tuple[str, str]]]) -> bool:
        """Every pair of same-turn calls where one mutates what the other touches is ordered
        by a dependency path, so any valid call order gives the same outcome."""
        succ: dict[int, list[int]] = {}
        for s, d, _, _ in draft.deps:
            succ.setdefault(s, []).append(d)
        tools = self.suite.tools
        for i, a in enumerate(draft.nodes):
            if not tools[a.tool].mutating:
                continue
            for j, b in enumerate(draft.nodes):
                if i == j or a.turn != b.turn:
                    continue
                if tools[b.tool].mutating and j < i:
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


def _topo_order(draft: Draft) -> list[int] | None:
    """Turns first, then dependencies, then creation order (Kahn's algorithm with a heap on
    ``(turn, index)``); ``None`` if the dependencies have a cycle."""
    n = len(draft.nodes)
    succ: list[list[int]] = [[] for _ in range(n)]
    indegree = [0] * n
    for s, d in {(s, d) for s, d, _, _ in draft.deps}:
        succ[s].append(d)
        indegree[d] += 1
    heap = [(draft.nodes[i].turn, i) for i in range(n) if indegree[i] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, i = heapq.heappop(heap)
        order.append(i)
        for j in succ[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                heapq.heappush(heap, (draft.nodes[j].turn, j))
    return order if len(order) == n else None


def _order_and_depth(draft: Draft) -> tuple[list[int] | None, int]:
    """:func:`_topo_order` and :func:`_depth` in one pass: ``(None, -1)`` for a cycle."""
    nodes = draft.nodes
    n = len(nodes)
    if not draft.deps and all(nodes[i].turn <= nodes[i + 1].turn for i in range(n - 1)):
        return list(range(n)), (1 if n else 0)  # no dependencies, turns in creation order
    succ: list[list[int]] = [[] for _ in range(n)]
    preds: list[list[int]] = [[] for _ in range(n)]
    indegree = [0] * n
    for s, d in {(s, d) for s, d, _, _ in draft.deps}:
        succ[s].append(d)
        indegree[d] += 1
    for s, d, _, _ in draft.deps:
        preds[d].append(s)
    heap = [(nodes[i].turn, i) for i in range(n) if indegree[i] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    level = [0] * n
    while heap:
        _, i = heapq.heappop(heap)
        order.append(i)
        level[i] = 1 + max((level[p] for p in preds[i]), default=0)
        for j in succ[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                heapq.heappush(heap, (nodes[j].turn, j))
    if len(order) != n:
        return None, -1
    return order, max(level, default=0)


def _depth(draft: Draft, order: Sequence[int] | None = None) -> int:
    """Calls on the longest dependency path (-1 for a cycle); ``order``: a topological order, if known."""
    level: dict[int, int] = {}
    preds: dict[int, list[int]] = {}
    for s, d, _, _ in draft.deps:
        preds.setdefault(d, []).append(s)
    if order is None:
        order = _topo_order(draft)
    if order is None:
        return -1
    for i in order:
        level[i] = 1 + max((level[p] for p in preds.get(i, ())), default=0)
    return max(level.values(), default=0)
