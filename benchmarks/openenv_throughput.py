"""A rods env served by OpenEnv: a bounded load test on loopback, and steps/s through the server vs in-process.

    python benchmarks/openenv_throughput.py [--scale smoke|full] [--env-id ID] [--json OUT]

1. Transcripts: the oracle plays one episode of each of K tasks (the train split's draws by seed) in-process,
   as tool calls (:mod:`rods_gym.integrations.tool_episode`); every call's result text, reward and ``done``
   are kept.
2. In-process: the transcripts replayed through a :class:`ToolEpisode` (reset by task id, then the calls):
   steps/s and per-call latency, on one thread.
3. Server: ``python -m rods_gym.integrations.openenv`` started the documented way on 127.0.0.1; one session
   plays each task once (untimed: the server's world cache is then as warm as the in-process run's, which
   recorded the transcripts), then S concurrent sessions (one :class:`RodsEnvClient` WebSocket each, one asyncio loop) each replay E episodes,
   stopping new episodes after the time limit (in-flight ones finish). Every call's result text, reward and
   ``done`` must equal the in-process transcript's (an episode whose observations came from another session's
   env would not), and every episode must end done with its transcript's return: an episode that does not
   (an exception, a timeout, a wrong return) is counted lost. Then the clients close and ``GET /sessions``
   must drop to 0 (the server destroyed every env).

Reported: episodes/s and steps/s through the server, p50/p99 latency of a tool call's round trip, the
in-process steps/s and the ratio, lost episodes, mismatched calls, sessions left. Client and server share
the machine's cores (the client also parses every observation), so the server figure is a lower bound for a
server on its own cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _script import run_script  # noqa: E402

SCALES = {"smoke": dict(sessions=8, episodes=4, tasks=16, time_limit=60.0, inprocess_passes=2),
          "full": dict(sessions=64, episodes=50, tasks=64, time_limit=600.0, inprocess_passes=10)}
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Transcript:
    task_id: str
    calls: list[tuple[str, Any, str, float, bool]]  # name, arguments, result text, reward, done
    ret: float


@dataclass
class Load:
    started: int = 0
    completed: int = 0
    steps: int = 0
    mismatched: int = 0
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def record(env_id: str, n: int) -> list[Transcript]:
    from rods_gym.integrations.tool_episode import ToolEpisode, oracle_call

    ep = ToolEpisode(env_id)
    out, seen = [], set()
    seed = 0
    while len(out) < n and seed < 20 * n:
        ep.start(split="train", seed=seed)
        seed += 1
        if ep.task_id in seen:
            continue
        seen.add(ep.task_id)
        calls = []
        while not ep.done:
            name, arguments = oracle_call(ep)
            r = ep.call(name, arguments)
            calls.append((name, arguments, r.text, r.reward, r.done))
        out.append(Transcript(str(ep.task_id), calls, ep.ret))
    ep.close()
    return out


def in_process(env_id: str, transcripts: list[Transcript], passes: int) -> dict[str, float]:
    from rods_gym.integrations.tool_episode import ToolEpisode

    ep = ToolEpisode(env_id)
    steps, latencies = 0, []
    start = time.perf_counter()
    for _ in range(passes):
        for t in transcripts:
            ep.start(task_id=t.task_id)
            for name, arguments, _, _, _ in t.calls:
                t0 = time.perf_counter()
                ep.call(name, arguments)
                latencies.append(time.perf_counter() - t0)
                steps += 1
    wall = time.perf_counter() - start
    ep.close()
    return {"steps_per_s": steps / wall, "episodes_per_s": passes * len(transcripts) / wall,
            "call_ms_p50": 1e3 * statistics.median(latencies), "steps": steps}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def start_server(env_id: str, port: int, sessions: int) -> subprocess.Popen:
    """The documented launch, waited on until ``/health`` answers."""
    proc = subprocess.Popen([sys.executable, "-m", "rods_gym.integrations.openenv", "--port", str(port), "--env-id",
                             env_id, "--max-sessions", str(sessions), "--log-level", "error"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
        try:
            get_json(f"http://127.0.0.1:{port}/health")
            return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("the server did not answer /health within 180 s")


async def session(base: str, index: int, episodes: int, transcripts: list[Transcript], deadline: float,
                  load: Load) -> None:
    from rods_gym.integrations.openenv import RodsEnvClient

    async with RodsEnvClient(base_url=base, message_timeout_s=120) as env:
        for e in range(episodes):
            if time.monotonic() > deadline:
                return
            t = transcripts[(index * episodes + e) % len(transcripts)]
            load.started += 1
            try:
                first = await env.reset(task_id=t.task_id, episode_id=f"s{index}-e{e}")
                ok = first.observation.task_id == t.task_id
                result = first
                for name, arguments, text, reward, done in t.calls:
                    t0 = time.perf_counter()
                    result = await env.call(name, arguments)
                    load.latencies.append(time.perf_counter() - t0)
                    load.steps += 1
                    o = result.observation
                    same = (o.result["data"] == text and abs((result.reward or 0.0) - reward) < 1e-9
                            and result.done == done and o.task_id == t.task_id)
                    if not same:
                        load.mismatched += 1
                        if len(load.errors) < 10:
                            load.errors.append(f"session {index} episode {e} ({t.task_id}): {name} returned "
                                               f"{o.result['data'][:160]!r} (reward {result.reward}, done "
                                               f"{result.done}), expected {text[:160]!r} ({reward}, {done})")
                    ok = ok and same
                ok = ok and result.done and abs(result.observation.episode_return - t.ret) < 1e-9
                load.completed += ok
            except Exception as exc:  # a lost episode: counted and named, the other sessions go on
                load.errors.append(f"session {index} episode {e}: {type(exc).__name__}: {exc}")
                return


async def drive(base: str, sessions: int, episodes: int, transcripts: list[Transcript], time_limit: float) -> Load:
    load = Load()
    deadline = time.monotonic() + time_limit
    await asyncio.gather(*(session(base, i, episodes, transcripts, deadline, load) for i in range(sessions)))
    return load


def commit() -> str:
    run = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return run.stdout.strip() or "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", choices=tuple(SCALES), default="full")
    ap.add_argument("--env-id", default="rods/ToolChain-Chat-v0")
    ap.add_argument("--sessions", type=int, default=None, help="concurrent sessions (default: the scale's)")
    ap.add_argument("--episodes", type=int, default=None, help="episodes per session (default: the scale's)")
    ap.add_argument("--time-limit", type=float, default=None, help="seconds after which no episode starts")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = ap.parse_args()
    scale = dict(SCALES[args.scale])
    for key in ("sessions", "episodes", "time_limit"):
        if getattr(args, key) is not None:
            if getattr(args, key) <= 0:
                raise ValueError(f"--{key.replace('_', '-')} must be > 0")
            scale[key] = getattr(args, key)

    transcripts = record(args.env_id, scale["tasks"])
    local = in_process(args.env_id, transcripts, scale["inprocess_passes"])
    port = free_port()
    server = start_server(args.env_id, port, scale["sessions"])
    try:
        warm = asyncio.run(drive(f"http://127.0.0.1:{port}", 1, len(transcripts), transcripts, scale["time_limit"]))
        if warm.completed != len(transcripts):
            raise RuntimeError(f"the warm-up pass lost episodes: {warm.errors[:3]}")
        start = time.perf_counter()
        load = asyncio.run(drive(f"http://127.0.0.1:{port}", scale["sessions"], scale["episodes"], transcripts,
                                 scale["time_limit"]))
        wall = time.perf_counter() - start
        left = get_json(f"http://127.0.0.1:{port}/sessions")["active"]
        for _ in range(40):  # the server destroys an env when its socket closes: give it a moment
            if left == 0:
                break
            time.sleep(0.25)
            left = get_json(f"http://127.0.0.1:{port}/sessions")["active"]
    finally:
        server.terminate()
        server.wait(timeout=30)

    lat = sorted(load.latencies) or [float("nan")]
    figures = {
        "scale": args.scale, "env_id": args.env_id, "sessions": scale["sessions"], "episodes_per_session":
        scale["episodes"], "time_limit_s": scale["time_limit"], "tasks": len(transcripts),
        "episodes_started": load.started, "episodes_completed": load.completed,
        "episodes_lost": load.started - load.completed, "mismatched_calls": load.mismatched,
        "sessions_left_after_close": left, "wall_s": wall, "server_steps": load.steps,
        "server_episodes_per_s": load.completed / wall, "server_steps_per_s": load.steps / wall,
        "call_ms_p50": 1e3 * lat[len(lat) // 2], "call_ms_p99": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
        "inprocess_steps_per_s": local["steps_per_s"], "inprocess_episodes_per_s": local["episodes_per_s"],
        "inprocess_call_ms_p50": local["call_ms_p50"],
        "server_vs_inprocess_steps": (load.steps / wall) / local["steps_per_s"],
        "errors": load.errors[:10], "commit": commit(), "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
                   f"python {platform.python_version()}",
    }
    print(f"OpenEnv server, {args.env_id}: {scale['sessions']} sessions x {scale['episodes']} episodes "
          f"(time limit {scale['time_limit']:.0f} s), {len(transcripts)} tasks")
    print(f"  episodes: {load.completed}/{load.started} completed, lost {load.started - load.completed}, "
          f"mismatched calls {load.mismatched}, sessions left after close {left}")
    print(f"  through the server: {figures['server_episodes_per_s']:.1f} episodes/s, "
          f"{figures['server_steps_per_s']:.0f} steps/s, call round trip p50 {figures['call_ms_p50']:.2f} ms, "
          f"p99 {figures['call_ms_p99']:.2f} ms")
    print(f"  in-process: {local['steps_per_s']:.0f} steps/s (call p50 {local['call_ms_p50']:.3f} ms); "
          f"server / in-process = {figures['server_vs_inprocess_steps']:.3f}")
    for err in load.errors[:5]:
        print("  error:", err)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    run_script(main)
