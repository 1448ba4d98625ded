"""The statistics of every benchmark: bootstrap CIs over seeds x tasks, paired differences, and the paper's
targets as PASS / MISS lines.

Intervals are two-level percentile bootstraps over a ``[seeds, tasks]`` matrix: each replicate draws the seeds
with replacement and, independently, the tasks with replacement (one task draw for every seed, since every seed
is evaluated on the same tasks), and takes the mean. A *paired* difference of two arms draws the same seeds and
the same tasks for both (they ran with the same seeds and were scored on the same tasks), so what the two arms
share (a hard task, a lucky seed) cancels; "A beats B" means that interval lies above 0. The unpaired reading (A's
and B's own intervals disjoint) is shown beside it. Every draw comes from a generator seeded with the base seed
and a CRC of what is estimated (:func:`rng_for`), so no number depends on the order of the work.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

SAMPLES = 2000  # bootstrap replicates
LEVEL = 0.95


def rng_for(base_seed: int, label: str) -> np.random.Generator:
    return np.random.default_rng([int(base_seed), zlib.crc32(label.encode())])


def _matrix(values: Any, what: str) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2 or v.size == 0:
        raise ValueError(f"{what} needs a non-empty [seeds, tasks] matrix, got shape {v.shape}")
    return v


def _interval(means: np.ndarray, level: float) -> tuple[float, float]:
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def bootstrap_ci(values: Any, rng: np.random.Generator, samples: int = SAMPLES, level: float = LEVEL
                 ) -> dict[str, float]:
    """Mean of a ``[seeds, tasks]`` matrix and its two-level percentile bootstrap interval."""
    v = _matrix(values, "bootstrap_ci")
    n_seeds, n_tasks = v.shape
    si = rng.integers(0, n_seeds, size=(samples, n_seeds))
    ti = rng.integers(0, n_tasks, size=(samples, n_tasks))
    lo, hi = _interval(v[si[:, :, None], ti[:, None, :]].mean(axis=(1, 2)), level)
    return {"mean": float(v.mean()), "lo": lo, "hi": hi}


def bootstrap_mean_1d(values: Sequence[float], rng: np.random.Generator, samples: int = SAMPLES,
                      level: float = LEVEL) -> dict[str, float]:
    """Mean of a flat sample and its percentile bootstrap interval (NaNs when empty)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {"mean": float("nan"), "lo": float("nan"), "hi": float("nan"), "n": 0}
    return {**bootstrap_ci(v[None, :], rng, samples, level), "n": int(v.size)}


def paired_difference(a: Any, b: Any, rng: np.random.Generator, samples: int = SAMPLES, level: float = LEVEL
                      ) -> dict[str, float]:
    """mean(a) - mean(b) of two ``[seeds, tasks]`` matrices measured on the same seeds (rows) and tasks
    (columns), with a two-level bootstrap interval in which both arms get the same seed and task draws."""
    a_, b_ = _matrix(a, "paired_difference"), _matrix(b, "paired_difference")
    if a_.shape != b_.shape:
        raise ValueError(f"paired_difference needs the same seeds and tasks for both arms, got shapes {a_.shape} "
                         f"and {b_.shape}")
    d = bootstrap_ci(a_ - b_, rng, samples, level)
    return {"diff": d["mean"], "lo": d["lo"], "hi": d["hi"]}


def difference_ci(a: Sequence[float], b: Sequence[float], rng: np.random.Generator, samples: int = SAMPLES
                  ) -> dict[str, float]:
    """mean(a) - mean(b) of two unpaired flat samples, each resampled on its own (NaNs when one is empty)."""
    a_, b_ = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a_.size == 0 or b_.size == 0:
        return {"diff": float("nan"), "lo": float("nan"), "hi": float("nan")}
    da = a_[rng.integers(0, a_.size, size=(samples, a_.size))].mean(axis=1)
    db = b_[rng.integers(0, b_.size, size=(samples, b_.size))].mean(axis=1)
    lo, hi = _interval(da - db, LEVEL)
    return {"diff": float(a_.mean() - b_.mean()), "lo": lo, "hi": hi}


def ratio_ci(a: Sequence[float], b: Sequence[float], rng: np.random.Generator, samples: int = SAMPLES
             ) -> dict[str, Any]:
    """mean(a) / mean(b) with a percentile bootstrap interval (each sample resampled on its own)."""
    a_, b_ = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    res: dict[str, Any] = {"n_boundary": int(a_.size), "n_rest": int(b_.size)}
    if a_.size == 0 or b_.size == 0 or b_.mean() <= 0:
        return {**res, "ratio": float("nan"), "lo": float("nan"), "hi": float("nan")}
    ra = a_[rng.integers(0, a_.size, size=(samples, a_.size))].mean(axis=1)
    rb = b_[rng.integers(0, b_.size, size=(samples, b_.size))].mean(axis=1)
    lo, hi = np.nanquantile(ra / np.where(rb > 0, rb, np.nan), [0.025, 0.975])
    return {**res, "ratio": float(a_.mean() / b_.mean()), "lo": float(lo), "hi": float(hi)}


def fmt_ci(ci: Mapping[str, float], digits: int = 3) -> str:
    """``mean [lo, hi]`` (``diff [lo, hi]`` with signs for a difference)."""
    if "diff" in ci:
        return f"{ci['diff']:+.{digits}f} [{ci['lo']:+.{digits}f}, {ci['hi']:+.{digits}f}]"
    return f"{ci['mean']:.{digits}f} [{ci['lo']:.{digits}f}, {ci['hi']:.{digits}f}]"


