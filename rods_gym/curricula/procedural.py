"""Arm "procedural": a fresh sampler task for every group (the upper reference of the headline benchmark).

Each task is drawn like the train split's seeds (:mod:`rods_gym.tasksets`: the same depth x
turn-type strata and their shares, the same sampler knobs), from its own sampler seed and world range,
with the OOD split's held-out tools excluded, never equal (signature and bindings) to a task of any
checked-in split or to an earlier task of the stream, and solved by the oracle in ``view`` before it is
handed out. So the source never repeats a task: every group trains on an unseen one, which is what
an unlimited task generator gives and what every finite curriculum approximates.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from ..env import ToolChainEnv
from ..envs import taskset_path
from ..sampler import SamplerConfig, SamplingError, TaskSampler
from ..suite import Suite, default_suite
from ..task import TaskSpec, read_jsonl
from ..tasksets import DEPTHS, STRATA, pick_held_out_tools, solvable_everywhere, split_key
from .source import GroupResult

SPLIT_NAMES = ("train", "dev", "test", "ood")
MAX_TRIES = 400  # sampler draws per wanted task before giving up on a cell


class ProceduralSource:
    """Fresh, never-repeated tasks from the task sampler, stratified like the train split.

    Args:
        seed: the stream's seed (its sampler seeds and cell draws come from it); 0, 1, ... give disjoint streams.
        view: the env view each task is oracle-solved in before it is handed out.
        suite: the domains (default: the built-in suite).
    """

    name = "procedural"

    def __init__(self, seed: int = 0, *, view: str = "structured", suite: Suite | None = None) -> None:
        if seed < 0:
            raise ValueError(f"ProceduralSource: seed must be >= 0, got {seed}")
        self.seed = int(seed)
        self.suite = suite or default_suite()
        self.view = view
        self.held = pick_held_out_tools(self.suite)
        self.rng = np.random.default_rng([self.seed, 0x9A0C])
        self.cells = [(d, s) for d in DEPTHS for s in STRATA]
        shares = np.array([STRATA[s][0] for _, s in self.cells], dtype=np.float64)
        self.p = shares / shares.sum()
        self._taken = {split_key(t, self.suite) for split in SPLIT_NAMES if taskset_path(split).exists()
                       for t in read_jsonl(taskset_path(split))}
        self._samplers: dict[int, TaskSampler] = {}
        self._index: dict[int, int] = {}
        self._env = ToolChainEnv(mode=view, suite=self.suite)
        self._made = 0
        self._last: dict[str, float] = {}

    def _sampler(self, cell: int) -> TaskSampler:
        if cell not in self._samplers:
            depth, stratum = self.cells[cell]
            cfg = SamplerConfig(depth=(depth, depth), extra_calls=(0, 1 if depth < 4 else 2), distractors=(0, 3),
                                cross_domain=0.3, world_pool=32, world_offset=100_000 + 10_000 * self.seed,
                                exclude_tools=tuple(self.held), **STRATA[stratum][1])
            self._samplers[cell] = TaskSampler(self.suite, cfg, seed=(7_000 + self.seed) * 1000 + cell,
                                               id_prefix=f"proc{self.seed}")
            self._index[cell] = 0
        return self._samplers[cell]

    def _fresh(self) -> TaskSpec:
        cell = int(self.rng.choice(len(self.cells), p=self.p))
        depth, stratum = self.cells[cell]
        sampler = self._sampler(cell)
        for _ in range(MAX_TRIES):
            i = self._index[cell]
            self._index[cell] += 1
            try:
                task = sampler.sample(i)
            except SamplingError:
                continue
            if task.meta["knobs"]["depth"] != depth:
                continue
            key = split_key(task, self.suite)
            if key in self._taken or not solvable_everywhere(task, [self._env]):
                continue
            self._taken.add(key)
            self._made += 1
            return replace(task, id=f"proc{self.seed}-{self._made:06d}",
                           meta={**task.meta, "split": "procedural", "stratum": stratum})
        raise RuntimeError(f"ProceduralSource: no fresh task of depth {depth} / {stratum} in {MAX_TRIES} draws")

    def next_batch(self, step: int, n_tasks: int) -> list[TaskSpec]:
        if n_tasks < 1:
            raise ValueError(f"next_batch: n_tasks must be >= 1, got {n_tasks}")
        return [self._fresh() for _ in range(n_tasks)]

    def observe(self, step: int, groups: Sequence[GroupResult]) -> None:
        silent = [float(np.std(g.returns) == 0.0) for g in groups]
        self._last = {"silent_fraction": float(np.mean(silent)) if silent else 0.0, "tasks_seen": float(self._made)}

    def telemetry(self) -> dict[str, float]:
        return dict(self._last)

    @property
    def extra_rollouts(self) -> int:
        return 0

    def state_dict(self) -> dict[str, Any]:
        return {"name": self.name, "seed": self.seed, "rng": self.rng.bit_generator.state, "index": dict(self._index),
                "made": self._made}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("name") != self.name or int(state["seed"]) != self.seed:
            raise ValueError(f"state of source {state.get('name')!r} (seed {state.get('seed')}) loaded into "
                             f"{self.name!r} (seed {self.seed})")
        self.rng.bit_generator.state = state["rng"]
        for cell, i in state["index"].items():  # samplers are pure functions of (seed, index): rebuild and move on
            self._sampler(int(cell))
            self._index[int(cell)] = int(i)
        self._made = int(state["made"])
