"""What the scripts that play saved policies on a task split share (compare_policies, failure_modes):
their command-line arguments, the split's tasks, and the evaluation engine of a training config."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Sequence

from rods_gym.tasksets import STRATA
from rods_gym.trainer.config import load_config
from rods_gym.trainer.loop import evaluation_engine
from rods_gym.trainer.policy import load_policy
from rods_gym.trainer.rollout import RolloutEngine
from rods_gym.trainer.tasks import load_tasks, spread


def add_split_args(ap: argparse.ArgumentParser, *, samples: int, samples_help: str, out_help: str) -> None:
    """--split --stratum --tasks --samples --temperature --config --set --seed --threads --out."""
    ap.add_argument("--split", default="test", help="a task split name or a JSONL path")
    ap.add_argument("--stratum", default="", help="only the split's tasks of these turn types (comma-separated "
                    "meta.stratum values: " + ", ".join(STRATA) + ")")
    ap.add_argument("--tasks", type=int, default=0, help="N tasks of the split, keeping its mix of turn types and depths as "
                    "eval.tasks and rods evaluate take them (0: all)")
    ap.add_argument("--samples", type=int, default=samples, help=samples_help)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--config", default="default", help="training config whose environment and limits to use")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override, as in rods train (e.g. --set data.slot_ids=shuffled); repeatable")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", help=out_help)


def split_tasks(args: argparse.Namespace) -> list[Any]:
    """``--tasks`` tasks of ``--split`` keeping its mix of turn types and depths (``tasks.spread``; all with 0), resolved through ``--config``'s data
    settings: the checked-in splits are ordered by depth, so the first N would all be depth 1."""
    if args.tasks < 0:
        raise ValueError(f"--tasks must be >= 0 (0: all), got {args.tasks}")
    tasks = load_tasks(args.split, load_config(args.config, list(args.set)).data)
    wanted = {x for x in args.stratum.split(",") if x}
    if wanted:
        tasks = [t for t in tasks if t.meta.get("stratum") in wanted]
        if not tasks:
            raise ValueError(f"--stratum {args.stratum}: no task of {args.split} is of these turn types")
    return spread(tasks, args.tasks) if args.tasks else tasks


def eval_engine(policy_dir: str | Path, config: str, temperature: float, overrides: Sequence[str] = ()) -> RolloutEngine:
    """A rollout engine for a saved policy in ``config``'s evaluation environment and limits (with
    ``overrides``), sampling at ``temperature``."""
    cfg = load_config(config, [*overrides, f"rollout.temperature={temperature}"])
    return evaluation_engine(cfg, load_policy(policy_dir))
