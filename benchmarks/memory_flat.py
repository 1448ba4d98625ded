"""Memory over a long run: whether the trainer's and the environment's memory stay flat.

    python benchmarks/memory_flat.py --scale cpu      # the figures in benchmarks/RESULTS.md
    python benchmarks/memory_flat.py --scale smoke    # under a minute

A leak that grows with episodes killed long RL runs of a peer after hours (DESIGN.md §8), so this
measures the process's resident memory (RSS, psutil) as work accumulates:

1. **GRPO**: the main job (``configs/default.yaml``: the tiny Llama, compact view, RODS curriculum,
   whose pool grows and synthesizes tasks) after a short warm start on the seed demonstrations, for
   ``steps`` steps; each step's ``mem_rss_mb`` from ``metrics.jsonl`` (the loop logs it).
2. **Environment**: ``episodes`` episodes of ``rods/ToolChain-Compact-v0``, each on a freshly sampled
   task (a new world), played by the oracle with a malformed action every fifth step (the
   error path); RSS after every ``episodes / 20``.

Reported for each: RSS at the start of the measured span and at its end, and the growth fitted by
least squares over the second half (after the allocator, caches and the curriculum's pool have had
the first half to settle), per 100 GRPO steps and per 10,000 episodes. **Flat** means that growth is
under 1% of the RSS: at that rate a run 100 times as long would still grow by under its own size.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import rods_gym.trainer  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)
import gymnasium as gym
import numpy as np
import psutil
import torch
import yaml

from rods_gym.oracle import oracle_action
from rods_gym.trainer.config import load_config
from rods_gym.trainer.metrics import read_jsonl
from rods_gym.trainer.pipeline import run_training

SCALES = yaml.safe_load((Path(__file__).resolve().parent / "configs" / "memory_flat.yaml").read_text())
FLAT = 0.01  # growth per unit (100 steps, 10,000 episodes) below this share of the RSS


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def second_half_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ``ys`` over ``xs`` on the second half of the points (0 for fewer than 2)."""
    half = len(xs) // 2
    x, y = np.asarray(xs[half:], float), np.asarray(ys[half:], float)
    if len(x) < 2 or np.ptp(x) == 0:
        return 0.0
    return float(np.polyfit(x, y, 1)[0])


def grpo_memory(scale: str, threads: int = 1) -> dict[str, Any]:
    """The main job's GRPO phase for the scale's steps; its per-step RSS."""
    s = SCALES[scale]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config("default", [f"run_dir={tmp}/run", f"steps={s['steps']}", "time_limit_min=0",
                                      "checkpoint_every=0", "tensorboard=false", "progress_bar=false",
                                      f"threads={threads}", f"sft.threads={threads}", f"eval.threads={threads}",
                                      "sft.data=seeds", "sft.demos=400", f"sft.steps={s['sft_steps']}",
                                      "eval.tasks=8", "eval.samples=0", *s["grpo"]])
        t0 = time.perf_counter()
        summary = run_training(cfg)
        seconds = time.perf_counter() - t0
        records = [r for r in read_jsonl(Path(tmp) / "run" / "metrics.jsonl") if "split" not in r]
    steps = [int(r["step"]) for r in records]
    rss = [float(r["mem_rss_mb"]) for r in records]
    return {"steps": steps, "rss_mb": rss, "episodes": summary["episodes"], "seconds": seconds,
            "slope_per_100": 100.0 * second_half_slope(steps, rss),
            "pool": [float(r.get("source/pool/active", float("nan"))) for r in records]}


def env_memory(scale: str, seed: int = 0) -> dict[str, Any]:
    """Oracle episodes (a malformed action every fifth step) on freshly sampled tasks; RSS per chunk."""
    n = SCALES[scale]["episodes"]
    chunk = max(n // 20, 1)
    env = gym.make("rods/ToolChain-Compact-v0")
    base = env.unwrapped
    marks, rss, steps = [0], [rss_mb()], 0
    t0 = time.perf_counter()
    for ep in range(n):
        env.reset(seed=seed * 1_000_003 + ep)
        done = False
        while not done:
            steps += 1
            action = "call ( $ $ ) ;;" if steps % 5 == 0 else base.encode(oracle_action(base.episode))
            _, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
        if (ep + 1) % chunk == 0:
            marks.append(ep + 1)
            rss.append(rss_mb())
    env.close()
    return {"episodes": marks, "rss_mb": rss, "steps": steps, "seconds": time.perf_counter() - t0,
            "slope_per_10k": 10_000.0 * second_half_slope(marks, rss)}


def verdict(slope: float, level: float) -> str:
    return "flat" if slope < FLAT * level else "GROWING"


def markdown(grpo: dict[str, Any], env: dict[str, Any], argv: Sequence[str]) -> str:
    load = os.getloadavg()
    g_level, e_level = grpo["rss_mb"][-1], env["rss_mb"][-1]
    pool = [p for p in grpo["pool"] if p == p]
    lines = [
        "## Memory over a long run (`benchmarks/memory_flat.py`)",
        "",
        f"- command: `python benchmarks/memory_flat.py {' '.join(argv)}`",
        f"- date: {_dt.datetime.now().isoformat(timespec='minutes')}",
        f"- machine: {os.cpu_count()}-core CPU ({platform.machine()}), Python {platform.python_version()}, "
        f"torch {torch.__version__}; load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        "",
        "| part | measured span | RSS first (MB) | RSS last (MB) | growth over the second half | verdict |",
        "|---|---|---|---|---|---|",
        f"| GRPO, main job config | {len(grpo['steps'])} steps, {grpo['episodes']} episodes, {grpo['seconds']:.0f} s "
        f"(with its warm start and evaluations) | {grpo['rss_mb'][0]:.0f} | {g_level:.0f} | "
        f"{grpo['slope_per_100']:+.1f} MB per 100 steps | {verdict(grpo['slope_per_100'], g_level)} |",
        f"| environment, compact view | {env['episodes'][-1]} episodes, {env['steps']} steps, {env['seconds']:.0f} s | "
        f"{env['rss_mb'][0]:.0f} | {e_level:.0f} | {env['slope_per_10k']:+.2f} MB per 10,000 episodes | "
        f"{verdict(env['slope_per_10k'], e_level)} |",
        "",
        f"Flat: growth under {FLAT:.0%} of the RSS per 100 steps / 10,000 episodes. GRPO RSS at every fifth of the "
        "run: " + ", ".join(f"{grpo['rss_mb'][i]:.0f}" for i in np.linspace(0, len(grpo['rss_mb']) - 1, 6).astype(int))
        + " MB" + (f"; the curriculum's pool {pool[0]:.0f} -> {pool[-1]:.0f} active tasks." if pool else "."),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=sorted(SCALES), default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: as the main job's GRPO)")
    ap.add_argument("--out", default=None, help="also write the report to this file")
    args = ap.parse_args(argv)
    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    env = env_memory(args.scale)  # first: the trainer's buffers would hide the environment's in one process's RSS
    grpo = grpo_memory(args.scale, args.threads)
    report = markdown(grpo, env, argv)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n")
    return 0


if __name__ == "__main__":
    from _script import run_script

    run_script(main)
