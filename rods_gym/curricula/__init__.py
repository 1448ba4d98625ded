"""Curricula: where every host's training tasks come from (torch-free, in the core).

A curriculum is a :class:`TaskSource`: it names each step's tasks (``next_batch``) and observes each task's
group of G returns (``observe``) — the returns the learner already computed, so a curriculum costs no extra
episode. Every arm is built by name through one registry (:func:`make_source`, :data:`ARMS`): ``rods train``,
the SB3 callback, the features GRPO learner, TRL, verl, OpenEnv, verifiers and the benchmarks name the same arms.
Hosts reach a source through a schedule: :class:`TaskSchedule` (one episode at a time; with
:class:`CurriculumEnv` for any Gymnasium agent) or :class:`SlotSchedule` (prompt slots of a batching trainer).

Modules: ``source`` (the interface), ``registry`` (arms by name), ``schedule`` / ``wrapper`` (hosts), ``fixed``,
``augmented``, ``offline``, ``procedural``, ``dapo`` (the arms other than RODS), and RODS itself: ``rods`` (the
source), ``config`` (every knob), ``detector`` (regions from returns), ``pool`` (replay priorities),
``synthesis`` (resampler interface, dedup, admission yield).
"""

from __future__ import annotations

from .augmented import AUGMENTED_ENV_ID, AugmentedRODSSource, AugmentedSeeds, RedrawSeeds, augmented_env_id
from .config import RODSConfig
from .dapo import DynamicSampling, DynamicSamplingSource, informative
from .detector import REGIONS, Detector, calibrate_kappa, classify, group_stats
from .fixed import FixedSeeds
from .offline import OfflinePipeline
from .pool import ReplayPool, rank_probabilities, replay_probabilities, staleness_probabilities
from .procedural import ProceduralSource
from .registry import (ARMS, FAITHFUL_AUGMENT, REDRAW_AUGMENT, Arm, ArmContext, RODSOptions, arm_names,
                       available_arms, make_source, parse_options)
from .rods import NaiveRODSSource, RandomParentRODSSource, ReplayOnlySource, RODSSource
from .schedule import Rollout, SlotSchedule, TaskSchedule
from .source import GroupResult, TaskSource, check_task_source, silent_fraction, source_env_options
from .synthesis import SeenContent, TaskResampler
from .wrapper import CurriculumEnv

__all__ = [
    "ARMS", "AUGMENTED_ENV_ID", "Arm", "ArmContext", "AugmentedRODSSource", "AugmentedSeeds", "CurriculumEnv",
    "Detector", "DynamicSampling", "DynamicSamplingSource", "FAITHFUL_AUGMENT", "FixedSeeds", "GroupResult",
    "NaiveRODSSource", "OfflinePipeline", "ProceduralSource", "REDRAW_AUGMENT", "REGIONS", "RODSConfig", "RODSOptions", "RODSSource",
    "RandomParentRODSSource", "RedrawSeeds", "ReplayOnlySource", "ReplayPool", "Rollout", "SeenContent",
    "SlotSchedule", "TaskResampler", "TaskSchedule", "TaskSource", "arm_names", "augmented_env_id",
    "available_arms", "calibrate_kappa", "check_task_source", "classify", "group_stats", "informative",
    "make_source", "parse_options", "rank_probabilities", "replay_probabilities", "silent_fraction",
    "source_env_options", "staleness_probabilities",
]
