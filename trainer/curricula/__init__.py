"""Moved: the curricula now live in the core, :mod:`rods_gym.curricula` (torch-free, one registry of arms).

This package re-exports the names it held for one release (README, changelog). ``default_resampler`` is
:func:`rods_gym.synth.make_resampler`; the submodules ``arms``, ``factories`` (``SOURCES``), ``config``,
``detector``, ``pool``, ``rods``, ``synthesis`` and ``procedural`` are gone: import from ``rods_gym.curricula``.
"""

from __future__ import annotations

from rods_gym.curricula import *  # noqa: F401,F403
from rods_gym.curricula import __all__ as _curricula_all
from rods_gym.synth import make_resampler as default_resampler

ARMS = ("fixed", "augment", "offline", "rods", "replay_only", "dapo", "naive")  # the names this package served
__all__ = [*_curricula_all, "default_resampler"]
