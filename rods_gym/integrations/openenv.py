"""Every ``rods/*`` chat env (the suite's chat view, BFCL-V3 multi-turn) as an OpenEnv environment: an MCP tool
environment served over HTTP/WebSocket by OpenEnv's own server, one env per session. Install with
``pip install "rods-gym[openenv]"`` (openenv-core 0.3).

Serve (one process; ``--max-sessions`` concurrent WebSocket sessions, each with its own env)::

    python -m rods_gym.integrations.openenv --port 8000 --env-id rods/ToolChain-Chat-v0 --max-sessions 64

Play (any OpenEnv MCP client; :class:`RodsEnvClient` also parses progress, success and the env's messages)::

    with RodsEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
        first = env.reset(seed=0, split="train")            # or task=<TaskSpec dict>, task_id="train-0042"
        result = env.call("find_customer_by_email", {"email": "..."})   # tools/call through step()
        result.reward, result.done, result.observation.progress, result.observation.success

How it maps (read from openenv-core 0.3's ``MCPEnvironment``, ``HTTPEnvServer`` and ``MCPToolClient``):

- **Actions** are MCP actions only: ``CallToolAction`` (``type: call_tool``) and ``ListToolsAction``. The task's
  tools are MCP tools whose ``input_schema`` is the task's JSON Schema, plus ``message_user(message)``, the text to
  the user (:mod:`rods_gym.integrations.tool_episode`). Every call is one chat-view action of the env, which
  validates, executes and scores it: bad arguments come back as the env's error message (``result.is_error``), a
  step like any other; an unknown tool also sets the observation's ``error`` (``tool_not_found``).
- **reset(seed, episode_id, task=..., task_id=..., split=...)** chooses the task (a trainer or a curriculum passes
  ``task`` as ``TaskSpec.to_dict()``). Its observation holds the opening messages and the task's tools. A bad
  choice is an observation with ``error`` set and ``done`` true, never an HTTP 500.
- **Observations** carry ``reward`` (the step's progress gain) and ``done``, plus ``progress``, ``success``,
  ``episode_return``, the env's new ``messages`` and its error class (``env_error``); ``state`` has the same
  totals.
- **Sessions**: ``SUPPORTS_CONCURRENT_SESSIONS``; OpenEnv gives each WebSocket (``/ws``, the client's path) its
  own env instance, built by the factory, and destroys it when the socket closes or drops (and, with
  ``--session-timeout``, when it idles). ``GET /sessions`` reports the live count. OpenEnv's HTTP ``/reset`` and
  ``/step`` are stateless (a fresh env per request), so a ``/step`` answers "reset first"; the MCP JSON-RPC
  endpoint (``/mcp``) reaches a session's tools directly (no reward in the reply; the session's state has it).
- **Guard**: OpenEnv parses WebSocket frames with ``json.loads``; JSON nested deeper than Python's parser allows
  raises ``RecursionError`` there, which closes the session. :class:`FrameGuard` answers such a frame with an
  error message and keeps the session.
"""

from __future__ import annotations

import argparse
import functools
import json
import uuid
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI
from fastmcp import FastMCP
from fastmcp.tools import Tool as FastMCPTool
from fastmcp.tools.base import ToolResult as FastMCPResult
from openenv.core.client_types import StepResult
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import (CallToolAction, CallToolObservation, ListToolsAction,
                                               ListToolsObservation, Tool, ToolError, ToolErrorType)
from openenv.core.env_server.types import Action, ConcurrencyConfig, EnvironmentMetadata, Observation, State
from openenv.core.mcp_client import MCPToolClient
from pydantic import Field

import rods_gym
from rods_gym.renderers.chat import too_deep

from .episodes import make_text_env
from .tool_episode import PROTOCOL_ERROR, ToolEpisode, ToolResult, checked_in_tasks

DEFAULT_ENV_ID = "rods/ToolChain-Chat-v0"
RESET_KEYS = ("seed", "episode_id", "task", "task_id", "split")
MAX_FRAME_DEPTH = 200  # JSON nesting a WebSocket frame may have (a tool call's arguments are a few levels deep)


