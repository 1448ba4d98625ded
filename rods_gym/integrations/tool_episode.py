"""A rods chat-view episode driven by tool calls: what tool-calling hosts need (OpenEnv's MCP tools, TRL's
``environment_factory`` methods, verifiers' tool loop).

The chat view reads one text action per step: a tool call (``<tool_call>{"name": ..., "arguments": ...}</tool_call>``)
or plain text to the user (a question ending in ``?``, else the reply to the current request). A tool-calling host
has no plain-text channel that keeps the episode going (TRL ends a rollout at the first reply without a tool call),
so here the text to the user is one more tool, :data:`USER_TOOL` (``message_user(message)``): its result is the
user's answer or next request, or says that the conversation is over. Every other tool is one of the task's own,
with the task's JSON Schema; a call becomes exactly the chat view's action, so the env validates it, executes it
and scores it as it would any agent's (an invalid call is the env's error observation, and a step).

Misuse of ``message_user`` itself (no ``message`` string, a message holding a tool call) is answered with an error
and does not step the env; so is any call after the episode ended. ``start`` chooses the task as the env's own
``reset`` options do: a task (a :class:`~rods_gym.task.TaskSpec` or its dict), a task id, a split to draw from with
the reset's seed, or nothing (the env's default draw). BFCL-V3 (``rods/BFCL-MultiTurn-v0``) is the same chat view;
its ``split`` (``train``/``test``/``all``) is drawn here from the env's category.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from rods_gym.env import load_split
from rods_gym.episode import Ask, Reply, ToolCall
from rods_gym.renderers.chat import parse_chat_action
from rods_gym.task import TaskSpec

from .episodes import make_text_env

USER_TOOL = "message_user"
USER_TOOL_SCHEMA: dict[str, Any] = {"type": "function", "function": {
    "name": USER_TOOL,
    "description": ("Write to the user. A question ending with '?' asks for information you lack; anything else is "
                    "your reply to their current request (include any value they asked for). Returns the user's "
                    "answer or next request, or says that the conversation is over."),
    "parameters": {"type": "object", "properties": {"message": {
        "type": "string", "description": "the text for the user"}}, "required": ["message"]}}}
OVER = "The conversation is over."
PROTOCOL_ERROR = "protocol"  # the error class of a call answered here without stepping the env


def call_text(name: str, arguments: Any) -> str:
    """The chat view's action for a call of tool ``name`` (``arguments`` as the host parsed them)."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def as_call(action_text: str) -> tuple[str, Any]:
    """A chat-view action text (e.g. the oracle's) as a tool call ``(name, arguments)`` of this protocol."""
    parsed = parse_chat_action(action_text)
    if isinstance(parsed, ToolCall):
        return parsed.name, parsed.arguments
    if isinstance(parsed, (Ask, Reply)):
        return USER_TOOL, {"message": parsed.text}
    raise ValueError(f"{action_text!r} is not a tool call or a message to the user: {parsed}")


@functools.lru_cache(maxsize=1)
def checked_in_tasks() -> dict[str, TaskSpec]:
    """The checked-in splits' tasks by id, loaded once per process and shared read-only by every episode (an env
    resolving an id loads the splits itself, once per env: half a second for each new server session)."""
    from rods_gym.envs import SPLITS, taskset_path

    return {t.id: t for split in SPLITS if taskset_path(split).exists() for t in load_split(split)}


def task_tool_names(tools: Sequence[Mapping[str, Any]]) -> list[str]:
    return [t["function"]["name"] for t in tools]


@dataclass(frozen=True)
class ToolResult:
    """What one call did. ``text`` is what the tool returns to the model: the env's new messages (a tool result
    or error, the user's answer or next request), or :data:`OVER` when the episode ended with nothing to say."""

    name: str
    text: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    reward: float = 0.0
    done: bool = False
    truncated: bool = False
    error: str = "none"  # the env's error class of the step, or PROTOCOL_ERROR (no step)
    stepped: bool = True

    @property
    def is_error(self) -> bool:
        return self.error != "none"


