"""The API dependency graph, derived from the domains (never written by hand).

A node per tool. An edge ``A -> B`` with key = B's parameter name when a value A returns
has the value type that parameter consumes. Only *linkable* value types (ids, contacts,
names, amounts, dates, places, codes) make edges; free text and categories never flow
between tools. An output whose type A also consumes (an update echoing its id) is not a
port. Types are global, so shared types (email, phone...) make cross-domain edges.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping

import networkx as nx

from .domain import EntitySpec, ToolSpec, ValueType


def skill_of(tool: ToolSpec, entities: Mapping[str, EntitySpec]) -> str:
    """A tool's skill: its kind crossed with the role of the entity it acts on."""
    return f"{tool.kind}:{entities[tool.entity].role}"


def output_ports(tool: ToolSpec, types: Mapping[str, ValueType]) -> list[tuple[str, str]]:
    consumed = {p.type for p in tool.params}
    return [(name, t) for name, t in tool.outputs if types[t].linkable and t not in consumed]


def build_api_graph(tools: Iterable[ToolSpec], types: Mapping[str, ValueType],
                    entities: Mapping[str, EntitySpec]) -> nx.MultiDiGraph:
    tools = list(tools)
    g = nx.MultiDiGraph()
    consumers: dict[str, list[tuple[ToolSpec, str]]] = {}
    for t in tools:
        g.add_node(t.name, domain=t.domain, kind=t.kind, entity=t.entity, skill=skill_of(t, entities),
                   mutating=t.mutating)
        for p in t.params:
            if types[p.type].linkable:
                consumers.setdefault(p.type, []).append((t, p.name))
    for a in tools:
        by_type: dict[str, list[str]] = {}
        for name, vtype in output_ports(a, types):
            by_type.setdefault(vtype, []).append(name)
        for vtype, fields in by_type.items():
            for b, param in consumers.get(vtype, ()):
                if b.name == a.name:
                    continue
                g.add_edge(a.name, b.name, key=param, type=vtype, fields=tuple(fields),
                           role=types[vtype].role, cross_domain=a.domain != b.domain)
    return g


def chain_shapes(g: nx.MultiDiGraph, max_depth: int = 6, limit: int = 200_000) -> dict[int, int]:
    """Distinct skill-labelled dependency chains per depth (calls), never reusing a value type.

    A chain ``t1 -> t2 -> ... -> td`` follows edges whose value types are all distinct (a
    chain that feeds a type back into itself is not a meaningful task). The enumeration is
    bounded by ``limit`` visited partial chains.
    """
    shapes: dict[int, set[tuple[str, ...]]] = {d: set() for d in range(1, max_depth + 1)}
    budget = [limit]
    succ: dict[str, list[tuple[str, str, str]]] = {
        n: [(v, d["type"], d["role"]) for _, v, d in g.out_edges(n, data=True)] for n in g
    }

    def walk(node: str, labels: tuple[str, ...], used: frozenset[str]) -> None:
        budget[0] -= 1
        depth = (len(labels) + 1) // 2
        shapes[depth].add(labels)
        if depth >= max_depth or budget[0] <= 0:
            return
        for nxt, vtype, role in succ[node]:
            if vtype not in used:
                walk(nxt, labels + (role, g.nodes[nxt]["skill"]), used | {vtype})

    for n in g:
        walk(n, (g.nodes[n]["skill"],), frozenset())
    return {d: len(s) for d, s in shapes.items()}


def longest_chain(g: nx.MultiDiGraph, max_depth: int = 12, limit: int = 200_000) -> int:
    """Length in calls of the longest type-distinct dependency chain (bounded search)."""
    best = [1 if len(g) else 0]
    budget = [limit]
    succ = {n: [(v, d["type"]) for _, v, d in g.out_edges(n, data=True)] for n in g}

    def walk(node: str, depth: int, used: frozenset[str], seen: frozenset[str]) -> None:
        budget[0] -= 1
        best[0] = max(best[0], depth)
        if depth >= max_depth or budget[0] <= 0:
            return
        for nxt, vtype in succ[node]:
            if vtype not in used and nxt not in seen:
                walk(nxt, depth + 1, used | {vtype}, seen | {nxt})

    for n in g:
        walk(n, 1, frozenset(), frozenset({n}))
    return best[0]


def edge_counts(g: nx.MultiDiGraph) -> dict[str, int]:
    """Edges (one per producer, consumer and consumer parameter) and the tool pairs they join (what a drawing
    shows as one arrow), all and cross-domain: the one count both ``rods graph``'s statistics and its PNG use."""
    pairs = {(u, v) for u, v in g.edges()}
    return {"edges": g.number_of_edges(), "tool_pairs": len(pairs),
            "cross_domain_edges": sum(1 for *_, d in g.edges(data=True) if d["cross_domain"]),
            "cross_domain_tool_pairs": sum(1 for u, v in pairs if g.nodes[u]["domain"] != g.nodes[v]["domain"])}


