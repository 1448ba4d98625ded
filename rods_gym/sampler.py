"""Task sampling from the API graph, by difficulty knobs, random-access by ``(seed, index)``.

Task ``i`` is drawn with its own generator (a :class:`~rods_gym.world.PyRng` seeded from
``(seed, i)``) in bounded attempts. An attempt draws the knobs (depth, user turns, extra
calls, whether the task must be cross-domain, whether it asks for an answer) and a world
seed, then builds the task in two stages:

1. **Structure**, built to have exactly the drawn depth. Per turn: a sink tool, then a
   dependency chain walked backwards through the API graph (never reusing a value type
   along the chain, never reusing a tool), found by a randomized depth-first search that
   backtracks out of dead ends; the first turn's chain has the task's depth, a later turn's
   at most that. A task that must be cross-domain gets one chain step, chosen at random,
   whose producer lies in another domain (a depth-1 task has no dependency, so it is never
   cross-domain). Then extra calls, each only where it keeps every dependency path within
   the depth: producers for free parameters (branching), consumers of existing outputs
   (fan-out), or independent sinks. Later turns may consume an output of an earlier turn.
   Every dependency is kept with its *chance* on the drawn world, the share of records
   drawn at random that would make it work: a value feeding a call that selects records by
   it (lookup, search, aggregate) must occur in that call's table, and a producing search
   must single out its record. When the draw fails, the attempt fails. So tasks are
   distributed as if their records were drawn at random and failed attempts redrawn, but
   no attempt is wasted on instantiating a task that cannot work.
2. **Values** (:mod:`rods_gym.instantiate`). Calls are instantiated in topological order on a scratch copy of the world:
   each picks a record consistent with the values its producers revealed and whose values
   its consumers (and theirs, down to the sinks) can take, takes its free arguments from
   that record (or draws new values for writes), and is executed, so its outputs are real.
   A producer must reveal exactly one value (a search feeding a later call must match one
   record).

Mutations never race with reads: two calls touching the same record (or a search/aggregate
over an entity another call mutates) must be ordered by a dependency path or by turns, so
every valid order of the agent's calls gives the same outcome.

The first half of the attempts may require a cross-domain task; the second half drops that
requirement; a bounded fallback then keeps to the fewest extra calls and user turns (and
finally the shallowest depth) before :class:`SamplingError` is raised.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from operator import attrgetter
from typing import Any, Collection, Iterator, Mapping, Sequence

from .domain import ToolSpec
from .instantiate import READS, SELECTS, Draft, DraftNode, Instantiator  # noqa: F401 (Draft* re-exported)
from .instructions import render_messages
from .suite import Suite
from .task import Answer, Call, Dep, TaskSpec, Turn, format_value
from .world import PyRng, World

Range = tuple[int, int]
Step = tuple[str, str, str, str]  # a producer: (consumer's param, producer tool, its out field, value type)
Outlet = tuple[str, str, str, str]  # a consumer: (producer's out field, value type, consumer tool, its param)
Shared = tuple[str, str, str, str]  # (entity, field, entity, field) whose tables must share a value
CHAIN_BUDGET = 48  # expansions the depth-first chain search may make per turn
WORLD_EDGES_CACHE = 64  # worlds whose edges a sampler keeps


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


def _shared_value(tools: Mapping[str, ToolSpec], src: str, out: str, dst: str, param: str) -> Shared | None:
    """``(entity, field, entity, field)`` that must share a value for output ``out`` of ``src`` to
    feed parameter ``param`` of ``dst``, or ``None`` when the edge needs no shared value: only a
    call that selects records by a value (lookup, search, aggregate) fed by a field of an
    existing record (read, lookup, search) needs that record's value in its own table."""
    s, d = tools[src], tools[dst]
    if s.kind not in READS or d.kind not in SELECTS:
        return None
    return s.entity, out, d.entity, d.param(param).field


