"""The headline's figures from its run records: per arm the success curve and final point with 95% CIs over
seeds x tasks, per depth and turn type, the groups it trained on (silent fraction, share carrying gradient, RODS
regions), paired differences between arms, the paper's targets, the structure of the boundary parents and their
variants, and the Markdown report."""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Sequence

import numpy as np

from .learners import RODS_FAMILY
from .recording import (group_profile, late_silent_flags, mean_last_telemetry, region_shares, region_variance,
                        silent_windows)
from .report import table
from .stats import (beats, bootstrap_ci, fmt_ci, matches_with_fraction, paired_difference, rng_for, silent_target,
                    variance_ratio_target)

SPLITS = ("test", "ood")
BOOT = {"samples": 2000, "seed": 0}
LEARNER_NAMES = {"ppo": "MaskablePPO (a critic)", "grpo": "GRPO (critic-free, group-normalised advantages)"}
Runs = Mapping[str, Mapping[int, Mapping[str, Any]]]  # arm -> seed -> record
# the paired differences the report shows (where both arms ran): RODS against every other arm, then what each
# ingredient adds (augmentation with and without the redraw, fresh tasks, the resampler without structure, RODS on
# top of augmentation)
DIFFERENCES = tuple((a, b) for a, bs in (
    ("rods", ("fixed", "augment", "augment_redraw", "offline", "procedural", "naive", "replay_only", "rods_random",
              "rods_augment")),
    ("naive", ("fixed", "augment", "augment_redraw")),
    ("rods_augment", ("augment", "augment_redraw")),
    ("augment", ("fixed",)),
    ("augment_redraw", ("fixed", "augment")),
    ("offline", ("fixed",)),
    ("procedural", ("fixed",)),
    ("replay_only", ("fixed",)),
) for b in bs)


def _ci(matrix: Any, label: str) -> dict[str, float]:
    return bootstrap_ci(np.asarray(matrix, dtype=np.float64), rng_for(BOOT["seed"], label), BOOT["samples"])


def final_matrix(by_seed: Mapping[int, Mapping[str, Any]], split: str = "test", point: int = -1) -> np.ndarray:
    """[seeds, tasks] greedy success at an evaluation point (the last by default), seeds in order."""
    return np.array([by_seed[s]["points"][point]["eval"][split]["success"] for s in sorted(by_seed)], np.float64)


def task_meta(sets: Mapping[str, Sequence[Any]]) -> dict[str, dict[str, list]]:
    """Depth and turn type of every evaluation task, per split, in evaluation order."""
    return {s: {"depth": [int(t.meta["knobs"]["depth"]) for t in ts], "stratum": [t.meta.get("stratum") for t in ts]}
            for s, ts in sets.items()}


