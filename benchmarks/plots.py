"""Figures of the benchmarks (matplotlib, Agg backend, PNG): success curves with their bands, the RODS pool and
region variance, the silent-group fraction over training."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .recording import POOL_KEYS, REGIONS, mean_over_seeds  # noqa: E402

SPLIT_TITLES = {"test": "held-out test split", "ood": "OOD split (held-out tools/signatures)"}


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _legend_grid_save(fig: Any, ax: Any, path: Path) -> Path:
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _colors(arms: list[str]) -> dict[str, Any]:
    cmap = plt.get_cmap("tab10")
    return {a: cmap(i % 10) for i, a in enumerate(arms)}


def _success_curve(ax: Any, arm: str, entry: Mapping[str, Any], split: str, x: str, color: Any,
                   alpha: float) -> None:
    """One arm's greedy success on ``split`` along ``x`` (a key of its curve points), with its 95% band."""
    xs = [p[x] for p in entry["curve"]]
    ax.plot(xs, [p[split]["success"]["mean"] for p in entry["curve"]], marker="o", ms=3, color=color,
            label=f"{arm} ({len(entry['seeds'])} seeds)")
    ax.fill_between(xs, [p[split]["success"]["lo"] for p in entry["curve"]],
                    [p[split]["success"]["hi"] for p in entry["curve"]], color=color, alpha=alpha, linewidth=0)


