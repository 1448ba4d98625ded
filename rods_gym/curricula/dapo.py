"""Ablation "dapo": DAPO-style dynamic sampling (Yu et al., 2025) over the seeds.

Groups with zero reward variance are dropped and replaced by fresh tasks within the step; the rollouts of the
replacements are counted in :attr:`DynamicSamplingSource.extra_rollouts`. Only a host that can run extra
rollout rounds within a step (``rods train``'s loop) can use it: the schedules of the Gymnasium/SB3, TRL and
verl hosts refuse it, since those run exactly the rollouts they planned.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from ..task import TaskSpec
from .fixed import FixedSeeds
from .source import GroupResult


@runtime_checkable
class DynamicSampling(Protocol):
    """A source that replaces silent groups within a step. The trainer's step becomes::

        tasks = source.next_batch(step, n)
        groups = rollouts(tasks); source.observe(step, groups)
        while more := source.refill(step):          # at most source.max_refill_rounds rounds
            extra = rollouts(more); source.observe(step, extra); groups += extra
        groups = source.select(groups)              # the groups to train on (<= n)

    :func:`rods_gym.trainer.loop.grpo_train` runs this protocol for every source that has these
    members (refill rollouts use their own env seeds; ``select`` must return groups it was given,
    by identity; a step that keeps no group makes no update). The trainer's metrics carry the
    step's ``rollouts`` (batch + refills), ``refill_rounds``, ``groups`` and ``groups_kept``.
    """

    max_refill_rounds: int

    def refill(self, step: int) -> list[TaskSpec]:
        ...

    def select(self, groups: Sequence[GroupResult]) -> list[GroupResult]:
        ...


def informative(group: GroupResult) -> bool:
    """A group carries a GRPO gradient only if its returns differ."""
    return bool(np.std(group.returns) > 0.0)


class DynamicSamplingSource:
    """Ablation "dapo": DAPO-style dynamic sampling (Yu et al., 2025) over the seeds.

    ``next_batch`` hands out ``n`` tasks (epochs over the seeds, as in "fixed"). After their
    groups are observed, ``refill`` asks for replacements of the silent ones: enough fresh
    tasks to cover the shortfall at the informative rate seen so far this step (at least
    ``min_informative_rate``, so at most ``1 / min_informative_rate`` times the shortfall),
    for at most ``max_refill_rounds`` rounds. ``select`` keeps the first ``n`` informative
    groups; the step may train on fewer when the rounds run out.

    Budget: the trainer counts ``n * G`` rollouts per step as for every arm; the rollouts of
    the refill tasks are this source's :attr:`extra_rollouts` (cumulative), so the total
    generated is ``steps * n * G + extra_rollouts``.
    """

    name = "dapo"

    def __init__(self, tasks: Sequence[TaskSpec], seed: int = 0, *, max_refill_rounds: int = 3,
                 min_informative_rate: float = 0.25) -> None:
        if max_refill_rounds < 0:
            raise ValueError(f"max_refill_rounds must be >= 0, got {max_refill_rounds}")
        if not 0.0 < min_informative_rate <= 1.0:
            raise ValueError(f"min_informative_rate must lie in (0, 1], got {min_informative_rate}")
        self.stream = FixedSeeds(tasks, seed)
        self.max_refill_rounds = max_refill_rounds
        self.min_informative_rate = min_informative_rate
        self._extra = 0
        self._step = {"target": 0, "rounds": 0, "groups": 0, "informative": 0, "refill_tasks": 0, "extra": 0}
        self._refills: dict[str, int] = {}  # refill task ids handed out, not yet observed
        self._last: dict[str, float] = {}

    def next_batch(self, step: int, n_tasks: int) -> list[TaskSpec]:
        self._step = {"target": n_tasks, "rounds": 0, "groups": 0, "informative": 0, "refill_tasks": 0, "extra": 0}
        self._refills = {}
        return self.stream.next_batch(step, n_tasks)

    def observe(self, step: int, groups: Sequence[GroupResult]) -> None:
        s = self._step
        for g in groups:
            s["groups"] += 1
            s["informative"] += informative(g)
            if self._refills.get(g.task.id, 0) > 0:
                self._refills[g.task.id] -= 1
                s["extra"] += len(g.returns)
                self._extra += len(g.returns)
        n = max(1, s["groups"])
        self._last = {"silent_fraction": 1.0 - s["informative"] / n, "refill_rounds": float(s["rounds"]),
                      "refill_tasks": float(s["refill_tasks"]), "extra_rollouts_step": float(s["extra"]),
                      "extra_rollouts": float(self._extra),
                      "kept_groups": float(min(s["informative"], s["target"])),
                      "tasks_seen": self.stream.telemetry()["tasks_seen"]}

    def refill(self, step: int) -> list[TaskSpec]:
        s = self._step
        shortfall = s["target"] - s["informative"]
        if shortfall <= 0 or s["rounds"] >= self.max_refill_rounds:
            return []
        rate = s["informative"] / s["groups"] if s["groups"] else 1.0
        k = math.ceil(shortfall / max(rate, self.min_informative_rate))
        tasks = self.stream.next_batch(step, k)
        for t in tasks:
            self._refills[t.id] = self._refills.get(t.id, 0) + 1
        s["rounds"] += 1
        s["refill_tasks"] += k
        return tasks

    def select(self, groups: Sequence[GroupResult]) -> list[GroupResult]:
        return [g for g in groups if informative(g)][: self._step["target"]]

    def telemetry(self) -> dict[str, float]:
        return dict(self._last)

    @property
    def extra_rollouts(self) -> int:
        return self._extra

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, "stream": self.stream.state_dict(), "extra": self._extra,
                "step": dict(self._step), "refills": dict(self._refills), "last": dict(self._last)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("name") != self.name:
            raise ValueError(f"state of source {state.get('name')!r} loaded into source {self.name!r}")
        self.stream.load_state_dict(state["stream"])
        self._extra = int(state["extra"])
        self._step = {k: int(v) for k, v in state["step"].items()}
        self._refills = {k: int(v) for k, v in state["refills"].items()}
        self._last = dict(state["last"])
