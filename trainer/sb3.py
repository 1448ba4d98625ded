"""Any curriculum for any Gymnasium agent: a task-sampling env wrapper and an SB3 callback.

:class:`CurriculumEnv` asks a :class:`TaskSchedule` for the task of each episode and passes
it to the wrapped env through ``reset(options={"task": task})``. The schedule draws a batch of
``tasks_per_batch`` tasks from the task source and hands each out ``group_size`` (G) times.
At the end of an episode the wrapper adds ``info["curriculum"]`` (batch step, slot, task id,
return, success). :class:`CurriculumCallback` collects those returns per task and, once every
group of a batch is complete, calls ``source.observe`` with the groups in batch order — the
same returns the agent trained on, so the curriculum costs no extra episode.

Usage with stable-baselines3 / sb3-contrib (in-process envs: ``DummyVecEnv``)::

    schedule = TaskSchedule(RODSSource(seeds, resampler, RODSConfig(), rng_seed=0), tasks_per_batch=4)
    env = make_vec_env(lambda: CurriculumEnv(gym.make("rods/ToolChain-Easy-Structured-v0"), schedule), n_envs=2)
    MaskablePPO("MultiInputPolicy", env).learn(20_000, callback=CurriculumCallback(schedule))
"""

from __future__ import annotations

from collections import deque
from typing import Any, SupportsFloat

import gymnasium as gym
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import SubprocVecEnv, VecEnv, VecEnvWrapper

from rods_gym.task import TaskSpec

from .task_source import GroupResult, TaskSource


class TaskSchedule:
    """Episodes to run, as ``(batch step, slot, task)``: each batch's tasks, G episodes each.

    Shared by every :class:`CurriculumEnv` of one (in-process) vectorized env and by the
    callback. A new batch is drawn when the previous one has been handed out, even if some
    of its episodes are still running; groups are observed when they are complete.
    """

    def __init__(self, source: TaskSource, tasks_per_batch: int = 4, group_size: int | None = None) -> None:
        if tasks_per_batch < 1:
            raise ValueError(f"tasks_per_batch must be >= 1, got {tasks_per_batch}")
        if group_size is None:
            config = getattr(source, "config", None)
            group_size = int(getattr(config, "group_size", 8))
        if group_size < 2:
            raise ValueError(f"group_size must be >= 2 (a group needs a return variance), got {group_size}")
        self.source = source
        self.tasks_per_batch = tasks_per_batch
        self.group_size = group_size
        self.next_step = 0
        self.batches: dict[int, list[TaskSpec]] = {}  # handed out, not yet observed
        self._queue: deque[tuple[int, int, TaskSpec]] = deque()

    def next_episode(self) -> tuple[int, int, TaskSpec]:
        if not self._queue:
            step = self.next_step
            tasks = self.source.next_batch(step, self.tasks_per_batch)
            self.batches[step] = tasks
            self._queue.extend((step, slot, t) for slot, t in enumerate(tasks) for _ in range(self.group_size))
            self.next_step += 1
        return self._queue.popleft()


class CurriculumEnv(gym.Wrapper):
    """Runs each episode on the task its :class:`TaskSchedule` picks.

    Args:
        env: any env whose ``reset`` takes ``options={task_option: TaskSpec}`` (``ToolChainEnv``).
        schedule: a shared :class:`TaskSchedule`, or a task source (a private schedule is made).
        tasks_per_batch, group_size: for a private schedule.
    """

    def __init__(self, env: gym.Env, schedule: TaskSchedule | TaskSource, tasks_per_batch: int = 4,
                 group_size: int | None = None, task_option: str = "task") -> None:
        super().__init__(env)
        self.schedule = schedule if isinstance(schedule, TaskSchedule) else TaskSchedule(schedule, tasks_per_batch, group_size)
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


STDOUT_KEYS = frozenset({"boundary_fraction", "silent_fraction", "kappa", "tasks_seen", "pool/active", "pool/staged",
                         "admission/yield", "extra_rollouts"})


def _innermost(venv: VecEnv) -> VecEnv:
    while isinstance(venv, VecEnvWrapper):
        venv = venv.venv
    return venv


class CurriculumCallback(BaseCallback):
    """Feeds finished episodes' returns back to the task source, one complete batch at a time,
    and logs the source's telemetry under ``curriculum/`` after each observation (all of it
    to CSV/TensorBoard, a summary to the stdout table)."""

    def __init__(self, schedule: TaskSchedule | None = None, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.schedule = schedule
        self.observed_batches = 0
        self.episodes = 0
        self._returns: dict[int, dict[int, list[tuple[float, bool]]]] = {}

    def _init_callback(self) -> None:
        if isinstance(_innermost(self.training_env), SubprocVecEnv):
            raise ValueError("CurriculumCallback needs the envs in this process (DummyVecEnv): a SubprocVecEnv "
                             "gives each worker its own copy of the task schedule")
        schedules = self.training_env.get_attr("schedule")
        if self.schedule is None:
            self.schedule = schedules[0]
        if any(s is not self.schedule for s in schedules):
            raise ValueError("every CurriculumEnv of the training env must share the callback's TaskSchedule")

    def _on_step(self) -> bool:
        assert self.schedule is not None
        for info in self.locals["infos"]:
            ep = info.get("curriculum")
            if ep is None:
                continue
            self.episodes += 1
            slots = self._returns.setdefault(ep["step"], {})
            slots.setdefault(ep["slot"], []).append((float(ep["return"]), bool(ep["success"])))
            self._maybe_observe(ep["step"])
        return True

    def _maybe_observe(self, step: int) -> None:
        assert self.schedule is not None
        tasks = self.schedule.batches[step]
        slots = self._returns[step]
        if len(slots) < len(tasks) or any(len(slots[i]) < self.schedule.group_size for i in range(len(tasks))):
            return
        groups = [GroupResult(task, tuple(r for r, _ in slots[i]), tuple(s for _, s in slots[i]))
                  for i, task in enumerate(tasks)]
        self.schedule.source.observe(step, groups)
        del self.schedule.batches[step], self._returns[step]
        self.observed_batches += 1
        for k, v in self.schedule.source.telemetry().items():
            # SB3's stdout table truncates long keys (and refuses collisions): it shows a summary
            self.logger.record(f"curriculum/{k}", v, exclude=None if k in STDOUT_KEYS else ("stdout", "log"))
