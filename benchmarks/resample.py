"""Speed and quality of the skill-aligned resampler, and of the naive one (the ablation).

    python benchmarks/resample.py                       # prints a Markdown report
    python benchmarks/resample.py --out /tmp/resample.md --json runs/resample.json   # then copy into benchmarks/RESULTS.md (section "resample")

Seeds: the ``train`` split (the 400 seeds) and, for decontamination, ``dev``+``test``+``ood``
with the OOD split's held-out tools excluded; when the splits are not built, sampler
stand-ins (medium difficulty) are used and the report says so.

Measured:

1. **Speed at tier 0**: a resampler restricted to exact matches makes 5 variants of every
   seed; variants per second of process CPU time (and of wall time), per depth. Worlds are
   generated (and cached) before timing; their one-off cost is reported apart.
2. **Quality** over 10,000 variants grown from the seeds by 10,000 independent calls
   (parent drawn uniformly, one variant each, *no* exclusion set, so duplicates are possible
   and counted): share per tier, signature fidelity per tier (tier 0: ``Signature.same`` as
   the parent; tier 1: isomorphic with skills relaxed to kinds; tier 2: same depth, calls and
   turns), oracle solvability (re-run independently), uniqueness (content; tool bindings),
   decontamination rejections, per depth.
3. **Naive resampler**: the same, on 2,000 variants: how many keep their parent's signature
   and how many signature classes they spread over, against the skill-aligned variants.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Sequence

import networkx as nx
import numpy as np
from networkx.algorithms import isomorphism as iso

import rods_gym
from rods_gym import DIFFICULTIES, TaskSampler, TaskSpec, compute_signature, default_suite
from rods_gym.resampler import (
    NaiveResampler, Resampler, ResamplerConfig, binding_key, content_key, oracle_solves, signature_classes, task_depth,
)
from rods_gym.suite import Suite
from rods_gym.tasksets import held_out_tools

Pairs = list[tuple[TaskSpec, TaskSpec]]  # (parent, variant)


def load_sets(suite: Suite) -> tuple[list[TaskSpec], list[TaskSpec], tuple[str, ...], str]:
    try:
        seeds = rods_gym.load_split("train")
        held = rods_gym.load_split("dev") + rods_gym.load_split("test") + rods_gym.load_split("ood")
        return seeds, held, held_out_tools(), "train split (400 seeds); dev+test+ood held out"
    except FileNotFoundError:
        seeds = TaskSampler(suite, DIFFICULTIES["medium"], seed=404, id_prefix="seed").sample_many(400)
        held = TaskSampler(suite, DIFFICULTIES["medium"], seed=101, id_prefix="held").sample_many(700)
        return seeds, held, (), "sampler stand-ins (splits not built): 400 medium seeds, 700 held-out"


def relaxed_graph(task: TaskSpec, suite: Suite) -> nx.MultiDiGraph:
    g = compute_signature(task, suite).graph.copy()
    for _, d in g.nodes(data=True):
        skill, rest = d["label"].split("@", 1)
        d["label"] = skill.split(":")[0] + "@" + rest
    return g


def fidelity(parent: TaskSpec, variant: TaskSpec, suite: Suite) -> bool:
    """Does the variant match its parent at the tier it claims?"""
    sp, sv = compute_signature(parent, suite), compute_signature(variant, suite)
    tier = variant.meta["tier"]
    if tier == 0:
        return sv.same(sp)
    if tier == 1:
        return nx.is_isomorphic(relaxed_graph(parent, suite), relaxed_graph(variant, suite),
                                node_match=iso.categorical_node_match("label", None),
                                edge_match=iso.categorical_multiedge_match("label", None))
    return (sv.depth, sv.n_calls, sv.n_turns) == (sp.depth, sp.n_calls, sp.n_turns)


def speed_tier0(suite: Suite, seeds: Sequence[TaskSpec], held: Sequence[TaskSpec], exclude_tools: tuple[str, ...],
                per_seed: int, repeats: int) -> dict[int, dict[str, float]]:
    """Per depth: the same work (fresh resampler, same rng seed) ``repeats`` times; the
    fastest repeat is the least disturbed by other jobs (as ``timeit`` reports), the median
    is given beside it."""
    by_depth: dict[int, list[TaskSpec]] = defaultdict(list)
    for t in seeds:
        by_depth[task_depth(t)].append(t)
    runs: dict[int, list[tuple[int, float, float]]] = defaultdict(list)
    for _ in range(repeats):
        r = Resampler(suite, decontaminate=held, config=ResamplerConfig(tiers=(0,), exclude_tools=exclude_tools))
        rng = np.random.default_rng(0)
        for depth in sorted(by_depth):
            cpu, wall, made = time.process_time(), time.perf_counter(), 0
            for t in by_depth[depth]:
                made += len(r.resample(t, per_seed, rng))
            runs[depth].append((made, time.process_time() - cpu, time.perf_counter() - wall))
    out: dict[int, dict[str, float]] = {}
    for depth, rs in runs.items():
        made = rs[0][0]
        assert all(m == made for m, _, _ in rs), "the repeats must do the same work"
        cpu, wall = sorted(c for _, c, _ in rs), sorted(w for _, _, w in rs)
        out[depth] = {"seeds": len(by_depth[depth]), "variants": made, "asked": per_seed * len(by_depth[depth]),
                      "cpu_s": cpu[0], "wall_s": wall[0], "per_s_cpu": made / cpu[0], "per_s_wall": made / wall[0],
                      "median_per_s_cpu": made / cpu[len(cpu) // 2]}
    return out


def grow(resampler: Resampler, seeds: Sequence[TaskSpec], n: int, seed: int) -> tuple[Pairs, float, float]:
    """``n`` independent calls (uniform parent, one variant, no exclusion set)."""
    rng = np.random.default_rng(seed)
    pairs: list[tuple[TaskSpec, TaskSpec]] = []
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(n):
        parent = seeds[int(rng.integers(0, len(seeds)))]
        pairs += [(parent, v) for v in resampler.resample(parent, 1, rng)]
    return pairs, time.process_time() - cpu, time.perf_counter() - wall


def quality(pairs: Pairs, suite: Suite, held: Sequence[TaskSpec]) -> dict[str, Any]:
    held_bindings = {binding_key(t) for t in held}
    per_depth: dict[int, Counter] = defaultdict(Counter)
    tiers: Counter = Counter()
    for parent, v in pairs:
        d = task_depth(parent)
        tier = v.meta["tier"]
        c = per_depth[d]
        c["variants"] += 1
        c[f"tier{tier}"] += 1
        if tier is not None:
            tiers[tier] += 1
            ok = fidelity(parent, v, suite)
            c[f"tier{tier}_faithful"] += ok
        c["solved"] += oracle_solves(v, suite)
        c["same_signature"] += compute_signature(v, suite).same(compute_signature(parent, suite))
        c["held_out_binding"] += binding_key(v) in held_bindings
    keys = [content_key(v) for _, v in pairs]
    tool_bindings = {binding_key(v, values=False) for _, v in pairs}
    classes = signature_classes([compute_signature(v, suite) for _, v in pairs])
    seed_classes = signature_classes([compute_signature(p, suite) for p in {p.id: p for p, _ in pairs}.values()])
    return {
        "variants": len(pairs), "unique_content": len(set(keys)), "unique_tool_bindings": len(tool_bindings),
        "signature_classes": len(set(classes)), "parent_signature_classes": len(set(seed_classes)),
        "tiers": dict(sorted(tiers.items())),
        "per_depth": {d: dict(c) for d, c in sorted(per_depth.items())},
        "totals": dict(sum(per_depth.values(), Counter())),
    }


def pct(a: float, b: float) -> str:
    return f"{100.0 * a / b:.1f}%" if b else "n/a"


def report(res: dict[str, Any]) -> str:
    lines = ["# Resampler benchmark\n", f"- command: `{res['command']}`", f"- date: {res['date']}",
             f"- machine: {res['machine']}; load average at start/end {res['load_start']} / {res['load_end']} "
             "(other jobs shared the cores: CPU-time rates are the fairer figure)", f"- data: {res['data']}",
             f"- world generation before timing: {res['world_setup_s']:.2f} s for {res['worlds']} worlds (cached)\n",
             f"## Speed at tier 0 (exact signature), {res['per_seed']} variant{'' if res['per_seed'] == 1 else 's'} asked per seed, "
             f"fastest of {res['repeats']} repeats\n",
             "| depth | seeds | variants | variants/s (CPU) | median of repeats (CPU) | variants/s (wall) |",
             "|---|---|---|---|---|---|"]
    for d, s in res["speed"].items():
        lines.append(f"| {d} | {s['seeds']} | {s['variants']}/{s['asked']} | {s['per_s_cpu']:.0f} | "
                     f"{s['median_per_s_cpu']:.0f} | {s['per_s_wall']:.0f} |")
    s4 = res["speed_depth_le4"]
    lines.append(f"| **1-4** | {s4['seeds']} | {s4['variants']}/{s4['asked']} | **{s4['per_s_cpu']:.0f}** | "
                 f"{s4['median_per_s_cpu']:.0f} | **{s4['per_s_wall']:.0f}** |\n")
    for name in ("skill", "naive"):
        q = res[name]
        t = q["totals"]
        lines += [f"## {'Skill-aligned' if name == 'skill' else 'Naive'} resampler: {q['variants']} variants from "
                  f"{q['calls']} independent calls\n",
                  f"- rate (all tiers, one variant per call): {q['per_s_cpu']:.0f} variants/s CPU, "
                  f"{q['per_s_wall']:.0f} wall",
                  f"- unique content: {q['unique_content']}/{q['variants']} "
                  f"({pct(q['unique_content'], q['variants'])}); "
                  f"distinct tool bindings: {q['unique_tool_bindings']}",
                  f"- oracle-solved: {t.get('solved', 0)}/{q['variants']} ({pct(t.get('solved', 0), q['variants'])})",
                  f"- same signature as the parent: {t.get('same_signature', 0)}/{q['variants']} "
                  f"({pct(t.get('same_signature', 0), q['variants'])})",
                  f"- signature classes among variants: {q['signature_classes']} "
                  f"(their parents: {q['parent_signature_classes']})",
                  f"- dev/test/OOD binding collisions: {t.get('held_out_binding', 0)}",
                  f"- resampler counters: {json.dumps(q['stats'])}\n"]
        if name == "skill":
            lines += ["| depth | variants | tier 0 | tier 1 | tier 2 | fidelity t0 | fidelity t1 | fidelity t2 "
                      "| solved |",
                      "|---|---|---|---|---|---|---|---|---|"]
            for d, c in q["per_depth"].items():
                fid = [pct(c.get(f"tier{k}_faithful", 0), c.get(f"tier{k}", 0)) for k in range(3)]
                lines.append(f"| {d} | {c['variants']} | {c.get('tier0', 0)} | {c.get('tier1', 0)} | "
                             f"{c.get('tier2', 0)} | "
                             f"{' | '.join(fid)} | {pct(c.get('solved', 0), c['variants'])} |")
        else:
            lines += ["| depth | variants | same signature as parent | solved |", "|---|---|---|---|"]
            for d, c in q["per_depth"].items():
                lines.append(f"| {d} | {c['variants']} | {pct(c.get('same_signature', 0), c['variants'])} | "
                             f"{pct(c.get('solved', 0), c['variants'])} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", type=int, default=10_000, help="skill-aligned variants for the quality run")
    ap.add_argument("--naive-variants", type=int, default=2_000, help="naive variants")
    ap.add_argument("--per-seed", type=int, default=5, help="variants asked per seed in the speed run")
    ap.add_argument("--repeats", type=int, default=7, help="repeats of the speed run (the fastest is reported)")
    ap.add_argument("--machine", default=f"{platform.processor() or platform.machine()} ({platform.system()})")
    ap.add_argument("--out", type=Path, default=None, help="write the Markdown report here")
    ap.add_argument("--json", type=Path, default=None, help="write the raw figures here")
    args = ap.parse_args(argv)
    small = [f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
             if k in ("variants", "naive_variants", "per_seed", "repeats") and v < 1]
    if small:
        ap.error(f"{', '.join(small)}: --variants, --naive-variants, --per-seed and --repeats must be >= 1")
    suite = default_suite()
    seeds, held, excl, data = load_sets(suite)
    cfg = ResamplerConfig(exclude_tools=tuple(t for t in excl if t in suite.tools))
    start = time.perf_counter()
    for w in range(cfg.world_offset, cfg.world_offset + cfg.world_pool):
        suite.world(w)
    for t in seeds:
        suite.world(t.world_seed)
    world_setup = time.perf_counter() - start
    given = argv if argv is not None else sys.argv[1:]
    res: dict[str, Any] = {"command": "python benchmarks/resample.py " + " ".join(given),
                           "date": _dt.date.today().isoformat(), "machine": args.machine, "data": data,
                           "world_setup_s": world_setup, "worlds": cfg.world_pool, "per_seed": args.per_seed,
                           "repeats": args.repeats,
                           "load_start": " ".join(f"{x:.1f}" for x in os.getloadavg())}
    speed = speed_tier0(suite, seeds, held, cfg.exclude_tools, args.per_seed, args.repeats)
    res["speed"] = speed
    le4 = [s for d, s in speed.items() if d <= 4]
    agg = {k: sum(s[k] for s in le4) for k in ("seeds", "variants", "asked", "cpu_s", "wall_s")}
    agg["per_s_cpu"], agg["per_s_wall"] = agg["variants"] / agg["cpu_s"], agg["variants"] / agg["wall_s"]
    agg["median_per_s_cpu"] = agg["variants"] / sum(s["variants"] / s["median_per_s_cpu"] for s in le4)
    res["speed_depth_le4"] = agg
    for name, cls, n in (("skill", Resampler, args.variants), ("naive", NaiveResampler, args.naive_variants)):
        r = cls(suite, decontaminate=held, config=cfg)
        pairs, cpu, wall = grow(r, seeds, n, seed=1)
        q = quality(pairs, suite, held)
        q.update({"calls": n, "per_s_cpu": len(pairs) / cpu, "per_s_wall": len(pairs) / wall, "stats": r.stats})
        res[name] = q
    res["load_end"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    text = report(res)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    from _script import run_script

    run_script(main)
