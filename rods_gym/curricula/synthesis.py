"""Synthesis bookkeeping for RODS: the resampler interface, the content keys of every task
seen (deduplication), and the admission-yield stopping rule.

The resampler (``rods_gym.resampler.Resampler``, or ``NaiveResampler`` for the ablation)
does the heavy work: same signature, new tools/entities/values, oracle-verified. This module
only decides what to do with its output.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Collection, Iterator, Protocol, Sequence, runtime_checkable

import numpy as np

from ..task import TaskSpec
from ..task_keys import TaskIndex

from .config import RODSConfig


@runtime_checkable
class TaskResampler(Protocol):
    """What RODS needs from a resampler: ``n`` new variants of ``task`` drawn with ``rng``."""

    def resample(self, task: TaskSpec, n: int, rng: np.random.Generator,
                 exclude: Collection[TaskSpec] = ()) -> list[TaskSpec]:
        """Up to ``n`` variants, none with the content of ``task`` or of a task in ``exclude``."""


class SeenContent(TaskIndex):
    """Content keys (:func:`rods_gym.resampler.content_key`) of every task the source has
    known: seeds and every variant it ever staged, including evicted and dropped ones.

    Passed to the resampler as ``exclude`` (it looks keys up in O(1) through ``has_key``), so
    a variant never repeats a task seen before. Only keys are kept, so the set stays small and
    checkpoints cheaply; it cannot be iterated.
    """

    def _remember(self, task: TaskSpec) -> None:
        pass  # keys only

    def __iter__(self) -> Iterator[TaskSpec]:
        raise TypeError("SeenContent keeps content keys only; it cannot list its tasks")

    def state_dict(self) -> list[str]:
        return sorted(k.hex() for k in self._keys)

    def load_state_dict(self, state: list[str]) -> None:
        self._keys = {bytes.fromhex(k) for k in state}


class YieldMonitor:
    """Rolling admission yield over the last ``yield_window`` first-appearance decisions, and
    the stopping rule: synthesis stops for good once the window is full and its yield stays
    under ``min_admission_yield`` at ``stop_patience`` synthesis rounds in a row."""

    def __init__(self, config: RODSConfig) -> None:
        self.config = config
        self.window: deque[int] = deque(maxlen=config.yield_window)
        self.low_rounds = 0
        self.stopped = False

    def record(self, admitted: bool) -> None:
        self.window.append(int(admitted))

    @property
    def yield_(self) -> float | None:
        return float(np.mean(self.window)) if self.window else None

    def check(self) -> bool:
        """Call once per synthesis round; returns whether synthesis may run."""
        cfg = self.config
        if self.stopped:
            return False
        full = len(self.window) == cfg.yield_window
        if full and float(np.mean(self.window)) < cfg.min_admission_yield:
            self.low_rounds += 1
        else:
            self.low_rounds = 0
        if self.low_rounds >= cfg.stop_patience:
            self.stopped = True
        return not self.stopped

    def state_dict(self) -> dict[str, Any]:
        return {"window": list(self.window), "low_rounds": self.low_rounds, "stopped": self.stopped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.window = deque((int(x) for x in state["window"]), maxlen=self.config.yield_window)
        self.low_rounds = int(state["low_rounds"])
        self.stopped = bool(state["stopped"])


def weighted_pick(rng: np.random.Generator, weights: Sequence[float], k: int) -> list[int]:
    """Up to ``k`` distinct indices drawn in proportion to ``weights`` (all-zero weights: uniform)."""
    n = len(weights)
    k = min(k, n)
    if k <= 0:
        return []
    w = np.asarray(weights, dtype=np.float64)
    w = np.where(w > 0, w, 0.0)
    if w.sum() <= 0 or np.count_nonzero(w) < k:
        w = w + 1e-9
    return [int(i) for i in rng.choice(n, size=k, replace=False, p=w / w.sum())]
