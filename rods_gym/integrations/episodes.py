"""A ToolChainEnv episode driven by action texts, seen as a conversation: what a host trainer's rollout
(TRL's ``rollout_func``, verl's agent loop) needs from the environment.

``start(task)`` resets the env on the task and gives the conversation so far (messages in chat-template
form, and the task's tools as JSON Schemas, in the chat view; the first observation as a user message
in the compact view). ``act(text)`` steps the env with one generated action and says how many messages
the environment added after it (tool results, errors, the scripted user's next turn); the host
tokenizes only those, keeping the ids its model generated. The return is the sum of the env's rewards:
its final progress in [0, 1] with the default reward.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

import rods_gym  # noqa: F401  (registers the rods/* ids)
from rods_gym.task import TaskSpec

Messages = list[dict[str, Any]]
TEXT_VIEWS = ("chat", "compact")


def make_text_env(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> gym.Env:
    """``gym.make(env_id)``, refused unless it is a text view (chat or compact) of a rods env."""
    if env_id not in gym.registry:
        raise ValueError(f"env_id {env_id!r} is not a registered environment (rods/ToolChain-Chat-v0, "
                         "rods/ToolChain-Compact-v0, ...)")
    env = gym.make(env_id, **dict(env_kwargs or {}))
    mode = getattr(env.unwrapped, "mode", None)
    if mode not in TEXT_VIEWS:
        env.close()
        raise ValueError(f"env_id {env_id!r} is the {mode!r} view; a language-model trainer needs a text view "
                         f"({', '.join(TEXT_VIEWS)}), e.g. rods/ToolChain-Chat-v0")
    return env


@dataclass
class StepOutcome:
    """What one action did: messages the env added after it, whether the episode is over, its last reward."""

    n_new: int
    done: bool
    truncated: bool
    reward: float
    error: str


class TextEpisode:
    """One episode of ``env`` (a chat or compact view) at a time, with its conversation."""

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self.mode = env.unwrapped.mode
        if self.mode not in TEXT_VIEWS:
            raise ValueError(f"TextEpisode needs a text view ({', '.join(TEXT_VIEWS)}), got {self.mode!r}")
        self.task: TaskSpec | None = None
        self.messages: Messages = []
        self.tools: list[dict[str, Any]] | None = None
        self.ret = 0.0
        self.progress = 0.0
        self.success = False
        self.done = False
        self.actions = 0

    def start(self, task: TaskSpec, options: Mapping[str, Any] | None = None, seed: int | None = None
              ) -> tuple[Messages, list[dict[str, Any]] | None]:
        obs, _ = self.env.reset(seed=seed, options={**dict(options or {}), "task": task})
        self.task, self.ret, self.progress, self.success, self.done, self.actions = task, 0.0, 0.0, False, False, 0
        if self.mode == "chat":
            self.messages, self.tools = list(self.env.unwrapped.messages), list(self.env.unwrapped.tools)
        else:
            self.messages, self.tools = [{"role": "user", "content": obs}], None
        return self.messages, self.tools

    def act(self, text: str) -> StepOutcome:
        """Step with the action ``text``; the conversation then ends with the action and the env's new messages."""
        if self.task is None or self.done:
            raise RuntimeError("act() needs a started, unfinished episode (call start(task))")
        obs, reward, terminated, truncated, info = self.env.step(text)
        self.actions += 1
        self.ret += float(reward)
        self.progress, self.success = float(info["progress"]), bool(info["success"])
        self.done = bool(terminated or truncated)
        if self.mode == "chat":
            self.messages = list(self.env.unwrapped.messages)
            n_new = len(info["new_messages"])
        else:
            self.messages = [*self.messages, {"role": "assistant", "content": text}, {"role": "user", "content": obs}]
            n_new = 1
        return StepOutcome(n_new, self.done, bool(truncated and not terminated), float(reward), str(info["error"]))

    def stop(self) -> None:
        """End the episode early (the host's turn or length budget ran out)."""
        self.done = True