class _WorldEdges:
    """The sampler's API-graph edges on one world, each with the chance that a record drawn at
    random makes it work there: the share of the producer's records whose :func:`_shared_value`
    field value the consumer's table holds (1 for an edge that needs no shared value). Edges
    with no chance are left out. :meth:`single` gives the other chance a step takes, that a
    producing search singles out one record. The structure stage keeps a step with its chance,
    so the tasks it builds are distributed as if their records were drawn at random and failed
    attempts redrawn, without those attempts. Built lazily per tool and kept (a sampler keeps
    at most :data:`WORLD_EDGES_CACHE` of these)."""

    def __init__(self, tools: Mapping[str, ToolSpec], world: World, steps: Mapping[str, list[tuple[Step, Shared | None]]],
                 outlets: Mapping[str, list[tuple[Outlet, Shared | None]]]) -> None:
        self._tools, self._world = tools, world
        self._all_steps, self._all_outlets = steps, outlets  # per tool: (edge, its _shared_value)
        # tuples: untracked by the gc once their items are
        self._steps: dict[str, tuple[tuple[Step, float], ...]] = {}
        self._outlets: dict[str, tuple[tuple[Outlet, float], ...]] = {}
        self._shared: dict[Shared, float] = {}
        self._single: dict[str, float] = {}
        self._chances: dict[tuple[str, str, str, str], float] = {}

    def steps(self, tool: str) -> tuple[tuple[Step, float], ...]:
        """``((param, src tool, out field, value type), chance)``: producers that can feed a
        required parameter of ``tool`` on this world (the chance includes :meth:`single` of the
        producer, which a step makes a producer)."""
        out = self._steps.get(tool)
        if out is None:
            share, single = self._share, self.single
            weighted = ((s, share(key)) for s, key in self._all_steps[tool])
            kept = [(s, w) for s, w in weighted if w > 0.0]  # the producer's chance only where this one is not 0
            weighted = ((s, w * single(s[1])) for s, w in kept)
            out = self._steps[tool] = tuple([(s, w) for s, w in weighted if w > 0.0])
        return out

    def outlets(self, tool: str) -> tuple[tuple[Outlet, float], ...]:
        """``((out field, value type, consumer tool, param), chance)``: required parameters an
        output of ``tool`` can feed on this world."""
        out = self._outlets.get(tool)
        if out is None:
            share = self._share
            weighted = ((o, share(key)) for o, key in self._all_outlets[tool])
            out = self._outlets[tool] = tuple([(o, w) for o, w in weighted if w > 0.0])
        return out

    def chance(self, src: str, out: str, dst: str, param: str) -> float:
        """The chance that output ``out`` of ``src`` can feed parameter ``param`` of ``dst``."""
        key = (src, out, dst, param)
        hit = self._chances.get(key)
        if hit is None:
            hit = self._chances[key] = self._share(_shared_value(self._tools, src, out, dst, param))
        return hit

    def single(self, tool: str) -> float:
        """The share of records a search's filters single out (1 for other kinds)."""
        hit = self._single.get(tool)
        if hit is None:
            spec = self._tools[tool]
            hit = 1.0
            if spec.kind == "search":
                table = self._world.tables[spec.entity]
                ids = self._world.singled_out(spec.entity, tuple(p.field for p in spec.params))
                hit = 1.0 if ids is None or not table else len(ids) / len(table)
            self._single[tool] = hit
        return hit

    def _share(self, key: Shared | None) -> float:
        """The share of the records of ``key``'s producer entity whose field value the
        consumer's table holds (1 without a shared value; kept per key)."""
        if key is None:
            return 1.0
        hit = self._shared.get(key)
        if hit is None:
            values = self._world.values(key[2], key[3])
            if values is None:  # an unhashable value: assume it works
                hit = 1.0
            else:
                column = self._world.column(key[0], key[1])
                if not column:
                    hit = 0.0
                else:
                    try:
                        hit = sum(map(values.__contains__, column)) / len(column)
                    except TypeError:
                        hit = 1.0
            self._shared[key] = hit
        return hit