class ToolEpisode:
    """One episode at a time of a chat-view rods env (``rods/ToolChain-*`` chat ids or ``rods/BFCL-MultiTurn-*``),
    played by tool calls. Thread-safe: a lock serializes ``start`` and ``call`` (a server may reach one session
    from two requests)."""

    def __init__(self, env: gym.Env | str, env_kwargs: Mapping[str, Any] | None = None) -> None:
        self.env = make_text_env(env, env_kwargs) if isinstance(env, str) else env
        self.env_id = self.env.spec.id if self.env.spec is not None else type(self.env.unwrapped).__name__
        if getattr(self.env.unwrapped, "mode", None) != "chat":
            raise ValueError(f"{self.env_id}: tool calls need the chat view (rods/ToolChain-Chat-v0, "
                             "rods/BFCL-MultiTurn-v0, ...); the compact and structured views have no tool schemas")
        if USER_TOOL in self._suite_tool_names():
            raise ValueError(f"{self.env_id} has a tool named {USER_TOOL!r}, the name of the user channel")
        self._lock = threading.Lock()
        self.task_id: str | None = None
        self.messages: list[dict[str, Any]] = []
        self.ret = 0.0
        self.progress = 0.0
        self.success = False
        self.done = True  # no episode yet
        self.steps = 0
        self.turn = 0

    def _suite_tool_names(self) -> set[str]:
        suite = getattr(self.env.unwrapped, "suite", None)
        return set(suite.tools) if suite is not None else set()

    @property
    def is_bfcl(self) -> bool:
        return hasattr(self.env.unwrapped, "turn_limit")

    @property
    def started(self) -> bool:
        return self.task_id is not None

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tools of the current task (chat-template form), ``message_user`` last."""
        return [*self.env.unwrapped.tools, USER_TOOL_SCHEMA]

    # -- episodes --------------------------------------------------------------------------
    def _options(self, task: Any, task_id: Any, split: Any, seed: int | None) -> dict[str, Any]:
        given = [k for k, v in (("task", task), ("task_id", task_id), ("split", split)) if v is not None]
        if len(given) > 1:
            raise ValueError(f"reset: give one of task, task_id, split, not {given}")
        if task is not None:
            if isinstance(task, Mapping):
                task = TaskSpec.from_dict(dict(task))
            if not isinstance(task, TaskSpec):
                raise TypeError(f"reset: task must be a task dict (TaskSpec.to_dict()), not {type(task).__name__}")
            return {"task": task}
        if task_id is not None:
            if not isinstance(task_id, str) or not task_id:
                raise TypeError(f"reset: task_id must be a non-empty string, not {task_id!r}")
            own_tasks = self.is_bfcl or getattr(self.env.unwrapped, "tasks", None) is not None
            return {"task": task_id if own_tasks else checked_in_tasks().get(task_id, task_id)}
        if split is None:
            return {}
        if not isinstance(split, str):
            raise TypeError(f"reset: split must be a string, not {type(split).__name__}")
        if not self.is_bfcl:
            return {"split": split}
        from rods_gym.bfcl.env import select_tasks

        if split not in ("train", "test", "all"):
            raise ValueError(f"reset: unknown BFCL split {split!r}; choose train, test or all")
        pool = select_tasks(self.env.unwrapped.category, split)
        rng = np.random.default_rng(seed) if seed is not None else self.env.unwrapped.np_random
        return {"task": pool[int(rng.integers(0, len(pool)))].id}

    def start(self, *, task: Any = None, task_id: Any = None, split: Any = None, seed: int | None = None,
              options: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Reset the env on the chosen task; returns the conversation so far (system prompt, first request).
        ``options``: more ``reset`` options (a curriculum's ``env_options``). A bad choice raises
        ``ValueError``/``KeyError``/``TypeError`` naming it, and the previous episode is left as it was."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise TypeError(f"reset: seed must be a non-negative int or None, not {seed!r}")
        with self._lock:
            options = {**dict(options or {}), **self._options(task, task_id, split, seed)}
            _, info = self.env.reset(seed=seed, options=options)
            self.task_id = str(info["task_id"])
            self.messages = list(self.env.unwrapped.messages)
            self.ret, self.progress, self.success = 0.0, float(info["progress"]), bool(info["success"])
            self.done, self.steps, self.turn = False, 0, int(info["turn"])
            return list(self.messages)

    def call(self, name: Any, arguments: Any = None) -> ToolResult:
        """Call tool ``name`` with ``arguments`` (whatever the host parsed: the env judges them)."""
        with self._lock:
            if not self.started:
                return ToolResult(str(name), f"Error [{PROTOCOL_ERROR}]: no episode; reset first", error=PROTOCOL_ERROR,
                                  stepped=False)
            if self.done:
                return ToolResult(str(name), f"Error [episode_over]: {OVER} Reset to start another.",
                                  done=True, error=PROTOCOL_ERROR, stepped=False)
            if name == USER_TOOL:
                message = arguments.get("message") if isinstance(arguments, Mapping) else None
                problem = self._message_problem(arguments, message)
                if problem:
                    return ToolResult(USER_TOOL, f"Error [{PROTOCOL_ERROR}]: {problem}", error=PROTOCOL_ERROR,
                                      stepped=False)
                return self._step(USER_TOOL, message)
            if not isinstance(name, str) or not name:
                return ToolResult(str(name), f"Error [{PROTOCOL_ERROR}]: the tool name must be a non-empty string",
                                  error=PROTOCOL_ERROR, stepped=False)
            try:
                action = call_text(name, arguments)
            except (TypeError, ValueError, RecursionError) as exc:
                return ToolResult(name, f"Error [{PROTOCOL_ERROR}]: the arguments are not JSON ({type(exc).__name__})",
                                  error=PROTOCOL_ERROR, stepped=False)
            return self._step(name, action)

    @staticmethod
    def _message_problem(arguments: Any, message: Any) -> str:
        if not isinstance(arguments, Mapping) or set(arguments) != {"message"}:
            got = sorted(map(str, arguments)) if isinstance(arguments, Mapping) else type(arguments).__name__
            return f'{USER_TOOL} takes exactly {{"message": <text>}}, got {got}'
        if not isinstance(message, str) or not message.strip():
            return f"{USER_TOOL}: message must be non-empty text"
        if isinstance(parse_chat_action(message), ToolCall) or "<tool_call>" in message:
            return f"{USER_TOOL}: the message holds a tool call; call the tool itself instead"
        return ""

    def _step(self, name: str, action: str) -> ToolResult:
        _, reward, terminated, truncated, info = self.env.step(action)
        new = list(info["new_messages"])
        self.messages = list(self.env.unwrapped.messages)
        self.ret += float(reward)
        self.progress, self.success = float(info["progress"]), bool(info["success"])
        self.done = bool(terminated or truncated)
        self.steps += 1
        self.turn = int(info["turn"])
        text = "\n".join(str(m["content"]) for m in new) if new else OVER
        if self.done and new:
            text += "\n" + OVER
        return ToolResult(name, text, new, float(reward), self.done, bool(truncated and not terminated),
                          str(info["error"]))

    def close(self) -> None:
        self.env.close()


def oracle_call(episode: ToolEpisode) -> tuple[str, Any]:
    """The env oracle's next action as a call ``(name, arguments)`` (for tests, demos and benchmarks)."""
    return as_call(episode.env.unwrapped.oracle_action())


def suite_tools(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every tool an episode of ``env_id`` can offer (chat-template form), ``message_user`` last: the suite's
    tools, or all BFCL classes' functions (as the env renders them: full or short docs)."""
    episode = ToolEpisode(env_id, env_kwargs)
    try:
        unwrapped = episode.env.unwrapped
        if episode.is_bfcl:
            from rods_gym.bfcl.data import FUNC_DOC_FILES, func_docs, short_schema, tool_schema

            short = unwrapped.tool_docs == "short"
            return [short_schema(d["name"]) if short else tool_schema(d) for cls in FUNC_DOC_FILES
                    for d in func_docs(cls)] + [USER_TOOL_SCHEMA]
        suite = unwrapped.suite
        return [suite.public_schemas[name] for name in suite.tools] + [USER_TOOL_SCHEMA]
    finally:
        episode.close()