class RodsObservation(Observation):
    """``reset``'s observation: the conversation so far and the task's tools (MCP specs)."""

    task_id: str | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[Tool] = Field(default_factory=list)
    progress: float = 0.0
    success: bool = False
    error: str | None = Field(default=None, description="why the reset was refused (no episode started)")


class RodsToolObservation(CallToolObservation):
    """A tool call's observation: OpenEnv's ``CallToolObservation`` plus the episode's progress."""

    messages: list[dict[str, Any]] = Field(default_factory=list, description="the env's new messages")
    env_error: str = "none"
    progress: float = 0.0
    success: bool = False
    episode_return: float = 0.0
    task_id: str | None = None
    step_count: int = 0
    tools: list[Tool] | None = Field(default=None, description="the task's tools, when this call changed them")


class RodsState(State):
    env_id: str = DEFAULT_ENV_ID
    task_id: str | None = None
    progress: float = 0.0
    success: bool = False
    done: bool = True
    episode_return: float = 0.0


def mcp_tool(schema: Mapping[str, Any]) -> Tool:
    """A chat-template tool schema as an MCP tool spec (the JSON Schema of its parameters kept as is)."""
    f = schema["function"]
    return Tool(name=f["name"], description=f.get("description", ""), input_schema=dict(f["parameters"]))


def tool_error(result: ToolResult) -> ToolError | None:
    """OpenEnv's framework-level error of a call: an unknown tool, or a call answered without an episode step.
    The env's own rejections (bad arguments, a failed precondition) are tool results with ``is_error``."""
    if result.error == "unknown_tool":
        return ToolError(error_type=ToolErrorType.TOOL_NOT_FOUND, message=result.text)
    if not result.stepped:
        return ToolError(error_type=ToolErrorType.INVALID_ARGS, message=result.text)
    return None


class EpisodeTool(FastMCPTool):
    """A task tool on the session's FastMCP server: ``tools/call`` steps the session's episode."""

    episode: Any = None  # the ToolEpisode (not part of the MCP spec)

    async def run(self, arguments: dict[str, Any]) -> FastMCPResult:
        result: ToolResult = self.episode.call(self.name, arguments)
        return FastMCPResult(content=result.text, is_error=result.is_error,
                             structured_content={"progress": self.episode.progress, "success": self.episode.success,
                                                 "done": result.done, "error": result.error})


