"""Statistics of the data-efficiency benchmark: bootstrap CIs, curves, curriculum telemetry, targets.

Confidence intervals are two-level percentile bootstraps over seeds x tasks: each replicate
draws the seeds with replacement and, independently, the evaluation tasks with replacement
(the same task draw for every seed, since every seed is evaluated on the same tasks), and
takes the mean. Every draw comes from a ``numpy.random.Generator`` seeded with the base seed
and a CRC of what is being estimated, so the numbers do not depend on the order of the work.
"""

from __future__ import annotations

import copy
import zlib
from collections import defaultdict
from typing import Any, Mapping, Sequence

import numpy as np

REGIONS = ("boundary", "plateau", "mastered", "hard")
POOL_KEYS = ("active_seeds", "active_synthetic", "staged", "quarantined", "archived")
SPLITS = ("test", "ood")
RODS_FAMILY = ("rods", "naive", "replay_only")


def rng_for(base_seed: int, label: str) -> np.random.Generator:
    return np.random.default_rng([int(base_seed), zlib.crc32(label.encode())])


def bootstrap_ci(values: np.ndarray, rng: np.random.Generator, samples: int = 2000,
                 level: float = 0.95) -> dict[str, float]:
    """Mean of a ``[seeds, tasks]`` matrix and its two-level percentile bootstrap interval."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2 or v.size == 0:
        raise ValueError(f"bootstrap_ci needs a non-empty [seeds, tasks] matrix, got shape {v.shape}")
    n_seeds, n_tasks = v.shape
    si = rng.integers(0, n_seeds, size=(samples, n_seeds))
    ti = rng.integers(0, n_tasks, size=(samples, n_tasks))
    means = v[si[:, :, None], ti[:, None, :]].mean(axis=(1, 2))
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return {"mean": float(v.mean()), "lo": float(lo), "hi": float(hi)}


def bootstrap_mean_1d(values: Sequence[float], rng: np.random.Generator, samples: int = 2000,
                      level: float = 0.95) -> dict[str, float]:
    """Mean of a flat sample and its percentile bootstrap interval (NaNs when empty)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {"mean": float("nan"), "lo": float("nan"), "hi": float("nan"), "n": 0}
    ci = bootstrap_ci(v[None, :], rng, samples, level)
    return {**ci, "n": int(v.size)}


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


# -- curriculum telemetry ---------------------------------------------------------------------
def _by_step(groups: Sequence[Mapping[str, Any]]) -> dict[int, list[Mapping[str, Any]]]:
    out: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for g in groups:
        out[int(g["step"])].append(g)
    return out