class _Build:
    """A draft under construction, with what the structure stage reads at every step: the
    tools taken, and per node its bound parameters, the value types used on its way down to
    its turn's sink, and the calls on the longest dependency path ending at it (``up``) and
    starting at it (``down``). :meth:`add` and :meth:`link` keep them all up to date."""

    __slots__ = ("edges", "depth", "draft", "taken", "bound", "types", "up", "down", "succ", "pred")

    def __init__(self, edges: _WorldEdges, depth: int) -> None:
        self.edges = edges
        self.depth = depth  # the task's depth: no dependency path may be longer
        self.draft = Draft()
        self.taken: set[str] = set()
        self.bound: list[set[str]] = []
        self.types: list[tuple[str, ...]] = []
        self.up: list[int] = []
        self.down: list[int] = []
        self.succ: list[list[int]] = []
        self.pred: list[list[int]] = []

    def add(self, tool: str, turn: int, types: tuple[str, ...] = ()) -> int:
        """A new call of ``tool`` in ``turn``; returns its index."""
        self.draft.nodes.append(DraftNode(tool, turn))
        self.taken.add(tool)
        self.bound.append(set())
        self.types.append(types)
        self.up.append(1)
        self.down.append(1)
        self.succ.append([])
        self.pred.append([])
        return len(self.draft.nodes) - 1

    def link(self, src: int, dst: int, param: str, out: str) -> None:
        """Parameter ``param`` of call ``dst`` takes output ``out`` of call ``src``."""
        self.draft.deps.append((src, dst, param, out))
        self.bound[dst].add(param)
        self.succ[src].append(dst)
        self.pred[dst].append(src)
        if self.up[dst] <= self.up[src]:
            _raise(self.up, self.succ, dst, self.up[src] + 1)
        if self.down[src] <= self.down[dst]:
            _raise(self.down, self.pred, src, self.down[dst] + 1)


def _raise(level: list[int], nxt: list[list[int]], node: int, value: int) -> None:
    """Raise ``level[node]`` to at least ``value`` and pass the rise on along ``nxt`` (a DAG)."""
    stack = [(node, value)]
    while stack:
        n, v = stack.pop()
        if level[n] < v:
            level[n] = v
            for m in nxt[n]:
                stack.append((m, v + 1))


def _happens(rng: PyRng, chance: float) -> bool:
    """True with probability ``chance`` (no draw when it is certain)."""
    return chance >= 1.0 or rng.random() < chance


def _between(rng: PyRng, r: Range) -> int:
    """A uniform int in the inclusive range ``r``."""
    return r[0] + rng.below(r[1] - r[0] + 1)


def _pick_untaken(items: Sequence[str], taken: Collection[str], rng: PyRng) -> str | None:
    """A uniformly drawn item not in ``taken`` (a few draws first, then a scan), or ``None``."""
    for _ in range(4 if items else 0):
        item = items[rng.below(len(items))]
        if item not in taken:
            return item
    free = [t for t in items if t not in taken]
    return free[rng.below(len(free))] if free else None


def _pop_random(items: list[Any], rng: PyRng) -> Any:
    """Remove and return a uniformly drawn item (the order of the rest changes)."""
    k = rng.below(len(items))
    items[k], items[-1] = items[-1], items[k]
    return items.pop()


class _ChainSearch:
    """A sink and the ``length`` steps of a chain upstream of it, each producer feeding the
    call before (step ``cross_step``'s producer from another domain; -1: none): a randomized
    depth-first search, sinks and producers tried in random order, that backtracks out of
    dead ends and makes at most :data:`CHAIN_BUDGET` expansions. A step is kept with its
    chance (see :class:`_WorldEdges`); when the draw fails, so does the search, as the
    attempt would have with records drawn at random."""

    __slots__ = ("edges", "domain", "rng", "length", "cross_step", "taken", "steps", "budget")

    def __init__(self, edges: _WorldEdges, domain: Mapping[str, str], rng: PyRng, length: int, cross_step: int,
                 taken: Collection[str]) -> None:
        self.edges, self.domain, self.rng = edges, domain, rng
        self.length, self.cross_step = length, cross_step
        self.taken = set(taken)
        self.steps: list[Step] = []
        self.budget = CHAIN_BUDGET

    def run(self, sinks: list[str]) -> tuple[str, list[Step]] | None:
        """The first sink of ``sinks`` (not taken yet, in random order) a chain can feed, and its steps."""
        while sinks and self.budget > 0:
            sink = _pop_random(sinks, self.rng)
            if sink in self.taken:
                continue
            self.taken.add(sink)
            if self._extend(sink, ()):
                return sink, self.steps
            self.taken.discard(sink)
        return None

    def _extend(self, tool: str, types: tuple[str, ...]) -> bool:
        """Complete the chain whose last call so far is ``tool`` (``types``: the value types it used)."""
        steps = self.steps
        if len(steps) == self.length:
            return True
        if self.budget == 0:
            return False
        self.budget -= 1
        rng, taken, domains = self.rng, self.taken, self.domain
        opts = list(self.edges.steps(tool))  # tried in random order; those that do not fit are skipped
        domain = domains[tool] if len(steps) == self.cross_step else None
        while opts:
            step, chance = _pop_random(opts, rng)
            src, vtype = step[1], step[3]
            if src in taken or vtype in types or domains[src] == domain:
                continue
            if not _happens(rng, chance):
                self.budget = 0
                return False
            taken.add(src)
            steps.append(step)
            if self._extend(src, types + (vtype,)):
                return True
            taken.discard(src)
            steps.pop()
        return False


