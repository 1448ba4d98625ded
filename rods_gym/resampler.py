"""Skill-aligned resampling (README, "Resampling and synthesis"): new tasks with a parent's structure, built on
other tools, entities, values and wording.

A variant keeps the parent's *signature*: the call DAG with node labels ``skill@turn`` plus
role flags (``+ask``, ``+locked``, ``+answer``) and edge labels = the role of the value
that flows, the same depth and the same turn types. It is drawn in four steps:

1. **Embed** the parent's labelled DAG in the API graph: every call gets a tool with the
   same label, every dependency an API-graph edge whose value role matches, tools stay
   distinct. An index built once per resampler (candidate tools per label, candidate
   neighbours per ``(tool, role, label)``, candidate links per ``(tool, tool, role)``)
   makes this a randomized backtracking search with a fixed node budget.
2. **Instantiate** values on a fresh world seed with the sampler's :class:`Instantiator`.
3. **Carry over** the turn types: a withheld fact on the corresponding call, the locked
   tool on the corresponding call, the answer read from the corresponding call, as many
   distractor tools; then render the user's messages in a randomly drawn wording style.
4. **Check**: the labels match the parent's under the call correspondence (an explicit
   isomorphism), the oracle solves it (progress 1.0), it is not a duplicate of the parent,
   of the other variants or of the ``exclude`` set, and it is not contaminated by the
   held-out sets (:class:`Decontaminator`).

When no exact embedding exists (or none survives the checks) the resampler falls back:

* tier 0 ``exact``: isomorphic labelled DAG (``Signature.same(parent)``);
* tier 1 ``relaxed``: same topology, turns, flags and edge roles; node labels relaxed
  from the skill (``kind:role``) to the tool kind;
* tier 2 ``size``: same depth, number of calls and user turns. The bare topology is
  embedded (any tools, any value roles; turns and flags kept); if even that is impossible,
  tasks of the same depth and size are drawn from the sampler.

A search that runs to completion without an embedding marks the (parent structure, tier)
as infeasible, so later calls skip it at once. Every loop is bounded; a fresh resampler
and the same ``rng`` state give the same variants.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .episode import CompiledTask, Episode, RewardConfig
from .instantiate import Draft, DraftNode, Instantiator
from .instructions import N_STYLES, render_turn_messages
from .oracle import oracle_action
from .sampler import SamplerConfig, TaskSampler, bit_positions
from .signature import Signature
from .suite import Suite
from .task import Answer, Call, Dep, TaskSpec, Turn, format_value
from .task_keys import (Decontaminator, TaskIndex, binding_from_parts, binding_key, call_flags,  # noqa: F401 (re-exported)
                        content_key, instruction_ngrams)
from .world import WorldState

TIERS = (0, 1, 2)
TIER_NAMES = {0: "exact", 1: "relaxed", 2: "size"}
STYLE_DRAWS = N_STYLES * 4  # wording style x opener offset
ANY = "*"  # the tier-2 label: any tool, any value role


def signature_classes(signatures: Sequence[Signature]) -> list[int]:
    """The structural class of each signature (0, 1, 2... in order of first appearance): two
    are in one class iff :meth:`Signature.same` holds. The Weisfeiler-Lehman bucket key is
    only the first filter; collisions inside a bucket are settled by the isomorphism check."""
    buckets: dict[tuple, list[tuple[Signature, int]]] = {}
    out: list[int] = []
    n_classes = 0
    for sig in signatures:
        members = buckets.setdefault(sig.key, [])
        for rep, cls in members:
            if rep.same(sig):
                out.append(cls)
                break
        else:
            members.append((sig, n_classes))
            out.append(n_classes)
            n_classes += 1
    return out


def oracle_solves(task: TaskSpec, suite: Suite) -> bool:
    """Run the oracle on ``task`` (env's default step limit); True when it reaches progress 1.0."""
    steps = 8 + 3 * len(task.calls) + 2 * len(task.turns)
    episode = Episode(task, CompiledTask(task, suite.tools), WorldState(suite.world(task.world_seed)), suite.tools,
                      suite.checkers, suite.executor, RewardConfig(), steps)
    for _ in range(steps):
        if episode.done:
            break
        episode.step(oracle_action(episode))
    return episode.success and episode.progress == 1.0


def task_depth(task: TaskSpec) -> int:
    """Longest dependency chain in calls (1 for a task without dependencies)."""
    preds: dict[str, list[str]] = {}
    for d in task.deps:
        preds.setdefault(d.dst, []).append(d.src)
    level: dict[str, int] = {}
    pending = [c.id for c in task.calls]
    for _ in range(len(pending) + 1):  # Kahn-style passes; a DAG needs at most len(calls)
        if not pending:
            break
        rest = []
        for cid in pending:
            if all(p in level for p in preds.get(cid, ())):
                level[cid] = 1 + max((level[p] for p in preds.get(cid, ())), default=0)
            else:
                rest.append(cid)
        pending = rest
    if pending:
        raise ValueError(f"task {task.id!r}: its dependencies form a cycle")
    return max(level.values(), default=0)


# -- configuration ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ResamplerConfig:
    """Bounds and options of the resampler (every search is bounded by these)."""

    tiers: tuple[int, ...] = TIERS  # fallback order
    world_pool: int = 64  # variants draw world seeds from world_offset + [0, world_pool)
    world_offset: int = 0
    attempts: int = 8  # embedding draws per wanted variant, per tier
    world_tries: int = 1  # world seeds tried per embedding (a failed one rarely works on another world)
    redraw_tries: int = 6  # world seeds tried by redraw()
    search_budget: int = 256  # tool assignments tried per embedding search
    link_combinations: int = 64  # parameter choices tried per complete tool assignment
    size_samples: int = 24  # sampler draws per wanted tier-2 (or naive) variant
    decontaminate_on: str = "calls"  # "calls": same signature and concrete calls; "tools": same tools, any values
    ngram: int = 8  # decontamination: word n-gram length
    max_overlap: float = 0.8  # decontamination: share of a variant's n-grams found in one held-out task
    tools: tuple[str, ...] | None = None  # tools variants may use (default: all)
    exclude_tools: tuple[str, ...] = ()  # e.g. tools held out for an OOD split
    plan_cache: int = 4096  # remembered infeasible (parent, tier) embeddings

    def __post_init__(self) -> None:
        if not self.tiers or any(t not in TIERS for t in self.tiers):
            raise ValueError(f"ResamplerConfig.tiers must be a non-empty subset of {TIERS}, got {self.tiers}")
        for name in ("world_pool", "attempts", "world_tries", "redraw_tries", "search_budget", "link_combinations",
                     "size_samples", "ngram", "plan_cache"):
            if getattr(self, name) < 1:
                raise ValueError(f"ResamplerConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.decontaminate_on not in Decontaminator.LEVELS:
            raise ValueError(f"ResamplerConfig.decontaminate_on must be one of {Decontaminator.LEVELS}, "
                             f"got {self.decontaminate_on!r}")
        if not 0.0 < self.max_overlap <= 1.0:
            raise ValueError(f"ResamplerConfig.max_overlap must lie in (0, 1], got {self.max_overlap}")


# -- the embedding index ------------------------------------------------------------------------
class _EmbeddingIndex:
    """Where labelled nodes and edges embed in the API graph, for one labelling of tools."""

    def __init__(self, suite: Suite, allowed: Sequence[str], label_of: Callable[[str], str],
                 links: dict[tuple[str, str, str], tuple[tuple[str, str, str], ...]]) -> None:
        by_label: dict[str, list[str]] = {}
        for t in allowed:
            by_label.setdefault(label_of(t), []).append(t)
        self.by_label = {k: tuple(v) for k, v in by_label.items()}
        succ: dict[tuple[str, str, str], dict[str, None]] = {}
        pred: dict[tuple[str, str, str], dict[str, None]] = {}
        for src, dst, role in links:
            succ.setdefault((src, role, label_of(dst)), {})[dst] = None
            pred.setdefault((dst, role, label_of(src)), {})[src] = None
        self.succ = {k: tuple(v) for k, v in succ.items()}
        self.pred = {k: tuple(v) for k, v in pred.items()}
        self.succ_sets = {k: frozenset(v) for k, v in self.succ.items()}
        self.pred_sets = {k: frozenset(v) for k, v in self.pred.items()}


@dataclass(frozen=True)
class _Parent:
    """What the checks need to know about the parent, computed once per call."""

    task: TaskSpec
    pos: dict[str, int]  # call id -> position
    labels: tuple  # (node labels, (src, dst, role) edges)
    flags: list[tuple[bool, bool, bool]]


@dataclass(frozen=True)
class _Plan:
    """A parent's labelled DAG prepared for the embedding search (node i = parent call i)."""

    key: tuple
    labels: tuple[str, ...]
    turns: tuple[int, ...]
    edges: tuple[tuple[int, int, str], ...]  # (src, dst, role)
    order: tuple[int, ...]  # search order: each node after a neighbour where possible
    adj: tuple[tuple[tuple[int, str, bool], ...], ...]  # per node: (neighbour, role, neighbour is the source)
    strict: bool  # the parent avoids loops and repeated value types along chains, so variants must too
    flags: tuple[tuple[bool, bool, bool], ...]  # per node: asked, locked, answer
    n_turns: int


class Resampler:
    """Skill-aligned resampler (see the module docstring).

    Args:
        suite: the domains (tools, API graph, worlds).
        decontaminate: held-out tasks (dev, test, OOD) variants must not come close to.
        config: bounds and options.

    ``stats`` counts, over the resampler's life: ``calls``, ``attempts``, ``produced`` and
    ``produced_tier{0,1,2}``, ``rejected_duplicate``, ``rejected_contaminated`` (split into
    ``_binding`` and ``_ngram``), ``rejected_unsolvable``, ``rejected_signature``,
    ``failed_embedding`` (no embedding within the search budget), ``failed_instantiation``
    (no values on any world tried) and ``infeasible_tier{0,1,2}`` (known to have no embedding).
    """

    kind = "skill"

    def __init__(self, suite: Suite, *, decontaminate: Sequence[TaskSpec] | Decontaminator = (),
                 config: ResamplerConfig = ResamplerConfig()) -> None:
        self.suite, self.config = suite, config
        allowed = set(config.tools) if config.tools is not None else set(suite.tools)
        unknown = (allowed | set(config.exclude_tools)) - set(suite.tools)
        if unknown:
            raise ValueError(f"ResamplerConfig names unknown tools {sorted(unknown)}")
        self.allowed = tuple(sorted(allowed - set(config.exclude_tools)))
        if not self.allowed:
            raise ValueError("ResamplerConfig leaves no tools to resample with")
        self.decontaminator = decontaminate if isinstance(decontaminate, Decontaminator) else \
            Decontaminator(decontaminate, n=config.ngram, max_overlap=config.max_overlap, level=config.decontaminate_on)
        self.values = Instantiator(suite, lookahead=True)
        self.stats: dict[str, int] = {k: 0 for k in (
            "calls", "attempts", "produced", "produced_tier0", "produced_tier1", "produced_tier2", "rejected_duplicate",
            "rejected_contaminated", "rejected_contaminated_binding", "rejected_contaminated_ngram",
            "rejected_unsolvable", "rejected_signature", "failed_embedding", "failed_instantiation",
            "infeasible_tier0", "infeasible_tier1", "infeasible_tier2")}
        tools = suite.tools
        allowed_set = set(self.allowed)
        links: dict[tuple[str, str, str], list[tuple[str, str, str]]] = {}
        for src, dst, param, d in suite.graph.edges(keys=True, data=True):
            if src in allowed_set and dst in allowed_set and tools[dst].param(param).required:
                for f in d["fields"]:
                    links.setdefault((src, dst, d["role"]), []).append((param, f, d["type"]))
        self.links = {k: tuple(v) for k, v in links.items()}
        any_links: dict[tuple[str, str, str], list[tuple[str, str, str]]] = {}
        for (src, dst, _), opts in self.links.items():
            any_links.setdefault((src, dst, ANY), []).extend(opts)
        self.any_links = {k: tuple(v) for k, v in any_links.items()}
        self.index = {
            0: _EmbeddingIndex(suite, self.allowed, lambda t: suite.skills[t], self.links),
            1: _EmbeddingIndex(suite, self.allowed, lambda t: tools[t].kind, self.links),
            2: _EmbeddingIndex(suite, self.allowed, lambda t: ANY, self.any_links),
        }
        self.param_types = {t: frozenset(p.type for p in tools[t].params) for t in suite.tools}
        self._role = {(t, p.name): suite.types[p.type].role for t in suite.tools for p in tools[t].params}
        # distractor candidates as bit sets over ``allowed``: the tools sharing a tool's domain or kind
        self._bit = {t: 1 << i for i, t in enumerate(self.allowed)}
        self._similar = {t: sum(1 << i for i, u in enumerate(self.allowed)
                                if tools[u].domain == tools[t].domain or tools[u].kind == tools[t].kind)
                         for t in suite.tools}
        self._infeasible: OrderedDict[tuple, None] = OrderedDict()
        self._size_samplers: OrderedDict[tuple, TaskSampler] = OrderedDict()

    # -- public ----------------------------------------------------------------------------
    def resample(self, task: TaskSpec, n: int, rng: np.random.Generator,
                 exclude: Collection[TaskSpec] = ()) -> list[TaskSpec]:
        """Up to ``n`` new tasks with ``task``'s signature (at the best tier reachable).

        Variants are oracle-solved, distinct from each other, from ``task`` and from
        ``exclude`` (content equality, see :func:`content_key`), and not contaminated.
        """
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        for c in task.calls:
            if c.tool not in self.suite.tools:
                raise ValueError(f"task {task.id!r} uses unknown tool {c.tool!r}")
        self.stats["calls"] += 1
        seen = self._membership(exclude)
        local = {content_key(task)}
        out: list[TaskSpec] = []
        parent = _Parent(task, {c.id: i for i, c in enumerate(task.calls)}, self._labels(task), call_flags(task))
        for tier in self.config.tiers:
            if len(out) >= n:
                break
            self._resample_tier(parent, tier, n, rng, seen, local, out)
        return out

    def redraw(self, task: TaskSpec, rng: np.random.Generator) -> TaskSpec | None:
        """The same task (id, tools, dependencies, turn types, distractors, wording) with its
        values re-instantiated on another world seed; ``None`` when that fails within bounds."""
        deps = self._parent_deps(task)
        pos = {c.id: i for i, c in enumerate(task.calls)}
        for _ in range(self.config.redraw_tries):
            draft = Draft([DraftNode(c.tool, c.turn) for c in task.calls], list(deps))
            world = self._world_seed(task, rng)
            outputs = self.values.instantiate(draft, range(len(task.calls)), world, rng)
            if outputs is None:
                continue
            new = self._assemble(task, draft, outputs, world, rng, pos, same=True)
            if new is None:
                continue
            new = replace(new, id=task.id, meta={**task.meta, "redrawn_from_world": task.world_seed})
            messages = render_turn_messages(new, self.suite)
            new = replace(new, turns=tuple(replace(t, message=m) for t, m in zip(new.turns, messages)))
            if oracle_solves(new, self.suite):
                return new
        return None

    # -- one tier ----------------------------------------------------------------------------
    def _resample_tier(self, parent: _Parent, tier: int, n: int, rng: np.random.Generator,
                       seen: Callable[[bytes], bool], local: set[bytes], out: list[TaskSpec]) -> None:
        plan = self._plan(parent.task, tier)
        for _ in range((n - len(out)) * self.config.attempts):
            if len(out) >= n:
                return
            self.stats["attempts"] += 1
            if plan.key not in self._infeasible:
                candidate = self._draw_embedded(parent, plan, tier, rng)
            elif tier == 2:  # not even the bare topology embeds: draw tasks of the same depth and size
                self.stats["infeasible_tier2"] += 1
                candidate = self._draw_sized(parent.task, rng)
            else:
                self.stats[f"infeasible_tier{tier}"] += 1
                return
            if candidate is None:
                continue
            variant, key = self._finish(parent.task, candidate, tier, rng)
            if self._accept(parent, variant, key, tier, seen, local):
                out.append(variant)
                self.stats["produced"] += 1
                self.stats[f"produced_tier{tier}"] += 1

    def _draw_embedded(self, parent: _Parent, plan: _Plan, tier: int, rng: np.random.Generator) -> TaskSpec | None:
        found = self._embed(plan, self.index[tier], rng)
        if found is None:
            self.stats["failed_embedding"] += 1
            return None
        tools, deps = found
        for _ in range(self.config.world_tries):
            draft = Draft([DraftNode(t, turn) for t, turn in zip(tools, plan.turns)], list(deps))
            world = self._world_seed(parent.task, rng)
            outputs = self.values.instantiate(draft, range(len(tools)), world, rng)
            if outputs is None:
                continue
            task = self._assemble(parent.task, draft, outputs, world, rng, parent.pos, same=False)
            if task is not None:
                return task
        self.stats["failed_instantiation"] += 1
        return None

    def _draw_sized(self, parent: TaskSpec, rng: np.random.Generator) -> TaskSpec | None:
        depth, n_calls, n_turns = task_depth(parent), len(parent.calls), len(parent.turns)
        sampler = self._size_sampler(parent, depth)
        for _ in range(self.config.size_samples):
            t = sampler.sample(int(rng.integers(0, 2**31 - 1)))
            if len(t.calls) == n_calls and len(t.turns) == n_turns and task_depth(t) == depth:
                return t
        self.stats["failed_instantiation"] += 1
        return None

    def _finish(self, parent: TaskSpec, task: TaskSpec, tier: int | None,
                rng: np.random.Generator) -> tuple[TaskSpec, bytes]:
        """Wording, lineage and a content-derived id for a drawn variant (and its content key)."""
        style = int(rng.integers(0, STYLE_DRAWS))
        root = str(parent.meta.get("root", parent.id))
        meta = {"source": "resample", "resampler": self.kind, "parent": parent.id, "root": root, "tier": tier,
                "generation": int(parent.meta.get("generation", 0)) + 1, "style": style}
        messages = render_turn_messages(task, self.suite, style=style)
        turns = tuple(Turn(m, t.locked, t.withheld) for t, m in zip(task.turns, messages))
        key = content_key(task)
        variant = TaskSpec(f"{root}~{key.hex()[:16]}", task.world_seed, task.calls, task.deps, turns, task.distractors,
                           task.answer, meta)
        return variant, key

    def _accept(self, parent: _Parent, variant: TaskSpec, key: bytes, tier: int | None,
                seen: Callable[[bytes], bool], local: set[bytes]) -> bool:
        if not self._matches(parent, variant, tier):
            self.stats["rejected_signature"] += 1
            return False
        if key in local or seen(key):
            self.stats["rejected_duplicate"] += 1
            return False
        why = self.decontaminator.check(variant)
        if why is not None:
            self.stats["rejected_contaminated"] += 1
            self.stats[f"rejected_contaminated_{why}"] += 1
            return False
        if not oracle_solves(variant, self.suite):
            self.stats["rejected_unsolvable"] += 1
            return False
        local.add(key)
        return True

    # -- signature checks ------------------------------------------------------------------------
    def _labels(self, task: TaskSpec) -> tuple[tuple[str, ...], tuple[tuple[int, int, str], ...]]:
        """Node labels (call order) and ``(src, dst, role)`` edges of the labelled DAG, as
        :func:`rods_gym.signature.labelled_dag` and ``compute_signature`` label them."""
        skills = self.suite.skills
        labels = tuple(f"{skills[c.tool]}@{c.turn}" + "+ask" * asked + "+locked" * locked + "+answer" * answer
                       for c, (asked, locked, answer) in zip(task.calls, call_flags(task)))
        pos = {c.id: i for i, c in enumerate(task.calls)}
        edges = tuple(sorted((pos[d.src], pos[d.dst], self._role[(task.calls[pos[d.dst]].tool, d.param)])
                             for d in task.deps))
        return labels, edges

    def _matches(self, parent: _Parent, variant: TaskSpec, tier: int | None) -> bool:
        """The variant's structure matches the parent's at ``tier`` (0 and 1: under the call
        correspondence, which is then an explicit isomorphism of the labelled DAGs)."""
        if tier is None:
            return True
        task = parent.task
        if tier == 2:
            return (len(variant.calls) == len(task.calls) and len(variant.turns) == len(task.turns)
                    and task_depth(variant) == task_depth(task))
        labels, edges = self._labels(variant)
        p_labels, p_edges = parent.labels
        if tier == 1:
            labels, p_labels = tuple(map(_relax, labels)), tuple(map(_relax, p_labels))
        return (labels == p_labels and edges == p_edges and variant.turn_types() == task.turn_types()
                and len(variant.distractors) == len(task.distractors))

    # -- embedding search ------------------------------------------------------------------------
    def _plan(self, parent: TaskSpec, tier: int) -> _Plan:
        labels, edges = self._labels(parent)
        if tier == 2:
            labels, edges = tuple(ANY for _ in labels), tuple((s, d, ANY) for s, d, _ in edges)
        elif tier == 1:
            labels = tuple(_skill_part(lab).split(":")[0] for lab in labels)
        else:
            labels = tuple(_skill_part(lab) for lab in labels)
        turns = tuple(c.turn for c in parent.calls)
        n = len(labels)
        adj: list[list[tuple[int, str, bool]]] = [[] for _ in range(n)]
        for s, d, role in edges:
            adj[d].append((s, role, True))
            adj[s].append((d, role, False))
        index = self.index[tier]
        size = [len(index.by_label.get(lab, ())) for lab in labels]
        order: list[int] = []
        placed: set[int] = set()
        for _ in range(n):  # each round places one connected component, breadth first
            rest = [i for i in range(n) if i not in placed]
            if not rest:
                break
            queue = [min(rest, key=lambda i: (size[i], i))]
            placed.add(queue[0])
            while queue:
                i = queue.pop(0)
                order.append(i)
                for j in sorted({j for j, _, _ in adj[i]} - placed, key=lambda j: (size[j], j)):
                    placed.add(j)
                    queue.append(j)
        strict = self._strict(parent)
        key = (tier, labels, turns, edges, strict, len(parent.turns))
        return _Plan(key, labels, turns, edges, tuple(order), tuple(tuple(a) for a in adj), strict,
                     tuple(call_flags(parent)), len(parent.turns))

    def _strict(self, task: TaskSpec) -> bool:
        tools = [c.tool for c in task.calls]
        pos = {c.id: i for i, c in enumerate(task.calls)}
        deps = [(pos[d.src], pos[d.dst], self.suite.tools[tools[pos[d.dst]]].param(d.param).type) for d in task.deps]
        return self._clean(tools, deps)

    def _clean(self, tools: Sequence[str], deps: Sequence[tuple[int, int, str]]) -> bool:
        """No lookup fed by a call that consumes the looked-up entity's id (a loop), and no value
        type twice along one dependency chain (the sampler's rules)."""
        suite = self.suite
        for s, d, _ in deps:
            dst = suite.tools[tools[d]]
            if dst.kind == "lookup" and suite.entities[dst.entity].id_field in self.param_types[tools[s]]:
                return False
        into: dict[int, set[str]] = {}
        incoming: dict[int, list[tuple[int, str]]] = {}
        for s, d, vtype in deps:
            incoming.setdefault(d, []).append((s, vtype))
        for i in _topological(len(tools), [(s, d) for s, d, _ in deps]):
            acc: set[str] = set()
            for s, vtype in incoming.get(i, ()):
                if vtype in into[s]:
                    return False
                acc |= into[s] | {vtype}
            into[i] = acc
        return True

    def _embed(self, plan: _Plan, index: _EmbeddingIndex, rng: np.random.Generator
               ) -> tuple[list[str], list[tuple[int, int, str, str]]] | None:
        """A tool per node and a link per edge, by randomized backtracking with a fixed budget.

        When the search runs to completion without a result, no embedding exists: the plan
        is remembered as infeasible (a property of the plan alone, so determinism holds)."""
        n = len(plan.labels)
        assign: list[str | None] = [None] * n
        used: set[str] = set()
        budget = [self.config.search_budget]
        complete = [True]

        def candidates(node: int) -> Sequence[str]:
            cands: Sequence[str] | None = None
            label = plan.labels[node]
            for nbr, role, nbr_is_src in plan.adj[node]:
                t = assign[nbr]
                if t is None:
                    continue
                key = (t, role, label)
                if nbr_is_src:
                    opts, opt_set = index.succ.get(key, ()), index.succ_sets.get(key, frozenset())
                else:
                    opts, opt_set = index.pred.get(key, ()), index.pred_sets.get(key, frozenset())
                cands = opts if cands is None else [x for x in cands if x in opt_set]
            if cands is None:
                cands = index.by_label.get(label, ())
            return [x for x in cands if x not in used]

        def dfs(k: int) -> list[tuple[int, int, str, str]] | None:
            if k == n:
                return self._choose_links(plan, assign, rng, complete)  # type: ignore[arg-type]
            node = plan.order[k]
            cands = candidates(node)
            for j in (rng.permutation(len(cands)) if len(cands) > 1 else range(len(cands))):
                if budget[0] <= 0:
                    complete[0] = False
                    return None
                budget[0] -= 1
                t = cands[int(j)]
                assign[node] = t
                used.add(t)
                links = dfs(k + 1)
                if links is not None:
                    return links
                used.discard(t)
                assign[node] = None
            return None

        links = dfs(0)
        if links is None:
            if complete[0]:
                self._infeasible[plan.key] = None
                if len(self._infeasible) > self.config.plan_cache:
                    self._infeasible.popitem(last=False)
            return None
        return list(assign), links  # type: ignore[arg-type]

    def _choose_links(self, plan: _Plan, tools: Sequence[str], rng: np.random.Generator,
                      complete: list[bool]) -> list[tuple[int, int, str, str]] | None:
        """A ``(param, field)`` per edge: distinct parameters per call, (for strict plans) no
        loops and no value type twice along a chain, and a tool binding that no held-out task
        has (contamination is known before any value is drawn). Bounded number of combinations."""
        options = []
        for s, d, role in plan.edges:
            opts = (self.any_links if role == ANY else self.links).get((tools[s], tools[d], role), ())
            if not opts:
                return None
            options.append([opts[int(j)] for j in rng.permutation(len(opts))] if len(opts) > 1 else list(opts))
        total = 1
        for o in options:
            total *= len(o)
        if total > self.config.link_combinations:
            complete[0] = False
        for combo in itertools.islice(itertools.product(*options), self.config.link_combinations):
            params = [(d, p) for (s, d, _), (p, _, _) in zip(plan.edges, combo)]
            if len(set(params)) != len(params):
                continue
            if plan.strict and not self._clean(tools, [(s, d, vt) for (s, d, _), (_, _, vt) in zip(plan.edges, combo)]):
                continue
            held = self.decontaminator
            if held.bindings and not held.values and binding_from_parts(
                    plan.n_turns, tools, plan.turns, plan.flags,
                    [(s, d, p) for (s, d, _), (p, _, _) in zip(plan.edges, combo)]) in held.bindings:
                self.stats["rejected_contaminated"] += 1
                self.stats["rejected_contaminated_binding"] += 1
                continue
            return [(s, d, p, f) for (s, d, _), (p, f, _) in zip(plan.edges, combo)]
        return None

    # -- building a variant ----------------------------------------------------------------------
    def _parent_deps(self, task: TaskSpec) -> list[tuple[int, int, str, str]]:
        pos = {c.id: i for i, c in enumerate(task.calls)}
        return [(pos[d.src], pos[d.dst], d.param, d.field) for d in task.deps]

    def _world_seed(self, parent: TaskSpec, rng: np.random.Generator) -> int:
        cfg = self.config
        k = int(rng.integers(0, cfg.world_pool))
        seed = cfg.world_offset + k
        if seed == parent.world_seed and cfg.world_pool > 1:
            seed = cfg.world_offset + (k + 1) % cfg.world_pool
        return seed

    def _assemble(self, parent: TaskSpec, draft: Draft, outputs: dict[int, dict[str, Any]], world_seed: int,
                  rng: np.random.Generator, pos: dict[str, int], same: bool) -> TaskSpec | None:
        """Calls, dependencies and the parent's turn types carried over to the instantiated draft.

        ``same`` keeps the parent's choices where they still apply (withheld parameter, answer
        field, distractors); otherwise they are drawn anew."""
        ids = [c.id for c in parent.calls]
        calls = tuple(Call(ids[i], node.tool, dict(node.args), node.turn) for i, node in enumerate(draft.nodes))
        deps = tuple(sorted((Dep(ids[s], ids[d], p, f) for s, d, p, f in draft.deps), key=lambda d: (d.dst, d.param)))
        answer = None
        if parent.answer is not None:
            i = pos[parent.answer.call]
            fields = self.values.answer_fields(draft, i, outputs)
            if not fields:
                return None
            f = parent.answer.field if same and parent.answer.field in fields \
                else fields[int(rng.integers(0, len(fields)))]
            answer = Answer(ids[i], f, format_value(outputs[i][f]))
        bound = {(d.dst, d.param) for d in deps}
        tool_pos = {c.tool: i for i, c in enumerate(parent.calls)}
        turns = []
        for t in parent.turns:
            withheld: list[tuple[str, str]] = []
            for cid, p in t.withheld:
                call = calls[pos[cid]]
                facts = [q for q in call.args if (cid, q) not in bound and (cid, q) not in withheld]
                if not facts:
                    return None
                q = p if same and p in facts else facts[int(rng.integers(0, len(facts)))]
                withheld.append((cid, q))
            locked = []
            for tool in t.locked:
                if tool not in tool_pos:
                    return None
                locked.append(calls[tool_pos[tool]].tool)
            turns.append(Turn("", tuple(locked), tuple(withheld)))
        k = len(parent.distractors)
        if same:
            distractors = tuple(t for t in parent.distractors if t not in {c.tool for c in calls})
        else:
            distractors = self._distractors(calls, k, rng)
        if len(distractors) != k:
            return None
        return TaskSpec(parent.id, world_seed, calls, deps, tuple(turns), distractors, answer, {})

    def _distractors(self, calls: Sequence[Call], k: int, rng: np.random.Generator) -> tuple[str, ...]:
        """Like the sampler's: ``k`` unused tools, preferring the task's domains and kinds."""
        if k <= 0:
            return ()
        similar_bits, free_bits = 0, (1 << len(self.allowed)) - 1
        for c in calls:
            similar_bits |= self._similar[c.tool]
            free_bits &= ~self._bit.get(c.tool, 0)
        similar = bit_positions(similar_bits & free_bits)
        if len(similar) < k:
            similar = bit_positions(free_bits)
        if len(similar) < k:
            return ()
        for i in range(k):  # partial Fisher-Yates: k distinct picks
            j = i + int(rng.integers(0, len(similar) - i))
            similar[i], similar[j] = similar[j], similar[i]
        return tuple(self.allowed[j] for j in sorted(similar[:k]))

    def _size_sampler(self, parent: TaskSpec, depth: int) -> TaskSampler:
        kinds = parent.turn_types()
        key = (depth, len(parent.calls), len(parent.turns), len(parent.distractors), parent.answer is not None,
               any("missing_param" in k for k in kinds), any("missing_tool" in k for k in kinds))
        sampler = self._size_samplers.get(key)
        if sampler is None:
            _, n_calls, n_turns, n_distract, answer, missing_param, missing_tool = key
            cfg = SamplerConfig(depth=(depth, depth), extra_calls=(0, max(0, n_calls - depth)),
                                user_turns=(n_turns, n_turns),
                                missing_param=float(missing_param), missing_tool=float(missing_tool),
                                distractors=(n_distract, n_distract), answer=float(answer),
                                world_pool=self.config.world_pool, world_offset=self.config.world_offset,
                                tools=self.allowed, max_attempts=20)
            sampler = TaskSampler(self.suite, cfg, seed=0, id_prefix="sized")
            self._size_samplers[key] = sampler
            if len(self._size_samplers) > 64:
                self._size_samplers.popitem(last=False)
        return sampler

    @staticmethod
    def _membership(exclude: Collection[TaskSpec]) -> Callable[[bytes], bool]:
        if isinstance(exclude, TaskIndex):
            return exclude.has_key
        keys = {content_key(t) for t in exclude}
        return keys.__contains__


class NaiveResampler(Resampler):
    """The ablation: ignores structure. Each variant is any sampler task of similar size
    (within one call of the parent), then checked like a skill-aligned one (oracle,
    duplicates, contamination). Variants carry ``tier: None`` and ``resampler: "naive"``."""

    kind = "naive"

    def __init__(self, suite: Suite, *, decontaminate: Sequence[TaskSpec] | Decontaminator = (),
                 config: ResamplerConfig = ResamplerConfig(), sampler_config: SamplerConfig | None = None) -> None:
        super().__init__(suite, decontaminate=decontaminate, config=config)
        base = sampler_config or SamplerConfig(depth=(1, 6), extra_calls=(0, 3), user_turns=(1, 3), missing_param=0.2,
                                               missing_tool=0.1, distractors=(0, 4), cross_domain=0.3)
        self.sampler = TaskSampler(suite, replace(base, tools=self.allowed, world_pool=config.world_pool,
                                                  world_offset=config.world_offset), seed=0, id_prefix="naive")
        self.stats["produced_naive"] = 0

    def resample(self, task: TaskSpec, n: int, rng: np.random.Generator,
                 exclude: Collection[TaskSpec] = ()) -> list[TaskSpec]:
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        self.stats["calls"] += 1
        seen = self._membership(exclude)
        local = {content_key(task)}
        out: list[TaskSpec] = []
        size = len(task.calls)
        for _ in range(n * self.config.attempts):
            if len(out) >= n:
                break
            self.stats["attempts"] += 1
            candidate = None
            for _ in range(self.config.size_samples):
                t = self.sampler.sample(int(rng.integers(0, 2**31 - 1)))
                if abs(len(t.calls) - size) <= 1:
                    candidate = t
                    break
            if candidate is None:
                self.stats["failed_instantiation"] += 1
                continue
            variant, key = self._finish(task, candidate, None, rng)
            if self._accept(_Parent(task, {}, (), []), variant, key, None, seen, local):
                out.append(variant)
                self.stats["produced"] += 1
                self.stats["produced_naive"] += 1
        return out


# -- helpers -------------------------------------------------------------------------------------
def _skill_part(label: str) -> str:
    return label.split("@", 1)[0]


def _relax(label: str) -> str:
    skill, rest = label.split("@", 1)
    return skill.split(":")[0] + "@" + rest



def _topological(n: int, edges: Sequence[tuple[int, int]]) -> list[int]:
    preds: dict[int, set[int]] = {}
    for s, d in edges:
        preds.setdefault(d, set()).add(s)
    order: list[int] = []
    done: set[int] = set()
    for _ in range(n + 1):  # bounded passes over a DAG
        progressed = False
        for i in range(n):
            if i not in done and preds.get(i, set()) <= done:
                order.append(i)
                done.add(i)
                progressed = True
        if not progressed:
            break
    return order
