"""The replay pool: every task RODS knows, its status, and PLR-style replay priorities.

Statuses: ``active`` (replayed), ``staged`` (synthesized, waiting for its first training
appearance), ``quarantined`` (hard on first appearance, held aside), ``archived`` (retired,
kept: seeds are archived, never deleted). Evicted and dropped synthetic tasks leave the pool.

Replay priority (Jiang et al., Prioritized Level Replay): scores are the detector's EMA of u;
``P_rank(i) ∝ rank(i)^(-1/beta)`` (rank 1 = highest score; ties broken at random),
``P_stale(i) ∝ step - last(i)``; ``P = (1 - rho) * P_rank + rho * P_stale``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from rods_gym.task import TaskSpec

STATUSES = ("active", "staged", "quarantined", "archived")


def rank_probabilities(scores: Sequence[float], beta: float, tiebreak: Sequence[float] | None = None) -> np.ndarray:
    """``P(i) ∝ rank(i)^(-1/beta)``, rank 1 for the highest score; ties ordered by ``tiebreak`` (ascending)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        return s
    tb = np.arange(s.size, dtype=np.float64) if tiebreak is None else np.asarray(tiebreak, dtype=np.float64)
    order = np.lexsort((tb, -s))  # primary key: score descending
    ranks = np.empty(s.size, dtype=np.float64)
    ranks[order] = np.arange(1, s.size + 1)
    h = ranks ** (-1.0 / beta)
    return h / h.sum()


def staleness_probabilities(last_steps: Sequence[int], step: int) -> np.ndarray:
    """``P(i) ∝ step - last(i)``; uniform when every task was just seen."""
    c = np.maximum(step - np.asarray(last_steps, dtype=np.float64), 0.0)
    if c.size == 0:
        return c
    total = c.sum()
    return c / total if total > 0 else np.full(c.size, 1.0 / c.size)


def replay_probabilities(scores: Sequence[float], last_steps: Sequence[int], step: int, beta: float, rho: float,
                         tiebreak: Sequence[float] | None = None) -> np.ndarray:
    p = (1.0 - rho) * rank_probabilities(scores, beta, tiebreak) + rho * staleness_probabilities(last_steps, step)
    return p / p.sum()


@dataclass
class PoolEntry:
    task: TaskSpec
    origin: str  # "seed" | "synthetic"
    status: str
    signature: str  # signature class (bucket key)
    depth: int
    root: str  # the seed this task descends from (itself for a seed)
    generation: int  # 0 for a seed, parent's + 1 for a variant
    added_step: int
    last_step: int = -1  # last step the task was in a batch (-1: never)
    uses: int = 0  # training appearances
    mastered: int = 0  # appearances classified mastered
    hard: int = 0  # appearances classified hard
    non_boundary: int = 0  # consecutive non-boundary appearances
    parent_uses: int = 0  # synthesis rounds it was a parent in
    status_step: int = 0  # step of the last status change
    retried: bool = False  # released from quarantine once already

    @property
    def is_seed(self) -> bool:
        return self.origin == "seed"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["task"] = self.task.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PoolEntry":
        return cls(**{**d, "task": TaskSpec.from_dict(d["task"])})


class ReplayPool:
    """Entries by task id, in insertion order (which the state dict keeps)."""

    def __init__(self) -> None:
        self.entries: dict[str, PoolEntry] = {}

    def __contains__(self, task_id: str) -> bool:
        return task_id in self.entries

    def __getitem__(self, task_id: str) -> PoolEntry:
        return self.entries[task_id]

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, entry: PoolEntry) -> None:
        assert entry.task.id not in self.entries, entry.task.id
        assert entry.status in STATUSES, entry.status
        self.entries[entry.task.id] = entry

    def remove(self, task_id: str) -> PoolEntry:
        entry = self.entries.pop(task_id)
        assert not entry.is_seed, f"seed {task_id!r} must never be deleted"
        return entry

    def set_status(self, task_id: str, status: str, step: int) -> None:
        assert status in STATUSES, status
        e = self.entries[task_id]
        e.status, e.status_step = status, step

    def with_status(self, status: str) -> Iterator[PoolEntry]:
        return (e for e in self.entries.values() if e.status == status)

    def ids(self, status: str) -> list[str]:
        return [e.task.id for e in self.with_status(status)]

    def counts(self) -> dict[str, int]:
        c = Counter(e.status for e in self.entries.values())
        return {s: c.get(s, 0) for s in STATUSES}

    def live_synthetic(self, key: str, value: str) -> int:
        """Synthetic tasks staged, active or quarantined whose ``key`` (``signature`` or ``root``) is ``value``."""
        return sum(1 for e in self.entries.values()
                   if not e.is_seed and e.status != "archived" and getattr(e, key) == value)

    def signature_entropy(self) -> tuple[float, int]:
        """Shannon entropy (nats) of the active tasks' signature classes, and the number of classes."""
        c = Counter(e.signature for e in self.with_status("active"))
        n = sum(c.values())
        if n == 0:
            return 0.0, 0
        return float(-sum(k / n * math.log(k / n) for k in c.values())), len(c)

    # -- state -------------------------------------------------------------------------
    def state_dict(self) -> list[dict[str, Any]]:
        return [e.to_dict() for e in self.entries.values()]

    def load_state_dict(self, state: list[dict[str, Any]]) -> None:
        self.entries = {}
        for d in state:
            self.add(PoolEntry.from_dict(d))
