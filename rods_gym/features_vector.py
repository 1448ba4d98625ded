"""``FeaturesVectorEnv``: N episodes of the features view stepped in one process, NumPy arrays in and out.

A :class:`gymnasium.vector.VectorEnv` over N :class:`~rods_gym.features_env.FeaturesEnv` sub-envs (or their
augmented twins, ``augment=``): ``step(actions)`` takes an int array of shape ``(N,)`` and returns the
observations ``(N, GLOBAL + N_CANDIDATES * CANDIDATE)`` float32, rewards, terminations and truncations as
arrays, and the infos in Gymnasium's vector layout (a key's values as an array of N, its ``_key`` mask);
``action_masks()`` gives the ``(N, N_CANDIDATES)`` bool masks. Each sub-env's renderer writes its
observation and mask straight into its row of the batch (:meth:`FeaturesRenderer.write_into`), and the
sub-envs share one cache of compiled tasks and per-task tables (:meth:`FeaturesEnv.share_caches`: a group's
episodes of a new task compile it once), so the batch costs what its episodes cost and no copies. (A host that
steps the sub-envs itself, ``venv.envs[i]``, gets that row back from their ``reset``/``step``, a view the next step
overwrites: copy it to keep it.)

Autoreset: **same-step** (``AutoresetMode.SAME_STEP``). When a sub-env's episode ends, ``step`` returns
that episode's reward, termination and truncation, and already the *next* episode's first observation and
mask; the ended episode's last observation is in ``info["final_obs"]`` and its last info in
``info["final_info"]`` (masks ``_final_obs`` / ``_final_info``), as ``SyncVectorEnv(...,
autoreset_mode=AutoresetMode.SAME_STEP)`` of N single envs gives (tested equal). Same-step is what
stable-baselines3's VecEnv convention and a GRPO learner want: no step is spent on a reset, and every
action the learner sends is an action in an episode. ``final_infos`` also holds the ended episodes' last
info dicts as the single envs returned them (None for the others), for hosts that want a list.

Tasks: from each sub-env's own source (``task_set``, or the sampler), or, with ``schedule=``, from a
curriculum schedule (the :class:`~rods_gym.curricula.TaskSchedule` contract: ``schedule.next_episode()`` ->
``(batch step, slot, task)`` at every reset, in sub-env order, as N ``CurriculumEnv`` would ask it). An ended
episode's info then holds ``curriculum`` (its step, slot, task id, return, success), which the host reports
back (``schedule.report_info``, or SB3's ``CurriculumCallback`` through :mod:`rods_gym.trainer.sb3_vector`).

Seeding as ``SyncVectorEnv``: ``reset(seed=s)`` seeds sub-env i with ``s + i`` (or a list, one per sub-env).
Registered as the vector entry point of ``rods/ToolChain-{,Easy-,Medium-,Hard-,Aug-}Features-v0``:
``gym.make_vec("rods/ToolChain-Features-v0", num_envs=16, task_set="train")``. Torch-free (the core).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from .features_env import FeaturesEnv
from .renderers.features import N_CANDIDATES
from .task import TaskSpec


class EpisodeSchedule(Protocol):
    """What the vector env needs of a curriculum schedule (:class:`rods_gym.curricula.TaskSchedule`)."""

    def next_episode(self) -> tuple[int, int, TaskSpec]: ...


def batch_infos(infos: Sequence[Mapping[str, Any] | None], n: int) -> dict[str, Any]:
    """Per-env info dicts (None: none) in Gymnasium's vector layout, as ``VectorEnv._add_info`` builds it env by
    env: per key an array of ``n`` (the dtype of the first value's type for ints, floats, bools and NumPy
    numbers, stacked for arrays, object otherwise; a dict recursively) and its ``_key`` presence mask;
    ``final_obs`` as an object array."""
    out: dict[str, Any] = {}
    first = infos[0]
    if first is not None and all(info is not None and info.keys() == first.keys() for info in infos):
        keys: list[str] = list(first)  # every env has every key (most steps): no presence to work out
        every = np.ones(n, np.bool_)
        for key in keys:
            value = first[key]
            kind = type(value)
            if kind is str:
                column = np.empty(n, dtype=object)
                column[:] = [info[key] for info in infos]  # type: ignore[index]
            elif kind in (int, float, bool):
                column = np.array([info[key] for info in infos], dtype=kind)  # type: ignore[index]
            else:
                return _batch_infos(infos, n)
            out[key], out[f"_{key}"] = column, every.copy()
        return out
    return _batch_infos(infos, n)


def _batch_infos(infos: Sequence[Mapping[str, Any] | None], n: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    keys = list(dict.fromkeys(k for info in infos if info for k in info))
    for key in keys:
        present = np.array([info is not None and key in info for info in infos], dtype=np.bool_)
        where = np.flatnonzero(present)
        values = [infos[i][key] for i in where]  # type: ignore[index]
        first = values[0]
        array: Any
        if isinstance(first, dict) and key != "final_obs":
            array = batch_infos([infos[i][key] if ok else None for i, ok in enumerate(present)], n)  # type: ignore[index]
        elif key != "final_obs" and (type(first) in (int, float, bool) or isinstance(first, np.number)):
            array = np.zeros(n, dtype=type(first))
            array[where] = values
        elif key != "final_obs" and isinstance(first, np.ndarray):
            array = np.zeros((n, *first.shape), dtype=first.dtype)
            array[where] = values
        else:
            array = np.full(n, None, dtype=object)
            for i, v in zip(where, values):
                array[i] = v
        out[key], out[f"_{key}"] = array, present
    return out


class FeaturesVectorEnv(gym.vector.VectorEnv):
    """N features-view episodes in one process (see the module docstring).

    Args:
        num_envs: N, the sub-envs.
        schedule: a curriculum schedule that picks every episode's task (None: each sub-env's own tasks).
        augment: an :class:`~rods_gym.augment.AugmentConfig` (or a dict of its fields): the sub-envs are the
            environment-augmentation twins (``rods/ToolChain-Aug-Features-v0``); None: plain envs.
        copy: return a copy of the observation batch (True, Gymnasium's default) or the batch itself, which
            the next ``step`` overwrites (False: for a host that copies it at once, as a rollout buffer does).
        **env_kwargs: passed to every :class:`~rods_gym.features_env.FeaturesEnv` (``task_set``, ``difficulty``,
            ``candidate_order``, ``max_steps``, ``reward``, ...).
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, num_envs: int = 8, *, schedule: EpisodeSchedule | None = None, augment: Any = None,
                 copy: bool = True, **env_kwargs: Any) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        if schedule is not None and not callable(getattr(schedule, "next_episode", None)):
            raise TypeError(f"schedule must have next_episode() -> (step, slot, task) (a TaskSchedule), got "
                            f"{type(schedule).__name__}")
        self.num_envs = num_envs
        self.schedule = schedule
        self.copy = copy
        self.envs: list[Any] = []
        for _ in range(num_envs):
            env: Any = FeaturesEnv(**env_kwargs)
            if augment is not None:
                from .augment import AugmentConfig, AugmentWrapper

                env = AugmentWrapper(env, AugmentConfig() if augment is True else augment)
            self.envs.append(env)
        first = self.envs[0].unwrapped
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._obs = np.zeros((num_envs, *self.single_observation_space.shape), np.float32)
        self._masks = np.zeros((num_envs, N_CANDIDATES), np.bool_)
        for i, env in enumerate(self.envs):
            if i:
                env.unwrapped.share_caches(first)
            env.unwrapped.renderer.write_into(self._obs[i], self._masks[i])
        self._rewards = np.zeros(num_envs, np.float64)
        self._terminations = np.zeros(num_envs, np.bool_)
        self._truncations = np.zeros(num_envs, np.bool_)
        self._episodes: list[tuple[int, int, str] | None] = [None] * num_envs  # (step, slot, task id) per sub-env
        self._returns = [0.0] * num_envs
        self._started = False
        self.final_infos: list[dict[str, Any] | None] = [None] * num_envs

    # -- resets ------------------------------------------------------------------------------------------------
    def _reset_one(self, i: int, seed: int | None, options: Mapping[str, Any] | None) -> dict[str, Any]:
        options = dict(options or {})
        if self.schedule is not None:
            if "task" in options:
                raise ValueError("this vector env's schedule chooses each episode's task; reset options may not "
                                 "set 'task'")
            step, slot, task = self.schedule.next_episode()
            options["task"] = task
            self._episodes[i] = (step, slot, task.id)
            self._returns[i] = 0.0
        _, info = self.envs[i].reset(seed=seed, options=options or None)
        return info

    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: Mapping[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every sub-env (``seed``: None, an int s for ``s + i``, or one per sub-env; ``options`` go to every
        sub-env's reset)."""
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)  # type: ignore[arg-type]
            if len(seeds) != self.num_envs:
                raise ValueError(f"reset: {len(seeds)} seeds for {self.num_envs} sub-envs")
        infos = [self._reset_one(i, s, options) for i, s in enumerate(seeds)]
        self._started = True
        self.final_infos = [None] * self.num_envs
        return (self._obs.copy() if self.copy else self._obs), batch_infos(infos, self.num_envs)

    # -- steps -------------------------------------------------------------------------------------------------
    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if not self._started:
            raise RuntimeError("call reset() before step()")
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"step: expected {self.num_envs} actions (one candidate index per sub-env), got an array "
                             f"of shape {actions.shape}")
        rewards, terminations, truncations = self._rewards, self._terminations, self._truncations
        infos: list[dict[str, Any]] = []
        finals: list[dict[str, Any] | None] = [None] * self.num_envs
        for i, env in enumerate(self.envs):
            _, reward, terminated, truncated, info = env.step(actions[i])
            rewards[i], terminations[i], truncations[i] = reward, terminated, truncated
            if self.schedule is not None:
                self._returns[i] += float(reward)
            if terminated or truncated:
                episode = self._episodes[i]
                if episode is not None:
                    step, slot, task_id = episode
                    info = {**info, "curriculum": {"step": step, "slot": slot, "task_id": task_id,
                                                   "return": self._returns[i], "success": bool(info["success"])}}
                finals[i] = info
                final_obs = self._obs[i].copy()
                info = {"final_obs": final_obs, "final_info": info, **self._reset_one(i, None, None)}
            infos.append(info)
        self.final_infos = finals
        return ((self._obs.copy() if self.copy else self._obs), rewards.copy(), terminations.copy(),
                truncations.copy(), batch_infos(infos, self.num_envs))

    def action_masks(self) -> np.ndarray:
        """The ``(N, N_CANDIDATES)`` masks of the candidates that exist now (MaskablePPO's masks)."""
        if not self._started:
            raise RuntimeError("call reset() before action_masks()")
        return self._masks.copy()

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()


def make_augmented_features_vector(num_envs: int = 8, augment: Any = None, **kwargs: Any) -> FeaturesVectorEnv:
    """The vector entry point of ``rods/ToolChain-Aug-Features-v0``: sub-envs in the environment-augmentation
    twin (``augment``: an AugmentConfig or a dict of its fields; None: its defaults)."""
    return FeaturesVectorEnv(num_envs, augment=True if augment is None else augment, **kwargs)
