"""``rods synth --bfcl``: verified tier-0 variants of the BFCL train split (see :mod:`rods_gym.bfcl.resample`).

    rods synth --bfcl --n 1000 --seed 0 --out runs/bfcl/variants.jsonl

Parents are the train split's tasks (``--seeds train``, or ``all``, or a category name) in a seeded order; each
gets up to ``ceil(n / parents)`` variants, every one with swapped values of the kinds their parameters take
(:mod:`rods_gym.bfcl.valuekinds`), verified by replaying its new ground truth, failed by the parent's ground truth
(every swapped value changes the backend state or a checked result) and decontaminated against the test split
(no test task's signature and argument set). The ``stats`` line counts the candidates each check rejected. The output is JSON lines
(:func:`rods_gym.bfcl.resample.variant_to_dict`: the parent id, questions and ground truth; no initial state,
which is the parent's), the same for the same arguments; ``rods_gym.bfcl.resample.read_variants`` reads it and
``gym.make("rods/BFCL-MultiTurn-v0", tasks=...)`` plays it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from typing import Iterator, Sequence

import numpy as np

from . import CATEGORIES
from .data import BFCLTask, load_tasks
from .resample import BFCLResampler, variant_to_dict
from .split import split_tasks


def seed_tasks(spec: str) -> list[BFCLTask]:
    if spec in ("train", "test"):
        return split_tasks(spec)
    if spec == "all" or spec in CATEGORIES:
        return list(load_tasks(spec))
    raise ValueError(f"--seeds with --bfcl: {spec!r} is not train, test, all or a category {CATEGORIES}")


def iter_variants(seeds: Sequence[BFCLTask], n: int, resampler: BFCLResampler, seed: int
                  ) -> Iterator[tuple[BFCLTask, BFCLTask]]:
    """``(parent, variant)`` pairs, up to ``n``, parents in a seeded order, ``ceil(n / len(seeds))`` per parent."""
    rng = np.random.default_rng(seed)
    per = max(1, math.ceil(n / len(seeds)))
    made = 0
    for k in rng.permutation(len(seeds)):
        parent = seeds[int(k)]
        for variant in resampler.resample(parent, min(per, n - made), rng):
            yield parent, variant
            made += 1
        if made >= n:
            return


def run_bfcl(args: argparse.Namespace) -> int:
    try:
        seeds = seed_tasks(args.seeds)
    except (ValueError, ImportError, FileNotFoundError) as exc:
        print(f"rods synth: error: {exc}", file=sys.stderr)
        return 2
    avoid = [] if args.decontaminate.strip().lower() == "none" else split_tasks("test")
    if args.seeds in ("test", "all") or args.seeds in CATEGORIES:
        avoid = [t for t in avoid if t.id not in {s.id for s in seeds}]
    resampler = BFCLResampler(avoid=avoid)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_name(args.out.name + ".partial")
    start = time.perf_counter()
    made, parents = 0, set()
    with partial.open("w") as fh:
        for parent, variant in iter_variants(seeds, args.n, resampler, args.seed):
            fh.write(json.dumps(variant_to_dict(variant, parent.id)) + "\n")
            made += 1
            parents.add(parent.id)
    os.replace(partial, args.out)
    elapsed = time.perf_counter() - start
    stats = resampler.stats()
    print(f"wrote {made} verified BFCL variants to {args.out} in {elapsed:.1f} s ({made / max(elapsed, 1e-9):.1f}/s) "
          f"from {len(parents)} of {len(seeds)} parents ({args.seeds}); decontaminated against {len(avoid)} test tasks")
    print("stats: " + json.dumps({**dataclasses.asdict(stats),
                                  "verified_share": round(stats.verified / max(stats.tried, 1), 4),
                                  "parents_covered": len(parents), "parents_covered_share":
                                  round(len(parents) / max(len(seeds), 1), 4)}))
    if made < args.n:
        print(f"rods synth: only {made} of {args.n} variants: tier 0 covers {len(parents)} of the {len(seeds)} parents "
              "(the rest state no argument that has a valid alternative)", file=sys.stderr)
        return 1
    return 0
