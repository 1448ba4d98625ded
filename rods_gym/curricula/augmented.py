"""The arms that train in the augmented environment: ``augment``, ``augment_redraw`` and ``rods_augment``.

The source only chooses tasks; the perturbation lives in the env (:mod:`rods_gym.augment`). A host builds the
envs it trains in as ``gym.make(source.env_id, **source.env_kwargs)`` (the trainer, the SB3 and GRPO learners
and the TRL/verl adapters all do), and evaluates in the plain env.

* ``augment`` is environment augmentation as the paper defines it: the same seeds, the environment perturbed
  (distractor tools; renamed/reordered tools and parameters, paraphrases and error hints where the view shows
  text; world perturbations that leave the task's own entities and values alone), **no new samples**.
* ``augment_redraw`` adds ``redraw_world``: the task's values are re-instantiated on another world seed per
  episode, a new task instance each time: online synthesis without boundary selection, its own arm.
* ``rods_augment`` is RODS's task source trained in the ``augment`` env: does RODS add to augmentation?
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import gymnasium as gym

from ..task import TaskSpec
from .fixed import FixedSeeds
from .rods import RODSSource

AUGMENTED_ENV_ID = "rods/ToolChain-Aug-v0"  # the chat view's twin
FEATURES_ENTRY_POINT = "rods_gym.features_env:FeaturesEnv"


def augmented_env_id(env_id: str) -> str:
    """The augmented twin of a registered env id, in the same view (chat, compact, structured, features)."""
    if env_id.startswith("rods/ToolChain-Aug"):
        return env_id
    if env_id not in gym.registry:
        raise ValueError(f"env id {env_id!r} is not a registered environment")
    spec = gym.registry[env_id]
    if not env_id.startswith("rods/ToolChain-"):
        raise ValueError(f"env id {env_id!r} has no augmented twin (only the rods/ToolChain-* views do)")
    if spec.entry_point == FEATURES_ENTRY_POINT:
        return "rods/ToolChain-Aug-Features-v0"
    mode = spec.kwargs.get("mode", "chat")
    return AUGMENTED_ENV_ID if mode == "chat" else f"rods/ToolChain-Aug-{mode.capitalize()}-v0"


class AugmentedSeeds(FixedSeeds):
    """Arm "augment": the seeds in epochs, every episode in the augmented env ``env_id`` with ``env_kwargs``
    (``{"augment": AugmentConfig fields}``)."""

    name = "augment"

    def __init__(self, tasks: Sequence[TaskSpec], seed: int = 0, *, env_id: str = AUGMENTED_ENV_ID,
                 env_kwargs: Mapping[str, Any] | None = None) -> None:
        super().__init__(tasks, seed)
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})


class RedrawSeeds(AugmentedSeeds):
    """Arm "augment_redraw": :class:`AugmentedSeeds` whose env also re-instantiates the task's values per episode
    (``redraw_world``): per-episode instance resampling."""

    name = "augment_redraw"


class AugmentedRODSSource(RODSSource):
    """Arm "rods_augment": :class:`RODSSource` whose tasks are trained in the augmented env ``env_id``."""

    name = "rods_augment"

    def __init__(self, *args: Any, env_id: str = AUGMENTED_ENV_ID, env_kwargs: Mapping[str, Any] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
