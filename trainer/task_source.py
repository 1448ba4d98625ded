"""Moved: the task-source interface is :mod:`rods_gym.curricula.source` (re-exported here for one release)."""

from __future__ import annotations

from rods_gym.curricula.fixed import FixedSeeds  # noqa: F401
from rods_gym.curricula.source import (REQUIRED_METHODS, GroupResult, TaskSource, check_task_source,  # noqa: F401
                                       source_env_options)
