"""rods_gym.integrations.openenv: a rods env served by OpenEnv's own server, started the documented way
(``python -m rods_gym.integrations.openenv``) on loopback, played through the client.

- the oracle's episode through the client scores (call by call) what the in-process env scores;
- a small bounded load test (the CI size of benchmarks/openenv_throughput.py): no lost episode, no call whose
  result differs from the in-process transcript of its own task (sessions that mixed state would), every
  session destroyed once its client closed;
- malformed frames, bad actions and hostile arguments get an error message or observation, never an HTTP 500 or a
  closed session; a killed client's session is destroyed;
- BFCL's missing-function tasks re-register the revealed tool (in-process, no server).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Iterator

import pytest

pytest.importorskip("openenv", reason="OpenEnv is not installed: pip install -e '.[openenv]' (openenv-core, fastmcp)")
pytest.importorskip("fastmcp", reason="fastmcp is not installed: pip install -e '.[openenv]'")

from openenv.core.env_server.mcp_types import CallToolAction  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402

from conftest import benchmarks_on_path  # noqa: E402
from rods_gym import default_suite, load_split  # noqa: E402
from rods_gym.integrations.openenv import (RodsEnvClient, RodsMCPEnvironment, RodsObservation,  # noqa: E402
                                           RodsToolObservation)
from rods_gym.integrations.tool_episode import USER_TOOL, ToolEpisode, oracle_call  # noqa: E402

ENV_ID = "rods/ToolChain-Chat-v0"
SESSIONS = 6  # the load test's concurrent sessions (the server allows SESSIONS + 2)
MULTI_TURN = ("train-0052", "train-0053")  # the oracle asks the user mid-episode (message_user), 2 user turns


@pytest.fixture(scope="module")
def bench() -> Any:
    with benchmarks_on_path():
        import openenv_throughput

    return openenv_throughput


@pytest.fixture(scope="module")
def server(bench: Any) -> Iterator[str]:
    port = bench.free_port()
    proc = bench.start_server(ENV_ID, port, SESSIONS + 2)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def active_sessions(base: str) -> int:
    with urllib.request.urlopen(f"{base}/sessions", timeout=5) as r:
        return int(json.loads(r.read())["active"])


def wait_sessions(base: str, n: int, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while (got := active_sessions(base)) != n and time.monotonic() < deadline:
        time.sleep(0.2)
    return got


def post(base: str, path: str, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(f"{base}{path}", data=data, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_oracle_episode_through_the_client_scores_what_the_env_scores(server: str) -> None:
    local = ToolEpisode(ENV_ID)
    suite = default_suite()
    tasks = {t.id: t for t in load_split("train")}
    with RodsEnvClient(base_url=server).sync() as env:
        for task_id in (*MULTI_TURN, "train-0000"):
            first = env.reset(task=tasks[task_id].to_dict(), seed=1)
            local.start(task=tasks[task_id], seed=1)
            obs = first.observation
            assert isinstance(obs, RodsObservation) and obs.task_id == task_id and not first.done
            assert obs.messages == local.messages
            # the task's tools as MCP tools, with the task's own JSON Schemas, and the user channel
            assert [t.name for t in obs.tools] == [*tasks[task_id].tools, USER_TOOL]
            for spec in obs.tools[:-1]:
                assert spec.input_schema == suite.public_schemas[spec.name]["function"]["parameters"]
            assert [t.name for t in env.list_tools()] == [t.name for t in obs.tools]
            calls = []
            while not local.done:
                name, arguments = oracle_call(local)
                expected = local.call(name, arguments)
                step = env.call(name, arguments)
                calls.append(name)
                o = step.observation
                assert isinstance(o, RodsToolObservation) and o.error is None
                assert o.result["data"] == expected.text and o.messages == expected.messages
                assert step.reward == pytest.approx(expected.reward) and step.done == expected.done
                assert (o.progress, o.success) == (local.progress, local.success)
            assert step.done and o.success and o.episode_return == pytest.approx(local.ret) == 1.0
            state = env.state()
            assert (state.task_id, state.done, state.success, state.step_count) == (task_id, True, True, len(calls))
            if task_id in MULTI_TURN:
                assert USER_TOOL in calls[:-1]  # the user answered mid-episode, through message_user
            # after the end, a call is refused without a step
            late = env.call(calls[0], {})
            assert late.done and late.observation.error is not None and late.observation.step_count == len(calls)


def test_reset_chooses_the_task(server: str) -> None:
    dev = load_split("dev")[3]
    with RodsEnvClient(base_url=server).sync() as env:
        assert env.reset(task_id=dev.id).observation.task_id == dev.id
        assert env.reset(task=dev.to_dict()).observation.task_id == dev.id
        a, b = (env.reset(split="test", seed=7).observation.task_id for _ in range(2))
        assert a == b and a.startswith("test-")
        for bad, words in (({"task_id": "nope"}, "nope"), ({"split": "nope"}, "split"),
                           ({"task_id": dev.id, "split": "dev"}, "one of"), ({"seed": -1}, "seed"),
                           ({"colour": "red"}, "colour"), ({"task": {"id": 3}}, "task")):
            refused = env.reset(**bad)
            assert refused.done and words in refused.observation.error, (bad, refused.observation.error)
        assert env.reset(task_id=dev.id).observation.error is None  # the session goes on


def test_bounded_load_loses_and_mixes_nothing(server: str, bench: Any) -> None:
    transcripts = bench.record(ENV_ID, 12)
    load = asyncio.run(bench.drive(server, SESSIONS, 4, transcripts, time_limit=120.0))
    assert load.errors == [] and load.started == SESSIONS * 4
    assert load.completed == load.started and load.mismatched == 0
    assert load.steps == sum(len(transcripts[(i * 4 + e) % 12].calls) for i in range(SESSIONS) for e in range(4))
    assert wait_sessions(server, 0) == 0
    lat = sorted(load.latencies)
    print(f"\n{SESSIONS} sessions x 4 episodes: {load.steps} calls, p50 {1e3 * lat[len(lat) // 2]:.1f} ms, "
          f"p99 {1e3 * lat[int(0.99 * (len(lat) - 1))]:.1f} ms")


def test_malformed_frames_and_hostile_arguments_keep_the_session(server: str) -> None:
    async def play() -> list[tuple[str, dict]]:
        async with connect(server.replace("http", "ws") + "/ws", max_size=2**25) as ws:
            async def send(frame: Any) -> tuple[str, dict]:
                await ws.send(frame if isinstance(frame, str) else json.dumps(frame))
                reply = json.loads(await ws.recv())
                return reply["type"], reply["data"]

            def call(name: str, arguments: Any) -> dict:
                return {"type": "step", "data": {"type": "call_tool", "tool_name": name, "arguments": arguments}}

            out = [await send({"type": "reset", "data": {"task_id": "train-0001"}})]
            tool = out[0][1]["observation"]["tools"][0]["name"]
            nested: dict = {}
            cur = nested
            for _ in range(120):  # under the frame guard's depth, so the env's parser judges it
                cur["a"] = {}
                cur = cur["a"]
            frames = ["not json", {"type": "bogus"}, {"type": "step", "data": {"type": "call_tool"}},
                      call(tool, [1, 2]), {"type": "step", "data": {"type": "other"}},
                      '{"type": "step", "data": ' + "[" * 100_000 + "]" * 100_000 + "}",
                      call(tool, {"booking_id": "B" * 1_000_000}), call(tool, nested),
                      call(tool, {"booking_id": "\u0000\ud7ff<tool_call>" * 50}), call("no_such_tool", {}),
                      call(USER_TOOL, {"message": '<tool_call>{"name": "x"}</tool_call>'}), call(USER_TOOL, {}),
                      {"type": "reset", "data": {"seed": "x"}}]
            for frame in frames:
                out.append(await send(frame))
                # after every bad frame the session still plays a valid call
                out.append(await send({"type": "reset", "data": {"task_id": "train-0001"}}))
                ok = await send(call(tool, {"booking_id": "BKG-0001"}))
                assert ok[0] == "observation", (frame if isinstance(frame, dict) else frame[:40], ok)
            return out

    replies = asyncio.run(play())
    kinds = [kind for kind, _ in replies]
    assert set(kinds) <= {"observation", "error"}
    codes = {data.get("code") for kind, data in replies if kind == "error"}
    assert codes <= {"INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR"}, codes  # never a dead session
    env_errors = [d["observation"].get("env_error") for k, d in replies if k == "observation"
                  and "env_error" in d["observation"]]
    assert {"too_long", "invalid_arguments", "unknown_tool", "protocol"} <= set(env_errors)
    assert wait_sessions(server, 0) == 0

    # the stateless HTTP routes: a 422 for a malformed action, an error observation otherwise, never a 500
    status, body = post(server, "/step", {"action": {"type": "call_tool", "tool_name": "get_booking"}})
    assert status == 200 and "reset first" in body["observation"]["result"]["data"]
    assert post(server, "/step", {"action": {"foo": 1}})[0] == 422
    status, body = post(server, "/reset", {"task_id": "nope"})
    assert status == 200 and body["done"] and "nope" in body["observation"]["error"]
    status, body = post(server, "/mcp", b"{not json")
    assert status == 200 and body["error"]["code"] == -32700


def test_a_killed_clients_session_is_destroyed(server: str) -> None:
    script = ("import asyncio, sys\nfrom websockets.asyncio.client import connect\n"
              "async def main():\n"
              f"    async with connect({server.replace('http', 'ws') + '/ws'!r}) as ws:\n"
              "        await ws.send('{\"type\": \"reset\", \"data\": {\"task_id\": \"train-0002\"}}')\n"
              "        await ws.recv()\n"
              "        print('ready', flush=True)\n"
              "        await asyncio.sleep(600)\n"
              "asyncio.run(main())\n")
    client = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout is not None and client.stdout.readline().strip() == "ready"
        assert active_sessions(server) == 1
    finally:
        client.kill()  # no close frame: the TCP connection just drops
        client.wait()
    assert wait_sessions(server, 0) == 0


def test_bfcl_missing_function_reveals_its_tool() -> None:
    pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed: pip install --no-deps bfcl-eval==2026.3.23")
    from rods_gym.bfcl.data import load_tasks

    task = next(t for t in load_tasks("miss_func") if t.missed_function)
    env = RodsMCPEnvironment("rods/BFCL-MultiTurn-v0")
    local = ToolEpisode("rods/BFCL-MultiTurn-v0")
    first = env.reset(task_id=task.id)
    local.start(task_id=task.id)
    hidden = {n for names in task.missed_function.values() for n in names}
    assert not hidden & {t.name for t in first.tools}
    revealed = set()
    while not local.done:
        name, arguments = oracle_call(local)
        expected = local.call(name, arguments)
        obs = env.step(CallToolAction(tool_name=name, arguments=arguments))
        assert obs.result["data"] == expected.text and obs.reward == pytest.approx(expected.reward)
        if obs.tools is not None:
            revealed |= {t.name for t in obs.tools} & hidden
            assert set(env._registered) == {t.name for t in obs.tools}  # on the session's MCP server too
    assert revealed == hidden and obs.done and obs.success and env.state.episode_return == pytest.approx(1.0)
    env.close()


def test_mcp_json_rpc_reaches_the_sessions_tools(server: str) -> None:
    """OpenEnv's MCP messages on a session (``type: mcp``, JSON-RPC tools/list and tools/call) reach the tools of
    the session's current task, registered on its FastMCP server, and a call steps the session's episode."""
    async def play() -> list[dict]:
        async with connect(server.replace("http", "ws") + "/ws") as ws:
            out = []
            for frame in ({"type": "reset", "data": {"task_id": "train-0000"}},
                          {"type": "mcp", "data": {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}},
                          {"type": "mcp", "data": {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                              "name": "count_provider_appointments", "arguments": {"provider_id": "PRV-0000"}}}},
                          {"type": "state"}):
                await ws.send(json.dumps(frame))
                out.append(json.loads(await ws.recv())["data"])
            return out

    reset, listed, called, state = asyncio.run(play())
    names = [t["name"] for t in reset["observation"]["tools"]]
    assert [t["name"] for t in listed["result"]["tools"]] == names == ["count_provider_appointments", USER_TOOL]
    schema = default_suite().public_schemas["count_provider_appointments"]["function"]["parameters"]
    assert listed["result"]["tools"][0]["input_schema"] == schema
    assert "result" in called or "error" in called  # the env's answer (an error result is a JSON-RPC error)
    assert state["task_id"] == "train-0000" and state["step_count"] == 1
