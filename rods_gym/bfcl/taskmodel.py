"""BFCL tasks in the suite's task model: call DAGs as :class:`rods_gym.task.TaskSpec`, signatures, API graph.

Each ground-truth call is a node ``c<k>`` with its turn. An edge is **data flow** (label ``data``) where an
argument's value was returned by an earlier call (a leaf of its JSON result) and the user never stated it in
the turns so far; a call with no data-flow source in its own turn gets an **order** edge (label ``order``)
from the last call of the previous turn that has calls, so the turns stay sequential while independent calls
of one turn are siblings. Node labels are ``<function>@<turn>`` plus ``+ask`` for the calls of the turn after a
missing-parameter turn and ``+locked`` for the revealed function's calls (the suite's role flags); turn types are
``missing_param``/``missing_tool`` for the turns with no ground-truth calls. The signature is the suite's
:class:`rods_gym.signature.Signature` over this DAG (same WL hashing, depth, widths), so the boundary detector,
the pool and the decontaminator's signature keys work on BFCL tasks.

The API dependency graph (:func:`api_graph`) links function ``f`` to ``g`` when a documented response field of
``f`` has the name and type of a parameter of ``g`` (``ticket_id`` of ``create_ticket`` -> ``get_ticket``).
"""

from __future__ import annotations

import json
import warnings
from functools import lru_cache
from typing import Any, Iterator

import networkx as nx

from ..signature import WL_ITERATIONS, Signature, _simple
from ..task import Call as SpecCall
from ..task import Dep, TaskSpec, Turn
from .backend import Backend
from .data import FUNC_DOC_FILES, BFCLTask, func_docs


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v, path)
    else:
        yield path, value


def _linkable(value: Any) -> bool:
    """Values specific enough that equality means flow (not booleans, small numbers, short strings)."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, (int, float)):
        return abs(value) >= 10
    return isinstance(value, str) and len(value) >= 3


def _result_leaves(text: str) -> list[tuple[str, Any]]:
    try:
        obj = json.loads(text)
    except ValueError:
        return []
    return [(p, v) for p, v in _leaves(obj) if _linkable(v)]


def turn_kind(task: BFCLTask, turn: int) -> str:
    if task.ground_truth[turn]:
        return "plain"
    return "missing_tool" if task.category == "miss_func" else "missing_param"


@lru_cache(maxsize=4096)
def to_taskspec(task: BFCLTask) -> TaskSpec:
    """The task's ground truth as a TaskSpec call DAG (``meta``: the BFCL id, category and edge kinds)."""
    backend = Backend(task)
    calls: list[SpecCall] = []
    deps: list[Dep] = []
    produced: list[tuple[str, str, Any]] = []  # (call id, field path, value) of earlier results
    stated = ""
    last_of_turn: str | None = None
    order: list[str] = []
    for turn, turn_calls in enumerate(task.ground_truth):
        stated += " " + task.user_text(turn)
        first_in_turn = len(calls)
        for call in turn_calls:
            cid = f"c{len(calls)}"
            sources = []
            for param, value in call.args.items():
                for _, v in _leaves(value):
                    if not _linkable(v) or str(v) in stated:
                        continue
                    hit = next(((src, p) for src, p, pv in reversed(produced) if pv == v), None)
                    if hit is not None and (hit[0], param) not in {(d.src, d.param) for d in deps if d.dst == cid}:
                        deps.append(Dep(hit[0], cid, param, hit[1]))
                        sources.append(hit[0])
            own_turn = {f"c{k}" for k in range(first_in_turn, len(calls))}
            if last_of_turn is not None and not own_turn.intersection(sources):
                deps.append(Dep(last_of_turn, cid, "", "order"))
                order.append(cid)
            calls.append(SpecCall(cid, call.name, dict(call.args), turn))
            result = backend.execute(call.name, call.args)
            produced.extend((cid, p, v) for p, v in _result_leaves(result))
        if turn_calls:
            last_of_turn = calls[-1].id
    turns = []
    for turn in range(task.n_turns):
        kind = turn_kind(task, turn)
        withheld = (("", "?"),) if kind == "missing_param" else ()
        locked = tuple(task.missed_function.get(turn, ())) if kind == "missing_tool" else ()
        turns.append(Turn(task.user_text(turn), locked=locked, withheld=withheld))
    return TaskSpec(id=task.id, world_seed=0, calls=tuple(calls), deps=tuple(deps), turns=tuple(turns),
                    meta={"bfcl_id": task.id, "category": task.category, "order_edges": tuple(order)})


