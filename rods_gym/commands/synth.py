"""``rods synth``: offline synthesis of a large task set from a seed set (the offline-pipeline arm).

    rods synth --seeds train --n 17000 --seed 0 --out runs/offline/synth.jsonl
    rods synth --seeds train --n 17000 --seed 0 --out runs/offline/naive.jsonl --naive
    rods synth --bfcl --n 1000 --seed 0 --out runs/bfcl/variants.jsonl   (BFCL-V3 multi-turn; rods_gym.bfcl.synth)

Parents are drawn uniformly from the seeds; each task is a variant from the skill-aligned
resampler (or the naive one with ``--naive``), oracle-solved, deduplicated and
decontaminated against the dev/test/OOD sets on disk, never using the OOD split's held-out
tools. The output is JSON lines, the same for the same arguments.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path

from ..resampler import NaiveResampler, Resampler, ResamplerConfig
from ..tasksets import held_out_tools
from ..suite import Suite
from ..synth import iter_synthesize
from ..task import TaskSpec, read_jsonl

SPLITS = ("train", "dev", "test", "ood")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("synth", help="synthesize a large task set from seed tasks (offline pipeline)")
    p.add_argument("--seeds", default="train", help="seed tasks: a split name (train/dev/test/ood) or a JSONL path")
    p.add_argument("--n", type=int, default=17000, help="number of tasks to synthesize")
    p.add_argument("--seed", type=int, default=0, help="random seed (the output is a function of it)")
    p.add_argument("--out", type=Path, required=True, help="output JSONL path")
    p.add_argument("--naive", action="store_true", help="use the naive resampler (ignores structure; the ablation)")
    p.add_argument("--decontaminate", default="dev,test,ood",
                   help="comma-separated splits or JSONL paths to decontaminate against ('none' for none); "
                        "split names that are not built yet are skipped with a note")
    p.add_argument("--tiers", default="0,1,2", help="fallback tiers to allow, in order (0 exact, 1 relaxed, 2 size)")
    p.add_argument("--domains", default=None, help="domain directory (default: the built-in domains)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--bfcl", action="store_true", help="BFCL-V3 multi-turn tier-0 variants of the BFCL train split "
                   "(--seeds train|all|<category>; needs the bfcl extra; see rods_gym.bfcl.synth)")
    p.set_defaults(func=run)


def _load(spec: str) -> list[TaskSpec]:
    from ..env import load_split

    if spec in SPLITS:
        return load_split(spec)
    path = Path(spec)
    if not path.exists():
        raise FileNotFoundError(f"--seeds/--decontaminate: {spec!r} is neither a split "
                                f"({', '.join(SPLITS)}) nor a file")
    return read_jsonl(path)


def run(args: argparse.Namespace) -> int:
    if args.n < 1:
        print(f"rods synth: error: --n must be >= 1 (an empty set is no training data), got {args.n}", file=sys.stderr)
        return 2
    if getattr(args, "bfcl", False):
        from ..bfcl.synth import run_bfcl

        return run_bfcl(args)
    try:
        tiers = tuple(int(x) for x in args.tiers.split(",") if x.strip())
        seeds = _load(args.seeds)
    except (ValueError, FileNotFoundError) as exc:
        print(f"rods synth: error: {exc}", file=sys.stderr)
        return 2
    held_tasks: list[TaskSpec] = []
    used = []
    if args.decontaminate.strip().lower() != "none":
        for spec in (x.strip() for x in args.decontaminate.split(",") if x.strip()):
            try:
                held_tasks += _load(spec)
                used.append(spec)
            except FileNotFoundError as exc:
                if spec not in SPLITS:
                    print(f"rods synth: error: {exc}", file=sys.stderr)
                    return 2
                print(f"note: split {spec!r} is not built; not decontaminating against it", file=sys.stderr)
    suite = Suite.load(args.domains)
    exclude_tools = tuple(t for t in held_out_tools() if t in suite.tools)
    try:
        config = ResamplerConfig(tiers=tiers, exclude_tools=exclude_tools)
    except ValueError as exc:
        print(f"rods synth: error: {exc}", file=sys.stderr)
        return 2
    cls = NaiveResampler if args.naive else Resampler
    resampler = cls(suite, decontaminate=held_tasks, config=config)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tiers_made: collections.Counter = collections.Counter()
    start = time.perf_counter()
    # written under a temporary name and renamed once complete: an interrupted run leaves no partial
    # file that an offline-pipeline run would read as the whole set
    partial = args.out.with_name(args.out.name + ".partial")
    try:
        with partial.open("w") as fh:
            for task in iter_synthesize(seeds, args.n, resampler, seed=args.seed, progress=not args.no_progress):
                fh.write(task.to_json() + "\n")
                tiers_made[task.meta["tier"]] += 1
    except KeyboardInterrupt:
        partial.unlink(missing_ok=True)
        print(f"\nrods synth: interrupted after {sum(tiers_made.values())} of {args.n} tasks; nothing written to "
              f"{args.out}", file=sys.stderr)
        return 130
    os.replace(partial, args.out)
    made = sum(tiers_made.values())
    elapsed = time.perf_counter() - start
    print(f"wrote {made} tasks to {args.out} in {elapsed:.1f} s ({made / max(elapsed, 1e-9):.0f} tasks/s) "
          f"from {len(seeds)} seeds ({args.seeds}); resampler {resampler.kind}; "
          f"decontaminated against {', '.join(used) or 'nothing'} ({len(held_tasks)} tasks); "
          f"{len(exclude_tools)} held-out tools excluded")
    if args.naive:  # the naive resampler ignores structure: it has no fallback tiers
        print(f"tiers: none (naive resampler, {made} tasks)")
    else:
        print("tiers: " + json.dumps({str(k): v for k, v in sorted(tiers_made.items(), key=lambda kv: str(kv[0]))}))
    print("stats: " + json.dumps(resampler.stats))
    if made < args.n:
        print(f"rods synth: only {made} of {args.n} tasks could be made within the draw budget", file=sys.stderr)
        return 1
    return 0
