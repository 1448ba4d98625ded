"""The suite's data: declarative domain files, shared value types and the checked-in task sets.

``envs/domains/*.json`` are the domains (see ``rods_gym.domain`` for the format),
``envs/value_types.json`` the value types every domain may use, and ``envs/tasksets/`` the
train (seed), dev, test and out-of-distribution task sets built by
``python -m rods_gym.envs.build_tasksets``.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent
DOMAINS_DIR = ROOT / "domains"
TASKSETS_DIR = ROOT / "tasksets"
SPLITS = ("train", "dev", "test", "ood")


def check_split(split: str) -> str:
    """``split`` when it names a checked-in task set, else a ``ValueError`` listing them."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {SPLITS}")
    return split


def taskset_path(split: str) -> Path:
    return TASKSETS_DIR / f"{check_split(split)}.jsonl"