def labelled_dag(spec: TaskSpec) -> nx.MultiDiGraph:
    g = nx.MultiDiGraph()
    after_ask = {i + 1 for i, t in enumerate(spec.turns) if t.withheld}
    revealed = {name for t in spec.turns for name in t.locked}
    for c in spec.calls:
        label = f"{c.tool}@{c.turn}"
        if c.turn in after_ask:
            label += "+ask"
        if c.tool in revealed:
            label += "+locked"
        g.add_node(c.id, label=label)
    for d in spec.deps:
        g.add_edge(d.src, d.dst, label="order" if d.field == "order" else "data")
    return g


@lru_cache(maxsize=4096)
def bfcl_signature(task: BFCLTask) -> Signature:
    """The suite's structural signature of a BFCL task's call DAG."""
    spec = to_taskspec(task)
    g = labelled_dag(spec)
    level: dict[str, int] = {}
    for n in nx.topological_sort(g):
        level[n] = 1 + max((level[p] for p in g.predecessors(n)), default=0)
    depth = max(level.values(), default=0)
    widths = tuple(sum(1 for v in level.values() if v == k) for k in range(1, depth + 1))
    with warnings.catch_warnings():  # as rods_gym.signature: networkx >= 3.5 hashes, pinned
        warnings.simplefilter("ignore", UserWarning)
        wl = nx.weisfeiler_lehman_graph_hash(_simple(g), node_attr="label", edge_attr="label", iterations=WL_ITERATIONS)
    turn_types = tuple((turn_kind(task, t),) for t in range(task.n_turns))
    return Signature(wl, depth, widths, len(spec.calls), task.n_turns, turn_types, 0, g)


def task_signature(task: BFCLTask) -> str:
    """The signature's WL hash (``info["signature"]``, as the suite's envs report it)."""
    return bfcl_signature(task).wl_hash


def api_graph() -> nx.MultiDiGraph:
    """Functions of the eight BFCL classes (nodes ``Class.function``, attribute ``cls``) with an edge ``f -> g``
    (attribute ``param``) for each response field of ``f`` whose name and type match a parameter of ``g``."""
    g = nx.MultiDiGraph()
    outputs: dict[str, dict[str, str]] = {}
    inputs: dict[str, dict[str, str]] = {}
    for cls in FUNC_DOC_FILES:
        for doc in func_docs(cls):
            node = f"{cls}.{doc['name']}"
            g.add_node(node, cls=cls)
            inputs[node] = {k: v.get("type", "") for k, v in doc["parameters"].get("properties", {}).items()}
            response = doc.get("response", {}).get("properties", {})
            outputs[node] = {k: v.get("type", "") for k, v in response.items()}
    for src, outs in outputs.items():
        for dst, ins in inputs.items():
            if src == dst:
                continue
            for name, vtype in outs.items():
                if ins.get(name) == vtype:
                    g.add_edge(src, dst, param=name)
    return g


def draw_api_graph(path: str) -> None:
    """Draw :func:`api_graph` to an image (matplotlib), classes coloured, isolated functions left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g = api_graph()
    g = g.subgraph([n for n in g if g.degree(n) > 0]).copy()
    classes = sorted({d["cls"] for _, d in g.nodes(data=True)})
    colours = {c: plt.cm.tab10(i) for i, c in enumerate(classes)}
    fig, ax = plt.subplots(figsize=(14, 10))
    pos = nx.spring_layout(g, seed=0, k=0.6)
    nx.draw_networkx_nodes(g, pos, ax=ax, node_size=120, node_color=[colours[g.nodes[n]["cls"]] for n in g])
    nx.draw_networkx_edges(g, pos, ax=ax, alpha=0.3, arrowsize=8)
    nx.draw_networkx_labels(g, pos, ax=ax, labels={n: n.split(".", 1)[1] for n in g}, font_size=6)
    for c in classes:
        ax.scatter([], [], color=colours[c], label=c)
    ax.legend(fontsize=7, loc="upper left")
    ax.set_axis_off()
    ax.set_title(f"BFCL API dependency graph: {g.number_of_nodes()} functions, {g.number_of_edges()} edges")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
