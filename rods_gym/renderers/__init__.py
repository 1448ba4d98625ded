"""Three views of the same episode: ``chat`` (LLMs), ``compact`` (small models trained from
scratch) and ``structured`` (numeric spaces for stable-baselines3)."""

from __future__ import annotations

from .base import Renderer, SlotTable
from .chat import ChatRenderer
from .compact import CompactRenderer
from .structured import StructuredRenderer

RENDERERS: dict[str, type[Renderer]] = {"chat": ChatRenderer, "compact": CompactRenderer, "structured": StructuredRenderer}

__all__ = ["RENDERERS", "Renderer", "SlotTable", "ChatRenderer", "CompactRenderer", "StructuredRenderer"]
