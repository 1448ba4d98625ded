"""Any curriculum for any Gymnasium agent: a wrapper that runs each episode on the task a schedule picks."""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym

from .schedule import TaskSchedule
from .source import TaskSource


class CurriculumEnv(gym.Wrapper):
    """Runs each episode on the task its :class:`TaskSchedule` picks, through ``reset(options={"task": task})``.

    At the end of an episode ``info["curriculum"]`` holds its batch step, slot, task id, return and success; the
    host hands it back with ``schedule.report_info(info["curriculum"])`` after its own step (the SB3
    :class:`~rods_gym.trainer.sb3.CurriculumCallback` does, after every vectorized step), so the source observes
    the returns the agent trained on.

    Args:
        env: any env whose ``reset`` takes ``options={task_option: TaskSpec}`` (``ToolChainEnv``, ``FeaturesEnv``).
        schedule: a shared :class:`TaskSchedule`, or a task source (a private schedule is made).
        tasks_per_batch, group_size: for a private schedule.
    """

    def __init__(self, env: gym.Env, schedule: TaskSchedule | TaskSource, tasks_per_batch: int = 4,
                 group_size: int | None = None, task_option: str = "task") -> None:
        super().__init__(env)
        self.schedule = schedule if isinstance(schedule, TaskSchedule) else TaskSchedule(schedule, tasks_per_batch,
                                                                                          group_size)
        self.task_option = task_option
        self._episode: tuple[int, int, str] | None = None
        self._return = 0.0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if options and self.task_option in options:
            raise ValueError(f"CurriculumEnv chooses each episode's task; reset options may not set {self.task_option!r}")
        step, slot, task = self.schedule.next_episode()
        obs, info = self.env.reset(seed=seed, options={**(options or {}), self.task_option: task})
        self._episode = (step, slot, task.id)
        self._return = 0.0
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._episode is None:
            raise RuntimeError("call reset() before step()")
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._return += float(reward)
        if terminated or truncated:
            step, slot, task_id = self._episode
            info = {**info, "curriculum": {"step": step, "slot": slot, "task_id": task_id, "return": self._return,
                                           "success": bool(info.get("success", False))}}
            self._episode = None
        return obs, reward, terminated, truncated, info

    def action_masks(self) -> Any:
        """The wrapped env's action masks (for sb3-contrib's MaskablePPO)."""
        return self.env.get_wrapper_attr("action_masks")()
