"""Arm "fixed": fixed-data RL, epochs over a fixed task list (the 400 seeds), reshuffled each epoch."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..task import TaskSpec
from .source import GroupResult, silent_fraction


class FixedSeeds:
    """Epochs over ``tasks``, each a permutation drawn from a seeded generator; reports how many distinct
    tasks it has handed out (``tasks_seen``: epochs cover every task before any repeats, so the count is exact)."""

    name = "fixed"

    def __init__(self, tasks: Sequence[TaskSpec], seed: int = 0) -> None:
        if not tasks:
            raise ValueError(f"{type(self).__name__} needs at least one task")
        self.tasks = list(tasks)
        self.rng = np.random.default_rng(seed)
        self._order: list[int] = []
        self._pos = 0
        self._drawn = 0
        self._last: dict[str, float] = {}

    def next_batch(self, step: int, n_tasks: int) -> list[TaskSpec]:
        if n_tasks < 1:
            raise ValueError(f"next_batch: n_tasks must be >= 1, got {n_tasks}")
        out = []
        for _ in range(n_tasks):
            if self._pos >= len(self._order):
                self._order = [int(i) for i in self.rng.permutation(len(self.tasks))]
                self._pos = 0
            out.append(self.tasks[self._order[self._pos]])
            self._pos += 1
        self._drawn += n_tasks
        return out

    def observe(self, step: int, groups: Sequence[GroupResult]) -> None:
        self._last = {"silent_fraction": silent_fraction(groups)}

    def telemetry(self) -> dict[str, float]:
        return {**self._last, "tasks_seen": float(min(self._drawn, len(self.tasks)))}

    @property
    def extra_rollouts(self) -> int:
        return 0

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rng": self.rng.bit_generator.state, "order": list(self._order), "pos": self._pos,
                "drawn": self._drawn}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("name", self.name) != self.name:
            raise ValueError(f"state of source {state['name']!r} loaded into source {self.name!r}")
        self.rng.bit_generator.state = state["rng"]
        self._order = list(state["order"])
        self._pos = int(state["pos"])
        self._drawn = int(state.get("drawn", 0))  # checkpoints before 2026-12-07 did not count
