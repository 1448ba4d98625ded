"""The trainer's task source: ``data.source`` / ``data.source_options`` of a :class:`TrainConfig`, built by the
curricula registry (:func:`rods_gym.curricula.make_source`), where every arm is defined once for every host.

A source of your own reaches ``rods train`` by name as an :class:`~rods_gym.curricula.Arm` in the
``rods_gym.arms`` entry-point group, or as an object: ``grpo_train(..., source=...)``.
"""

from __future__ import annotations

from typing import Sequence

from rods_gym.curricula import Arm, TaskSource, available_arms
from rods_gym.curricula import make_source as make_arm_source
from rods_gym.curricula import source_env_options  # noqa: F401 (the loop's import)
from rods_gym.task import TaskSpec

from .config import TrainConfig


def available_sources() -> dict[str, Arm]:
    """Every arm ``data.source`` may name."""
    return available_arms()


def make_source(name: str, cfg: TrainConfig, seeds: Sequence[TaskSpec], rng_seed: int) -> TaskSource:
    """The source ``data.source`` names, with ``data.source_options``, G = ``rollout.group_size`` and the arms'
    augmented twin of ``data.env_id``. Mistakes are a ``ValueError`` that says where (``data.source...``)."""
    arms = available_arms()
    if name not in arms:
        raise ValueError(f"config data.source={name!r}: choose one of {tuple(sorted(arms))}")
    where = f"data.source_options (data.source={name})"
    try:
        return make_arm_source(name, seeds, seed=rng_seed, group_size=cfg.rollout.group_size, env_id=cfg.data.env_id,
                               options=dict(cfg.data.source_options), where=where)
    except (ValueError, FileNotFoundError) as exc:  # a mistake found while building: say where, as the parser does
        text = str(exc)
        raise type(exc)(text if text.startswith(where) else f"{where}: {text}") from None
