"""Four views of the same episode: ``chat`` (LLMs), ``compact`` (small models trained from
scratch), ``structured`` (numeric spaces for stable-baselines3) and ``features`` (candidate actions
described by task-independent features, for PPO that transfers to unseen tasks; its env with
``action_masks()`` is :class:`rods_gym.features_env.FeaturesEnv`)."""

from __future__ import annotations

from .base import Renderer, SlotTable
from .chat import ChatRenderer
from .compact import CompactRenderer
from .features import FeaturesRenderer
from .structured import StructuredRenderer

RENDERERS: dict[str, type[Renderer]] = {"chat": ChatRenderer, "compact": CompactRenderer, "structured": StructuredRenderer,
                                     "features": FeaturesRenderer}

__all__ = ["RENDERERS", "Renderer", "SlotTable", "ChatRenderer", "CompactRenderer", "StructuredRenderer", "FeaturesRenderer"]
