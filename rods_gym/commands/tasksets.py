"""``rods tasksets``: build the checked-in task sets, or describe them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tasksets", help="build or describe the train/dev/test/ood task sets")
    p.add_argument("action", choices=["build", "show"], help="build: regenerate the JSONL files; show: describe them")
    p.add_argument("--out", type=Path, default=None,
                   help="build: where to write; show: where to read (default: the package's envs/tasksets)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rods_gym.envs import SPLITS, TASKSETS_DIR
    from ..tasksets import build_all, describe

    from ..task import read_jsonl

    directory = args.out or TASKSETS_DIR
    if args.action == "build":
        for name, tasks in build_all(directory).items():
            print(f"{name:6s} {describe(tasks)}")
        return 0
    missing = [name for name in SPLITS if not (directory / f"{name}.jsonl").exists()]
    if missing:
        print(f"rods tasksets: error: {directory} has no {', '.join(m + '.jsonl' for m in missing)}"
              + ("" if args.out else "; build them with rods tasksets build"), file=sys.stderr)
        return 2
    for name in SPLITS:
        print(f"{name:6s} {describe(read_jsonl(directory / f'{name}.jsonl'))}")
    return 0
