"""The task-source interface every curriculum implements (fixed seeds, augmentation,
offline pipeline, RODS, ablations), and the fixed-seed source.

The training loop asks a source for the tasks of each step, runs G rollouts per task, and
hands back each task's group of returns — the same returns the GRPO advantages use. A
source never calls the policy or the environment itself (so, for RODS, detection is free).
Its ``state_dict`` must capture everything needed to resume exactly, RNG included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from rods_gym.task import TaskSpec


@dataclass(frozen=True)
class GroupResult:
    """The G rollouts of one task in one training step."""

    task: TaskSpec
    returns: tuple[float, ...]  # episode returns (final progress in [0, 1] by default)
    successes: tuple[bool, ...] = ()
    env_options: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class TaskSource(Protocol):
    """What the training loop asks of a curriculum. Required: ``name`` and the methods below
    (``check_task_source`` names any that are missing before the first step). ``next_batch`` must
    return exactly ``n_tasks`` tasks.

    Optional hooks, looked up with ``getattr`` (a source without them gets the default):

    - ``extra_rollouts`` (int, default 0): rollouts the source consumed beyond the trainer's (DAPO-style
      resampling); counted in budgets and logged.
    - ``env_id`` (str) and ``env_kwargs`` (dict): train in another environment than ``data.env_id``
      (the augmentation arm's); evaluation always uses the plain one.
    - ``env_options(task) -> dict``: per-task ``reset`` options.
    - ``select(groups) -> list[GroupResult]`` and ``refill(step) -> list[TaskSpec]``: DAPO-style dynamic
      sampling (``curricula.arms.DynamicSampling``): keep the informative groups, ask for more tasks.

    A source of your own reaches ``rods train`` through the ``rods_gym.sources`` entry-point group
    (``sources.available_sources``), or ``grpo_train(..., source=...)`` from Python.
    """

    name: str

    def next_batch(self, step: int, n_tasks: int) -> list[TaskSpec]:
        """The tasks of training step ``step`` (each gets G rollouts)."""

    def observe(self, step: int, groups: Sequence[GroupResult]) -> None:
        """The step's group returns, in the order of ``next_batch``'s tasks."""

    def telemetry(self) -> dict[str, float]:
        """Scalars to log for the last step (pool size, boundary fraction, ...)."""

    def state_dict(self) -> dict[str, Any]:
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ...


REQUIRED_METHODS = ("next_batch", "observe", "telemetry", "state_dict", "load_state_dict")


def check_task_source(source: Any, name: str | None = None) -> None:
    """A ``TypeError`` naming what ``source`` lacks of the ``TaskSource`` interface (before any rollout)."""
    missing = [m for m in REQUIRED_METHODS if not callable(getattr(source, m, None))]
    if not isinstance(getattr(source, "name", None), str):
        missing.insert(0, "name (a str attribute)")
    if missing:
        label = name or getattr(source, "name", None) or type(source).__name__
        raise TypeError(f"task source {label!r} ({type(source).__name__}) lacks {missing} of the TaskSource interface "
                        "(rods_gym.trainer.task_source)")


class FixedSeeds:
    """Fixed-data RL: epochs over a fixed task list, reshuffled each epoch with a seeded RNG."""

    name = "fixed"

    def __init__(self, tasks: Sequence[TaskSpec], seed: int = 0) -> None:
        if not tasks:
            raise ValueError("FixedSeeds needs at least one task")
        self.tasks = list(tasks)
        self.rng = np.random.default_rng(seed)
        self._order: list[int] = []
        self._pos = 0
        self._last: dict[str, float] = {}

    def next_batch(self, step: int, n_tasks: int) -> list[TaskSpec]:
        out = []
        for _ in range(n_tasks):
            if self._pos >= len(self._order):
                self._order = [int(i) for i in self.rng.permutation(len(self.tasks))]
                self._pos = 0
            out.append(self.tasks[self._order[self._pos]])
            self._pos += 1
        return out

    def observe(self, step: int, groups: Sequence[GroupResult]) -> None:
        stds = [float(np.std(g.returns)) for g in groups]
        self._last = {"silent_fraction": float(np.mean([s == 0.0 for s in stds])) if stds else 0.0}

    def telemetry(self) -> dict[str, float]:
        return dict(self._last)

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state, "order": list(self._order), "pos": self._pos}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self._order = list(state["order"])
        self._pos = int(state["pos"])

    @property
    def extra_rollouts(self) -> int:
        return 0
