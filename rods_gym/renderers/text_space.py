"""The text views' observation space: a Gymnasium ``Text`` that refuses shared memory.

``AsyncVectorEnv`` (``gym.make_vec(..., vectorization_mode="async")``) puts observations in shared memory
by default and reads that memory once, when it is built, expecting an array view that later writes
update. Gymnasium 1.x reads a ``Text`` space's memory into a tuple of strings instead: a snapshot, so every
observation from the first ``reset()`` on comes back as the empty memory's padding, silently (Gymnasium
issue #1164). This subclass makes that a clear error when the vector env is built, as Gymnasium already
does for its dynamic spaces; everything else (sampling, ``contains``, batching, ``check_env``) is ``Text``'s.
"""

from __future__ import annotations

import multiprocessing as mp
from types import ModuleType
from typing import NoReturn

import gymnasium as gym
from gymnasium.vector.utils import create_shared_memory


class TranscriptText(gym.spaces.Text):
    """A ``Text`` observation space whose vectorized copies must not go through shared memory."""


@create_shared_memory.register(TranscriptText)
def _refuse_shared_memory(space: TranscriptText, n: int = 1, ctx: ModuleType = mp) -> NoReturn:
    raise TypeError("the rods_gym text views (chat, compact) cannot pass observations through shared memory: "
                    "Gymnasium 1.x would return padding instead of the text (its issue #1164). Build the async vector "
                    "env without it: gym.make_vec(id, n, vectorization_mode='async', "
                    "vector_kwargs={'shared_memory': False}), or AsyncVectorEnv(env_fns, shared_memory=False)")
