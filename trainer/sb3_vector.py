"""stable-baselines3 / sb3-contrib on the batched features view: :class:`FeaturesVecEnv` is a
:class:`~rods_gym.features_vector.FeaturesVectorEnv` behind SB3's ``VecEnv`` interface.

It replaces ``DummyVecEnv([lambda: ActionMasker(CurriculumEnv(FeaturesEnv(...), schedule)), ...])``: the
episodes, tasks and observations are the same (``tests/test_features_vector.py``), but one process steps the
batch without a wrapper per sub-env, the masks come as one array (``env_method("action_masks")`` and
``action_masks()``, what MaskablePPO asks), and no info is deep-copied. SB3's conventions: ``step_wait``
returns float32 rewards and ``dones = terminated | truncated``; an ended sub-env's info is its last info (with
``curriculum`` when a schedule picks the tasks, read by :class:`~rods_gym.trainer.sb3.CurriculumCallback`),
``terminal_observation`` and ``TimeLimit.truncated``; the other sub-envs' infos are empty (SB3 reads infos only
where an episode ended). The vector env's same-step autoreset is SB3's own.

Usage::

    schedule = TaskSchedule(make_source("rods", load_split("train"), group_size=2), tasks_per_batch=32)
    env = VecMonitor(FeaturesVecEnv(FeaturesVectorEnv(8, schedule=schedule)))
    MaskablePPO("MlpPolicy", env).learn(196_608, callback=CurriculumCallback(schedule))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn

from rods_gym.features_vector import FeaturesVectorEnv


class FeaturesVecEnv(VecEnv):
    """A :class:`FeaturesVectorEnv` as an SB3 ``VecEnv`` (see the module docstring)."""

    def __init__(self, venv: FeaturesVectorEnv) -> None:
        if not isinstance(venv, FeaturesVectorEnv):
            raise TypeError(f"FeaturesVecEnv wraps a FeaturesVectorEnv, got {type(venv).__name__}")
        self.venv = venv  # before VecEnv.__init__, which reads the sub-envs' render_mode
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)
        self._actions: np.ndarray | None = None

    # -- the VecEnv interface ----------------------------------------------------------------------------------
    def reset(self) -> VecEnvObs:
        seeds = self._seeds if any(s is not None for s in self._seeds) else None
        options = self._options[0] if self._options and self._options[0] else None
        if any(o != self._options[0] for o in self._options):
            raise ValueError("FeaturesVecEnv: every sub-env resets with the same options (set_options(dict))")
        obs, _ = self.venv.reset(seed=seeds, options=options)
        self.reset_infos = [{} for _ in range(self.num_envs)]
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        if self._actions is None:
            raise RuntimeError("step_async() before step_wait()")
        obs, rewards, terminated, truncated, info = self.venv.step(self._actions)
        self._actions = None
        dones = terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if dones.any():
            final_obs = info["final_obs"]
            for i in np.flatnonzero(dones):
                infos[i] = {**self.venv.final_infos[i], "terminal_observation": final_obs[i],  # type: ignore[dict-item]
                            "TimeLimit.truncated": bool(truncated[i] and not terminated[i])}
        return obs, rewards.astype(np.float32), dones, infos

    def action_masks(self) -> np.ndarray:
        return self.venv.action_masks()

    def close(self) -> None:
        self.venv.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """``schedule`` is the vector env's (shared by every sub-env, as ``CurriculumCallback`` checks); any other
        attribute is read from the sub-envs."""
        if attr_name == "schedule":
            return [self.venv.schedule for _ in self._get_indices(indices)]
        return [getattr(self.venv.envs[i], attr_name) for i in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        for i in self._get_indices(indices):
            setattr(self.venv.envs[i], attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        """``action_masks`` from the batch (one row per sub-env); any other method called on the sub-envs."""
        if method_name == "action_masks":
            masks = self.venv.action_masks()
            return [masks[i] for i in self._get_indices(indices)]
        return [getattr(self.venv.envs[i], method_name)(*method_args, **method_kwargs)
                for i in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        from stable_baselines3.common import env_util

        return [env_util.is_wrapped(self.venv.envs[i], wrapper_class) for i in self._get_indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [None for _ in range(self.num_envs)]
