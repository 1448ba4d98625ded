"""rods_gym.integrations.verifiers: a rods env as a verifiers 0.4 environment, played through verifiers' own rollout
code (``Env.serving``, ``Env.run_slot``: the interception server, the agent's interaction, the trace) on a CPU.

The model is a scripted OpenAI-compatible server on loopback: it answers each chat completion with the next action
of a fixed script, as tool calls or plain text. The episode's recorded reward must be what the in-process env gives
the same actions, and the model must have been offered the task's tools.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

vf = pytest.importorskip("verifiers.v1", reason="verifiers is not installed: pip install -e '.[verifiers]'")

import uvicorn  # noqa: E402
from fastapi import FastAPI, Request  # noqa: E402
from verifiers.v1.env import RunSlot  # noqa: E402

from rods_gym.integrations.tool_episode import USER_TOOL, ToolEpisode, oracle_call  # noqa: E402
from rods_gym.integrations.verifiers import PLUGIN_ID, RodsEnv, load_environment  # noqa: E402

TASK = "train-0052"  # the oracle asks the user mid-episode; two user turns


class ScriptedModel:
    """An OpenAI-compatible chat endpoint answering request i with the script's action i (i = the assistant
    messages already in the request), and keeping the requests it got."""

    def __init__(self, script: list[tuple[str, Any]]) -> None:
        self.script, self.requests = script, []
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self.complete)
        self.app.get("/v1/models")(lambda: {"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    async def complete(self, request: Request) -> dict:
        body = await request.json()
        self.requests.append(body)
        i = sum(m["role"] == "assistant" for m in body["messages"])
        name, arguments = self.script[min(i, len(self.script) - 1)]
        if name == USER_TOOL:
            message, finish = {"role": "assistant", "content": arguments["message"]}, "stop"
        else:
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{i}", "type": "function",
                 "function": {"name": name, "arguments": arguments if isinstance(arguments, str)
                              else json.dumps(arguments)}}]}
            finish = "tool_calls"
        return {"id": f"cmpl-{i}", "object": "chat.completion", "created": int(time.time()), "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


@pytest.fixture()
def serve() -> Iterator[Any]:
    servers = []

    def start(model: ScriptedModel) -> str:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(model.app, host="127.0.0.1", port=port, log_level="error"))
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.05)
        servers.append(server)
        return f"http://127.0.0.1:{port}/v1"

    yield start
    for server in servers:
        server.should_exit = True


def oracle_script(task_id: str) -> tuple[list[tuple[str, Any]], ToolEpisode]:
    episode = ToolEpisode("rods/ToolChain-Chat-v0")
    episode.start(task_id=task_id)
    script = []
    while not episode.done:
        script.append(oracle_call(episode))
        episode.call(*script[-1])
    return script, episode


def play(env: RodsEnv, base_url: str, task_id: str) -> Any:
    task = next(t for t in env.taskset if t.data.id == task_id)
    ctx = vf.ModelContext(model="scripted", client=vf.EvalClientConfig(base_url=base_url,
                                                                        api_key_var="RODS_SCRIPTED_MODEL_KEY"))

    async def run() -> Any:
        async with env.serving():
            return await env.run_slot(RunSlot(task), ctx)

    return asyncio.run(run())


def test_a_scripted_model_plays_an_episode_through_verifiers(serve: Any) -> None:
    script, reference = oracle_script(TASK)
    bad_first = [(script[0][0], {"no_such_argument": 1}), ("no_such_tool", "{not json")]  # env errors, still steps
    replay = ToolEpisode("rods/ToolChain-Chat-v0")
    replay.start(task_id=TASK)
    for name, arguments in [*bad_first, *script]:
        if not replay.done:
            replay.call(name, arguments)
    model = ScriptedModel([*bad_first, *script])
    env = load_environment(split="train")
    assert type(env.taskset).__module__ == RodsEnv.__module__ and PLUGIN_ID == env.config.taskset.id

    episode = play(env, serve(model), TASK)
    assert episode.ok, episode.errors
    trace = episode.traces[0]
    assert trace.rewards["progress"].score == pytest.approx(replay.ret)
    assert trace.metrics["success"] == float(replay.success) == 1.0 and reference.ret == pytest.approx(replay.ret)
    assert trace.info["rods_task_id"] == TASK
    # verifiers' own interception relayed every model call: one per action of the script
    assert len(model.requests) == len(bad_first) + len(script)
    offered = sorted(t["function"]["name"] for t in model.requests[0]["tools"])
    assert offered == sorted(reference.env.unwrapped.task.tools)
    roles = [m["role"] for m in model.requests[-1]["messages"]]
    assert roles[:2] == ["system", "user"] and "tool" in roles
    assert roles.count("user") == 2  # the scripted user's answer came back as a user turn


def test_curricula_that_need_group_results_are_refused() -> None:
    with pytest.raises(ValueError, match="no group results"):
        load_environment(split="dev", curriculum="rods")
    stream = load_environment(split="dev", stream=True, seed=3)
    first = [t.data.id for t in stream.taskset.take(5)]
    assert not stream.taskset.bounded and first == [t.data.id for t in load_environment(
        split="dev", stream=True, seed=3).taskset.take(5)]
    with pytest.raises(ValueError, match="split"):
        load_environment(split="nope")
