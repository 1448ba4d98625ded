"""Curricula: the task sources the GRPO trainer (or an SB3 agent) draws its training tasks from.

Arms, by name: ``fixed`` (FixedSeeds), ``augment`` (AugmentedSeeds), ``offline``
(OfflinePipeline), ``rods`` (RODSSource), and the ablations ``replay_only``
(ReplayOnlySource), ``dapo`` (DynamicSamplingSource) and ``naive`` (NaiveRODSSource).
``SOURCES`` maps those names (but ``fixed``, which the trainer registers itself) to factories
``(cfg: TrainConfig, seeds, rng_seed) -> TaskSource`` for ``rods_gym.trainer.sources``.
"""

from __future__ import annotations

from ..task_source import FixedSeeds
from .arms import AUGMENTED_ENV_ID, AugmentedSeeds, DynamicSampling, DynamicSamplingSource, OfflinePipeline
from .config import RODSConfig
from .detector import REGIONS, Detector, calibrate_kappa, classify, group_stats
from .factories import SOURCES, augmented_env_id, default_resampler
from .pool import ReplayPool, rank_probabilities, replay_probabilities, staleness_probabilities
from .rods import NaiveRODSSource, ReplayOnlySource, RODSSource
from .synthesis import SeenContent, TaskResampler

ARMS = ("fixed", "augment", "offline", "rods", "replay_only", "dapo", "naive")

__all__ = [
    "ARMS", "AUGMENTED_ENV_ID", "AugmentedSeeds", "Detector", "DynamicSampling", "DynamicSamplingSource", "SOURCES",
    "FixedSeeds", "NaiveRODSSource", "OfflinePipeline", "REGIONS", "RODSConfig", "RODSSource", "ReplayOnlySource",
    "ReplayPool", "SeenContent", "TaskResampler", "augmented_env_id", "calibrate_kappa", "classify", "default_resampler",
    "group_stats", "rank_probabilities", "replay_probabilities", "staleness_probabilities",
]
