"""Training-curve figure: per-step rollout reward and success, and held-out figures before, during and after."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np


def _smooth(values: Sequence[float], window: int) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    if len(v) < window or window <= 1:
        return v
    kernel = np.ones(window) / window
    head = np.array([v[: i + 1].mean() for i in range(window - 1)])
    return np.concatenate([head, np.convolve(v, kernel, mode="valid")])


def plot_training_curve(history: Sequence[Mapping[str, Any]], eval_points: Mapping[str, Sequence[tuple[int, float]]],
                        path: str | Path, title: str = "GRPO training") -> Path:
    """``eval_points``: legend label -> [(step, value), ...] (step 0 = before GRPO), e.g.
    ``{"test success (greedy)": [(0, 0.29), (60, 0.28)]}``; every series goes on the right panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    steps = [h["step"] for h in history]
    window = max(1, len(steps) // 15)
    for key, label in (("reward_mean", "reward (progress)"), ("success", "success")):
        vals = [h[key] for h in history]
        ax1.plot(steps, vals, alpha=0.25)
        ax1.plot(steps, _smooth(vals, window), label=f"{label} (smoothed)")
    ax1.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers, even over a short run
    ax2.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax1.set_xlabel("GRPO step")
    ax1.set_ylabel("training rollouts")
    ax1.set_ylim(0, 1)
    ax1.legend()
    ax1.grid(alpha=0.3)
    for label, pts in eval_points.items():
        if pts:
            xs, ys = zip(*pts)
            ax2.plot(xs, ys, marker="o", label=label)
    ax2.set_xlabel("GRPO step (0 = SFT warm start)")
    ax2.set_ylabel("held-out tasks")
    ax2.set_ylim(0, 1)
    ax2.legend()
    ax2.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