class TaskSampler:
    """Draws tasks from a suite's API graph. ``sample(i)`` is a pure function of (seed, i)."""

    def __init__(self, suite: Suite, config: SamplerConfig = SamplerConfig(), seed: int = 0,
                 id_prefix: str = "task") -> None:
        if seed < 0:
            raise ValueError(f"sampler seed must be >= 0, got {seed}")
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
        self.values = Instantiator(suite, lookahead=True)
        if not self.allowed:
            raise ValueError("no tools left to sample from")
        # lookups the structure stage reads on every attempt, derived once per sampler
        tools = suite.tools
        required_consumers = {vtype: [(t, p) for t, p in cs if tools[t].param(p).required]
                              for vtype, cs in self.consumers.items()}
        self._steps = {t: [(s, _shared_value(tools, s[1], s[2], t, s[0])) for s in self._producer_steps(t)]
                       for t in self.allowed}
        self._outlets = {t: [((f, vtype, c, p), _shared_value(tools, t, f, c, p))
                             for f, vtype in suite.ports[t] for c, p in required_consumers.get(vtype, ())]
                         for t in self.allowed}
        self._not_aggregate = [t for t in self.allowed if tools[t].kind != "aggregate"]
        self._domain = {t: spec.domain for t, spec in tools.items()}
        self._distractor_index = DistractorIndex(suite, self.allowed)
        self._world_edges: dict[int, _WorldEdges] = {}

    # -- public ------------------------------------------------------------------------
    def sample(self, index: int) -> TaskSpec:
        if index < 0:
            raise IndexError(f"task index must be >= 0, got {index}")
        rng = PyRng(f"{self.seed}:{index}")
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
    def _attempt(self, rng: PyRng, index: int, relax: bool, simple: bool = False,
                 shallow: bool = False) -> TaskSpec | None:
        """One attempt (see the module docstring); ``None`` when it fails. ``relax``: no
        cross-domain requirement; ``simple``: the fewest user turns and extra calls;
        ``shallow``: the shallowest depth too."""
        cfg = self.config
        if simple:
            depth = cfg.depth[0] if shallow else _between(rng, cfg.depth)
            n_turns, extra = cfg.user_turns[0], cfg.extra_calls[0]
        else:
            depth, n_turns, extra = _between(rng, cfg.depth), _between(rng, cfg.user_turns), _between(rng, cfg.extra_calls)
        want_cross = (not relax) and rng.random() < cfg.cross_domain
        if want_cross and depth < 2:
            return None  # without a dependency no task is cross-domain
        want_answer = rng.random() < cfg.answer
        world_seed = cfg.world_offset + rng.below(cfg.world_pool)
        build = _Build(self._edges(world_seed), depth)
        for turn in range(n_turns):
            length = depth if turn == 0 else _between(rng, (1, depth))
            answer_turn = want_answer and turn == n_turns - 1
            if not self._structure(build, rng, turn, length, extra if turn == 0 else 0, answer_turn,
                                   cross=want_cross and turn == 0):
                return None
            if turn > 0 and rng.random() < 0.5 and not self._link_turns(build, rng, turn):
                return None
        draft = build.draft
        assert max(build.up) == depth, (draft, depth)  # the structure stage keeps the depth
        # turns first, then dependencies (a producer's longest path up is shorter than its consumer's)
        order = sorted(range(len(draft.nodes)), key=lambda i: (draft.nodes[i].turn, build.up[i], i))
        outputs = self.values.instantiate(draft, order, world_seed, rng)
        if outputs is None:
            return None
        return self._finish(draft, order, outputs, rng, index, world_seed, want_answer, n_turns, depth)

    def _edges(self, world_seed: int) -> _WorldEdges:
        """The edges of a world (kept for the last :data:`WORLD_EDGES_CACHE` worlds used)."""
        edges = self._world_edges.pop(world_seed, None)
        if edges is None:
            edges = _WorldEdges(self.suite.tools, self.suite.world(world_seed), self._steps, self._outlets)
            if len(self._world_edges) >= WORLD_EDGES_CACHE:
                del self._world_edges[next(iter(self._world_edges))]  # the least recently used
        self._world_edges[world_seed] = edges
        return edges

    # -- structure ---------------------------------------------------------------------
    def _producer_steps(self, tool: str) -> list[Step]:
        """The producers that may feed a required parameter of ``tool``, in parameter order."""
        spec = self.suite.tools[tool]
        # a lookup of entity E fed by a call that already consumes E's id is a loop
        # ("read the traveler to get their email, then find the traveler by email")
        loop_type = self.suite.entities[spec.entity].id_field if spec.kind == "lookup" else None
        return [(p.name, src, f, vtype) for p in spec.params if p.required
                for src, f, vtype in self.producers[tool].get(p.name, ()) if loop_type not in self.param_types[src]]

    @staticmethod
    def _options(edges: _WorldEdges, tool: str, taken: Collection[str], bound: Collection[str],
                 used_types: Collection[str]) -> list[tuple[Step, float]]:
        """The producers (with their chance) that can feed a free required parameter of
        ``tool`` on the world: of a value type not used along the chain, a tool not yet taken."""
        return [(s, w) for s, w in edges.steps(tool)
                if s[1] not in taken and s[3] not in used_types and s[0] not in bound]

    def _structure(self, b: _Build, rng: PyRng, turn: int, length: int, extra: int, answer: bool,
                   cross: bool) -> bool:
        """Add one turn to ``b``: a sink (answerable if ``answer``) fed by a chain of ``length``
        calls in all (one step cross-domain if ``cross``), then ``extra`` extra calls where
        they fit. False when no chain is found."""
        pool = self.answerable if answer else self.allowed
        search = _ChainSearch(b.edges, self._domain, rng, length - 1, rng.below(length - 1) if cross else -1, b.taken)
        chain = search.run(list(pool))
        if chain is None:
            return False
        sink, steps = chain
        first = cur = b.add(sink, turn)
        for param, src, f, vtype in steps:
            j = b.add(src, turn, b.types[cur] + (vtype,))
            b.link(j, cur, param, f)
            cur = j
        for _ in range(extra):
            mode = rng.below(3)
            if mode == 0:
                if not self._add_branch(b, rng, turn, first):
                    return False
            elif mode == 1:
                if not self._add_fan_out(b, rng, turn, first):
                    return False
            else:  # an independent request in the same turn
                tool = _pick_untaken(self._not_aggregate, b.taken, rng)
                if tool is not None:
                    b.add(tool, turn)
        return True

    def _add_branch(self, b: _Build, rng: PyRng, turn: int, first: int) -> bool:
        """Another producer for a free required parameter of a call of this turn (from node
        ``first`` on) whose longest path down stays under the depth (branching)."""
        cands = []
        for i in range(first, len(b.draft.nodes)):
            if b.down[i] < b.depth and len(b.bound[i]) < self.config.branching:
                opts = self._options(b.edges, b.draft.nodes[i].tool, b.taken, b.bound[i], b.types[i])
                if opts:
                    cands.append((i, opts))
        if cands:
            i, opts = cands[rng.below(len(cands))]
            (param, src, f, vtype), chance = opts[rng.below(len(opts))]
            if not _happens(rng, chance):
                return False
            b.link(b.add(src, turn, b.types[i] + (vtype,)), i, param, f)
        return True

    def _add_fan_out(self, b: _Build, rng: PyRng, turn: int, first: int) -> bool:
        """A second consumer of an output of a call of this turn (from node ``first`` on)
        whose longest path up stays under the depth (fan-out)."""
        cands = []
        for i in range(first, len(b.draft.nodes)):
            if b.up[i] >= b.depth:
                continue
            types_i, taken = b.types[i], b.taken
            cands += [(i, o, w) for o, w in b.edges.outlets(b.draft.nodes[i].tool)
                      if o[1] not in types_i and o[2] not in taken]
        if cands:
            i, (f, vtype, t, p), chance = cands[rng.below(len(cands))]
            if not b.succ[i]:  # the call becomes a producer
                chance *= b.edges.single(b.draft.nodes[i].tool)
            if not _happens(rng, chance):
                return False
            b.link(i, b.add(t, turn, b.types[i] + (vtype,)), p, f)
        return True

    def _link_turns(self, b: _Build, rng: PyRng, turn: int) -> bool:
        """Let a call of ``turn`` consume an output of an earlier turn (the agent must remember
        it), where the longest path through the new dependency stays within the depth. False
        when the link's chance fails."""
        nodes = b.draft.nodes
        cands = []
        for j, node in enumerate(nodes):
            if node.turn != turn:
                continue
            for p in self.suite.tools[node.tool].params:
                if not p.required or p.name in b.bound[j]:
                    continue
                for i, prev in enumerate(nodes):
                    if prev.turn < turn and b.up[i] + b.down[j] <= b.depth:
                        for f, vtype in self.suite.ports[prev.tool]:
                            if vtype == p.type and b.edges.chance(prev.tool, f, node.tool, p.name) > 0.0:
                                cands.append((i, j, p.name, f))
        if cands:
            i, j, param, f = cands[rng.below(len(cands))]
            chance = b.edges.chance(nodes[i].tool, f, nodes[j].tool, param)
            if not b.succ[i]:  # the call becomes a producer
                chance *= b.edges.single(nodes[i].tool)
            if not _happens(rng, chance):
                return False
            b.link(i, j, param, f)
        return True

    # -- finishing ---------------------------------------------------------------------
    def _finish(self, draft: Draft, order: list[int], outputs: Mapping[int, Mapping[str, Any]],
                rng: PyRng, index: int, world_seed: int, want_answer: bool, n_turns: int,
                depth: int) -> TaskSpec | None:
        """The task of an instantiated draft: call ids in ``order``, the answer, withheld
        facts, locked tools, distractors and the user's messages; ``None`` without an answer
        when one is wanted."""
        cfg = self.config
        nodes = draft.nodes
        ids = [""] * len(nodes)
        for k, i in enumerate(order):
            ids[i] = f"c{k}"
        calls = tuple([Call(ids[i], nodes[i].tool, nodes[i].args, nodes[i].turn) for i in order])
        deps = tuple(sorted([Dep(ids[s], ids[d], p, f) for s, d, p, f in draft.deps], key=_DEP_ORDER))
        answer = None
        if want_answer:
            producers = {s for s, _, _, _ in draft.deps}
            stated = self.values.stated(draft)
            options = [(i, f) for i in order if nodes[i].turn == n_turns - 1 and i not in producers
                       and self.suite.tools[nodes[i].tool].kind in ("read", "lookup", "aggregate")
                       for f in self.values.answer_fields(draft, i, outputs, stated)]
            if not options:
                return None
            i, f = options[rng.below(len(options))]
            answer = Answer(ids[i], f, format_value(outputs[i][f]))
        # withheld facts and locked tools
        withheld: dict[int, tuple[tuple[str, str], ...]] = {}
        locked: dict[int, tuple[str, ...]] = {}
        if rng.random() < cfg.missing_param:
            facts = _facts(calls, deps)
            if facts:
                c, p = facts[rng.below(len(facts))]
                withheld[c.turn] = ((c.id, p),)
        if rng.random() < cfg.missing_tool:
            c = calls[rng.below(len(calls))]
            locked[c.turn] = (c.tool,)
        distractors = self._distractors(calls, _between(rng, cfg.distractors), rng)
        knobs = {"depth": depth, "calls": len(calls), "turns": n_turns,
                 "cross_domain": len({self._domain[c.tool] for c in calls}) > 1}
        task_id = f"{self.id_prefix}-{self.seed}-{index}"
        meta = {"source": "sampler", "seed": self.seed, "index": index, "knobs": knobs}
        held = [withheld.get(t, ()) for t in range(n_turns)]
        messages = render_messages(task_id, calls, deps, held, answer, self.suite)
        turns = tuple([Turn(m, locked.get(t, ()), held[t]) for t, m in enumerate(messages)])
        return TaskSpec(task_id, world_seed, calls, deps, turns, distractors, answer, meta)

    def _distractors(self, calls: Sequence[Call], k: int, rng: PyRng) -> tuple[str, ...]:
        return pick_distractors(self.suite, self.allowed, calls, k, rng, self._distractor_index)


