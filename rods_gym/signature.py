"""Structural identity of a task (README, "Resampling and synthesis").

The labelled call DAG has a node per call labelled ``skill@turn`` plus its role flags
(``+ask`` when one of its facts is withheld, ``+locked`` when its tool is locked in its
turn, ``+answer`` when the answer is read from it) and an edge per dependency labelled with
the role of the value type that flows. Two tasks are structurally equal when their scalar
summaries match and their labelled DAGs are isomorphic; the Weisfeiler-Lehman hash is the
bucket key, the isomorphism check settles collisions.

networkx changed its WL hashes in 3.5; the version range is pinned in pyproject.toml and
``tests/test_signature.py`` holds known hashes so a drift is caught.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import networkx as nx
from networkx.algorithms import isomorphism as iso

from .task import TaskSpec

if TYPE_CHECKING:
    from .suite import Suite

WL_ITERATIONS = 3


@dataclass(frozen=True, eq=False)
class Signature:
    wl_hash: str
    depth: int
    widths: tuple[int, ...]
    n_calls: int
    n_turns: int
    turn_types: tuple[tuple[str, ...], ...]
    n_distractors: int
    graph: nx.MultiDiGraph

    @property
    def key(self) -> tuple:
        """Bucket key: equal for structurally equal tasks (collisions possible, see :meth:`same`)."""
        return (self.wl_hash, self.depth, self.widths, self.n_calls, self.n_turns, self.turn_types, self.n_distractors)

    def same(self, other: "Signature") -> bool:
        """Exact structural equality: same bucket key and isomorphic labelled DAGs."""
        if self.key != other.key:
            return False
        return nx.is_isomorphic(self.graph, other.graph, node_match=iso.categorical_node_match("label", None),
                                edge_match=iso.categorical_multiedge_match("label", None))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Signature) and self.same(other)

    def __hash__(self) -> int:
        return hash(self.key)

    def summary(self) -> dict:
        return {"wl_hash": self.wl_hash, "depth": self.depth, "widths": list(self.widths), "n_calls": self.n_calls,
                "n_turns": self.n_turns, "turn_types": [list(t) for t in self.turn_types],
                "n_distractors": self.n_distractors}


def labelled_dag(task: TaskSpec, skills: dict[str, str]) -> nx.MultiDiGraph:
    g = nx.MultiDiGraph()
    locked = {(i, tool) for i, t in enumerate(task.turns) for tool in t.locked}
    asked = {cid for t in task.turns for cid, _ in t.withheld}
    for c in task.calls:
        label = f"{skills[c.tool]}@{c.turn}"
        if c.id in asked:
            label += "+ask"
        if (c.turn, c.tool) in locked:
            label += "+locked"
        if task.answer is not None and task.answer.call == c.id:
            label += "+answer"
        g.add_node(c.id, label=label)
    return g


def _simple(g: nx.MultiDiGraph) -> nx.DiGraph:
    """WL hashing needs a simple graph: parallel edges merge into one with their labels joined."""
    s = nx.DiGraph()
    s.add_nodes_from(g.nodes(data=True))
    for u, v, d in g.edges(data=True):
        if s.has_edge(u, v):
            s[u][v]["label"] = "|".join(sorted(s[u][v]["label"].split("|") + [d["label"]]))
        else:
            s.add_edge(u, v, label=d["label"])
    return s


def compute_signature(task: TaskSpec, suite: "Suite") -> Signature:
    g = labelled_dag(task, suite.skills)
    tools = {c.id: c.tool for c in task.calls}
    for d in task.deps:
        role = suite.types[suite.tools[tools[d.dst]].param(d.param).type].role
        g.add_edge(d.src, d.dst, label=role)
    level: dict[str, int] = {}
    for n in nx.topological_sort(g):
        level[n] = 1 + max((level[p] for p in g.predecessors(n)), default=0)
    depth = max(level.values(), default=0)
    widths = tuple(sum(1 for v in level.values() if v == k) for k in range(1, depth + 1))
    with warnings.catch_warnings():  # networkx warns that directed hashes changed in 3.5; we pin >= 3.5
        warnings.simplefilter("ignore", UserWarning)
        wl = nx.weisfeiler_lehman_graph_hash(_simple(g), node_attr="label", edge_attr="label", iterations=WL_ITERATIONS)
    return Signature(wl, depth, widths, len(task.calls), len(task.turns), task.turn_types(),
                     len(task.distractors), g)
