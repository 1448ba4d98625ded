"""``FeaturesEnv``: :class:`~rods_gym.env.ToolChainEnv` in the ``features`` view (candidate actions
described by task-independent features, :mod:`rods_gym.renderers.features`), with ``action_masks()``
for sb3-contrib's MaskablePPO. Registered as ``rods/ToolChain-Features-v0`` (medium),
``rods/ToolChain-{Easy,Medium,Hard}-Features-v0`` and ``rods/ToolChain-Aug-Features-v0``, and as the same ids
with ``-v1``: the view with turn cues (``turn_cues=True``: the reply's row says when it closes a user turn, ask and
reply keep their positions), which multi-turn tasks need (docs/features.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .env import ToolChainEnv


class FeaturesEnv(ToolChainEnv):
    """A :class:`ToolChainEnv` whose view is ``features``; every other constructor argument is the same
    (``mode`` may be given, but only as ``"features"``). ``candidate_order``: ``shuffled`` (default) or ``ranked``;
    ``turn_cues``: off in ``-v0`` (the default here, the view the published headline ran), on in ``-v1``
    (:class:`~rods_gym.renderers.features.FeaturesRenderer`)."""

    def __init__(self, mode: str = "features", candidate_order: str = "shuffled", turn_cues: bool = False,
                 **kwargs: Any) -> None:
        if mode != "features":
            raise ValueError(f"FeaturesEnv is the features view; got mode={mode!r} (use ToolChainEnv for the others)")
        from .renderers.features import FeaturesRenderer

        super().__init__(mode="features", **kwargs)
        self.renderer = FeaturesRenderer(self.suite, candidate_order=candidate_order, turn_cues=turn_cues)

    def share_caches(self, other: "FeaturesEnv") -> None:
        """Use ``other``'s compiled tasks (with their signatures) and its renderer's per-task tables: pure functions
        of the task and the suite, built once for all the envs of one process that run the task (the sub-envs of
        :class:`~rods_gym.features_vector.FeaturesVectorEnv`: a group's episodes of a new task then compile it once)."""
        if other.suite is not self.suite:
            raise ValueError("share_caches: the envs must have the same suite")
        self._compiled = other._compiled
        self.renderer.share_caches(other.renderer)  # type: ignore[attr-defined]

    def action_masks(self) -> np.ndarray:
        """Which of the ``Discrete`` candidates exist now (MaskablePPO's mask)."""
        if self.episode is None:
            raise RuntimeError("call reset() before action_masks()")
        return self.renderer.action_masks(self.episode)  # type: ignore[attr-defined]


def make_augmented_features_env(augment: Any = None, **env_kwargs: Any) -> Any:
    """The environment-augmentation baseline (:func:`rods_gym.augment.make_augmented_env`) in the features view."""
    from .augment import AugmentConfig, AugmentWrapper

    return AugmentWrapper(FeaturesEnv(**env_kwargs), augment if augment is not None else AugmentConfig())
