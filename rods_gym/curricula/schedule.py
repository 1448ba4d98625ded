"""Schedules: how a host trainer draws its tasks from a task source and feeds back the group returns it computed.

Two views of one bookkeeping. :class:`SlotSchedule` is for hosts that batch prompts (TRL, verl);
:class:`TaskSchedule` hands out episodes one at a time to Gymnasium-style hosts (the SB3 callback, the
features GRPO learner, the batched features vector env) and is a thin queue over a :class:`SlotSchedule`.

A host that trains GRPO rolls out fixed-size batches of prompts, G rollouts each. Here each prompt of
such a batch is a *slot*: slot ``s`` is position ``s % k`` of batch ``s // k`` (``k`` prompts per batch).
The first time the host asks for a slot of batch ``b``, the source draws that batch
(``source.next_batch(b, k)``); the host reports each slot's G rewards, and once every slot of the batch
has its G rewards the source observes the batch's groups in slot order
(``source.observe(b, groups)``): the same rewards the host's advantages use, so the curriculum costs no
extra episode. :class:`SlotSchedule` is the one place that bookkeeping lives; the TRL and verl adapters
only translate their host's rows and batches to slots.

The schedule's ``state_dict`` holds the source's state and the drawn, not yet observed batches (task
dicts, since a synthesized task exists nowhere else), so a resumed host serves the same tasks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..task import TaskSpec
from .source import GroupResult, TaskSource, check_task_source

STATE_VERSION = 1
SERVED_KEPT = 64  # batches whose task ids stay in ``served`` (memory stays flat over long runs)


@dataclass(frozen=True)
class Rollout:
    """One rollout's outcome as the host computed it: the slot it belongs to, its reward, its success."""

    slot: int
    reward: float
    success: bool = False


