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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.samples < 0:
        print(f"rods graph: error: --samples must be >= 0, got {args.samples}", file=sys.stderr)
        return 2
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        print(f"rods graph: error: --out {args.out} is a file; give a directory (it is created if missing)",
              file=sys.stderr)
        return 2
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
        print(f"edges               {stats['edges']}")
        print(f"domains             {stats['domains']}")
        print(f"cross-domain edges  {stats['cross_domain_edges']}")
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
