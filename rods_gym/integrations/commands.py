"""``rods tasks``: export a task set for another trainer (``--to-parquet``: verl's RL dataset format).

Registered through the ``rods_gym.commands`` entry-point group (pyproject.toml), as the trainer's commands are:
the core CLI never imports the integrations."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tasks", help="export a task set (--to-parquet: one verl dataset row per task)")
    p.add_argument("--split", default="train",
                   help="a task set: train, dev, test, ood, or a JSONL file of tasks (default: train)")
    p.add_argument("--to-parquet", type=Path, required=True, metavar="PATH",
                   help="write the tasks as verl dataset rows (prompt, agent_name rods_env, the task in extra_info)")
    p.add_argument("--env-id", default="rods/ToolChain-Chat-v0",
                   help="the text view whose opening messages the rows hold (default: rods/ToolChain-Chat-v0)")
    p.add_argument("-n", "--n", type=int, default=None, help="only the first N tasks")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rods_gym.envs import SPLITS

    from rods_gym.env import load_split
    from rods_gym.task import read_jsonl

    from .rows import task_rows, write_parquet

    if args.n is not None and args.n < 1:
        print(f"rods tasks: error: --n must be >= 1, got {args.n}", file=sys.stderr)
        return 2
    if args.split in SPLITS:
        tasks = load_split(args.split)
    elif Path(args.split).is_file():
        tasks = read_jsonl(args.split)
    else:
        print(f"rods tasks: error: --split {args.split!r} is neither a task set {SPLITS} nor a JSONL file",
              file=sys.stderr)
        return 2
    tasks = tasks[: args.n] if args.n else tasks
    try:
        rows = task_rows(tasks, env_id=args.env_id, split=args.split if args.split in SPLITS else Path(args.split).stem)
        path = write_parquet(rows, args.to_parquet)
    except (ValueError, ImportError) as exc:
        print(f"rods tasks: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(rows)} rows ({args.env_id}) to {path}")
    return 0