_DEP_ORDER = attrgetter("dst", "param")  # a task's dependencies by consumer id, then parameter


def _facts(calls: Sequence[Call], deps: Sequence[Dep]) -> list[tuple[Call, str]]:
    """``(call, param)`` of every argument the user states (not bound by a dependency), in
    call order: the pairs of ``TaskSpec.facts()``."""
    bound = {(d.dst, d.param) for d in deps}
    return [(c, p) for c in calls for p in c.args if (c.id, p) not in bound]


class DistractorIndex:
    """The ``allowed`` tools as bit masks over their positions in ``allowed``: per domain, per
    kind and per tool, for :func:`pick_distractors`."""

    def __init__(self, suite: Suite, allowed: Sequence[str]) -> None:
        self.allowed = allowed  # the sequence it was built from (identity is checked)
        self.by_domain: dict[str, int] = {}
        self.by_kind: dict[str, int] = {}
        self.by_tool: dict[str, int] = {}
        for i, t in enumerate(allowed):
            spec = suite.tools[t]
            self.by_domain[spec.domain] = self.by_domain.get(spec.domain, 0) | 1 << i
            self.by_kind[spec.kind] = self.by_kind.get(spec.kind, 0) | 1 << i
            self.by_tool[t] = self.by_tool.get(t, 0) | 1 << i

    def near(self, suite: Suite, used: Collection[str]) -> int:
        """The mask of the allowed tools not in ``used`` that share a domain or a kind with one of them."""
        mask = own = 0
        tools, by_domain, by_kind, by_tool = suite.tools, self.by_domain, self.by_kind, self.by_tool
        for t in used:
            spec = tools[t]
            mask |= by_domain.get(spec.domain, 0) | by_kind.get(spec.kind, 0)
            own |= by_tool.get(t, 0)
        return mask & ~own

    def unused(self, used: Collection[str]) -> int:
        """The mask of the allowed tools not in ``used``."""
        own = 0
        for t in used:
            own |= self.by_tool.get(t, 0)
        return ((1 << len(self.allowed)) - 1) & ~own

    def similar(self, suite: Suite, used: set[str]) -> list[str]:
        """Allowed tools not in ``used`` sharing a domain or a kind with one of them, in ``allowed`` order."""
        return [self.allowed[i] for i in bit_positions(self.near(suite, used))]


