"""Task sets for training and evaluation: checked-in splits, JSONL files, or a seeded stand-in.

``load_tasks("train")`` returns ``envs/tasksets/train.jsonl`` when it has been built. Until
then (and only for the named splits) it falls back to tasks from the sampler at
``DataConfig.fallback_difficulty``, one sampler seed per split, with evaluation splits
decontaminated against the training stand-in (no task with the same calls and world).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from rods_gym import DIFFICULTIES, TaskSampler, default_suite, load_split, read_jsonl
from rods_gym.task import TaskSpec

from .config import DataConfig

SPLITS = ("train", "dev", "test", "ood")
FALLBACK_SEEDS = {"train": 1000, "dev": 2000, "test": 3000, "ood": 4000}


def content_key(task: TaskSpec) -> str:
    """Identity of a task's content (ignores its id): world, calls and answer."""
    calls = [(c.tool, sorted((k, json.dumps(v, sort_keys=True)) for k, v in c.args.items()), c.turn) for c in task.calls]
    return json.dumps([task.world_seed, calls, task.answer.field if task.answer else None])


@lru_cache(maxsize=16)
def _fallback(split: str, difficulty: str, n: int, n_train: int) -> tuple[TaskSpec, ...]:
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"data.fallback_difficulty={difficulty!r}: choose one of {sorted(DIFFICULTIES)}")
    config = DIFFICULTIES["medium" if split == "ood" and difficulty == "easy" else difficulty]
    sampler = TaskSampler(default_suite(), config, seed=FALLBACK_SEEDS[split])
    if split == "train":
        return tuple(sampler.sample_many(n))
    seen = {content_key(t) for t in _fallback("train", difficulty, n_train, n_train)}
    out: list[TaskSpec] = []
    for i in range(4 * n):  # bounded: decontamination drops few tasks
        t = sampler.sample(i)
        if content_key(t) not in seen:
            out.append(t)
            if len(out) == n:
                break
    return tuple(out)


def load_tasks(split: str, data: DataConfig, n: int | None = None) -> list[TaskSpec]:
    """The tasks of ``split`` (a split name or a JSONL path), at most ``n`` of them."""
    if split in SPLITS:
        try:
            tasks = load_split(split)
        except FileNotFoundError:
            size = data.fallback_train_tasks if split == "train" else data.fallback_eval_tasks
            tasks = list(_fallback(split, data.fallback_difficulty, size, data.fallback_train_tasks))
    else:
        path = Path(split)
        if not split.strip() or not path.is_file():  # '' and '.' name directories, not task sets
            raise FileNotFoundError(f"task set {split!r} is neither a split name {SPLITS} nor an existing JSONL file")
        tasks = read_jsonl(path)
    if not tasks:
        raise ValueError(f"task set {split!r} is empty")
    return tasks if n is None else tasks[:n]


def using_fallback(split: str) -> bool:
    if split not in SPLITS:
        return False
    from rods_gym.envs import taskset_path

    return not taskset_path(split).exists()


# how spread() picks: part of what a cached evaluation was measured on (benchmarks/_de_runner.py's job keys)
SPREAD_RULE = "evenly spaced over turn type, then depth (2026-12-03)"


def spread(tasks: list[TaskSpec], n: int) -> list[TaskSpec]:
    """``n`` tasks that keep the set's mix of turn types and depths, in the set's order: evenly spaced over the
    tasks ordered by turn type, then depth (``meta["stratum"]``, ``meta["knobs"]["depth"]``, as the shipped sets
    and ``rods synth`` record them; the list's own order where they are missing), so each turn type gets its
    share of ``n`` (to one task) and, within it, the depths theirs. (Evenly spaced over the list alone, as before
    2026-12-03, a small ``n`` fell in step with the turn types' cycle within each depth and left whole types out:
    10 of the test split were plain and answer tasks only.)"""
    if n <= 0 or n >= len(tasks):
        return list(tasks)

    def key(i: int) -> tuple[str, int, int]:
        meta = tasks[i].meta or {}
        depth = (meta.get("knobs") or {}).get("depth", 0)
        return str(meta.get("stratum", "")), depth if isinstance(depth, int) else 0, i

    order = sorted(range(len(tasks)), key=key)
    return [tasks[i] for i in sorted(order[(k * len(tasks)) // n] for k in range(n))]
