"""Task sources by name: the registry the training loop builds its curriculum from.

``make_source(name, cfg, seeds, rng_seed)`` returns a :class:`TaskSource`. Names come from
``available_sources()``, which is built on each call (no global registry):

- ``fixed``: :class:`FixedSeeds`, epochs over the seed tasks (this module);
- every name in a ``SOURCES`` mapping of the optional modules ``rods_gym.trainer.rods`` and
  ``rods_gym.trainer.curricula`` (imported lazily, skipped when absent);
- every entry point of the group ``rods_gym.sources`` (for packages outside this one).

A factory has the signature ``factory(cfg: TrainConfig, seeds: Sequence[TaskSpec], rng_seed: int)
-> TaskSource``; source-specific knobs are read from ``cfg.data.source_options``.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any, Callable, Mapping, Sequence

from rods_gym.task import TaskSpec

from .config import TrainConfig
from .task_source import FixedSeeds, TaskSource, check_task_source

SourceFactory = Callable[[TrainConfig, Sequence[TaskSpec], int], TaskSource]
OPTIONAL_MODULES = ("rods_gym.trainer.rods", "rods_gym.trainer.curricula", "rods_gym.bfcl.trainer")


def fixed_source(cfg: TrainConfig, seeds: Sequence[TaskSpec], rng_seed: int) -> TaskSource:
    unknown = set(cfg.data.source_options)
    if unknown:
        raise ValueError(f"data.source_options: the fixed source takes no options, got {sorted(unknown)}")
    return FixedSeeds(seeds, seed=rng_seed)


def _module_sources(name: str) -> Mapping[str, SourceFactory]:
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:  # the optional module does not exist (yet)
            return {}
        raise
    found = getattr(module, "SOURCES", {})
    if not isinstance(found, Mapping):
        raise TypeError(f"{name}.SOURCES must be a mapping of name -> factory")
    return found


def available_sources() -> dict[str, SourceFactory]:
    sources: dict[str, SourceFactory] = {"fixed": fixed_source}
    for module in OPTIONAL_MODULES:
        sources.update(_module_sources(module))
    for ep in entry_points(group="rods_gym.sources"):
        sources[ep.name] = ep.load()
    return sources


def make_source(name: str, cfg: TrainConfig, seeds: Sequence[TaskSpec], rng_seed: int) -> TaskSource:
    sources = available_sources()
    if name not in sources:
        raise ValueError(f"config data.source={name!r}: choose one of {tuple(sorted(sources))}")
    try:
        source = sources[name](cfg, seeds, rng_seed)
    except ValueError as exc:  # say where the mistake is, as the config's own errors do
        text = str(exc)
        raise ValueError(text if text.startswith(("data.", "config ")) else
                         f"data.source_options of data.source={name}: {text}") from None
    check_task_source(source, name)
    return source


def source_env_options(source: Any, task: TaskSpec) -> dict[str, Any]:
    """Per-task reset options a source may ask for (``source.env_options(task)``), else none."""
    fn = getattr(source, "env_options", None)
    return dict(fn(task)) if callable(fn) else {}