class RodsMCPEnvironment(MCPEnvironment):
    """One session's env: a :class:`~rods_gym.integrations.tool_episode.ToolEpisode` of ``env_id`` whose task's
    tools are registered on a FastMCP server of its own (re-registered when the task or its tools change)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env_id: str = DEFAULT_ENV_ID, env_kwargs: Mapping[str, Any] | None = None) -> None:
        super().__init__(FastMCP("rods-gym"))
        self.env_id = env_id
        self.episode = ToolEpisode(make_text_env(env_id, env_kwargs))
        self.episode_id: str | None = None
        self._registered: list[str] = []

    # -- tools ---------------------------------------------------------------------------------
    def _sync_tools(self) -> bool:
        """Register the episode's tools on the FastMCP server; True when they changed."""
        schemas = self.episode.tools if self.episode.started else []
        names = [s["function"]["name"] for s in schemas]
        if names == self._registered:
            return False
        for name in self._registered:
            self.mcp_server.local_provider.remove_tool(name)
        for s in schemas:
            f = s["function"]
            self.mcp_server.add_tool(EpisodeTool(name=f["name"], description=f.get("description", ""),
                                                 parameters=dict(f["parameters"]), episode=self.episode))
        self._registered = names
        return True

    def _tool_specs(self) -> list[Tool]:
        return [mcp_tool(s) for s in self.episode.tools] if self.episode.started else []

    # -- OpenEnv API ----------------------------------------------------------------------------
    def reset(self, seed: int | None = None, episode_id: str | None = None, task: Any = None, task_id: Any = None,
              split: Any = None, **kwargs: Any) -> RodsObservation:
        if kwargs:
            return RodsObservation(done=True, error=f"reset: unknown argument(s) {sorted(kwargs)}; it takes "
                                                    f"{', '.join(RESET_KEYS)}")
        try:
            messages = self.episode.start(task=task, task_id=task_id, split=split, seed=seed)
        except (ValueError, KeyError, TypeError) as exc:
            return RodsObservation(done=True, error=str(exc.args[0]) if exc.args else type(exc).__name__)
        self.episode_id = episode_id if isinstance(episode_id, str) and episode_id else str(uuid.uuid4())
        self._sync_tools()
        return RodsObservation(task_id=self.episode.task_id, messages=messages, tools=self._tool_specs(),
                               progress=self.episode.progress, success=self.episode.success, reward=0.0)

    def _call(self, action: CallToolAction) -> RodsToolObservation:
        ep = self.episode
        result = ep.call(action.tool_name, action.arguments)
        changed = result.stepped and self._sync_tools()
        return RodsToolObservation(
            tool_name=action.tool_name, error=tool_error(result), done=result.done or not ep.started,
            reward=result.reward if result.stepped else 0.0,
            result={"content": [{"type": "text", "text": result.text}], "structured_content": None,
                    "data": result.text, "is_error": result.is_error},
            messages=result.messages, env_error=result.error, progress=ep.progress, success=ep.success,
            episode_return=ep.ret, task_id=ep.task_id, step_count=ep.steps,
            tools=self._tool_specs() if changed else None)

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        if isinstance(action, CallToolAction):
            return self._call(action)
        if isinstance(action, ListToolsAction):
            return ListToolsObservation(tools=self._tool_specs())
        return self._step_impl(action)

    # Every session's env runs on the server's event loop thread, never in OpenEnv's worker threads: the core's
    # shared suite (its lazily filled value pools, its world cache) is not thread-safe, and worlds generated in
    # two threads at once came out wrong (benchmarks/openenv_throughput.py found it). Under the GIL a step is
    # no faster in a thread; create_app warms the pools so that no reset fills them on the loop.
    async def reset_async(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
                          ) -> RodsObservation:
        return self.reset(seed=seed, episode_id=episode_id, **kwargs)

    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return self.step(action)

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return RodsToolObservation(tool_name=str(getattr(action, "type", type(action).__name__)), done=True,
                                   error=ToolError(error_type=ToolErrorType.INVALID_ARGS,
                                                   message="rods envs take MCP actions: list_tools or call_tool"),
                                   env_error=PROTOCOL_ERROR)

    @property
    def state(self) -> RodsState:
        ep = self.episode
        return RodsState(episode_id=self.episode_id, step_count=ep.steps, env_id=self.env_id, task_id=ep.task_id,
                         progress=ep.progress, success=ep.success, done=ep.done, episode_return=ep.ret)

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name=f"rods-gym {self.env_id}", version=rods_gym.__version__,
                                   description="Simulated multi-turn tool-use tasks (rods-gym): the task's tools as "
                                               "MCP tools plus message_user; reward = progress gain per step")

    def close(self) -> None:
        self.episode.close()
        super().close()


class FrameGuard:
    """ASGI middleware: a WebSocket text frame whose JSON nests deeper than ``max_depth`` is answered with OpenEnv's
    error message (``VALIDATION_ERROR``) and not handed to the app, whose ``json.loads`` would raise
    ``RecursionError`` and end the session. Closing a socket the client already closed is not an error."""

    def __init__(self, app: Any, max_depth: int = MAX_FRAME_DEPTH) -> None:
        self.app, self.max_depth = app, max_depth

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)

        async def guarded_receive() -> dict:
            while True:
                message = await receive()
                text = message.get("text") if message["type"] == "websocket.receive" else None
                if text is None or not too_deep(text, self.max_depth):
                    return message
                error = {"message": f"message rejected: JSON nested over {self.max_depth} levels",
                         "code": "VALIDATION_ERROR"}
                await send({"type": "websocket.send", "text": json.dumps({"type": "error", "data": error})})

        async def guarded_send(message: dict) -> None:
            try:
                await send(message)
            except Exception:
                if message["type"] != "websocket.close":
                    raise  # OpenEnv closes a socket the client already closed; nothing is left to tell it

        return await self.app(scope, guarded_receive, guarded_send)