def summarize(runs: Runs, meta: Mapping[str, Mapping[str, list]], baseline: Mapping[str, Any] | None
              ) -> dict[str, Any]:
    arms: dict[str, Any] = {}
    for arm, by_seed in runs.items():
        if not by_seed:
            continue
        seeds = sorted(by_seed)
        n_points = min(len(by_seed[s]["points"]) for s in seeds)
        curve = []
        for i in range(n_points):
            pts = [by_seed[s]["points"][i] for s in seeds]
            p: dict[str, Any] = {"env_steps": float(np.mean([q["env_steps"] for q in pts])),
                                 "distinct_tasks": float(np.mean([q["distinct_tasks"] for q in pts]))}
            for split in SPLITS:
                p[split] = {k: _ci([q["eval"][split][k] for q in pts], f"{arm}/{i}/{split}/{k}")
                            for k in ("success", "progress")}
            curve.append(p)
        final = [by_seed[s]["points"][n_points - 1] for s in seeds]
        breakdown: dict[str, Any] = {}
        for split in SPLITS:
            m = np.array([q["eval"][split]["success"] for q in final], dtype=np.float64)
            for kind in ("depth", "stratum"):
                cells = sorted(set(meta[split][kind]), key=str)
                breakdown[f"{split}/{kind}"] = {
                    str(c): {**_ci(m[:, [j for j, v in enumerate(meta[split][kind]) if v == c]],
                                   f"{arm}/{split}/{kind}/{c}"),
                             "n": meta[split][kind].count(c)} for c in cells}
        windows = silent_windows(by_seed)
        entry: dict[str, Any] = {
            "seeds": seeds, "curve": curve, "final": curve[-1], "breakdown": breakdown,
            "env_steps": [int(by_seed[s]["env_steps"]) for s in seeds],
            "distinct_tasks": float(np.mean([by_seed[s]["distinct_tasks"] for s in seeds])),
            "silent_windows": windows, "silent_late": late_silent_flags(by_seed),
            "gradient_windows": [1.0 - w for w in windows],  # groups with non-zero return variance
            "silent_fraction": float(np.mean([g["silent"] for s in seeds for g in by_seed[s]["groups"]])),
            "seed_task_share": float(np.mean([g["seed_task"] for s in seeds for g in by_seed[s]["groups"]])),
            "seconds": float(np.mean([by_seed[s]["seconds"] for s in seeds])),
            "train_seconds": float(np.mean([by_seed[s]["train_seconds"] for s in seeds])),
            "eval_seconds": float(np.mean([by_seed[s]["eval_seconds"] for s in seeds])),
        }
        offline_sizes = [by_seed[s].get("offline_set_size") for s in seeds if by_seed[s].get("offline_set_size")]
        if offline_sizes:
            entry["offline_set_size"] = int(offline_sizes[0])
        entry["profile"] = {k: group_profile(by_seed, k) for k in ("depth", "stratum")}
        if arm in RODS_FAMILY:
            entry["region_variance"] = region_variance(by_seed, BOOT, arm)
            entry["regions"] = region_shares(by_seed)
            entry["pool_end"] = mean_last_telemetry(by_seed)
            if all(by_seed[s].get("catalog") for s in seeds):
                entry["structure"] = structure(by_seed)
        arms[arm] = entry
    summary: dict[str, Any] = {"arms": arms, "tasks": {s: len(meta[s]["depth"]) for s in SPLITS}}
    if baseline is not None:
        summary["random"] = {s: _ci([e["success"] for e in baseline["eval"][s]], f"random/{s}") for s in SPLITS}
    summary["targets"] = [t.as_dict() for t in targets(runs, arms)]
    summary["differences"] = {f"{a} - {b}": curve_differences(runs, a, b)
                              for a, b in DIFFERENCES if a in runs and b in runs}
    return summary


def targets(runs: Runs, arms: Mapping[str, Any]) -> list[Any]:
    """The paper's targets: RODS > fixed, RODS > augmentation (paired), RODS >= offline with 1/20 of its tasks,
    the boundary variance ratio, and fewer silent groups than fixed."""
    finals = {arm: final_matrix(by_seed) for arm, by_seed in runs.items() if by_seed}
    out = [beats("rods", "fixed", finals), beats("rods", "augment", finals)]
    rods, off = arms.get("rods"), arms.get("offline")
    if rods and off:
        size = off.get("offline_set_size") or off["distinct_tasks"]
        out.append(matches_with_fraction("rods", "offline", finals, rods["distinct_tasks"], size,
                                         "distinct training tasks (offline: its set)"))
    else:
        out.append(matches_with_fraction("rods", "offline", {}, 0, 0, "distinct training tasks"))
    out.append(variance_ratio_target("rods", rods.get("region_variance") if rods else None))
    out.append(silent_target("rods", "fixed", {a: e["silent_late"] for a, e in arms.items()}))
    return out


