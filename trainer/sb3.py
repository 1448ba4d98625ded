"""stable-baselines3 with any curriculum: the callback that feeds finished episodes back to the task source.

:class:`~rods_gym.curricula.CurriculumEnv` (re-exported here) asks a shared
:class:`~rods_gym.curricula.TaskSchedule` for each episode's task and reports its return in
``info["curriculum"]``; :class:`CurriculumCallback` hands those to the schedule after every vectorized step, so
the source observes each complete batch's groups — the returns the agent trained on, no extra episode.

Usage with stable-baselines3 / sb3-contrib (in-process envs: ``DummyVecEnv``)::

    schedule = TaskSchedule(make_source("rods", seeds, group_size=8), tasks_per_batch=4)
    env = make_vec_env(lambda: CurriculumEnv(gym.make("rods/ToolChain-Easy-Structured-v0"), schedule), n_envs=2)
    MaskablePPO("MultiInputPolicy", env).learn(20_000, callback=CurriculumCallback(schedule))
"""

from __future__ import annotations

from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import SubprocVecEnv, VecEnv, VecEnvWrapper

from rods_gym.curricula import CurriculumEnv, TaskSchedule  # noqa: F401 (re-exported: their home until 2026-12)


STDOUT_KEYS = frozenset({"boundary_fraction", "silent_fraction", "kappa", "tasks_seen", "pool/active", "pool/staged",
                         "admission/yield", "extra_rollouts"})


def _innermost(venv: VecEnv) -> VecEnv:
    while isinstance(venv, VecEnvWrapper):
        venv = venv.venv
    return venv


class CurriculumCallback(BaseCallback):
    """Feeds finished episodes' returns back to the task source (through the shared schedule, which observes one
    complete batch at a time) and logs the source's telemetry under ``curriculum/`` after each observation (all
    of it to CSV/TensorBoard, a summary to the stdout table)."""

    def __init__(self, schedule: TaskSchedule | None = None, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.schedule = schedule
        self.observed_batches = 0
        self.episodes = 0

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
            if self.schedule.report_info(ep):
                self.observed_batches += 1
                self._log_telemetry()
        return True

    def _log_telemetry(self) -> None:
        assert self.schedule is not None
        for k, v in self.schedule.source.telemetry().items():
            # SB3's stdout table truncates long keys (and refuses collisions): it shows a summary
            self.logger.record(f"curriculum/{k}", v, exclude=None if k in STDOUT_KEYS else ("stdout", "log"))
