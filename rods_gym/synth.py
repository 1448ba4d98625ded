"""Offline synthesis: a large task set grown once, up front, from a seed set (the offline-pipeline arm).

Each task is one variant of a parent drawn uniformly from the seeds, through a resampler
(skill-aligned by default, the naive one for the ablation); variants are distinct from the
seeds and from each other, oracle-solved, and decontaminated against the held-out sets the
resampler was given. The result is a pure function of the seeds, the resampler's
configuration and ``seed``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
from tqdm.auto import tqdm

from .resampler import Resampler, TaskIndex
from .task import TaskSpec

RNG_SALT = 0x5A17
DRAWS_PER_TASK = 4  # parents drawn per wanted task before giving up (bounds the loop)


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