def create_app(env_id: str = DEFAULT_ENV_ID, env_kwargs: Mapping[str, Any] | None = None, *, max_sessions: int = 64,
               session_timeout: float | None = None) -> FastAPI:
    """The OpenEnv app serving ``env_id`` (OpenEnv's routes: ``/ws``, ``/reset``, ``/step``, ``/state``,
    ``/schema``, ``/metadata``, ``/health``, ``/mcp``), plus ``GET /sessions``, behind :class:`FrameGuard`."""
    warm = make_text_env(env_id, env_kwargs)  # a bad env id fails here, not in the first session
    warm.reset(seed=0)  # fills the suite's value pools before any session runs
    warm.close()
    if not env_id.startswith("rods/BFCL"):
        checked_in_tasks()  # the task index reset(task_id=...) reads
    factory = functools.partial(RodsMCPEnvironment, env_id=env_id, env_kwargs=dict(env_kwargs or {}))
    server = HTTPEnvServer(factory, CallToolAction, RodsToolObservation,
                           concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions,
                                                                session_timeout=session_timeout))
    app = FastAPI(title=f"rods-gym OpenEnv server: {env_id}", version=rods_gym.__version__)
    server.register_routes(app)

    @app.get("/sessions")
    def sessions() -> dict[str, int]:
        return {"active": server.active_sessions, "max": server.max_concurrent_envs}

    app.state.env_server = server
    app.add_middleware(FrameGuard)
    return app


class RodsEnvClient(MCPToolClient):
    """OpenEnv's MCP tool client, with the rods fields of the observations parsed (:class:`RodsObservation`,
    :class:`RodsToolObservation`) and :meth:`call`, a tool call that returns the whole step result."""

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[Observation]:
        data = dict(payload.get("observation", {}))
        common = {"done": payload.get("done", False), "reward": payload.get("reward")}
        if "tool_name" in data:
            observation: Observation = RodsToolObservation(**data, **common)
        elif "messages" in data:
            observation = RodsObservation(**data, **common)
        else:
            return super()._parse_result(payload)
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> RodsState:
        return RodsState(**payload)

    async def reset(self, **kwargs: Any) -> StepResult[Observation]:
        result = await super().reset(**kwargs)
        self._tools_cache = list(getattr(result.observation, "tools", None) or []) or None  # the new task's tools
        return result

    async def step(self, action: Any, **kwargs: Any) -> StepResult[Observation]:
        result = await super().step(action, **kwargs)
        if isinstance(result.observation, RodsToolObservation) and result.observation.tools is not None:
            self._tools_cache = list(result.observation.tools)  # the call revealed or removed tools
        return result

    async def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> StepResult[Observation]:
        """One ``tools/call`` through ``step`` (so its reward and ``done`` come back)."""
        return await self.step(CallToolAction(tool_name=name, arguments=dict(arguments or {})))


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m rods_gym.integrations.openenv",
                                     description="Serve a rods/* chat env as an OpenEnv MCP environment.")
    parser.add_argument("--env-id", default=DEFAULT_ENV_ID, help="a chat-view id (rods/ToolChain-Chat-v0, "
                        "rods/ToolChain-Hard-Chat-v0, rods/BFCL-MultiTurn-v0, ...)")
    parser.add_argument("--env-kwargs", default="{}", help="JSON object of gym.make keyword arguments")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-sessions", type=int, default=64, help="concurrent WebSocket sessions (envs)")
    parser.add_argument("--session-timeout", type=float, default=None,
                        help="seconds of inactivity after which a session is destroyed (default: never)")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    env_kwargs = json.loads(args.env_kwargs)
    if not isinstance(env_kwargs, dict):
        parser.error(f"--env-kwargs must be a JSON object, got {args.env_kwargs!r}")
    app = create_app(args.env_id, env_kwargs, max_sessions=args.max_sessions, session_timeout=args.session_timeout)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, ws_max_size=16 * 2**20)


if __name__ == "__main__":
    main()
