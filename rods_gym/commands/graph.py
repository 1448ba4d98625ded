"""``rods graph``: API dependency graph statistics and exports."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..graph import export_graph, graph_stats
from ..sampler import SamplerConfig, TaskSampler
from ..signature import compute_signature
from ..suite import Suite


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("graph", help="print API-graph statistics; export JSON, GraphML and PNG")
    p.add_argument("--out", default=None, help="directory for api_graph.{json,graphml,png}")
    p.add_argument("--domains", default=None, help="domain directory (default: the built-in domains)")
    p.add_argument("--samples", type=int, default=300, help="tasks sampled per depth to count distinct signatures")
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")
    p.add_argument("--bfcl", action="store_true",
                   help="the BFCL-V3 multi-turn classes' API graph instead (needs bfcl-eval: README, BFCL)")
    p.set_defaults(func=run)


def run_bfcl(args: argparse.Namespace) -> int:
    """Statistics of the BFCL classes' API graph (``rods_gym.bfcl.taskmodel.api_graph``); with ``--out`` its
    node-link JSON, GraphML and a PNG."""
    import networkx as nx

    from ..bfcl.taskmodel import api_graph, draw_api_graph

    try:
        graph = api_graph()
    except ImportError as exc:  # bfcl-eval missing or without its data: the message says how to install it
        print(f"rods graph --bfcl: error: {exc}", file=sys.stderr)
        return 2
    classes = sorted({c for _, c in graph.nodes(data="cls")})
    stats = {"functions": graph.number_of_nodes(), "edges": graph.number_of_edges(), "classes": classes,
             "cross_class_edges": sum(graph.nodes[u]["cls"] != graph.nodes[v]["cls"] for u, v in graph.edges()),
             "isolated_functions": sum(1 for n in graph if graph.degree(n) == 0)}
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        for key, value in stats.items():
            print(f"{key.replace('_', ' '):20s}{', '.join(value) if isinstance(value, list) else value}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "bfcl_api_graph.json").write_text(json.dumps(nx.node_link_data(graph, edges="links"), indent=1))
        nx.write_graphml(graph, out / "bfcl_api_graph.graphml")
        draw_api_graph(str(out / "bfcl_api_graph.png"))
        for name in ("json", "graphml", "png"):
            print(f"wrote {name:8s} {out / f'bfcl_api_graph.{name}'}", file=sys.stderr if args.json else sys.stdout)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.samples < 0:
        print(f"rods graph: error: --samples must be >= 0, got {args.samples}", file=sys.stderr)
        return 2
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        print(f"rods graph: error: --out {args.out} is a file; give a directory (it is created if missing)",
              file=sys.stderr)
        return 2
    if args.bfcl:
        return run_bfcl(args)
    suite = Suite.load(args.domains)
    stats = graph_stats(suite.graph)
    per_depth = {}
    for depth in range(1, 7):
        sampler = TaskSampler(suite, SamplerConfig(depth=(depth, depth), extra_calls=(0, 2)), seed=depth)
        sigs = set()
        for t in sampler.sample_many(args.samples):
            sigs.add(compute_signature(t, suite).wl_hash)
        per_depth[depth] = len(sigs)
    stats["sampled_signatures_per_depth"] = per_depth
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        print(f"tools               {stats['tools']}")
        print(f"edges               {stats['edges']} (between {stats['tool_pairs']} tool pairs)")
        print(f"domains             {stats['domains']}")
        print(f"cross-domain edges  {stats['cross_domain_edges']} (between {stats['cross_domain_tool_pairs']} tool pairs; "
              "the PNG draws them in red)")
        print(f"longest chain       {stats['longest_chain']} calls")
        print("tools per kind      " + ", ".join(f"{k} {v}" for k, v in stats["tools_per_kind"].items()))
        print("chain shapes        " + ", ".join(f"d{d}: {n}" for d, n in stats["chain_shapes_per_depth"].items())
              + "   (distinct skill-labelled dependency chains per depth)")
        print("sampled DAG shapes  " + ", ".join(f"d{d}: {n}" for d, n in per_depth.items())
              + f"   (distinct signatures among {args.samples} sampled tasks per depth)")
    if args.out:
        paths = export_graph(suite.graph, args.out)
        for kind, path in paths.items():  # with --json, stdout holds the JSON alone
            print(f"wrote {kind:8s} {path}", file=sys.stderr if args.json else sys.stdout)
    return 0