# -- the paper's targets --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """One checked claim: ``passed`` True (PASS), False (MISS) or None (not measured), and the figures why."""

    name: str
    passed: bool | None
    detail: str
    figures: Mapping[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        return {True: "PASS", False: "MISS", None: "N/A"}[self.passed]

    def line(self) -> str:
        return f"- **{self.verdict}** {self.name}: {self.detail}"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "verdict": self.verdict, "detail": self.detail,
                **dict(self.figures)}


def not_measured(name: str, needs: str) -> Target:
    return Target(name, None, f"not measured (needs {needs})")


def beats(a: str, b: str, matrices: Mapping[str, Any], boot_seed: int = 0, samples: int = SAMPLES,
          what: str = "test success") -> Target:
    """"``a`` > ``b``", decided by the paired difference (``matrices[arm]``: ``[seeds, tasks]``, same seeds and
    tasks): PASS when its 95% interval lies above 0. The unpaired reading (disjoint intervals) is shown beside."""
    name = f"{a} > {b} on {what} (paired difference over seeds x tasks, 95% CI above 0)"
    if a not in matrices or b not in matrices:
        return not_measured(name, f"the {a} and {b} arms")
    ma, mb = np.asarray(matrices[a], np.float64), np.asarray(matrices[b], np.float64)
    if ma.shape != mb.shape:
        return Target(name, None, f"not paired: {a} has {ma.shape[0]} seeds x {ma.shape[1]} tasks, {b} "
                      f"{mb.shape[0]} x {mb.shape[1]} (run both on the same seeds)")
    diff = paired_difference(ma, mb, rng_for(boot_seed, f"paired/{a}/{b}/{what}"), samples)
    ca = bootstrap_ci(ma, rng_for(boot_seed, f"{a}/{what}"), samples)
    cb = bootstrap_ci(mb, rng_for(boot_seed, f"{b}/{what}"), samples)
    disjoint = ca["lo"] > cb["hi"]
    detail = (f"{a} - {b} = {fmt_ci(diff)} over {ma.shape[0]} seeds x {ma.shape[1]} tasks; unpaired: {a} "
              f"{fmt_ci(ca)} vs {b} {fmt_ci(cb)}, CIs {'disjoint' if disjoint else 'overlap'} "
              f"(gap {ca['lo'] - cb['hi']:+.3f})")
    return Target(name, bool(diff["lo"] > 0), detail, {"paired": diff, a: ca, b: cb, "unpaired_disjoint": disjoint})


def matches_with_fraction(a: str, b: str, matrices: Mapping[str, Any], used: float, of: float, unit: str,
                          fraction: float = 1 / 20, boot_seed: int = 0, samples: int = SAMPLES) -> Target:
    """"``a`` reaches ``b``'s test success with <= ``fraction`` of its ``unit``": mean(a) >= mean(b) and
    ``used / of <= fraction``; the paired difference is shown."""
    name = f"{a} >= {b} on test success with <= 1/{round(1 / fraction)} of its {unit}"
    if a not in matrices or b not in matrices:
        return not_measured(name, f"the {a} and {b} arms")
    ma, mb = np.asarray(matrices[a], np.float64), np.asarray(matrices[b], np.float64)
    share = used / of if of else float("nan")
    detail = f"{a} {ma.mean():.3f} vs {b} {mb.mean():.3f}"
    if ma.shape == mb.shape:
        detail += f" ({a} - {b} = {fmt_ci(paired_difference(ma, mb, rng_for(boot_seed, f'paired/{a}/{b}'), samples))})"
    detail += f"; {a} used {used:,.0f} {unit} = {share:.3f} of {b}'s {of:,.0f} (needs <= {fraction:.3f})"
    return Target(name, bool(ma.mean() >= mb.mean() and share <= fraction), detail, {"share": share})


def variance_ratio_target(arm: str, region_variance: Mapping[str, Any] | None, threshold: float = 2.0) -> Target:
    """The boundary groups' mean return variance over the rest's >= ``threshold`` (the paper reports 2.0-2.2)."""
    name = f"boundary-vs-rest variance ratio >= {threshold:g} ({arm})"
    if region_variance is None or not np.isfinite(region_variance["ratio"]["ratio"]):
        return not_measured(name, f"{arm} groups in and out of the boundary")
    r, ahead = region_variance["ratio"], region_variance.get("ratio_next_appearance")
    detail = (f"ratio {r['ratio']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}] over {r.get('n_boundary', '?')} boundary and "
              f"{r.get('n_rest', '?')} other groups")
    if ahead is not None and np.isfinite(ahead["ratio"]):
        detail += f"; one appearance ahead {ahead['ratio']:.2f} [{ahead['lo']:.2f}, {ahead['hi']:.2f}]"
    return Target(name, bool(r["ratio"] >= threshold), detail, {"ratio": r, "ratio_next_appearance": ahead})


def silent_target(a: str, b: str, late: Mapping[str, Sequence[bool]], boot_seed: int = 0,
                  samples: int = SAMPLES) -> Target:
    """The silent-group fraction of the second half of training lower under ``a`` than ``b``: the difference's
    95% interval over groups (groups are not paired across arms) below 0."""
    name = f"silent-group fraction lower under {a} than {b} in the second half (95% CI over groups below 0)"
    if not late.get(a) or not late.get(b):
        return not_measured(name, f"the {a} and {b} arms")
    d = difference_ci(late[a], late[b], rng_for(boot_seed, "silent_late"), samples)
    detail = (f"{a} {np.mean(late[a]):.3f} vs {b} {np.mean(late[b]):.3f} (difference {fmt_ci(d)} over "
              f"{len(late[a])} / {len(late[b])} groups)")
    return Target(name, bool(d["hi"] < 0), detail, {"difference": d})