def bit_positions(mask: int) -> list[int]:
    """The positions of the set bits of ``mask``, lowest first."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def pick_distractors(suite: Suite, allowed: Sequence[str], calls: Sequence[Call], k: int,
                     rng: PyRng, index: DistractorIndex | None = None) -> tuple[str, ...]:
    """``k`` tools the task does not need, preferring its domains and kinds (sorted ``allowed`` order).
    ``index``: a :class:`DistractorIndex` of ``allowed`` (built here when not given)."""
    if k <= 0:
        return ()
    used = {c.tool for c in calls}
    if index is None or index.allowed is not allowed:
        index = DistractorIndex(suite, allowed)
    pool = index.near(suite, used)
    if pool.bit_count() < k:
        pool = index.unused(used)
    k = min(k, pool.bit_count())
    picks: set[int] = set()
    below, n = rng.below, len(allowed)
    for _ in range(16 * k):  # uniform draws over ``allowed``, kept when in the pool: each pick is uniform
        if len(picks) == k:
            break
        i = below(n)
        if pool >> i & 1:
            picks.add(i)
    if len(picks) < k:  # rarely: the rest drawn from the pool's remaining positions
        rest = bit_positions(pool & ~sum(1 << i for i in picks))
        for j in range(k - len(picks)):
            r = j + rng.below(len(rest) - j)
            rest[j], rest[r] = rest[r], rest[j]
        picks.update(rest[: k - len(picks)])
    return tuple([allowed[i] for i in sorted(picks)])
