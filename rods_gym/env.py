"""``ToolChainEnv``: a multi-turn tool-use episode as a Gymnasium environment."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from pathlib import Path
from numbers import Integral
from typing import Any, Mapping, Sequence

import gymnasium as gym
import numpy as np

from .episode import CompiledTask, Episode, RewardConfig
from .oracle import oracle_action
from .renderers import RENDERERS
from .renderers.frame import text_frame
from .sampler import DIFFICULTIES, SamplerConfig, TaskSampler
from .signature import compute_signature
from .suite import Suite, default_suite
from .task import TaskSpec, read_jsonl, task_generator  # task_generator: also public here
from .world import WorldState

TASK_CACHE = 4096


def load_split(split: str) -> list[TaskSpec]:
    """A checked-in task set: ``train`` (the seeds), ``dev``, ``test`` or ``ood``."""
    from rods_gym.envs import taskset_path

    path = taskset_path(split)
    if not path.exists():
        raise FileNotFoundError(f"task set {split!r} not found at {path}; build it with "
                                "python -m rods_gym.envs.build_tasksets")
    return read_jsonl(path)


def config_of(cls: type, value: Any, name: str) -> Any:
    """``value`` as a ``cls`` (a frozen config dataclass): kept when it is one, built from a dict of its fields
    (lists become tuples, as YAML and JSON give ranges), None kept; anything else is a TypeError naming ``name``."""
    if value is None or isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        fields = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(str(k) for k in value if k not in fields)
        if unknown:
            raise TypeError(f"{name}: unknown field(s) {unknown}; {cls.__name__} has {', '.join(fields)}")
        try:
            return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in value.items()})
        except TypeError as exc:
            raise TypeError(f"{name}: {exc}") from None
    raise TypeError(f"{name} must be a {cls.__name__} or a dict of its fields, not {type(value).__name__}")


class ToolChainEnv(gym.Env):
    """One task per episode; each step is one agent action (tool call, question or reply).

    Args:
        mode: ``chat`` (text, chat-template messages), ``compact`` (symbolic text) or
            ``structured`` (Dict/MultiDiscrete spaces with ``action_masks()``).
        difficulty: sampler preset (``easy``/``medium``/``hard``) used when no task set is given.
        task_set: a split name (``train``/``dev``/``test``/``ood``), a JSONL path, or a list
            of tasks; episodes then draw from it instead of the sampler.
        sampler_config: explicit knobs (overrides ``difficulty``).
        reward: optional penalties/bonus (off by default: return = final progress in [0, 1]).
        max_steps: step limit (truncation); default ``8 + 3 * calls + 2 * turns``.
        suite: the domains (default: the built-in suite).
        slot_ids: ``compact`` view only: ``ordered`` (values numbered in order of appearance),
            ``shuffled`` (the ids under a permutation drawn from a generator seeded by the task, as its
            world is: every episode of a task, a GRPO group or a replayed branch, shows the same ids) or
            ``typed`` (each value named by its type and rank, ``$email.0``).
    """

    metadata = {"render_modes": ["ansi", "human", "rgb_array"], "render_fps": 1}

    def __init__(self, mode: str = "chat", difficulty: str = "medium", task_set: str | Path | Sequence[TaskSpec] | None = None,
                 sampler_config: SamplerConfig | Mapping[str, Any] | None = None,
                 reward: RewardConfig | Mapping[str, Any] | None = None,
                 max_steps: int | None = None, suite: Suite | None = None, sampler_seed: int = 0,
                 render_mode: str | None = None, slot_ids: str = "ordered") -> None:
        if mode not in RENDERERS:
            raise ValueError(f"unknown mode {mode!r}; choose one of {sorted(RENDERERS)}")
        if sampler_config is None and difficulty not in DIFFICULTIES:
            raise ValueError(f"unknown difficulty {difficulty!r}; choose one of {sorted(DIFFICULTIES)}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"unknown render_mode {render_mode!r}; choose one of {self.metadata['render_modes']} or None")
        sampler_config = config_of(SamplerConfig, sampler_config, "sampler_config")
        reward = config_of(RewardConfig, reward, "reward")
        if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, Integral)
                                      or max_steps < 1):
            raise ValueError(f"max_steps must be a positive int (or None: 8 + 3 * calls + 2 * turns), got {max_steps!r}")
        self.suite = suite or default_suite()
        self.mode = mode
        if mode == "compact":
            self.renderer = RENDERERS[mode](self.suite, slot_ids=slot_ids)  # type: ignore[call-arg]
        elif slot_ids != "ordered":
            raise ValueError(f"slot_ids={slot_ids!r} applies to the compact view only, not {mode!r}")
        else:
            self.renderer = RENDERERS[mode](self.suite)
        self.observation_space = self.renderer.observation_space
        self.action_space = self.renderer.action_space
        self.reward_config = reward or RewardConfig()
        self.max_steps = max_steps
        self.render_mode = render_mode
        self.sampler = TaskSampler(self.suite, sampler_config or DIFFICULTIES[difficulty], seed=sampler_seed)
        self.tasks: list[TaskSpec] | None = self._load_tasks(task_set)
        self._by_id = {t.id: t for t in self.tasks} if self.tasks else {}
        self._compiled: OrderedDict[str, tuple[CompiledTask, str]] = OrderedDict()
        self._splits: dict[str, list[TaskSpec]] = {}
        self.episode: Episode | None = None
        self._shown = 0  # render_mode="human": characters of the transcript already printed

    @staticmethod
    def _load_tasks(task_set: Any) -> list[TaskSpec] | None:
        if task_set is None:
            return None
        if isinstance(task_set, (str, Path)):
            if str(task_set) in ("train", "dev", "test", "ood"):
                return load_split(str(task_set))
            if not Path(task_set).is_file():
                raise FileNotFoundError(f"task_set {str(task_set)!r} is neither a split name (train, dev, test, ood) "
                                        "nor a JSONL file")
            return read_jsonl(task_set)
        tasks = [t if isinstance(t, TaskSpec) else TaskSpec.from_dict(t) for t in task_set]
        if not tasks:
            raise ValueError("task_set is empty")
        return tasks

    # -- task selection ----------------------------------------------------------------
    def _resolve_task(self, options: Mapping[str, Any] | None) -> TaskSpec:
        options = options or {}
        if not isinstance(options, Mapping):
            raise TypeError(f"reset options must be a dict such as {{'task': ..., 'split': 'test'}}, not "
                            f"{type(options).__name__}")
        unknown = set(options) - {"task", "split"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; use 'task' and/or 'split'")
        task = options.get("task")
        split = options.get("split")
        if split is not None:  # checked even when a task is given, where the split is not loaded
            from rods_gym.envs import check_split

            check_split(split)
        if isinstance(task, TaskSpec):
            return task
        if isinstance(task, Mapping):
            return TaskSpec.from_dict(task)
        if isinstance(task, str):
            return self._task_by_id(task, split)
        if task is not None:
            raise TypeError(f"options['task'] must be a TaskSpec, a dict or a task id, not {type(task).__name__}")
        if split is not None:
            pool = self._split(split)
            return pool[int(self.np_random.integers(0, len(pool)))]
        if self.tasks is not None:
            return self.tasks[int(self.np_random.integers(0, len(self.tasks)))]
        return self.sampler.sample(int(self.np_random.integers(0, 2**31 - 1)))

    def _split(self, split: str) -> list[TaskSpec]:
        if split not in self._splits:
            self._splits[split] = load_split(split)
        return self._splits[split]

    def _task_by_id(self, task_id: str, split: str | None) -> TaskSpec:
        """A task named by id: in ``split`` when one is given, else in the env's own task set, then in
        the checked-in splits (each loaded once, when first needed)."""
        def find(name: str) -> TaskSpec | None:
            return next((t for t in self._split(name) if t.id == task_id), None)

        if split is not None:
            hit = find(split)
            if hit is None:
                raise KeyError(f"no task with id {task_id!r} in split {split!r}")
            return hit
        if task_id in self._by_id:
            return self._by_id[task_id]
        from rods_gym.envs import SPLITS, taskset_path

        for name in [*self._splits, *(s for s in SPLITS if s not in self._splits and taskset_path(s).exists())]:
            hit = find(name)
            if hit is not None:
                return hit
        raise KeyError(f"no task with id {task_id!r} in this env's task set or the checked-in splits {SPLITS}")

    def _compile(self, task: TaskSpec) -> tuple[CompiledTask, str]:
        hit = self._compiled.get(task.id)
        if hit is not None and hit[0].task is task:
            return hit
        for c in task.calls:
            if c.tool not in self.suite.tools:
                raise ValueError(f"task {task.id!r} uses unknown tool {c.tool!r}")
        entry = (CompiledTask(task, self.suite.tools), compute_signature(task, self.suite).wl_hash)
        self._compiled[task.id] = entry
        if len(self._compiled) > TASK_CACHE:
            self._compiled.popitem(last=False)
        return entry

    # -- gymnasium API -----------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        task = self._resolve_task(options)
        compiled, sig = self._compile(task)
        steps = self.max_steps or (8 + 3 * len(task.calls) + 2 * len(task.turns))
        state = WorldState(self.suite.world(task.world_seed))
        self.episode = Episode(task, compiled, state, self.suite.tools, self.suite.checkers, self.suite.executor,
                               self.reward_config, steps)
        self._signature = sig
        if getattr(self.renderer, "slot_ids", "ordered") == "shuffled":  # like the world, the ids follow from the task
            self.renderer.shuffle_slots(task_generator(task))  # type: ignore[attr-defined]
        obs = self.renderer.reset(self.episode)
        info = self._info("none")
        if self.mode == "chat":
            info["new_messages"] = list(self.renderer.new_messages)  # type: ignore[attr-defined]
        self._shown = 0
        self._show()
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        ep = self.episode
        if ep is None:
            raise RuntimeError("call reset() before step()")
        renderer = self.renderer
        before = len(ep.satisfied) + ep.answered
        outcome = ep.step(renderer.decode(action))
        obs = renderer.observe(ep, outcome)
        done = len(ep.satisfied) + ep.answered  # ep.progress and ep.success, inlined (as _info)
        info = {"progress": done / ep.c.n_required, "success": done == ep.c.n_required, "error": outcome.error,
                "effect": outcome.effect(done > before), "turn": ep.turn, "step": ep.steps, "task_id": ep.task.id,
                "signature": self._signature}
        if self.mode == "chat":
            info["new_messages"] = list(self.renderer.new_messages)  # type: ignore[attr-defined]
        self._show()
        return obs, float(outcome.reward), outcome.terminated, outcome.truncated, info

    def _info(self, error: str) -> dict[str, Any]:
        ep = self.episode
        assert ep is not None
        return {"progress": ep.progress, "success": ep.success, "error": error, "turn": ep.turn,
                "step": ep.steps, "task_id": ep.task.id, "signature": self._signature}

    def _show(self) -> None:
        """``render_mode="human"``: print what the transcript gained since the last print (every view,
        the structured one included, prints its readable text, never its arrays)."""
        if self.render_mode != "human":
            return
        text = self.renderer.text()
        new = text[self._shown:].lstrip("\n")
        self._shown = len(text)
        if new:
            print(new)

    def render(self) -> str | np.ndarray | None:
        """The episode so far: its text (``ansi``, and when no render mode was set), printed (``human``) or
        drawn on a fixed-size RGB frame (``rgb_array``, e.g. for video recorders); None before ``reset``."""
        if self.episode is None:
            return None
        text = self.renderer.text()
        if self.render_mode == "human":
            print(text)
            return None
        if self.render_mode == "rgb_array":
            return text_frame(text)
        return text

    # -- helpers for agents ------------------------------------------------------------
    def action_masks(self) -> np.ndarray:
        """Valid-action masks per dimension (structured mode; for sb3-contrib MaskablePPO)."""
        if self.mode != "structured":
            raise AttributeError("action_masks() exists only in structured mode")
        if self.episode is None:
            raise RuntimeError("call reset() before action_masks()")
        return self.renderer.action_masks(self.episode)  # type: ignore[attr-defined]

    def encode(self, action: Any) -> Any:
        """This renderer's action for an abstract ``ToolCall``/``Ask``/``Reply``."""
        if self.episode is None:
            raise RuntimeError("call reset() before encode()")
        return self.renderer.encode(action, self.episode)

    def oracle_action(self) -> Any:
        """The oracle's next action, in this renderer's action format."""
        if self.episode is None:
            raise RuntimeError("call reset() before oracle_action()")
        return self.encode(oracle_action(self.episode))

    @property
    def task(self) -> TaskSpec | None:
        return None if self.episode is None else self.episode.task

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation so far in chat-template form (chat mode)."""
        return getattr(self.renderer, "messages", [])

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The task's tool schemas in chat-template form (chat mode)."""
        return getattr(self.renderer, "tools", [])
