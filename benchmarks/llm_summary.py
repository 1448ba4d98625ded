"""The LLM data-efficiency benchmark's figures (benchmarks/data_efficiency.py): per arm the curve (the shared warm
start, then every evaluation point) with 95% CIs over seeds x tasks, overall and per depth, the curriculum
telemetry per step, and the issue's targets. The statistics are :mod:`benchmarks.stats`'s, the group figures
:mod:`benchmarks.recording`'s."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .recording import dapo_refills, late_silent_flags, region_variance, silent_windows, step_telemetry
from .stats import Target, beats, bootstrap_ci, not_measured, rng_for, silent_target, variance_ratio_target

SPLITS = ("test", "ood")


# -- curves ------------------------------------------------------------------------------------
def _points(warm: Mapping[str, Any], run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The evaluation points of one run, the warm start (rollouts 0) first."""
    start = {"target": 0, "step": 0, "rollouts": 0, "distinct_tasks": 0, "eval": warm["eval"]}
    return [start, *run["points"]]


def arm_curve(arm: str, warm: Mapping[int, Mapping[str, Any]], runs: Mapping[int, Mapping[str, Any]],
              tasks: Mapping[str, Mapping[str, list]], boot: Mapping[str, int]) -> list[dict[str, Any]]:
    """Per evaluation point: rollouts and distinct tasks (mean and per seed), success and
    progress with CIs over seeds x tasks, overall and per depth, per split."""
    seeds = sorted(runs)
    per_seed = [_points(warm[s], runs[s]) for s in seeds]
    n_points = min(len(p) for p in per_seed)
    curve = []
    for k in range(n_points):
        pts = [p[k] for p in per_seed]
        entry: dict[str, Any] = {
            "target": pts[0]["target"], "seeds": seeds,
            "rollouts": [int(p["rollouts"]) for p in pts], "rollouts_mean": float(np.mean([p["rollouts"] for p in pts])),
            "distinct_tasks": [int(p["distinct_tasks"]) for p in pts],
            "distinct_tasks_mean": float(np.mean([p["distinct_tasks"] for p in pts])),
        }
        for split in tasks:
            depth = np.asarray(tasks[split]["depth"])
            out: dict[str, Any] = {"per_depth": {}}
            for metric in ("success", "progress"):
                m = np.asarray([p["eval"][split][metric] for p in pts], dtype=np.float64)
                label = f"{arm}/{k}/{split}/{metric}"
                out[metric] = bootstrap_ci(m, rng_for(boot["seed"], label), boot["samples"])
                for d in sorted(set(depth.tolist())):
                    cols = depth == d
                    slot = out["per_depth"].setdefault(str(d), {"n": int(cols.sum())})
                    slot[metric] = bootstrap_ci(m[:, cols], rng_for(boot["seed"], f"{label}/d{d}"), boot["samples"])
            entry[split] = out
        curve.append(entry)
    return curve


# -- the whole summary --------------------------------------------------------------------------
def summarize_benchmark(warm: Mapping[int, Mapping[str, Any]], runs: Mapping[str, Mapping[int, Mapping[str, Any]]],
                        boot: Mapping[str, int]) -> dict[str, Any]:
    """Curves, final numbers, telemetry and the target checks of every arm that has runs."""
    any_warm = warm[min(warm)]
    tasks = any_warm["tasks"]
    arms: dict[str, Any] = {}
    for arm, by_seed in runs.items():
        if not by_seed:
            continue
        curve = arm_curve(arm, warm, by_seed, tasks, boot)
        telemetry = {s: step_telemetry(by_seed[s]) for s in sorted(by_seed)}
        all_groups = [g for s in by_seed for g in by_seed[s]["groups"]]
        entry: dict[str, Any] = {
            "seeds": sorted(by_seed), "curve": curve, "final": curve[-1], "telemetry": telemetry,
            "silent_fraction": float(np.mean([g["silent"] for g in all_groups])) if all_groups else float("nan"),
            "silent_windows": silent_windows(by_seed),
            "silent_late": late_silent_flags(by_seed),
            "train_seconds": float(np.mean([r["train_seconds"] for r in by_seed.values()])),
            "eval_seconds": float(np.mean([r["eval_seconds"] for r in by_seed.values()])),
            "steps": [int(r["steps"]) for r in by_seed.values()],
        }
        if arm == "dapo":
            entry["refills"] = dapo_refills(by_seed)
        if any(g["region"] is not None for g in all_groups):
            entry["region_variance"] = region_variance(by_seed, boot, arm)
        arms[arm] = entry
    return {"arms": arms, "targets": check_targets(arms, runs, boot),
            "tasks": {k: len(v["ids"]) for k, v in tasks.items()}}


def check_targets(arms: Mapping[str, Any], runs: Mapping[str, Mapping[int, Mapping[str, Any]]],
                  boot: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
    """The four targets of the issue, each measured, with PASS / MISS and by how much; "RODS beats X" is decided
    by the paired difference over seeds x tasks (the unpaired reading beside it)."""
    boot = boot or {"samples": 2000, "seed": 0}
    finals = {a: np.array([r[s]["points"][-1]["eval"]["test"]["success"] for s in sorted(r)], np.float64)
              for a, r in runs.items() if r}
    out = [reaches_offline(arms), *(beats("rods", other, finals, boot["seed"], boot["samples"])
                                    for other in ("fixed", "augment"))]
    rods = arms.get("rods")
    out.append(variance_ratio_target("rods", rods.get("region_variance") if rods else None))
    out.append(silent_target("rods", "fixed", {a: e["silent_late"] for a, e in arms.items()}, boot["seed"],
                             boot["samples"]))
    return [t.as_dict() for t in out]


def reaches_offline(arms: Mapping[str, Any], fraction: float = 1 / 20) -> Target:
    """RODS reaches the offline arm's final test success with <= ``fraction`` of its training trajectories (at the
    first evaluation point where its mean is at least as high); vacuous when offline never left the warm start."""
    name = "RODS reaches the offline arm's final test success with <= 1/20 of its trajectories"
    rods, offline = arms.get("rods"), arms.get("offline")
    if not (rods and offline):
        return not_measured(name, "the rods and offline arms")
    goal = offline["final"]["test"]["success"]["mean"]
    start = offline["curve"][0]["test"]["success"]["mean"]  # the shared warm start
    budget = offline["final"]["rollouts_mean"]
    final = rods["final"]["test"]["success"]["mean"]
    figures = {"offline_final_success": goal, "warm_start_success": start, "offline_rollouts": budget,
               "rods_final_success": final}
    if goal <= start:
        return Target(name, None, f"vacuous: the offline arm did not improve on the warm start ({start:.3f} -> "
                      f"{goal:.3f}), so there is nothing to reach (RODS final {final:.3f})",
                      {**figures, "rods_rollouts": None, "fraction": None})
    reached = [p for p in rods["curve"][1:] if p["test"]["success"]["mean"] >= goal]
    if not reached:
        return Target(name, False, f"RODS never reaches offline's final {goal:.3f} (RODS final {final:.3f}, short by "
                      f"{goal - final:.3f})", {**figures, "rods_rollouts": None, "fraction": None})
    frac = reached[0]["rollouts_mean"] / budget if budget else float("nan")
    return Target(name, bool(frac <= fraction), f"RODS first reaches {goal:.3f} at {reached[0]['rollouts_mean']:.0f} "
                  f"rollouts = {frac:.3f} of offline's {budget:.0f} (target <= {fraction:.3f})",
                  {**figures, "rods_rollouts": reached[0]["rollouts_mean"], "fraction": frac})
