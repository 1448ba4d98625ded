"""BFCL tasks for ``rods train``: the trainer's task files and a RODS task source.

The trainer's loop, sources and evaluation handle :class:`rods_gym.task.TaskSpec`; the BFCL env takes a
TaskSpec in ``reset(options={"task": ...})`` and plays the BFCL task its ``meta["bfcl_id"]`` names. The task
files ``envs/bfcl/{train,test}_tasks.jsonl`` hold each split's tasks in that form *without BFCL's data*: the
call DAG's structure (function names, turns, data-flow and order edges, turn kinds) and the id, no argument
values and no question text (:func:`structure_only`); ``python -m rods_gym.bfcl.trainer`` rebuilds them.

:class:`BFCLRodsSource` is the RODS curriculum on BFCL: epochs over the seeds, and for every group on the
variance boundary (returns not all equal) verified tier-0 variants of its task (:mod:`rods_gym.bfcl.resample`)
join a replay pool, from which ``pool_share`` of each batch is drawn. A variant reaches the env through the
source's ``env_options(task)`` (``{"task": <BFCLTask>}``), which the trainer passes to ``reset``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rods_gym.envs import ROOT as ENVS_ROOT

from ..task import Call as SpecCall
from ..task import TaskSpec, Turn, write_jsonl
from .data import BFCLTask, tasks_by_id
from .resample import BFCLResampler, variant_from_dict, variant_to_dict
from .split import split_tasks
from .taskmodel import to_taskspec

TASK_FILES = {s: ENVS_ROOT / "bfcl" / f"{s}_tasks.jsonl" for s in ("train", "test")}  # installed with the package


def structure_only(task: BFCLTask) -> TaskSpec:
    """The task's call DAG with its arguments and questions removed (ids and structure only)."""
    spec = to_taskspec(task)
    calls = tuple(SpecCall(c.id, c.tool, {}, c.turn) for c in spec.calls)
    turns = tuple(Turn("", locked=t.locked, withheld=t.withheld) for t in spec.turns)
    meta = {"bfcl_id": task.id.split(".v")[0] if task.id not in tasks_by_id() else task.id,
            "category": task.category, "stratum": task.category, "order_edges": list(spec.meta["order_edges"])}
    return dataclasses.replace(spec, id=task.id, calls=calls, turns=turns, meta=meta)


def write_task_files() -> dict[str, Path]:
    for split, path in TASK_FILES.items():
        write_jsonl([structure_only(t) for t in split_tasks(split)], path)
    return TASK_FILES


class BFCLRodsSource:
    """RODS on BFCL (see the module docstring). ``seeds``: the trainer's seed TaskSpecs (BFCL ids)."""

    name = "bfcl_rods"

    def __init__(self, seeds: Sequence[TaskSpec], seed: int = 0, pool_share: float = 0.5, per_parent: int = 2,
                 pool_size: int = 512) -> None:
        if not seeds:
            raise ValueError("BFCLRodsSource needs at least one seed task")
        if not 0.0 <= pool_share <= 1.0:
            raise ValueError(f"pool_share must be in [0, 1], got {pool_share}")
        by_id = tasks_by_id()
        missing = [t.id for t in seeds if str(t.meta.get("bfcl_id", t.id)) not in by_id]
        if missing:
            raise ValueError(f"seed tasks {missing[:3]} name no BFCL task (meta['bfcl_id']); use envs/bfcl/*_tasks.jsonl")
        self.seeds = list(seeds)
        self.rng = np.random.default_rng(seed)
        self.resampler = BFCLResampler(avoid=split_tasks("test"))
        self.pool_share, self.per_parent, self.pool_size = pool_share, per_parent, pool_size
        self.pool: list[BFCLTask] = []
        self.variants: dict[str, BFCLTask] = {}
        self._order: list[int] = []
        self._pos = 0
        self._last: dict[str, float] = {}

    def _bfcl(self, task: TaskSpec) -> BFCLTask:
        return self.variants.get(task.id) or tasks_by_id()[str(task.meta.get("bfcl_id", task.id))]

    def next_batch(self, step: int, n_tasks: int) -> list[TaskSpec]:
        n_pool = min(len(self.pool), int(round(n_tasks * self.pool_share)))
        out = [structure_only(self.pool[int(k)]) for k in self.rng.choice(len(self.pool), n_pool, replace=False)] \
            if n_pool else []
        while len(out) < n_tasks:
            if self._pos >= len(self._order):
                self._order = [int(i) for i in self.rng.permutation(len(self.seeds))]
                self._pos = 0
            out.append(self.seeds[self._order[self._pos]])
            self._pos += 1
        return out

    def env_options(self, task: TaskSpec) -> dict[str, Any]:
        return {"task": self._bfcl(task)}

    def observe(self, step: int, groups: Sequence[Any]) -> None:
        boundary = [g for g in groups if len(set(g.returns)) > 1]
        added = 0
        for g in boundary:
            parent = self._bfcl(g.task)
            root = tasks_by_id().get(parent.id.split(".v")[0], parent)
            for v in self.resampler.resample(root, self.per_parent, self.rng):
                v = dataclasses.replace(v, id=f"{v.id}.s{step}")
                self.variants[v.id] = v
                self.pool.append(v)
                added += 1
        if len(self.pool) > self.pool_size:
            for old in self.pool[: len(self.pool) - self.pool_size]:
                self.variants.pop(old.id, None)
            self.pool = self.pool[-self.pool_size:]
        self._last = {"boundary_fraction": len(boundary) / max(len(groups), 1), "pool_size": float(len(self.pool)),
                      "variants_added": float(added),
                      "silent_fraction": sum(len(set(g.returns)) == 1 for g in groups) / max(len(groups), 1)}

    def telemetry(self) -> dict[str, float]:
        return dict(self._last)

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state, "order": list(self._order), "pos": self._pos,
                "pool": [variant_to_dict(v, v.id.split(".v")[0]) for v in self.pool],
                "resampler": [self.resampler.tried, self.resampler.verified]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self._order, self._pos = list(state["order"]), int(state["pos"])
        self.pool = [variant_from_dict(row) for row in state["pool"]]
        self.variants = {v.id: v for v in self.pool}
        self.resampler.tried, self.resampler.verified = state["resampler"]


if __name__ == "__main__":
    for split, path in write_task_files().items():
        print(split, path)
