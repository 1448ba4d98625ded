"""Moved: task sources by name are :func:`rods_gym.curricula.make_source` (this name stays for one release).

``make_source(name, seeds, seed=0, group_size=8, options=None)`` is the registry's, which also takes ``env_id``
and knows every arm (:func:`rods_gym.curricula.arm_names`), not only the four this module used to.
"""

from __future__ import annotations

from rods_gym.curricula import make_source  # noqa: F401

SOURCE_NAMES = ("rods", "naive", "replay_only", "fixed")  # the arms this module served before the registry
