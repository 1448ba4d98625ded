"""Environment throughput on one core: steps/s per view (oracle and invalid actions),
resets/s, sampled tasks/s, and the features view against the renderer it replaced.

    python benchmarks/env_throughput.py [--scale smoke|cpu] [--json OUT]

Oracle actions are recorded once per task and then replayed, so the timed loop is
parse + validate + execute + reward + render and nothing else. Timings use the unwrapped
env (``gym.make`` adds Gymnasium's checker wrappers; their cost is reported separately).
Targets (issue 2): structured >= 50,000 steps/s, chat >= 20,000 steps/s, reset >= 5,000/s,
sampler >= 5,000 tasks/s. The sampler figure is the median of fresh processes (5 at the cpu
scale), each timing 3,000 medium tasks after 200 warm-up tasks; the same timing done in-process
after the env parts is reported beside it.

The features view (``FeaturesEnv``, issue 50) is timed beside its previous renderer
(``tests/features_reference.py``, the code at 88d36dc, installed in the same env), alternating
between the two in rounds, on the same recorded episodes: the oracle's actions and random masked
actions (the early-training regime), step() alone and with the resets. Each figure is the median
over the rounds, and the speed-up is the median of the per-round ratios (same run, same load).

Every timed function runs the way ``timeit`` times code: the garbage collector collects
first and is off while it runs (:func:`gc_paused`), so no figure carries a collection that
the objects of earlier parts (or of its own kept results) happen to trigger.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import multiprocessing
import os
import platform
import importlib.util
import statistics
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

import gymnasium as gym
import numpy as np

import rods_gym
from rods_gym import DIFFICULTIES, TaskSampler, ToolChainEnv, default_suite, load_split, oracle_action
from rods_gym.features_env import FeaturesEnv

T = TypeVar("T")
MODES = ("chat", "compact", "structured")
TARGETS = {"chat": 20_000, "structured": 50_000, "reset": 5_000, "sampler": 5_000, "features": 20_000}
REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "features_reference.py"


def gc_paused(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` run as ``timeit`` runs timed code: a full collection first, the collector off
    while it runs (and back on afterwards, as it was)."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T:
        was_on = gc.isenabled()
        gc.collect()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was_on:
                gc.enable()
    return run


def record_oracle(env: ToolChainEnv, tasks: list) -> list[tuple[Any, list[Any]]]:
    """The oracle's actions per task; in the features view an episode ends early where the oracle's call
    is not among the candidates (rare: the view's documented cap)."""
    episodes = []
    for task in tasks:
        env.reset(options={"task": task})
        actions = []
        done = False
        while not done:
            try:
                a = env.encode(oracle_action(env.episode))
            except ValueError:
                break
            actions.append(a)
            _, _, term, trunc, _ = env.step(a)
            done = term or trunc
        episodes.append((task, actions))
    return episodes


@gc_paused
def time_replay(env: ToolChainEnv, episodes: list, repeats: int) -> tuple[float, int]:
    """Seconds spent inside step() and the number of steps, over ``repeats`` passes."""
    spent, steps = 0.0, 0
    for _ in range(repeats):
        for task, actions in episodes:
            env.reset(options={"task": task})
            t0 = time.perf_counter()
            for a in actions:
                env.step(a)
            spent += time.perf_counter() - t0
            steps += len(actions)
    return spent, steps


def invalid_actions(mode: str, env: ToolChainEnv) -> list[Any]:
    if mode == "chat":
        return ['{"name": "get_order", "arguments": {"order_id": 12}', "<tool_call>{\"name\": \"nope\"}</tool_call>",
                '{"name": "get_order", "arguments": {"order_id": 12}}', "[" * 50]
    if mode == "compact":
        return ["call nope", "call get_order order_id $63", "reply $99 extra", "frobnicate"]
    n = len(env.action_space.nvec)
    return [[0] * (n - 1), [5] + [0] * (n - 1), [0, 10**6] + [0] * (n - 2)]


def record_random(env: ToolChainEnv, tasks: list, seed: int) -> list[tuple[Any, list[Any]]]:
    """One episode per task of uniformly random masked actions (the features view's ``action_masks``)."""
    rng = np.random.default_rng(seed)
    episodes = []
    for task in tasks:
        env.reset(options={"task": task})
        actions: list[Any] = []
        done = False
        while not done:
            actions.append(int(rng.choice(np.flatnonzero(env.action_masks()))))
            _, _, term, trunc, _ = env.step(actions[-1])
            done = term or trunc
        episodes.append((task, actions))
    return episodes


@gc_paused
def time_episodes(env: Any, episodes: list) -> tuple[float, float, int]:
    """Seconds in step() (with ``action_masks()``, as a masked agent asks each step), seconds in reset(), and
    the number of steps, over one pass."""
    stepping = resetting = 0.0
    steps = 0
    for task, actions in episodes:
        t0 = time.perf_counter()
        env.reset(options={"task": task})
        t1 = time.perf_counter()
        for a in actions:
            env.step(a)
            env.action_masks()
        stepping += time.perf_counter() - t1
        resetting += t1 - t0
        steps += len(actions)
    return stepping, resetting, steps


def reference_renderer() -> Any:
    """The features renderer the incremental one replaced (tests/features_reference.py), or None when the
    tests are not next to this script (an installed package)."""
    if not REFERENCE.exists():
        return None
    spec = importlib.util.spec_from_file_location("features_reference", REFERENCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FeaturesRenderer


def time_features(tasks: list, rounds: int) -> dict[str, Any]:
    """The features view (shuffled order) on recorded oracle and random-masked episodes, today's renderer and
    the reference one alternating in ``rounds`` rounds on one env; medians over the rounds."""
    env = FeaturesEnv()
    renderers = {"features": env.renderer}
    old = reference_renderer()
    if old is not None:
        renderers["features_before"] = old(env.suite, "shuffled")
    workloads = {"oracle": record_oracle(env, tasks), "random": record_random(env, tasks, seed=0)}
    for renderer in renderers.values():  # warm each renderer's caches (task tables, checker answers) once
        env.renderer = renderer
        for episodes in workloads.values():
            time_episodes(env, episodes)
    rates: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name, renderer in renderers.items():
            env.renderer = renderer
            for workload, episodes in workloads.items():
                stepping, resetting, steps = time_episodes(env, episodes)
                rates.setdefault(f"{name}_{workload}_steps_per_s", []).append(steps / stepping)
                with_resets = steps / (stepping + resetting)
                rates.setdefault(f"{name}_{workload}_steps_per_s_with_resets", []).append(with_resets)
    out: dict[str, Any] = {k: float(statistics.median(v)) for k, v in rates.items()}
    if old is not None:
        for key in [k for k in rates if k.startswith("features_") and not k.startswith("features_before")]:
            before = rates["features_before" + key[len("features"):]]
            out[key.replace("steps_per_s", "speedup")] = float(statistics.median(
                a / b for a, b in zip(rates[key], before)))
    out["features_random_steps_per_episode"] = sum(len(a) for _, a in workloads["random"]) / len(tasks)
    return out


@gc_paused
def time_invalid(env: ToolChainEnv, tasks: list, n_steps: int) -> float:
    actions = invalid_actions(env.mode, env)
    env.reset(options={"task": tasks[0]})
    spent, i, k = 0.0, 0, 0
    while i < n_steps:
        a = actions[i % len(actions)]
        t0 = time.perf_counter()
        _, _, term, trunc, _ = env.step(a)
        spent += time.perf_counter() - t0
        i += 1
        if term or trunc:
            k += 1
            env.reset(options={"task": tasks[k % len(tasks)]})
    return n_steps / spent


@gc_paused
def time_resets(env: ToolChainEnv, tasks: list, n: int) -> float:
    for t in tasks:  # warm worlds and compiled tasks
        env.reset(options={"task": t})
    t0 = time.perf_counter()
    for i in range(n):
        env.reset(options={"task": tasks[i % len(tasks)]})
    return n / (time.perf_counter() - t0)


@gc_paused
def time_sampler(n: int) -> float:
    sampler = TaskSampler(default_suite(), DIFFICULTIES["medium"], seed=123)
    sampler.sample_many(200)  # warm the world cache
    t0 = time.perf_counter()
    sampler.sample_many(n, start=10_000)
    return n / (time.perf_counter() - t0)


def time_sampler_fresh(n: int, processes: int) -> list[float]:
    """``time_sampler`` in ``processes`` fresh interpreters, one after another (as pyperf runs its
    workers): each starts from an empty heap rather than after the env parts' hundreds of thousands
    of steps, which slowed the same code by about a fifth when measured in-process."""
    ctx = multiprocessing.get_context("spawn")  # a new interpreter; it inherits the one-core affinity
    rates = []
    for _ in range(processes):
        with ctx.Pool(1) as pool:
            rates.append(pool.apply(time_sampler, (n,)))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--scale", choices=["smoke", "cpu"], default="cpu")
    parser.add_argument("--json", default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    n_tasks, repeats, n_invalid, n_resets, n_sample, n_fresh, rounds = {
        "smoke": (40, 1, 2_000, 2_000, 200, 1, 1), "cpu": (400, 5, 50_000, 50_000, 3_000, 5, 7)}[args.scale]
    tasks = load_split("test")[:n_tasks]
    results: dict[str, Any] = {"scale": args.scale, "python": platform.python_version(),
                               "machine": f"{platform.machine()} {os.cpu_count()} cpus, pinned to 1 core",
                               "gc": "collected before each timed part, off while it runs (as timeit)"}
    for mode in MODES:
        env = ToolChainEnv(mode=mode)
        episodes = record_oracle(env, tasks)
        spent, steps = time_replay(env, episodes, repeats)
        results[f"{mode}_oracle_steps_per_s"] = steps / spent
        results[f"{mode}_invalid_steps_per_s"] = time_invalid(env, tasks, n_invalid)
        wrapped = gym.make(f"rods/ToolChain-{mode.title()}-v0")  # the same episodes through gym.make's wrappers
        spent, steps = time_replay(wrapped, episodes, repeats)
        results[f"{mode}_oracle_steps_per_s_gym_make"] = steps / spent
    results.update(time_features(tasks, rounds))
    results["resets_per_s"] = time_resets(ToolChainEnv(mode="structured"), tasks, n_resets)
    results["resets_per_s_chat"] = time_resets(ToolChainEnv(mode="chat"), tasks, n_resets)
    results["sampler_tasks_per_s_in_process"] = time_sampler(n_sample)  # after the env parts, same process
    fresh = time_sampler_fresh(n_sample, n_fresh)
    results["sampler_tasks_per_s_fresh_processes"] = fresh
    results["sampler_tasks_per_s"] = float(statistics.median(fresh))
    for k, v in results.items():
        if isinstance(v, float):
            shown = f"{v:,.2f}" if "speedup" in k or "per_episode" in k else f"{v:,.0f}"
        else:
            shown = " ".join(f"{x:,.0f}" for x in v) if isinstance(v, list) else v
        print(f"{k:48s} {shown}")
    for key, target in TARGETS.items():
        got = {"chat": results["chat_oracle_steps_per_s"], "structured": results["structured_oracle_steps_per_s"],
               "reset": results["resets_per_s"], "sampler": results["sampler_tasks_per_s"],
               "features": results["features_random_steps_per_s_with_resets"]}[key]
        print(f"target {key:10s} {target:>8,} -> {got:10,.0f}  {'met' if got >= target else 'MISSED'}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    from _script import run_script

    run_script(main)
