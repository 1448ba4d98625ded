"""Gymnasium ids registered on ``import rods_gym``.

``rods/ToolChain-v0`` is the chat view at medium difficulty. Variants name a difficulty
and/or a view: ``rods/ToolChain-{Easy,Medium,Hard}-v0``, ``rods/ToolChain-{Chat,Compact,Structured}-v0``
and ``rods/ToolChain-{Easy,Medium,Hard}-{Chat,Compact,Structured}-v0``. Any constructor
argument of :class:`rods_gym.env.ToolChainEnv` can still be passed to ``gym.make``.
"""

from __future__ import annotations

import gymnasium as gym

ENTRY_POINT = "rods_gym.env:ToolChainEnv"
DIFFICULTY_NAMES = {"Easy": "easy", "Medium": "medium", "Hard": "hard"}
MODE_NAMES = {"Chat": "chat", "Compact": "compact", "Structured": "structured"}


def _register(env_id: str, **kwargs: str) -> None:
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=ENTRY_POINT, kwargs=kwargs, disable_env_checker=False)


def register_envs() -> list[str]:
    ids = ["rods/ToolChain-v0"]
    _register("rods/ToolChain-v0", mode="chat", difficulty="medium")
    for dname, difficulty in DIFFICULTY_NAMES.items():
        ids.append(f"rods/ToolChain-{dname}-v0")
        _register(ids[-1], mode="chat", difficulty=difficulty)
    for mname, mode in MODE_NAMES.items():
        ids.append(f"rods/ToolChain-{mname}-v0")
        _register(ids[-1], mode=mode, difficulty="medium")
        for dname, difficulty in DIFFICULTY_NAMES.items():
            ids.append(f"rods/ToolChain-{dname}-{mname}-v0")
            _register(ids[-1], mode=mode, difficulty=difficulty)
    return ids
