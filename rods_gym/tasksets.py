"""The checked-in task sets and how they are drawn: ``train`` (the 400 seeds), ``dev``, ``test`` and ``ood``.

    rods tasksets build --out DIR                      # (re)build them (envs/tasksets/*.jsonl by default)
    python -m rods_gym.envs.build_tasksets            # the same, as a script

Every split is stratified over depth and turn type (single-turn plain, multi-turn,
missing parameter, missing tool, information goal), drawn from its own sampler seed and
world range. Held-out tools (two per domain, chosen by a seeded generator) never occur in
train, dev or test; every ``ood`` task uses at least one of them. No two tasks of any
splits share (signature, bindings). Every task is solved by the oracle in all three views
before it is written. The build is deterministic: the same seed gives the same files.

``demonstration_tasks(n)`` draws further tasks the same way, kept apart from every split, for
warm-start demonstrations (``sft.data: sampled`` in the trainer); the curricula's procedural arm draws
its fresh tasks with the same strata (:data:`STRATA`), :func:`split_key` and :func:`solvable_everywhere`.

Two functions about held-out tools, with different jobs: :func:`pick_held_out_tools` chooses them when
the sets are built (seeded, two per domain); :func:`rods_gym.resampler.held_out_tools` reads the list the
build wrote (``envs/tasksets/held_out_tools.json``).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from .env import ToolChainEnv
from .oracle import solve
from .sampler import SamplerConfig, SamplingError, TaskSampler
from .signature import compute_signature
from .suite import Suite, default_suite
from .task import TaskSpec, read_jsonl, write_jsonl

from .envs import TASKSETS_DIR, taskset_path

DEPTHS = (1, 2, 3, 4, 5)
#: turn-type strata and their share of each split
STRATA: dict[str, tuple[float, dict]] = {
    "plain": (0.40, dict(user_turns=(1, 1), missing_param=0.0, missing_tool=0.0, answer=0.0)),
    "answer": (0.25, dict(user_turns=(1, 1), missing_param=0.0, missing_tool=0.0, answer=1.0)),
    "multi_turn": (0.15, dict(user_turns=(2, 2), missing_param=0.0, missing_tool=0.0, answer=0.3)),
    "missing_param": (0.10, dict(user_turns=(1, 1), missing_param=1.0, missing_tool=0.0, answer=0.3)),
    "missing_tool": (0.10, dict(user_turns=(1, 1), missing_param=0.0, missing_tool=1.0, answer=0.3)),
}


@dataclass(frozen=True)
class SplitSpec:
    name: str
    size: int
    sampler_seed: int
    world_offset: int


SPLITS = (
    SplitSpec("test", 400, 101, 1000),
    SplitSpec("dev", 100, 202, 2000),
    SplitSpec("ood", 200, 303, 3000),
    SplitSpec("train", 400, 404, 0),
)


def pick_held_out_tools(suite: Suite, seed: int = 7, per_domain: int = 2) -> tuple[str, ...]:
    """Choose the tools kept out of train/dev/test (seeded: the same every build); the OOD split uses them."""
    rng = np.random.default_rng(seed)
    out = []
    for d in suite.domains:
        names = sorted(t.name for t in d.tools)
        out += [names[int(i)] for i in sorted(rng.choice(len(names), size=per_domain, replace=False))]
    return tuple(sorted(out))


def split_key(task: TaskSpec, suite: Suite) -> tuple[str, str]:
    """(signature hash, concrete calls): two tasks with equal keys are the same task, for keeping the splits
    (and the procedural arm's fresh tasks) apart. The checked-in sets were built with this key; the resampler's
    keys are :mod:`rods_gym.task_keys`."""
    calls = json.dumps([[c.tool, c.args, c.turn] for c in task.calls], sort_keys=True)
    return compute_signature(task, suite).wl_hash, calls


def quotas(size: int) -> list[tuple[int, str, int]]:
    """(depth, stratum, count) cells summing to ``size``, as even as the shares allow."""
    cells = [(d, s, size * share / len(DEPTHS)) for d in DEPTHS for s, (share, _) in STRATA.items()]
    counts = [int(c) for _, _, c in cells]
    rest = size - sum(counts)
    order = sorted(range(len(cells)), key=lambda i: -(cells[i][2] - counts[i]))
    for i in order[:rest]:
        counts[i] += 1
    return [(d, s, n) for (d, s, _), n in zip(cells, counts) if n]


def solvable_everywhere(task: TaskSpec, envs: Sequence[ToolChainEnv]) -> bool:
    for env in envs:
        env.reset(options={"task": task})
        try:
            _, info = solve(env)
        except ValueError:  # a value the view cannot express
            return False
        if not info.get("success"):
            return False
    return True


def build_split(spec: SplitSpec, suite: Suite, held: Sequence[str], taken: set[tuple[str, str]],
                max_tries_per_task: int = 200, views: Sequence[str] = ("chat", "compact", "structured")
                ) -> list[TaskSpec]:
    """``spec.size`` stratified tasks whose keys are not in ``taken`` (which grows), each solved in ``views``."""
    envs = [ToolChainEnv(mode=m, suite=suite) for m in views]
    out: list[TaskSpec] = []
    for cell, (depth, stratum, count) in enumerate(quotas(spec.size)):
        knobs = STRATA[stratum][1]
        cfg = SamplerConfig(depth=(depth, depth), extra_calls=(0, 1 if depth < 4 else 2), distractors=(0, 3),
                            cross_domain=0.3, world_pool=32, world_offset=spec.world_offset,
                            exclude_tools=() if spec.name == "ood" else tuple(held), **knobs)
        sampler = TaskSampler(suite, cfg, seed=spec.sampler_seed * 1000 + cell, id_prefix=spec.name)
        got, index = 0, 0
        while got < count:
            if index >= count * max_tries_per_task:
                raise RuntimeError(f"{spec.name}: could not fill depth {depth} / {stratum} ({got}/{count})")
            index += 1
            try:
                task = sampler.sample(index - 1)
            except SamplingError:  # this draw's knobs could not be met; the next index can
                continue
            if spec.name == "ood" and not any(c.tool in held for c in task.calls):
                continue
            if task.meta["knobs"]["depth"] != depth:
                continue
            key = split_key(task, suite)
            if key in taken or not solvable_everywhere(task, envs):
                continue
            taken.add(key)
            out.append(replace(task, id=f"{spec.name}-{len(out):04d}",
                               meta={**task.meta, "split": spec.name, "stratum": stratum}))
            got += 1
    return out


def build_all(out_dir: Path = TASKSETS_DIR, suite: Suite | None = None) -> dict[str, list[TaskSpec]]:
    suite = suite or default_suite()
    held = pick_held_out_tools(suite)
    taken: set[tuple[str, str]] = set()
    splits = {}
    for spec in SPLITS:
        splits[spec.name] = build_split(spec, suite, held, taken)
        write_jsonl(splits[spec.name], Path(out_dir) / f"{spec.name}.jsonl")
    (Path(out_dir) / "held_out_tools.json").write_text(json.dumps(list(held), indent=1) + "\n")
    return splits


def demonstration_tasks(size: int, *, seed: int = 505, view: str = "compact", suite: Suite | None = None,
                        ) -> list[TaskSpec]:
    """Fresh tasks for warm-start demonstrations, drawn like the seeds but never equal to a checked-in task.

    The same strata and depths as the train split, from sampler seed ``seed`` and its own world
    range; held-out tools excluded (so the OOD split stays out of distribution); no task shares
    (signature, bindings) with any train, dev, test or OOD task; each is solved by the oracle in
    ``view``. Deterministic in ``(size, seed)``.
    """
    suite = suite or default_suite()
    taken = {split_key(t, suite) for split in ("train", "dev", "test", "ood") if taskset_path(split).exists()
             for t in read_jsonl(taskset_path(split))}
    spec = SplitSpec("demo", size, seed, 10_000 + 1_000 * (seed % 50))
    return build_split(spec, suite, pick_held_out_tools(suite), taken, views=(view,))


def held_out_tools() -> tuple[str, ...]:
    """The tools the build kept for the OOD split, read from ``envs/tasksets/held_out_tools.json`` (empty when the
    sets are not built). Synthesis never uses them, so the OOD split stays out of distribution."""
    path = TASKSETS_DIR / "held_out_tools.json"
    return tuple(json.loads(path.read_text())) if path.exists() else ()


HELD_OUT_SPLITS = ("dev", "test", "ood")


def held_out_tasks(splits: Sequence[str] = HELD_OUT_SPLITS) -> list[TaskSpec]:
    """The tasks of the held-out ``splits`` that exist on disk (empty when none is built): what synthesis is
    decontaminated against."""
    out: list[TaskSpec] = []
    for split in splits:
        path = taskset_path(split)
        if path.exists():
            out.extend(read_jsonl(path))
    return out


def describe(tasks: Iterable[TaskSpec]) -> str:
    tasks = list(tasks)
    depth = Counter(t.meta["knobs"]["depth"] for t in tasks)
    strata = Counter(t.meta.get("stratum") for t in tasks)
    return (f"{len(tasks)} tasks; depth {dict(sorted(depth.items()))}; strata {dict(sorted(strata.items()))}")