def curve_differences(runs: Runs, a: str, b: str, split: str = "test") -> list[dict[str, float]]:
    """At every evaluation point, success(a) - success(b), paired over seeds x tasks (95% CI); None where the two
    arms do not share their seeds."""
    if sorted(runs[a]) != sorted(runs[b]):
        return []
    n_points = min(len(r["points"]) for arm in (a, b) for r in runs[arm].values())
    out = []
    for i in range(n_points):
        d = paired_difference(final_matrix(runs[a], split, i), final_matrix(runs[b], split, i),
                              rng_for(BOOT["seed"], f"diff/{a}/{b}/{split}/{i}"), BOOT["samples"])
        steps = float(np.mean([r["points"][i]["env_steps"] for r in runs[a].values()]))
        out.append({"env_steps": steps, **d})
    return out


# -- the structure question ------------------------------------------------------------------------------
def structure(by_seed: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """What the boundary parents and their variants are, and which of their groups carry gradient.

    Per run, each trained-on task's description (``catalog``: signature class, depth, calls, turn type, parent)
    and the groups; pooled over seeds: (1) the seeds trained on and the parents (tasks at least one variant descends
    from): how many, how many were on the boundary at an appearance, their depth / turn type; (2) the variants: the
    share that keep their parent's signature class, depth and turn type; (3) signature class sizes (distinct
    trained-on tasks per class) of parents and of variants; (4) the share of groups with non-zero return variance
    (the groups that carry a GRPO gradient): seeds vs variants, overall, in the second half, at a variant's first
    appearance, and for variants that keep / change their parent's signature class."""
    counts: dict[str, Counter[str]] = {k: Counter() for k in ("seed_depth", "seed_turn", "parent_depth", "parent_turn",
                                                              "variant_depth", "variant_turn")}
    agg: dict[str, list] = {k: [] for k in ("keep_sig", "keep_depth", "keep_turn", "parent_class", "variant_class",
                                          "parent_boundary", "depth_shift")}
    carry: dict[str, list] = {k: [] for k in ("seed", "variant", "seed_late", "variant_late", "variant_first",
                                              "variant_same_sig", "variant_other_sig")}
    u: dict[str, list] = {"seed": [], "variant": []}
    n_parents = 0
    for r in by_seed.values():
        cat = r["catalog"]
        classes = Counter(d["sig"] for d in cat.values())
        boundary = {g["task"] for g in r["groups"] if g["region"] == "boundary"}
        same_sig = {}
        for tid, d in cat.items():
            p = cat.get(d["parent"]) if d.get("parent") else None
            if d.get("parent") is None:
                counts["seed_depth"][str(d["depth"])] += 1
                counts["seed_turn"][d["turn"]] += 1
            if p is None:  # a seed, or a variant whose parent was never trained on in this run
                continue
            same_sig[tid] = d["sig"] == p["sig"]
            agg["keep_sig"].append(same_sig[tid])
            agg["keep_depth"].append(d["depth"] == p["depth"])
            agg["keep_turn"].append(d["turn"] == p["turn"])
            agg["depth_shift"].append(d["depth"] - p["depth"])
            agg["variant_class"].append(classes[d["sig"]])
            counts["variant_depth"][str(d["depth"])] += 1
            counts["variant_turn"][d["turn"]] += 1
        for pid in {d["parent"] for d in cat.values() if d.get("parent") in cat}:
            p = cat[pid]
            n_parents += 1
            agg["parent_class"].append(classes[p["sig"]])
            agg["parent_boundary"].append(pid in boundary)
            counts["parent_depth"][str(p["depth"])] += 1
            counts["parent_turn"][p["turn"]] += 1
        seen: set[str] = set()
        for g in r["groups"]:
            kind = "seed" if g["seed_task"] else "variant"
            carry[kind].append(not g["silent"])
            u[kind].append(g["u"])
            if 2 * int(g["step"]) >= int(r["steps"]):
                carry[f"{kind}_late"].append(not g["silent"])
            if kind == "variant" and g["task"] in same_sig:
                carry["variant_same_sig" if same_sig[g["task"]] else "variant_other_sig"].append(not g["silent"])
                if g["task"] not in seen:
                    carry["variant_first"].append(not g["silent"])
            seen.add(g["task"])

    def share(c: Counter[str]) -> dict[str, float]:
        n = max(1, sum(c.values()))
        return {k: c[k] / n for k in sorted(c, key=str)}

    def mean(xs: list) -> float:
        return float(np.mean(xs)) if xs else float("nan")

    return {"parents": n_parents, "variants": len(agg["keep_sig"]),
            "parent_boundary_share": mean(agg["parent_boundary"]),
            **{k: share(c) for k, c in counts.items()},
            "keep_signature": mean(agg["keep_sig"]), "keep_depth": mean(agg["keep_depth"]),
            "keep_turn": mean(agg["keep_turn"]), "depth_shift": mean(agg["depth_shift"]),
            "parent_class_size": mean(agg["parent_class"]), "variant_class_size": mean(agg["variant_class"]),
            "carry": {k: mean(v) for k, v in carry.items()}, "groups": {k: len(v) for k, v in carry.items()},
            "u_mean": {k: mean(v) for k, v in u.items()}}


# -- report ----------------------------------------------------------------------------------------------
def report(summary: Mapping[str, Any], setup: Mapping[str, Any]) -> str:
    arms = summary["arms"]
    learner = setup.get("learner", "ppo")
    lines = [f"### Headline, {LEARNER_NAMES.get(learner, learner)} ({setup['scale']} scale)", "",
             f"Command: `{setup['command']}`  ", f"Date: {setup['date']}; machine: {setup['machine']}; "
             f"wall time {setup['wall_seconds'] / 60:.1f} min; code {setup.get('code', '?')}", "",
             f"{LEARNER_NAMES.get(learner, learner)} from scratch on `{setup['env_id']}`"
             + (f" {setup['env_kwargs']}" if setup["env_kwargs"] else "") + "; "
             f"{setup['budget']:,} env steps per run; seeds {', '.join(map(str, setup['seeds']))} per arm; "
             f"G={setup['group_size']}, {setup['tasks_per_batch']} tasks per batch; greedy success on "
             f"{summary['tasks']['test']} test and {summary['tasks']['ood']} OOD tasks, mean [95% CI over seeds x "
             "tasks].", "", f"Chosen on dev (seeds {', '.join(map(str, setup.get('dev_seeds', [])))}): "
             f"{setup.get('chosen', '?')}. Learner settings: {setup.get('learner_config')}; RODS overrides: "
             f"{setup.get('rods') or 'none (library defaults)'}.", ""]
    rows = []
    if "random" in summary:
        r = summary["random"]
        rows.append(["random masked agent", fmt_ci(r["test"]), fmt_ci(r["ood"]), "", 0, "", "", 0])
    for arm, e in arms.items():
        f = e["final"]
        late = float(np.mean(e["silent_late"])) if e["silent_late"] else float("nan")
        steps = sorted(set(e["env_steps"]))
        rows.append([arm, fmt_ci(f["test"]["success"]), fmt_ci(f["ood"]["success"]),
                     f"{f['test']['progress']['mean']:.3f}", f"{e['distinct_tasks']:.0f}",
                     f"{e['silent_fraction']:.3f} / {late:.3f}",
                     " / ".join(f"{x:.2f}" for x in e["gradient_windows"]), ", ".join(f"{s:,}" for s in steps)])
    lines += table(["arm", "test success", "OOD success", "test progress", "distinct tasks",
                    "silent (all / 2nd half)", "groups with return variance > 0, per quarter", "env steps"], rows)
    lines += ["", "Targets (each \"A > B\" decided by the paired difference; the unpaired reading beside it):", ""]
    lines += [f"- **{t['verdict']}** {t['name']}: {t['detail']}" for t in summary["targets"]]
    diffs = {k: v for k, v in summary.get("differences", {}).items() if v}
    if diffs:
        first = next(iter(diffs.values()))
        lines += ["", "Test success differences along the budget, paired over seeds x tasks, mean [95% CI]:", ""]
        lines += table(["pair", *(f"{int(p['env_steps']):,}" for p in first)],
                       [[pair, *(fmt_ci(d) for d in ds)] for pair, ds in diffs.items()])
    for split in SPLITS:
        for kind in ("depth", "stratum"):
            any_arm = next(iter(arms.values()))
            cells = list(any_arm["breakdown"][f"{split}/{kind}"])
            ns = [any_arm["breakdown"][f"{split}/{kind}"][c]["n"] for c in cells]
            lines += ["", f"{split} success by {'depth' if kind == 'depth' else 'turn type'} (final point):", ""]
            lines += table(["arm", *(f"{c} (n={n})" for c, n in zip(cells, ns))],
                           [[arm, *(f"{b[c]['mean']:.3f} [{b[c]['lo']:.2f}, {b[c]['hi']:.2f}]" for c in cells)]
                            for arm, e in arms.items() for b in [e["breakdown"][f"{split}/{kind}"]]])
    first_curve = next(iter(arms.values()))["curve"]
    lines += ["", "Test success along the budget (mean over seeds; distinct tasks in parentheses):", ""]
    lines += table(["arm", *(f"{int(p['env_steps']):,}" for p in first_curve)],
                   [[arm, *(f"{p['test']['success']['mean']:.3f} ({p['distinct_tasks']:.0f})" for p in e["curve"])]
                    for arm, e in arms.items()])
    lines += _rods_family(arms) + _profiles(arms) + _structure(arms)
    lines += ["", "Time per run (mean): " + ", ".join(f"{a} {e['seconds']:.0f} s (eval {e['eval_seconds']:.0f} s)"
                                                   for a, e in arms.items()), ""]
    return "\n".join(lines)


def _rods_family(arms: Mapping[str, Any]) -> list[str]:
    fam = [a for a in arms if a in RODS_FAMILY]
    if not fam:
        return []
    rows = []
    for arm in fam:
        e, rg, pe = arms[arm], arms[arm]["regions"], arms[arm]["pool_end"]
        two = lambda k: f"{rg['first'][k]:.2f} / {rg['second'][k]:.2f}"  # noqa: E731
        rows.append([arm, two("boundary"), two("mastered"), two("hard"), two("plateau"), two("boundary_seed_share"),
                     f"{pe.get('pool/active_seeds', float('nan')):.0f} / "
                     f"{pe.get('pool/active_synthetic', float('nan')):.0f}",
                     f"{pe.get('synth/staged_total', 0):.0f} ({pe.get('admission/admitted_total', 0):.0f} / "
                     f"{pe.get('admission/dropped_total', 0):.0f} / {pe.get('admission/evicted_total', 0):.0f})",
                     f"{pe.get('kappa', float('nan')):.3f}",
                     f"{e['region_variance']['ratio']['ratio']:.2f} / "
                     f"{e['region_variance']['ratio_next_appearance']['ratio']:.2f}"])
    return ["", "RODS family: regions (share of groups, first / second half), boundary groups that are seeds, pool at "
            "the end (mean over seeds):", ""] + table(
        ["arm", "boundary", "mastered", "hard", "plateau", "boundary seeds", "active seeds / synthetic",
         "staged total (admitted / dropped / evicted)", "kappa", "variance ratio (same / next appearance)"], rows)


def _profiles(arms: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    for kind in ("depth", "stratum"):
        cells = sorted({c for e in arms.values() for c in e["profile"][kind]})
        lines += ["", f"Training groups by the {'depth' if kind == 'depth' else 'turn type'} of their root seed: share "
                  "of groups / share of boundary groups (RODS family) / mean mu / silent fraction in the second half:",
                  ""]
        rows = []
        for arm, e in arms.items():
            pr = e["profile"][kind]
            rows.append([arm, *("" if c not in pr else f"{pr[c]['groups']:.2f} / "
                                + (f"{pr[c]['boundary']:.2f}" if arm in RODS_FAMILY else "-")
                                + f" / {pr[c]['mu']:.2f} / {pr[c]['silent_late']:.2f}" for c in cells)])
        lines += table(["arm", *cells], rows)
    return lines


def _structure(arms: Mapping[str, Any]) -> list[str]:
    st = {a: e["structure"] for a, e in arms.items() if "structure" in e}
    if not st:
        return []

    def dist(d: Mapping[str, float]) -> str:
        return ", ".join(f"{k} {v:.2f}" for k, v in d.items())

    rows = [[a, f"{s['parents']:,}", f"{s['parent_boundary_share']:.2f}", dist(s["seed_depth"]),
             dist(s["parent_depth"]), dist(s["variant_depth"]), dist(s["seed_turn"]), dist(s["parent_turn"]),
             dist(s["variant_turn"]), f"{s['variants']:,}", f"{s['keep_signature']:.2f} / {s['keep_depth']:.2f} / "
             f"{s['keep_turn']:.2f}", f"{s['depth_shift']:+.2f}",
             f"{s['parent_class_size']:.1f} / {s['variant_class_size']:.1f}"] for a, s in st.items()]
    c = lambda s, k: f"{s['carry'][k]:.3f} ({s['groups'][k]:,})"  # noqa: E731
    carry = [[a, c(s, "seed"), c(s, "variant"), f"{s['carry']['seed_late']:.3f} / {s['carry']['variant_late']:.3f}",
              c(s, "variant_first"), c(s, "variant_same_sig"), c(s, "variant_other_sig"),
              f"{s['u_mean']['seed']:.3f} / {s['u_mean']['variant']:.3f}"] for a, s in st.items()]
    return (["", "The structure question: the seeds trained on, the parents variants were made from and the variants "
             "(pooled over seeds; 'on the boundary': the parent was in the boundary region at one of its appearances; "
             "depth and turn type from each task's own signature):", ""]
            + table(["arm", "parents", "on the boundary", "seed depth", "parent depth", "variant depth",
                     "seed turn type", "parent turn type", "variant turn type", "variants",
                     "variant keeps signature / depth / turn type", "depth shift",
                     "signature class size, parents / variants"], rows)
            + ["", "Groups that carry gradient (return variance > 0), share (groups): seeds vs variants, the second "
               "half, a variant's first appearance, variants that keep / change their parent's signature class; mean "
               "u = 4 var:", ""]
            + table(["arm", "seed groups", "variant groups", "2nd half seeds / variants", "variant, first appearance",
                     "variant, same signature", "variant, other signature", "mean u seeds / variants"], carry))


def dev_report(runs: Runs, setup: Mapping[str, Any]) -> str:
    """``--dev``: final greedy success on the dev split per arm (95% CI over seeds x tasks), for choosing knobs."""
    rows = []
    for arm, by_seed in runs.items():
        last = [by_seed[s]["points"][-1] for s in sorted(by_seed)]
        ci = _ci([q["eval"]["dev"]["success"] for q in last], f"{arm}/dev")
        progress = float(np.mean([q["eval"]["dev"]["progress"] for q in last]))
        silent = float(np.mean([g["silent"] for r in by_seed.values() for g in r["groups"]]))
        rows.append([arm, ",".join(map(str, sorted(by_seed))), fmt_ci(ci), f"{progress:.3f}",
                     f"{np.mean([r['distinct_tasks'] for r in by_seed.values()]):.0f}", f"{silent:.3f}"])
    head = [f"# Headline, {setup.get('learner', 'ppo')}, dev split only ({setup['scale']} scale, {setup['budget']:,} "
            "env steps)", "", f"Command: `{setup['command']}`; date {setup['date']}; code {setup['code']}; G="
            f"{setup['group_size']}, {setup['tasks_per_batch']} tasks per batch; learner settings "
            f"{setup.get('learner_config')}; RODS overrides: {setup.get('rods') or {}}", ""]
    return "\n".join(head + table(["arm", "seeds", "dev success [95% CI]", "dev progress", "distinct tasks",
                                   "silent fraction"], rows))

