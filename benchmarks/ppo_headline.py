"""The headline's documented name: ``benchmarks/headline.py`` with ``--learner ppo`` by default (every option of
``headline.py`` works here too, ``--learner grpo`` included).

    python benchmarks/ppo_headline.py --scale smoke        # = python benchmarks/headline.py --learner ppo --scale smoke
    python benchmarks/ppo_headline.py --scale cpu --report-only
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

if __name__ == "__main__" and not __package__:  # run as a file: import the package, not its modules by name
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import headline  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    return headline.main(argv, learner="ppo")


if __name__ == "__main__":
    from benchmarks._script import run_script

    run_script(main)
