"""Build the checked-in task sets (``envs/tasksets/*.jsonl``): a script over :mod:`rods_gym.tasksets`.

    python -m rods_gym.envs.build_tasksets [--out DIR]     # the same as `rods tasksets build`
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

from rods_gym.tasksets import build_all, describe

from . import TASKSETS_DIR


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=TASKSETS_DIR)
    args = parser.parse_args(argv)
    for name, tasks in build_all(args.out).items():
        print(f"{name:6s} {describe(tasks)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
