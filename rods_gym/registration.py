"""Gymnasium ids registered on ``import rods_gym``.

``rods/ToolChain-v0`` is the chat view at medium difficulty. Variants name a difficulty
and/or a view: ``rods/ToolChain-{Easy,Medium,Hard}-v0``, ``rods/ToolChain-{Chat,Compact,Structured}-v0``
and ``rods/ToolChain-{Easy,Medium,Hard}-{Chat,Compact,Structured}-v0``. Any constructor
argument of :class:`rods_gym.env.ToolChainEnv` can still be passed to ``gym.make``.

The environment-augmentation baseline (:mod:`rods_gym.augment`) is registered as
``rods/ToolChain-Aug-v0`` (chat, medium) and ``rods/ToolChain-Aug-{Chat,Compact,Structured}-v0``. Without
``augment=`` these ids run the faithful baseline (arm ``augment``: the environment perturbed, the task instance
kept); pass ``augment=AugmentConfig(...)``, a dict of its fields, or a preset name (``"redraw"`` for arm
``augment_redraw``, ``"faithful"``, ``"full"``, ``"off"``) to ``gym.make`` to choose another.

The ``features`` view (:mod:`rods_gym.renderers.features`: a ``Box`` of task-independent features of
candidate actions, a ``Discrete`` choice among them, ``action_masks()``; for PPO that transfers to unseen
tasks) has its own env class, :class:`rods_gym.features_env.FeaturesEnv`, registered as
``rods/ToolChain-Features-v0`` (medium), ``rods/ToolChain-{Easy,Medium,Hard}-Features-v0`` and
``rods/ToolChain-Aug-Features-v0``, and the same ids with ``-v1``: the view with turn cues (the reply's row says
when it closes a user turn; ask and reply keep their positions), under which MaskablePPO learns multi-turn tasks.
``-v0`` stays as the headline ran it; the structured ids are unchanged.
"""

from __future__ import annotations

import gymnasium as gym

ENTRY_POINT = "rods_gym.env:ToolChainEnv"
AUG_ENTRY_POINT = "rods_gym.augment:make_augmented_env"
FEATURES_ENTRY_POINT = "rods_gym.features_env:FeaturesEnv"
AUG_FEATURES_ENTRY_POINT = "rods_gym.features_env:make_augmented_features_env"
# gym.make_vec on a features id builds the batched FeaturesVectorEnv (vectorization_mode="sync" still gives N envs)
FEATURES_VECTOR_ENTRY_POINT = "rods_gym.features_vector:FeaturesVectorEnv"
AUG_FEATURES_VECTOR_ENTRY_POINT = "rods_gym.features_vector:make_augmented_features_vector"
# BFCL-V3 multi-turn (rods_gym.bfcl, the optional `bfcl` extra): registered by name only, so `import rods_gym` never
# imports bfcl-eval; gym.make raises an ImportError naming the extra when it is absent. Not in ENV_IDS (optional).
BFCL_ID = "rods/BFCL-MultiTurn-v0"  # and rods/BFCL-MultiTurn-Short-v0: tool_docs="short" (a third of the prompt)
BFCL_ENTRY_POINT = "rods_gym.bfcl.env:BFCLMultiTurnEnv"
DIFFICULTY_NAMES = {"Easy": "easy", "Medium": "medium", "Hard": "hard"}
MODE_NAMES = {"Chat": "chat", "Compact": "compact", "Structured": "structured"}
# the features view's versions: v0 as the published headline ran it, v1 with turn cues (multi-turn tasks learnable)
FEATURES_VERSIONS = {"v0": False, "v1": True}


def _register(env_id: str, entry_point: str = ENTRY_POINT, vector_entry_point: str | None = None,
              **kwargs: str | bool) -> None:
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=entry_point, kwargs=kwargs, disable_env_checker=False,
                     vector_entry_point=vector_entry_point)


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
    ids.append("rods/ToolChain-Aug-v0")
    _register(ids[-1], AUG_ENTRY_POINT, mode="chat", difficulty="medium")
    for mname, mode in MODE_NAMES.items():
        ids.append(f"rods/ToolChain-Aug-{mname}-v0")
        _register(ids[-1], AUG_ENTRY_POINT, mode=mode, difficulty="medium")
    for version, cues in FEATURES_VERSIONS.items():
        ids.append(f"rods/ToolChain-Features-{version}")
        _register(ids[-1], FEATURES_ENTRY_POINT, FEATURES_VECTOR_ENTRY_POINT, difficulty="medium", turn_cues=cues)
        for dname, difficulty in DIFFICULTY_NAMES.items():
            ids.append(f"rods/ToolChain-{dname}-Features-{version}")
            _register(ids[-1], FEATURES_ENTRY_POINT, FEATURES_VECTOR_ENTRY_POINT, difficulty=difficulty,
                      turn_cues=cues)
        ids.append(f"rods/ToolChain-Aug-Features-{version}")
        _register(ids[-1], AUG_FEATURES_ENTRY_POINT, AUG_FEATURES_VECTOR_ENTRY_POINT, difficulty="medium",
                  turn_cues=cues)
    _register(BFCL_ID, BFCL_ENTRY_POINT)
    _register("rods/BFCL-MultiTurn-Short-v0", BFCL_ENTRY_POINT, tool_docs="short")
    return ids
