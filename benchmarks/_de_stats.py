"""A thin re-export for the scripts that still import the statistics by their old module name
(benchmarks/features_grpo_dev.py): the statistics live in :mod:`benchmarks.stats`."""

from __future__ import annotations

import sys
from pathlib import Path

if str(Path(__file__).resolve().parents[1]) not in sys.path:  # imported by name from a script in benchmarks/
    sys.path.append(str(Path(__file__).resolve().parents[1]))

from benchmarks.stats import bootstrap_ci, bootstrap_mean_1d, difference_ci, rng_for  # noqa: E402,F401
