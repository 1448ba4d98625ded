"""Task sources by name for the host-trainer adapters, built from the same curriculum classes as
``rods train`` uses (``rods_gym.trainer.curricula``): nothing of RODS is re-implemented here.

``make_source("rods", seeds, seed=0, group_size=8, options={...})`` builds RODS with the skill-aligned
resampler, decontaminated against the dev/test/OOD sets on disk and never using the OOD split's
held-out tools (as ``rods train`` does); ``options`` are :class:`RODSConfig` fields. ``naive`` is RODS
with the structure-blind resampler, ``replay_only`` the detector and replay without synthesis,
``fixed`` epochs over the seeds. Any other :class:`~rods_gym.trainer.task_source.TaskSource` object
can be given to the adapters directly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from rods_gym.resampler import held_out_tasks
from rods_gym.task import TaskSpec

from ..trainer.curricula import FixedSeeds, NaiveRODSSource, ReplayOnlySource, RODSConfig, RODSSource, default_resampler
from ..trainer.task_source import TaskSource

SOURCE_NAMES = ("rods", "naive", "replay_only", "fixed")


def rods_config(options: Mapping[str, Any], group_size: int, where: str = "options") -> RODSConfig:
    """A :class:`RODSConfig` of ``options`` with G = ``group_size``; unknown fields are named."""
    known = [f.name for f in dataclasses.fields(RODSConfig)]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(f"{where}: unknown RODSConfig field(s) {unknown}; it has {known}")
    if options.get("group_size", group_size) != group_size:
        raise ValueError(f"{where}: group_size={options['group_size']} differs from the host's G={group_size}")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    return RODSConfig(**{**values, "group_size": int(group_size)})


def make_source(name: str, seeds: Sequence[TaskSpec], *, seed: int = 0, group_size: int = 8,
                options: Mapping[str, Any] | None = None) -> TaskSource:
    """The curriculum ``name`` (one of :data:`SOURCE_NAMES`) over ``seeds``."""
    options = dict(options or {})
    if name not in SOURCE_NAMES:
        raise ValueError(f"unknown task source {name!r}; choose one of {SOURCE_NAMES} (or pass a TaskSource object)")
    if not seeds:
        raise ValueError("the task source needs at least one seed task")
    if name == "fixed":
        if options:
            raise ValueError(f"the fixed source takes no options, got {sorted(options)}")
        return FixedSeeds(seeds, seed=seed)
    config = rods_config(options, group_size, where=f"{name} options")
    if name == "replay_only":
        return ReplayOnlySource(seeds, config, seed)
    held_out = held_out_tasks()
    resampler = default_resampler(decontaminate=held_out, naive=name == "naive")
    cls = NaiveRODSSource if name == "naive" else RODSSource
    return cls(seeds, resampler, config, seed, decontaminate=held_out)
