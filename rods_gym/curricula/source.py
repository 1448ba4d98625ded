"""The task-source interface every curriculum implements (fixed seeds, augmentation,
offline pipeline, procedural, RODS, ablations), and the result of one task's group.

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

    A source of your own reaches every host by name through an :class:`~rods_gym.curricula.registry.Arm` in the
    ``rods_gym.arms`` entry-point group (:func:`rods_gym.curricula.available_arms`), or is passed as an object
    (``grpo_train(..., source=...)``, ``TaskSchedule(source)``, ``TRLCurriculum(source, ...)``).
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
                        "(rods_gym.curricula.TaskSource)")


def source_env_options(source: Any, task: TaskSpec) -> dict[str, Any]:
    """Per-task reset options a source may ask for (``source.env_options(task)``), else none."""
    fn = getattr(source, "env_options", None)
    return dict(fn(task)) if callable(fn) else {}


def silent_fraction(groups: Sequence[GroupResult]) -> float:
    """The share of ``groups`` whose returns are all equal (std 0): under GRPO they carry no gradient."""
    return float(np.mean([float(np.std(g.returns)) == 0.0 for g in groups])) if groups else 0.0