def step_telemetry(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per training step of one run: silent fraction, regions, boundary-vs-rest variance ratio
    (from the recorded groups) and the source's own pool telemetry (from the trainer's history)."""
    history = {int(h["step"]) - 1: h for h in run["history"]}  # history steps are 1-based
    out = []
    for step, gs in sorted(_by_step(run["groups"]).items()):
        rec: dict[str, Any] = {"step": step + 1, "groups": len(gs),
                               "silent_fraction": float(np.mean([g["silent"] for g in gs])),
                               "u_mean": float(np.mean([g["u"] for g in gs]))}
        regions = [g["region"] for g in gs if g["region"] is not None]
        if regions:
            for r in REGIONS:
                rec[f"region/{r}"] = regions.count(r) / len(regions)
            rec["boundary_fraction"] = rec["region/boundary"]
            ub = [g["u"] for g in gs if g["region"] == "boundary"]
            ur = [g["u"] for g in gs if g["region"] not in (None, "boundary")]
            if ub and ur and np.mean(ur) > 0:
                rec["variance_ratio"] = float(np.mean(ub) / np.mean(ur))
        h = history.get(step, {})
        for key in POOL_KEYS:
            if f"source/pool/{key}" in h:
                rec[f"pool/{key}"] = float(h[f"source/pool/{key}"])
        for key in ("source/pool/signature_entropy", "source/kappa", "source/synth/staged_total",
                    "source/admission/yield", "source/variance_ratio"):
            if key in h:
                rec[key.removeprefix("source/")] = float(h[key])
        out.append(rec)
    return out


def mean_over_seeds(per_seed: Sequence[Sequence[Mapping[str, Any]]], key: str) -> tuple[list[int], list[float]]:
    """Per step, the mean of ``key`` over the seeds that have it."""
    vals: dict[int, list[float]] = defaultdict(list)
    for series in per_seed:
        for rec in series:
            if key in rec and np.isfinite(rec[key]):
                vals[int(rec["step"])].append(float(rec[key]))
    steps = sorted(vals)
    return steps, [float(np.mean(vals[s])) for s in steps]


def region_variance(runs: Mapping[int, Mapping[str, Any]], boot: Mapping[str, int], arm: str) -> dict[str, Any]:
    """Group variance u by detector region, pooled over seeds and steps, with CIs; the
    boundary-vs-rest ratio; and the same ratio *one appearance ahead* (region assigned at a
    task's previous appearance, u measured at the next one), which the region did not see."""
    groups = [g for s in sorted(runs) for g in runs[s]["groups"] if g["region"] is not None]
    out: dict[str, Any] = {"regions": {}}
    for r in REGIONS:
        us = [g["u"] for g in groups if g["region"] == r]
        out["regions"][r] = bootstrap_mean_1d(us, rng_for(boot["seed"], f"{arm}/region/{r}"), boot["samples"])
    out["ratio"] = _ratio_ci([g["u"] for g in groups if g["region"] == "boundary"],
                             [g["u"] for g in groups if g["region"] != "boundary"],
                             rng_for(boot["seed"], f"{arm}/ratio"), boot["samples"])
    ahead_b, ahead_r = [], []
    for s in sorted(runs):
        last_region: dict[str, str] = {}
        for g in runs[s]["groups"]:
            if g["region"] is None:
                continue
            prev = last_region.get(g["task"])
            if prev is not None:
                (ahead_b if prev == "boundary" else ahead_r).append(g["u"])
            last_region[g["task"]] = g["region"]
    out["ratio_next_appearance"] = _ratio_ci(ahead_b, ahead_r, rng_for(boot["seed"], f"{arm}/ratio_ahead"),
                                             boot["samples"])
    return out


def _ratio_ci(a: Sequence[float], b: Sequence[float], rng: np.random.Generator, samples: int) -> dict[str, Any]:
    """mean(a) / mean(b) with a percentile bootstrap interval (groups resampled within a and b)."""
    a_, b_ = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    res: dict[str, Any] = {"n_boundary": int(a_.size), "n_rest": int(b_.size)}
    if a_.size == 0 or b_.size == 0 or b_.mean() <= 0:
        return {**res, "ratio": float("nan"), "lo": float("nan"), "hi": float("nan")}
    ra = a_[rng.integers(0, a_.size, size=(samples, a_.size))].mean(axis=1)
    rb = b_[rng.integers(0, b_.size, size=(samples, b_.size))].mean(axis=1)
    ratios = ra / np.where(rb > 0, rb, np.nan)
    lo, hi = np.nanquantile(ratios, [0.025, 0.975])
    return {**res, "ratio": float(a_.mean() / b_.mean()), "lo": float(lo), "hi": float(hi)}


def late_silent_flags(runs: Mapping[int, Mapping[str, Any]]) -> list[bool]:
    """Silent flags of every group in the second half of training (pooled over seeds)."""
    return [bool(g["silent"]) for r in runs.values() for g in r["groups"] if 2 * int(g["step"]) >= int(r["steps"])]


def silent_windows(runs: Mapping[int, Mapping[str, Any]], n_windows: int = 4) -> list[float]:
    """Silent-group fraction in ``n_windows`` equal windows of training steps (fewer when there
    are fewer steps), pooled over seeds."""
    n_windows = max(1, min(n_windows, min(int(r["steps"]) for r in runs.values())))
    sums = np.zeros(n_windows)
    counts = np.zeros(n_windows)
    for s in runs:
        total = max(int(runs[s]["steps"]), 1)
        for g in runs[s]["groups"]:
            w = min(n_windows - 1, int(g["step"]) * n_windows // total)
            sums[w] += g["silent"]
            counts[w] += 1
    return [float(x) if c else float("nan") for x, c in zip(sums / np.maximum(counts, 1), counts)]


def dapo_refills(runs: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """Whether DAPO's dynamic sampling actually happened: refill groups beyond the batch, and
    the extra rollouts the source counted."""
    silent_steps = refill_groups = 0
    for r in runs.values():
        for step, gs in _by_step(r["groups"]).items():
            tasks = int(r["history"][0]["episodes"]) // max(1, gs[0]["size"]) if r["history"] else len(gs)
            refill_groups += max(0, len(gs) - tasks)
            silent_steps += any(g["silent"] for g in gs[:tasks])
    extra = [float(r["history"][-1].get("extra_rollouts", 0)) if r["history"] else 0.0 for r in runs.values()]
    return {"refill_groups": refill_groups, "steps_with_silent_groups": silent_steps, "extra_rollouts": extra,
            "active": bool(refill_groups > 0 or any(extra))}


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
    return {"arms": arms, "targets": check_targets(arms, boot), "tasks": {k: len(v["ids"]) for k, v in tasks.items()}}


def difference_ci(a: Sequence[float], b: Sequence[float], rng: np.random.Generator, samples: int = 2000
                  ) -> dict[str, float]:
    """mean(a) - mean(b) with a percentile bootstrap interval (each sample resampled on its own)."""
    a_, b_ = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a_.size == 0 or b_.size == 0:
        return {"diff": float("nan"), "lo": float("nan"), "hi": float("nan")}
    da = a_[rng.integers(0, a_.size, size=(samples, a_.size))].mean(axis=1)
    db = b_[rng.integers(0, b_.size, size=(samples, b_.size))].mean(axis=1)
    lo, hi = np.quantile(da - db, [0.025, 0.975])
    return {"diff": float(a_.mean() - b_.mean()), "lo": float(lo), "hi": float(hi)}


def check_targets(arms: Mapping[str, Any], boot: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
    """The four targets of the issue, each measured, with pass/miss and by how much."""
    out: list[dict[str, Any]] = []
    rods, offline = arms.get("rods"), arms.get("offline")
    # 1. RODS reaches offline's final test success with <= 1/20 of offline's trajectories
    t: dict[str, Any] = {"name": "RODS reaches the offline arm's final test success with <= 1/20 of its trajectories"}
    if rods and offline:
        goal = offline["final"]["test"]["success"]["mean"]
        start = offline["curve"][0]["test"]["success"]["mean"]  # the shared warm start
        budget = offline["final"]["rollouts_mean"]
        reached = [p for p in rods["curve"][1:] if p["test"]["success"]["mean"] >= goal]
        t["offline_final_success"] = goal
        t["warm_start_success"] = start
        t["offline_rollouts"] = budget
        t["rods_final_success"] = rods["final"]["test"]["success"]["mean"]
        if goal <= start:
            t.update(rods_rollouts=None, fraction=None, passed=None)
            t["detail"] = (f"vacuous: the offline arm did not improve on the warm start ({start:.3f} -> {goal:.3f}), "
                           f"so there is nothing to reach (RODS final {t['rods_final_success']:.3f})")
        elif reached:
            frac = reached[0]["rollouts_mean"] / budget if budget else float("nan")
            t.update(rods_rollouts=reached[0]["rollouts_mean"], fraction=frac, passed=bool(frac <= 1 / 20))
            t["detail"] = (f"RODS first reaches {goal:.3f} at {reached[0]['rollouts_mean']:.0f} rollouts = "
                           f"{frac:.3f} of offline's {budget:.0f} (target <= 0.050)")
        else:
            t.update(rods_rollouts=None, fraction=None, passed=False)
            t["detail"] = (f"RODS never reaches offline's final {goal:.3f} (RODS final "
                           f"{t['rods_final_success']:.3f}, short by {goal - t['rods_final_success']:.3f})")
    else:
        t.update(passed=None, detail="not measured (needs the rods and offline arms)")
    out.append(t)
    # 2. RODS beats fixed and augment with non-overlapping 95% CIs
    for other in ("fixed", "augment"):
        t = {"name": f"RODS beats {other} at equal budget, non-overlapping 95% CIs (final test success)"}
        if rods and other in arms:
            a, b = rods["final"]["test"]["success"], arms[other]["final"]["test"]["success"]
            t.update(rods=a, other=b, gap=a["lo"] - b["hi"], passed=bool(a["lo"] > b["hi"]))
            t["detail"] = (f"RODS {a['mean']:.3f} [{a['lo']:.3f}, {a['hi']:.3f}] vs {other} {b['mean']:.3f} "
                           f"[{b['lo']:.3f}, {b['hi']:.3f}]; CI gap {a['lo'] - b['hi']:+.3f} (needs > 0)")
        else:
            t.update(passed=None, detail=f"not measured (needs the rods and {other} arms)")
        out.append(t)
    # 3. boundary-vs-rest variance ratio >= 2
    t = {"name": "boundary-vs-rest variance ratio >= 2 (RODS; the paper reports 2.0-2.2)"}
    if rods and "region_variance" in rods:
        r = rods["region_variance"]["ratio"]
        ahead = rods["region_variance"]["ratio_next_appearance"]
        # with no boundary (or no other) group the ratio is undefined: not measured, rather than missed
        measured = bool(np.isfinite(r["ratio"]))
        t.update(ratio=r, ratio_next_appearance=ahead, passed=bool(r["ratio"] >= 2.0) if measured else None)
        t["detail"] = (f"pooled ratio {r['ratio']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}] over {r['n_boundary']} boundary "
                       f"and {r['n_rest']} other groups; one appearance ahead {ahead['ratio']:.2f} "
                       f"[{ahead['lo']:.2f}, {ahead['hi']:.2f}]")
    else:
        t.update(passed=None, detail="not measured (needs the rods arm)")
    out.append(t)
    # 4. silent fraction lower under RODS than fixed as training goes on
    t = {"name": "zero-variance (silent) group fraction stays lower under RODS than fixed data as training goes on"}
    if rods and "fixed" in arms:
        rw, fw = rods["silent_windows"], arms["fixed"]["silent_windows"]
        half = min(len(rw), len(fw)) // 2
        late_r, late_f = float(np.nanmean(rw[half:])), float(np.nanmean(fw[half:]))
        boot = boot or {"samples": 2000, "seed": 0}
        diff = difference_ci(rods["silent_late"], arms["fixed"]["silent_late"], rng_for(boot["seed"], "silent_late"),
                             boot["samples"])
        t.update(rods_windows=rw, fixed_windows=fw, rods_late=late_r, fixed_late=late_f, late_difference=diff,
                 passed=bool(late_r < late_f))
        t["detail"] = (f"second half of training: RODS {late_r:.3f} vs fixed {late_f:.3f} (difference "
                       f"{diff['diff']:+.3f}, 95% CI over groups [{diff['lo']:+.3f}, {diff['hi']:+.3f}]); per quarter "
                       "RODS " + ", ".join(f"{x:.2f}" for x in rw) + " / fixed " + ", ".join(f"{x:.2f}" for x in fw))
    else:
        t.update(passed=None, detail="not measured (needs the rods and fixed arms)")
    out.append(t)
    return out


def group_records(step: int, groups: Sequence[Any], source: Any, seed_ids: frozenset[str]) -> list[dict[str, Any]]:
    """One record per observed group, as the benchmarks' recording sources keep them: the step, the task id,
    whether it is a seed, ``mu`` and ``u = 4 var`` of its returns, whether it was silent, its size and, for a
    source with a RODS detector, the region that detector assigns it at this appearance (on a copy of the
    detector, so ``source`` is untouched). Call it before ``source.observe(step, groups)``."""
    from rods_gym.curricula import group_stats  # here: importing this module stays light

    detector = getattr(source, "detector", None)
    shadow = copy.deepcopy(detector) if detector is not None else None
    records = []
    for g in groups:
        mu, u = group_stats(g.returns)
        region = None
        if shadow is not None:
            shadow.update(g.task.id, g.returns)
            region = shadow.region(g.task.id)
        records.append({"step": int(step), "task": g.task.id, "seed_task": g.task.id in seed_ids, "mu": mu, "u": u,
                        "silent": bool(np.std(g.returns) == 0.0), "size": len(g.returns), "region": region})
    return records