def success_curves(summary: Mapping[str, Any], path: Path, x: str = "rollouts_mean",
                   xlabel: str = "training rollout trajectories") -> Path:
    """Greedy success per arm with 95% bootstrap bands, one panel per split."""
    arms = summary["arms"]
    splits = list(summary["tasks"])
    colors = _colors(list(arms))
    fig, axes = plt.subplots(1, len(splits), figsize=(6 * len(splits), 4.2), squeeze=False)
    for ax, split in zip(axes[0], splits):
        for arm, entry in arms.items():
            _success_curve(ax, arm, entry, split, x, colors[arm], alpha=0.15)
        top = max([p[split]["success"]["hi"] for e in arms.values() for p in e["curve"]] + [0.0])
        ax.set_ylim(-0.01, min(1.0, max(0.1, 1.15 * top)))
        ax.set_title(f"{SPLIT_TITLES.get(split, split)} ({summary['tasks'][split]} tasks)")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("greedy success (95% CI)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    return _save(fig, path)


def pool_composition(summary: Mapping[str, Any], path: Path, arm: str = "rods") -> Path | None:
    """RODS pool composition (mean over seeds) as stacked areas, boundary fraction on the right axis."""
    entry = summary["arms"].get(arm)
    if entry is None:
        return None
    per_seed = list(entry["telemetry"].values())
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    layers, steps = [], None
    for key in POOL_KEYS:
        s, v = mean_over_seeds(per_seed, f"pool/{key}")
        if s:
            steps = s if steps is None else steps
            layers.append((key, np.interp(steps, s, v)))
    if layers and steps:
        ax.stackplot(steps, *[v for _, v in layers], labels=[k.replace("_", " ") for k, _ in layers], alpha=0.7)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("tasks in the pool")
    ax.grid(alpha=0.3)
    ax2 = ax.twinx()
    s, v = mean_over_seeds(per_seed, "boundary_fraction")
    ax2.plot(s, v, color="black", marker=".", label="boundary fraction of the batch")
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("boundary fraction")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")
    ax.set_title(f"{arm}: pool composition and boundary fraction ({len(per_seed)} seeds, mean)")
    return _save(fig, path)


def variance_by_region(summary: Mapping[str, Any], path: Path, arm: str = "rods") -> Path | None:
    """Mean group variance u = 4 var per detector region (95% CI), and the boundary/rest ratio per step."""
    entry = summary["arms"].get(arm)
    if entry is None or "region_variance" not in entry:
        return None
    rv = entry["region_variance"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    means = [rv["regions"][r]["mean"] for r in REGIONS]
    err = np.array([[max(0.0, rv["regions"][r]["mean"] - rv["regions"][r]["lo"]) for r in REGIONS],
                    [max(0.0, rv["regions"][r]["hi"] - rv["regions"][r]["mean"]) for r in REGIONS]])
    err = np.nan_to_num(err)
    ax1.bar(REGIONS, np.nan_to_num(means), yerr=err, capsize=4, color=["tab:red", "tab:gray", "tab:green", "tab:blue"])
    for i, r in enumerate(REGIONS):
        ax1.annotate(f"n={rv['regions'][r]['n']}", (i, 0), textcoords="offset points", xytext=(0, 3), ha="center",
                     fontsize=8)
    ratio = rv["ratio"]
    ax1.set_title(f"{arm}: group variance by region (ratio boundary/rest {ratio['ratio']:.2f})")
    ax1.set_ylabel("u = 4 var(returns) (95% CI)")
    ax1.grid(alpha=0.3, axis="y")
    per_seed = list(entry["telemetry"].values())
    s, v = mean_over_seeds(per_seed, "variance_ratio")
    ax2.plot(s, v, marker="o", ms=3, label="boundary / rest, this step")
    ax2.axhline(2.0, color="gray", ls="--", label="target 2")
    ax2.set_xlabel("GRPO step")
    ax2.set_ylabel("variance ratio (mean over seeds)")
    ax2.legend(fontsize=8)
    ax2.grid(alpha=0.3)
    return _save(fig, path)


def silent_fraction(summary: Mapping[str, Any], path: Path) -> Path:
    """Fraction of zero-variance groups per step (mean over seeds) for every arm."""
    arms = summary["arms"]
    colors = _colors(list(arms))
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for arm, entry in arms.items():
        s, v = mean_over_seeds(list(entry["telemetry"].values()), "silent_fraction")
        window = max(1, len(v) // 8)
        smooth = np.convolve(v, np.ones(window) / window, mode="valid") if len(v) >= window else np.asarray(v)
        ax.plot(s[window - 1:] if len(v) >= window else s, smooth, color=colors[arm], label=arm)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("silent-group fraction (std = 0)")
    ax.set_ylim(0, 1)
    ax.set_title("zero-variance groups per step (moving average, mean over seeds)")
    return _legend_grid_save(fig, ax, path)


def all_figures(summary: Mapping[str, Any], out: Path) -> dict[str, str]:
    out.mkdir(parents=True, exist_ok=True)
    figs = {
        "success_vs_rollouts": success_curves(summary, out / "success_vs_rollouts.png"),
        "success_vs_tasks": success_curves(summary, out / "success_vs_tasks.png", x="distinct_tasks_mean",
                                           xlabel="distinct training tasks"),
        "pool_composition": pool_composition(summary, out / "rods_pool_composition.png"),
        "variance_by_region": variance_by_region(summary, out / "rods_variance_by_region.png"),
        "silent_fraction": silent_fraction(summary, out / "silent_fraction.png"),
    }
    return {k: str(v) for k, v in figs.items() if v is not None}


def silent_by_quarter(summary: Mapping[str, Any], path: Path) -> Path:
    """Silent (zero-variance) group fraction per quarter of training, one line per arm."""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for arm, e in summary["arms"].items():
        w = e["silent_windows"]
        ax.plot(range(1, len(w) + 1), w, marker="o", label=arm)
    ax.set_xlabel("quarter of training")
    ax.set_ylabel("silent (zero-variance) group fraction")
    return _legend_grid_save(fig, ax, path)


LEARNER_TITLES = {"grpo": "GRPO (critic-free)", "ppo": "MaskablePPO (a critic)"}


def headline_panels(summaries: Mapping[str, Mapping[str, Any]], arms: list[str], path: Path,
                    split: str = "test") -> Path:
    """One panel per learner: greedy success along the env-step budget for the named arms, 95% bands.

    ``summaries`` maps a learner name to the ``summary.json`` that ``benchmarks/headline.py`` wrote for it; an arm
    a learner did not run is left out of its panel."""
    colors = _colors(arms)
    fig, axes = plt.subplots(1, len(summaries), figsize=(6 * len(summaries), 4.2), squeeze=False, sharey=True)
    for ax, (learner, summary) in zip(axes[0], summaries.items()):
        for arm in arms:
            entry = summary["arms"].get(arm)
            if entry is None:
                continue
            _success_curve(ax, arm, entry, split, "env_steps", colors[arm], alpha=0.12)
        group = summary.get("setup", {}).get("group_size")
        title = LEARNER_TITLES.get(learner, learner) + (f", G = {group}" if group else "")
        ax.set_title(f"{title}: {SPLIT_TITLES.get(split, split)}")
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("greedy success (95% CI)")
    axes[0][0].legend(fontsize=8)
    return _save(fig, path)


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.plots --out FIG.png --arms a,b learner=DIR ...``: the headline figure from the
    summaries that ``benchmarks/headline.py`` wrote (DIR holds ``summary.json``)."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m benchmarks.plots", description=main.__doc__)
    parser.add_argument("runs", nargs="+", help="learner=DIR, DIR holding a headline summary.json")
    parser.add_argument("--arms", default="fixed,rods,augment,augment_redraw,offline")
    parser.add_argument("--split", default="test")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    summaries = {}
    for item in args.runs:
        learner, sep, folder = item.partition("=")
        if not sep:
            parser.error(f"run {item!r}: expected learner=DIR, e.g. grpo=benchmarks/out/headline/grpo/cpu")
        summary_path = Path(folder) / "summary.json"
        if not summary_path.is_file():
            parser.error(f"run {item!r}: no summary.json in {folder} (run benchmarks/headline.py first)")
        summaries[learner] = json.loads(summary_path.read_text())
    print(headline_panels(summaries, [a for a in args.arms.split(",") if a], args.out, args.split))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
