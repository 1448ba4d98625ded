"""The 400/400 train/test split of BFCL-V3 multi-turn, and the decontamination check.

EnvTuning "sampled half of each split [category] as the training set, with the remaining portion used as
the test set"; its task ids are not in its public repository, so this split is seeded and stratified by
category. Entry ``i`` of every category derives from ``multi_turn_base_i`` (the same question, initial state
and ground truth, with a parameter withheld, a function held out or a long context added), so sampling each
category independently would put a test task's near-twin in train. The split is therefore drawn over the 200
indices, stratified by the base entry's involved classes: 100 indices (x 4 categories = 400 tasks, 100 per
category) train, the other 100 test. ``envs/bfcl/split.json`` holds the ids (no BFCL data); rebuild it with
``python -m rods_gym.bfcl.split`` (the same seed gives the same file).
"""

from __future__ import annotations

import json
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from rods_gym.envs import ROOT as ENVS_ROOT

from . import CATEGORIES
from .data import BFCLTask, load_tasks

SPLIT_SEED = 20251010  # EnvTuning's release date; any fixed seed
SPLIT_FILE = ENVS_ROOT / "bfcl" / "split.json"  # the installed data folder (the repo's envs/, or the wheel's rods_gym/envs)
SPLITS = ("train", "test")


def _split_file() -> Path:
    return SPLIT_FILE


def draw_split(tasks: Sequence[BFCLTask], seed: int = SPLIT_SEED) -> dict[str, list[str]]:
    """The seeded split over entry indices, stratified by the base entries' involved classes."""
    base = {t.index: t for t in tasks if t.category == "base"}
    strata: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for i, t in sorted(base.items()):
        strata[tuple(sorted(t.involved_classes))].append(i)
    rng = np.random.default_rng(seed)
    train_idx: set[int] = set()
    extra = 0  # odd strata alternate which side gets the extra index, so the halves stay equal
    for key in sorted(strata):
        members = [strata[key][int(k)] for k in rng.permutation(len(strata[key]))]
        half = len(members) // 2
        if len(members) % 2:
            half += extra
            extra = 1 - extra
        train_idx.update(members[:half])
    train = [t.id for t in tasks if t.index in train_idx]
    test = [t.id for t in tasks if t.index not in train_idx]
    return {"train": train, "test": test}


def write_split(path: Path = SPLIT_FILE, seed: int = SPLIT_SEED) -> dict[str, list[str]]:
    split = draw_split(load_tasks(), seed)
    payload = {"rule": "seeded, stratified by the base entry's involved classes, over entry indices (all four "
                       "categories of an index on one side); 100 per category per side",
               "seed": seed, **split}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1) + "\n")
    return split


@lru_cache(maxsize=None)
def split_ids(split: str) -> tuple[str, ...]:
    """The task ids of ``train`` or ``test``."""
    if split not in SPLITS:
        raise ValueError(f"unknown BFCL split {split!r}; choose one of {SPLITS}")
    path = _split_file()
    if not path.is_file():
        raise FileNotFoundError(f"the BFCL split file {path} is missing; build it with python -m rods_gym.bfcl.split")
    return tuple(json.loads(path.read_text())[split])


def split_tasks(split: str, category: str | None = None) -> list[BFCLTask]:
    ids = set(split_ids(split))
    return [t for t in load_tasks(category) if t.id in ids]


def content_key(task: BFCLTask) -> tuple:
    """A test task's identity for decontamination: its signature plus its ground-truth argument set."""
    from .taskmodel import bfcl_signature

    args = tuple(sorted(json.dumps([c.name, c.args], sort_keys=True) for turn in task.ground_truth for c in turn))
    return (bfcl_signature(task).key, args)


def contamination(test: Iterable[BFCLTask], pools: Iterable[BFCLTask]) -> list[tuple[str, str]]:
    """Pairs ``(test id, pool id)`` where a pool task has a test task's signature and argument set."""
    keys: dict[tuple, str] = {}
    for t in test:
        keys.setdefault(content_key(t), t.id)
    return [(keys[k], p.id) for p in pools if (k := content_key(p)) in keys]


def index_overlap(train: Iterable[BFCLTask], test: Iterable[BFCLTask]) -> set[int]:
    """Entry indices on both sides (must be empty: an index's four categories are near-twins)."""
    return {t.index for t in train} & {t.index for t in test}


if __name__ == "__main__":
    out = write_split()
    tasks = load_tasks()
    by = {s: [t for t in tasks if t.id in set(out[s])] for s in SPLITS}
    for s in SPLITS:
        counts = {c: sum(1 for t in by[s] if t.category == c) for c in CATEGORIES}
        print(s, len(out[s]), counts)
    print("written", SPLIT_FILE)