def graph_title(g: nx.MultiDiGraph) -> str:
    """The PNG's title, in the words and numbers of the printed statistics (``edge_counts``)."""
    c = edge_counts(g)
    return (f"API dependency graph: {g.number_of_nodes()} tools, {c['edges']} edges (between {c['tool_pairs']} tool "
            f"pairs), {c['cross_domain_edges']} cross-domain edges (between {c['cross_domain_tool_pairs']} tool "
            "pairs, in red)")


def graph_stats(g: nx.MultiDiGraph) -> dict[str, Any]:
    kinds = Counter(d["kind"] for _, d in g.nodes(data=True))
    counts = edge_counts(g)
    return {
        "tools": g.number_of_nodes(),
        "edges": counts["edges"],
        "tool_pairs": counts["tool_pairs"],
        "domains": len({d["domain"] for _, d in g.nodes(data=True)}),
        "cross_domain_edges": counts["cross_domain_edges"],
        "cross_domain_tool_pairs": counts["cross_domain_tool_pairs"],
        "tools_per_kind": dict(sorted(kinds.items())),
        "longest_chain": longest_chain(g),
        "chain_shapes_per_depth": chain_shapes(g),
    }


def graphml_value(value: Any) -> bool | int | float | str:
    """An attribute as GraphML can type it: booleans and numbers kept (``read_graphml`` gives them back
    typed), sequences joined with commas, anything else as its text."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(str(v) for v in value)
    return str(value)


def export_graph(g: nx.MultiDiGraph, out_dir: str | Path) -> dict[str, Path]:
    """Write node-link JSON, GraphML and a PNG drawing; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "api_graph.json", "graphml": out / "api_graph.graphml", "png": out / "api_graph.png"}
    data = nx.node_link_data(g, edges="edges")
    paths["json"].write_text(json.dumps(data, indent=1, default=list))
    flat = nx.MultiDiGraph()
    flat.add_nodes_from((n, {k: graphml_value(v) for k, v in d.items()}) for n, d in g.nodes(data=True))
    flat.add_edges_from((u, v, k, {a: graphml_value(b) for a, b in d.items()})
                        for u, v, k, d in g.edges(keys=True, data=True))
    nx.write_graphml(flat, paths["graphml"])
    draw_graph(g, paths["png"])
    return paths


def draw_graph(g: nx.MultiDiGraph, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    domains = sorted({d["domain"] for _, d in g.nodes(data=True)})
    groups = [[n for n, d in g.nodes(data=True) if d["domain"] == dom] for dom in domains]
    simple = nx.DiGraph(g)
    pos = nx.shell_layout(simple, nlist=None) if len(groups) < 2 else _domain_layout(groups)
    cmap = plt.get_cmap("tab10")
    colors = [cmap(domains.index(g.nodes[n]["domain"]) % 10) for n in simple]
    fig, ax = plt.subplots(figsize=(16, 16))
    cross = [(u, v) for u, v in simple.edges if g.nodes[u]["domain"] != g.nodes[v]["domain"]]
    local = [(u, v) for u, v in simple.edges if g.nodes[u]["domain"] == g.nodes[v]["domain"]]
    nx.draw_networkx_edges(simple, pos, edgelist=local, ax=ax, alpha=0.25, arrowsize=6, width=0.6)
    nx.draw_networkx_edges(simple, pos, edgelist=cross, ax=ax, alpha=0.5, arrowsize=6, width=0.8, edge_color="tab:red")
    nx.draw_networkx_nodes(simple, pos, ax=ax, node_size=120, node_color=colors)
    nx.draw_networkx_labels(simple, pos, ax=ax, font_size=6)
    for i, dom in enumerate(domains):
        ax.scatter([], [], color=cmap(i % 10), label=dom)
    ax.legend(loc="upper right")
    ax.set_title(graph_title(g))
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _domain_layout(groups: list[list[str]]) -> dict[str, Any]:
    import numpy as np

    pos = {}
    k = len(groups)
    for i, group in enumerate(groups):
        angle = 2 * np.pi * i / k
        cx, cy = 3 * np.cos(angle), 3 * np.sin(angle)
        for j, n in enumerate(sorted(group)):
            a = 2 * np.pi * j / max(len(group), 1)
            pos[n] = np.array([cx + np.cos(a), cy + np.sin(a)])
    return pos