class SlotSchedule:
    """Slots -> tasks of ``source``, and the host's rewards -> ``source.observe``.

    Args:
        source: any :class:`~rods_gym.curricula.TaskSource` (RODS, fixed seeds, ...). Sources that
            refill rejected groups with extra rollouts (DAPO-style ``select``/``refill``) are refused: a host
            runs exactly the rollouts it planned.
        tasks_per_batch: ``k``, the distinct prompts (tasks) of one host batch.
        group_size: G, the rollouts of each prompt.
    """

    def __init__(self, source: TaskSource, tasks_per_batch: int, group_size: int) -> None:
        check_task_source(source)
        if callable(getattr(source, "select", None)) or callable(getattr(source, "refill", None)):
            raise ValueError(f"task source {source.name!r} refills groups with extra rollouts (select/refill); this host "
                             "runs only the rollouts it planned, so use it with rods train instead")
        if tasks_per_batch < 1:
            raise ValueError(f"tasks_per_batch must be >= 1, got {tasks_per_batch}")
        if group_size < 2:
            raise ValueError(f"group_size must be >= 2 (a group needs a reward variance), got {group_size}")
        self.source = source
        self.tasks_per_batch = int(tasks_per_batch)
        self.group_size = int(group_size)
        self.next_batch = 0  # the next batch to draw
        self.observed_batches = 0
        self._drawn: dict[int, list[TaskSpec]] = {}  # drawn, not yet observed
        self._pending: dict[int, dict[int, list[Rollout]]] = {}  # batch -> position -> rollouts so far
        self.served: list[tuple[int, list[str]]] = []  # (batch, task ids) of the last SERVED_KEPT drawn batches

    # -- slots -------------------------------------------------------------------------
    def batch_of(self, slot: int) -> tuple[int, int]:
        if slot < 0:
            raise ValueError(f"slot must be >= 0, got {slot}")
        return divmod(int(slot), self.tasks_per_batch)

    def task(self, slot: int) -> TaskSpec:
        """The task of ``slot``; draws its batch from the source when it is the next one."""
        batch, pos = self.batch_of(slot)
        if batch not in self._drawn:
            if batch < self.next_batch:
                raise ValueError(f"slot {slot} belongs to batch {batch}, which the curriculum has already observed: "
                                 "the host served it twice (a second pass over the slot dataset? make it cover "
                                 "every training step)")
            if batch > self.next_batch:
                raise ValueError(f"slot {slot} belongs to batch {batch}, but the next batch to draw is "
                                 f"{self.next_batch}: the host skipped prompts (a resumed run whose curriculum "
                                 "state was not restored?)")
            tasks = list(self.source.next_batch(batch, self.tasks_per_batch))
            if len(tasks) != self.tasks_per_batch:
                raise RuntimeError(f"task source {self.source.name!r} returned {len(tasks)} tasks for batch {batch}, "
                                   f"expected {self.tasks_per_batch}")
            self._drawn[batch] = tasks
            self._pending[batch] = {}
            self.served = [*self.served[-(SERVED_KEPT - 1):], (batch, [t.id for t in tasks])]
            self.next_batch = batch + 1
        return self._drawn[batch][pos]

    def slots(self, batch: int) -> range:
        return range(batch * self.tasks_per_batch, (batch + 1) * self.tasks_per_batch)

    def env_options(self, task: TaskSpec) -> dict[str, Any]:
        """Extra ``reset`` options the source asks for (``env_options`` hook), without the task."""
        hook = getattr(self.source, "env_options", None)
        return dict(hook(task)) if callable(hook) else {}

    # -- feedback ----------------------------------------------------------------------
    def record(self, rollouts: Sequence[Rollout]) -> list[int]:
        """Add the host's rollouts; observe every batch they complete. Returns the batches observed."""
        touched: list[int] = []
        for r in rollouts:
            batch, pos = self.batch_of(r.slot)
            if batch not in self._drawn:
                raise ValueError(f"a reward for slot {r.slot} (batch {batch}), which the curriculum "
                                 + ("has already observed" if batch < self.next_batch else "never handed out"))
            got = self._pending[batch].setdefault(pos, [])
            if len(got) >= self.group_size:
                raise ValueError(f"slot {r.slot} got more than G={self.group_size} rewards: the host's group size "
                                 "differs from the curriculum's")
            got.append(r)
            if batch not in touched:
                touched.append(batch)
        done = [b for b in touched if self._complete(b)]
        for b in sorted(done):
            self._observe(b)
        return sorted(done)

    def _complete(self, batch: int) -> bool:
        pending = self._pending[batch]
        return len(pending) == self.tasks_per_batch and all(len(v) == self.group_size for v in pending.values())

    def _observe(self, batch: int) -> None:
        tasks, pending = self._drawn.pop(batch), self._pending.pop(batch)
        groups = [GroupResult(task, tuple(r.reward for r in pending[i]), tuple(r.success for r in pending[i]),
                              self.env_options(task)) for i, task in enumerate(tasks)]
        self.source.observe(batch, groups)
        self.observed_batches += 1

    def is_observed(self, batch: int) -> bool:
        return batch < self.next_batch and batch not in self._drawn

    def telemetry(self) -> dict[str, float]:
        return {**self.source.telemetry(), "batches_observed": float(self.observed_batches)}

    # -- state -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """JSON-serializable (it goes into trainer_state.json or a verl checkpoint)."""
        return {
            "version": STATE_VERSION,
            "source_name": self.source.name,
            "tasks_per_batch": self.tasks_per_batch,
            "group_size": self.group_size,
            "source": self.source.state_dict(),
            "next_batch": self.next_batch,
            "observed_batches": self.observed_batches,
            "drawn": [[b, [t.to_dict() for t in tasks]] for b, tasks in self._drawn.items()],
            "pending": [[b, [[pos, [[r.slot, r.reward, r.success] for r in rs]] for pos, rs in p.items()]]
                        for b, p in self._pending.items()],
            "served": [[b, list(ids)] for b, ids in self.served],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"curriculum schedule state: version {state.get('version')!r}, expected {STATE_VERSION}")
        for key, here in (("source_name", self.source.name), ("tasks_per_batch", self.tasks_per_batch),
                          ("group_size", self.group_size)):
            if state[key] != here:
                raise ValueError(f"curriculum schedule state was saved with {key}={state[key]!r}, this run has "
                                 f"{here!r}")
        self.source.load_state_dict(state["source"])
        self.next_batch = int(state["next_batch"])
        self.observed_batches = int(state["observed_batches"])
        self._drawn = {int(b): [TaskSpec.from_dict(t) for t in tasks] for b, tasks in state["drawn"]}
        self._pending = {int(b): {int(pos): [Rollout(int(s), float(r), bool(ok)) for s, r, ok in rs] for pos, rs in p}
                         for b, p in state["pending"]}
        self.served = [(int(b), list(ids)) for b, ids in state["served"]]


