"""Offline synthesis: a large task set grown once, up front, from a seed set (the offline-pipeline arm).

Each task is one variant of a parent drawn uniformly from the seeds, through a resampler
(skill-aligned by default, the naive one for the ablation); variants are distinct from the
seeds and from each other, oracle-solved, and decontaminated against the held-out sets the
resampler was given. The result is a pure function of the seeds, the resampler's
configuration and ``seed``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import lru_cache

import numpy as np
from tqdm.auto import tqdm

from .resampler import NaiveResampler, Resampler, ResamplerConfig
from .suite import Suite, default_suite
from .task import TaskSpec
from .task_keys import TaskIndex
from .tasksets import held_out_tasks, held_out_tools

RNG_SALT = 0x5A17
DRAWS_PER_TASK = 4  # parents drawn per wanted task before giving up (bounds the loop)


def make_resampler(suite: Suite | None = None, decontaminate: Sequence[TaskSpec] | None = None, naive: bool = False,
                   exclude_tools: Sequence[str] | None = None, config: ResamplerConfig | None = None) -> Resampler:
    """A fresh resampler for synthesis (RODS, the offline set, ``rods synth``): skill-aligned, or structure-blind
    (:class:`~rods_gym.resampler.NaiveResampler`, the "naive" ablation) with ``naive``.

    By default it never uses the OOD split's held-out tools and is decontaminated against the dev/test/OOD
    sets on disk (:func:`rods_gym.tasksets.held_out_tools` / :func:`~rods_gym.tasksets.held_out_tasks`).
    ``config``'s other fields are kept; its ``exclude_tools`` is replaced by ``exclude_tools``.
    """
    suite = suite or default_suite()
    held = held_out_tasks() if decontaminate is None else list(decontaminate)
    tools = held_out_tools() if exclude_tools is None else tuple(exclude_tools)
    config = replace(config or ResamplerConfig(), exclude_tools=tuple(t for t in tools if t in suite.tools))
    return (NaiveResampler if naive else Resampler)(suite, decontaminate=held, config=config)


@lru_cache(maxsize=4)
def default_resampler(suite: Suite | None = None) -> Resampler:
    """:func:`make_resampler`'s default for ``suite``, cached (for one-off calls such as :func:`resample`; a
    curriculum builds its own with :func:`make_resampler`, so its statistics and caches are its own)."""
    return make_resampler(suite)


def resample(task: TaskSpec, n: int, rng: np.random.Generator, suite: Suite | None = None) -> list[TaskSpec]:
    """Up to ``n`` skill-aligned variants of ``task`` (:class:`~rods_gym.resampler.Resampler`) from the cached
    default resampler of ``suite`` (decontaminated against the dev/test/OOD sets on disk)."""
    return default_resampler(suite).resample(task, n, rng)


def synthesize(seeds: Sequence[TaskSpec], n: int, resampler: Resampler, seed: int = 0, progress: bool = False,
               on_task: Callable[[TaskSpec], None] | None = None) -> list[TaskSpec]:
    """``n`` variants of uniformly drawn seed tasks (fewer only if the draw budget of
    ``DRAWS_PER_TASK * n`` parents runs out; the caller can compare lengths)."""
    return list(iter_synthesize(seeds, n, resampler, seed, progress, on_task))


def iter_synthesize(seeds: Sequence[TaskSpec], n: int, resampler: Resampler, seed: int = 0, progress: bool = False,
                    on_task: Callable[[TaskSpec], None] | None = None) -> Iterator[TaskSpec]:
    """:func:`synthesize` as a stream (memory stays at the deduplication index)."""
    if not seeds:
        raise ValueError("synthesize needs at least one seed task")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = np.random.default_rng([seed, RNG_SALT])
    index = TaskIndex(seeds)
    made = 0
    with tqdm(total=n, desc="synth", unit="task", disable=not progress, dynamic_ncols=True) as bar:
        for _ in range(DRAWS_PER_TASK * n):
            if made >= n:
                break
            parent = seeds[int(rng.integers(0, len(seeds)))]
            for variant in resampler.resample(parent, 1, rng, exclude=index):
                index.add(variant)
                made += 1
                bar.update(1)
                if on_task is not None:
                    on_task(variant)
                yield variant
