"""Moved: the schedules are :mod:`rods_gym.curricula.schedule` (re-exported here for one release)."""

from __future__ import annotations

from rods_gym.curricula.schedule import SERVED_KEPT, STATE_VERSION, Rollout, SlotSchedule  # noqa: F401