class TaskSchedule:
    """Episodes to run, one at a time, as ``(batch step, slot, task)``: each batch's tasks, G episodes each.

    A new batch is drawn (``source.next_batch``) when the previous one has been handed out, even if some of its
    episodes are still running; the host reports each finished episode (:meth:`report`), and a batch's groups are
    observed (``source.observe``, in slot order) once all of them are complete: the same returns the learner
    trained on, so the curriculum costs no extra episode. Shared by every env of one in-process vectorized env
    (:class:`~rods_gym.curricula.CurriculumEnv`) and the host's feedback path.

    Args:
        source: any task source without ``select``/``refill`` (those need ``rods train``'s extra rollout rounds).
        tasks_per_batch: distinct tasks per batch.
        group_size: G, episodes per task (default: ``source.config.group_size``, else 8).
    """

    def __init__(self, source: TaskSource, tasks_per_batch: int = 4, group_size: int | None = None) -> None:
        if group_size is None:
            group_size = int(getattr(getattr(source, "config", None), "group_size", 8))
        self.slots = SlotSchedule(source, tasks_per_batch, group_size)
        self._queue: deque[tuple[int, int, TaskSpec]] = deque()

    @property
    def source(self) -> TaskSource:
        return self.slots.source

    @property
    def tasks_per_batch(self) -> int:
        return self.slots.tasks_per_batch

    @property
    def group_size(self) -> int:
        return self.slots.group_size

    @property
    def next_step(self) -> int:
        """The next batch to draw."""
        return self.slots.next_batch

    def next_episode(self) -> tuple[int, int, TaskSpec]:
        """The next episode's ``(batch step, slot within the batch, task)``."""
        if not self._queue:
            step = self.slots.next_batch
            tasks = [self.slots.task(s) for s in self.slots.slots(step)]
            self._queue.extend((step, slot, t) for slot, t in enumerate(tasks) for _ in range(self.group_size))
        return self._queue.popleft()

    def report(self, step: int, slot: int, ret: float, success: bool = False) -> bool:
        """One finished episode of ``(step, slot)`` with return ``ret``; True when it completed (and so had the
        source observe) its batch."""
        if not 0 <= slot < self.tasks_per_batch:
            raise ValueError(f"slot must lie in [0, {self.tasks_per_batch}), got {slot}")
        return bool(self.slots.record([Rollout(step * self.tasks_per_batch + slot, float(ret), bool(success))]))

    def report_info(self, episode: Mapping[str, Any]) -> bool:
        """:meth:`report` from a finished episode's ``info["curriculum"]`` (:class:`CurriculumEnv`)."""
        return self.report(int(episode["step"]), int(episode["slot"]), float(episode["return"]),
                           bool(episode.get("success", False)))

    def telemetry(self) -> dict[str, float]:
        return self.slots.telemetry()

    def state_dict(self) -> dict[str, Any]:
        """The slot schedule's state and the queue of episodes not yet handed out (JSON-serializable)."""
        return {"slots": self.slots.state_dict(), "queue": [[step, slot] for step, slot, _ in self._queue]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.slots.load_state_dict(state["slots"])
        queue = []
        for step, slot in state["queue"]:
            queue.append((int(step), int(slot), self.slots.task(int(step) * self.tasks_per_batch + int(slot))))
        self._queue = deque(queue)
