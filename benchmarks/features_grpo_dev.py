"""Choosing the features-view GRPO learner's defaults on the DEV split (never test): each variant of
``FeaturesGRPOConfig`` trains on the fixed arm (the train split's 400 seeds in shuffled epochs, through the same
TaskSchedule contract as every curriculum) for the headline budget, then plays every dev task once, greedily.

    flock /tmp/rods-cpu.lock env OMP_NUM_THREADS=1 python benchmarks/features_grpo_dev.py --variants base lr3e-3 \
        --seeds 0 1 [--budget 196608] [--jobs 2] [--out benchmarks/out/features_grpo_dev]

A variant is a name from VARIANTS (overrides of FeaturesGRPOConfig()), or ``name=JSON`` for an ad-hoc one
(``g16b8='{"group_size": 16, "tasks_per_step": 8}'``). Each run is a file ``runs/VARIANT/seedK.json`` (reused when
its settings match, so an interrupted sweep resumes); ``report.md`` has, per variant, dev greedy success with its
95% bootstrap interval over seeds x tasks at each evaluation point, its paired difference to ``base`` at the end
(the same seeds and dev tasks), the training episodes' success and silent-group fraction at the end, and the CPU
seconds. The env steps of a run end at the first whole step (B x G episodes) at or after the budget.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
if __name__ == "__main__" and not __package__:  # run as a file: import the package, not its modules by name
    sys.path[0] = str(HERE.parent)

from benchmarks._script import run_script  # noqa: E402
from benchmarks.provenance import line, provenance  # noqa: E402
from benchmarks.stats import bootstrap_ci, fmt_ci, paired_difference, rng_for  # noqa: E402

ENV_ID = "rods/ToolChain-Easy-Features-v0"  # the headline's features env (tasks are always given)
VARIANTS: dict[str, dict[str, Any]] = {
    "base": {},
    "lr3e-4": {"lr": 3e-4}, "lr3e-3": {"lr": 3e-3},
    "g4b32": {"group_size": 4, "tasks_per_step": 32}, "g16b8": {"group_size": 16, "tasks_per_step": 8},
    "b32": {"tasks_per_step": 32}, "b8": {"tasks_per_step": 8},
    "ent0.01": {"ent_coef": 0.01},
    "net128": {"net_arch": (128, 128)},
    "ep1mb1": {"epochs": 1, "minibatches": 1}, "ep8": {"epochs": 8}, "mb8": {"minibatches": 8},
    "b32ep8": {"tasks_per_step": 32, "epochs": 8},
    "drgrpo": {"scale_rewards": "none"}, "seq": {"aggregation": "sequence"},
    "clip0.1": {"eps_low": 0.1, "eps_high": 0.1},
}
N_POINTS = 4


def variant(name: str) -> tuple[str, dict[str, Any]]:
    if "=" in name:
        label, text = name.split("=", 1)
        return label, json.loads(text)
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}: choose from {', '.join(VARIANTS)} or give name=JSON")
    return name, VARIANTS[name]


def run_one(label: str, overrides: dict[str, Any], seed: int, budget: int, out: Path) -> dict[str, Any]:
    """Train one variant x seed, evaluating greedily on dev at N_POINTS evenly spaced budgets."""
    import gymnasium as gym
    import torch

    from benchmarks.evaluator import greedy_evaluate
    from rods_gym import load_split
    from rods_gym.trainer.features_grpo import FeaturesGRPO, FeaturesGRPOConfig
    from rods_gym.curricula import FixedSeeds

    config = replace(FeaturesGRPOConfig(), **overrides)
    key = {"variant": label, "config": asdict(config), "seed": seed, "budget": budget, "env_id": ENV_ID}
    path = out / "runs" / label / f"seed{seed}.json"
    if path.exists():
        done = json.loads(path.read_text())
        if done["key"] == json.loads(json.dumps(key)):
            return done
    torch.set_num_threads(1)
    dev = load_split("dev")
    eval_envs = [gym.make(ENV_ID) for _ in range(32)]
    learner = FeaturesGRPO(ENV_ID, FixedSeeds(load_split("train"), seed=seed), config, seed=seed)
    points, cpu0 = [], time.process_time()
    for i in range(N_POINTS):
        learner.learn(budget * (i + 1) // N_POINTS - budget * i // N_POINTS)
        wins = greedy_evaluate(learner.predict, eval_envs, dev)["success"]
        points.append({"env_steps": learner.num_timesteps, "dev": [float(w) for w in wins]})
    tail = learner.log[-max(1, len(learner.log) // 10):]  # the last tenth of the steps
    record = {"key": key, "points": points, "cpu_seconds": time.process_time() - cpu0,
              "train_success_end": float(np.mean([r["success"] for r in tail])),
              "silent_fraction_end": float(np.mean([r["silent_fraction"] for r in tail])),
              "steps": len(learner.log), "log": learner.log}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return record


def report(runs: dict[str, list[dict[str, Any]]]) -> str:
    lines = ["# Features-view GRPO: its defaults chosen on dev", "", line(provenance()), "",
             "Fixed arm (train split, 400 seeds), greedy success on the 100 dev tasks, 95% bootstrap CI over seeds x "
             "tasks; train success / silent fraction: the sampled training episodes of the last tenth of the steps.",
             "", "| variant | seeds | " + " | ".join(f"dev @ {p}" for p in _point_labels(runs)) +
             " | per seed (end) | - base (paired, end) | train success | silent fraction | CPU s / run |",
             "|---|---|" + "---|" * (len(_point_labels(runs)) + 5)]
    base = runs.get("base")
    for label, recs in runs.items():
        cells = []
        for i in range(N_POINTS):
            m = np.array([r["points"][i]["dev"] for r in recs], dtype=np.float64)
            ci = bootstrap_ci(m, rng_for(0, f"{label}/{i}"))
            cells.append(f"{ci['mean']:.3f} [{ci['lo']:.3f}, {ci['hi']:.3f}]")
        per_seed = ", ".join(f"{np.mean(r['points'][-1]['dev']):.2f}" for r in recs)
        vs_base = "-"
        if base is not None and label != "base" and [r["key"]["seed"] for r in base] == [r["key"]["seed"] for r in recs]:
            end = [np.array([r["points"][-1]["dev"] for r in rs], dtype=np.float64) for rs in (recs, base)]
            vs_base = fmt_ci(paired_difference(end[0], end[1], rng_for(0, f"{label}-base")))
        lines.append(f"| {label} | {','.join(str(r['key']['seed']) for r in recs)} | " + " | ".join(cells) +
                     f" | {per_seed} | {vs_base} | {np.mean([r['train_success_end'] for r in recs]):.3f} | "
                     f"{np.mean([r['silent_fraction_end'] for r in recs]):.3f} | "
                     f"{np.mean([r['cpu_seconds'] for r in recs]):.0f} |")
    return "\n".join(lines)


def _point_labels(runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    first = next(iter(runs.values()))[0]
    return [f"{p['env_steps']:,}" for p in first["points"]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=["base"], help="names of VARIANTS, or name=JSON")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--budget", type=int, default=196_608)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "features_grpo_dev")
    args = ap.parse_args()
    chosen = dict(variant(n) for n in args.variants)
    jobs = [(label, ov, seed) for label, ov in chosen.items() for seed in args.seeds]
    results: dict[tuple[str, int], dict[str, Any]] = {}
    with cf.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_one, label, ov, seed, args.budget, args.out): (label, seed)
                   for label, ov, seed in jobs}
        for fut in cf.as_completed(futures):
            label, seed = futures[fut]
            results[(label, seed)] = rec = fut.result()
            print(f"{label} seed {seed}: dev {np.mean(rec['points'][-1]['dev']):.3f} "
                  f"({rec['cpu_seconds']:.0f} CPU s)", flush=True)
    runs = {label: [results[(label, s)] for s in args.seeds] for label in chosen}
    text = report(runs)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    run_script(main)
