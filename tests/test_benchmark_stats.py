"""benchmarks/stats.py: bootstrap CIs over seeds x tasks, paired differences (a planted difference is found where
the unpaired reading cannot see it, and no difference is found where none was planted), and the PASS / MISS logic
of the targets."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import benchmarks_package

with benchmarks_package():
    from benchmarks import stats


def test_bootstrap_ci_matches_the_normal_approximation_and_is_seeded() -> None:
    rng = np.random.default_rng(7)
    values = (rng.random((1, 400)) < 0.3).astype(float)
    ci = stats.bootstrap_ci(values, np.random.default_rng(0), samples=4000)
    p = values.mean()
    half = 1.96 * np.sqrt(p * (1 - p) / 400)
    assert ci["mean"] == pytest.approx(p)
    assert ci["lo"] == pytest.approx(p - half, abs=0.012) and ci["hi"] == pytest.approx(p + half, abs=0.012)
    assert stats.bootstrap_ci(values, np.random.default_rng(0), samples=4000) == ci  # seeded: the same interval
    assert stats.bootstrap_ci(np.ones((3, 20)), np.random.default_rng(0), samples=200) == {"mean": 1.0, "lo": 1.0,
                                                                                           "hi": 1.0}
    with pytest.raises(ValueError, match="seeds, tasks"):
        stats.bootstrap_ci(np.ones(5), np.random.default_rng(0))


def test_bootstrap_resamples_seeds_too() -> None:
    """Seeds that disagree widen the interval beyond what the task noise alone gives."""
    agree = np.tile((np.arange(50) % 2).astype(float), (3, 1))
    disagree = np.stack([np.zeros(50), np.ones(50), (np.arange(50) % 2).astype(float)])
    a = stats.bootstrap_ci(agree, np.random.default_rng(1), samples=2000)
    d = stats.bootstrap_ci(disagree, np.random.default_rng(1), samples=2000)
    assert a["mean"] == d["mean"] == pytest.approx(0.5)
    assert (d["hi"] - d["lo"]) > 2 * (a["hi"] - a["lo"])


def _planted(shift_tasks: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two arms on the same 5 seeds x 300 tasks: task difficulty shared (the bulk of the variance), B = A except
    that ``shift_tasks`` of A's failures become successes."""
    rng = np.random.default_rng(seed)
    difficulty = rng.random(300)
    a = (rng.random((5, 300)) < difficulty).astype(float)
    b = a.copy()
    failures = np.argwhere(b == 0)
    pick = failures[rng.choice(len(failures), size=shift_tasks, replace=False)]
    b[pick[:, 0], pick[:, 1]] = 1.0
    return a, b


def test_a_paired_difference_finds_a_planted_difference_the_unpaired_reading_misses() -> None:
    a, b = _planted(60)  # +0.04 on average: 60 of 1,500 cells
    d = stats.paired_difference(b, a, stats.rng_for(0, "planted"))
    assert d["diff"] == pytest.approx(60 / 1500) and 0 < d["lo"] < d["diff"] < d["hi"]
    ca, cb = (stats.bootstrap_ci(m, stats.rng_for(0, k)) for k, m in (("a", a), ("b", b)))
    assert cb["lo"] < ca["hi"]  # the arms' own intervals overlap: task difficulty dominates them
    t = stats.beats("b", "a", {"a": a, "b": b})
    assert t.verdict == "PASS" and t.figures["unpaired_disjoint"] is False and "overlap" in t.detail
    assert stats.beats("a", "b", {"a": a, "b": b}).verdict == "MISS"  # the other direction


def test_no_difference_planted_no_difference_found() -> None:
    a, _ = _planted(0)
    b = a[:, np.random.default_rng(3).permutation(300)]  # the same arm, its tasks' results shuffled among tasks
    d = stats.paired_difference(a, a, stats.rng_for(0, "same"))
    assert d == {"diff": 0.0, "lo": 0.0, "hi": 0.0}
    assert stats.beats("a", "b", {"a": a, "b": b}).verdict == "MISS"
    with pytest.raises(ValueError, match="same seeds and tasks"):
        stats.paired_difference(a, a[:4], stats.rng_for(0, "x"))


def test_beats_refuses_to_pair_arms_run_on_different_seeds() -> None:
    a, b = _planted(60)
    t = stats.beats("b", "a", {"a": a[:3], "b": b})
    assert t.verdict == "N/A" and "not paired" in t.detail
    assert stats.beats("b", "c", {"b": b}).verdict == "N/A"


def test_the_other_targets_pass_miss_and_not_measured() -> None:
    good, poor = np.ones((2, 10)), np.zeros((2, 10))
    assert stats.matches_with_fraction("r", "o", {"r": good, "o": poor}, 500, 17_000, "tasks").verdict == "PASS"
    assert stats.matches_with_fraction("r", "o", {"r": good, "o": poor}, 1_000, 17_000, "tasks").verdict == "MISS"
    assert stats.matches_with_fraction("r", "o", {"r": poor, "o": good}, 10, 17_000, "tasks").verdict == "MISS"
    ratio = {"ratio": {"ratio": 2.5, "lo": 2.2, "hi": 2.8, "n_boundary": 9, "n_rest": 30}}
    assert stats.variance_ratio_target("rods", ratio).verdict == "PASS"
    assert stats.variance_ratio_target("rods", {"ratio": {**ratio["ratio"], "ratio": 1.9}}).verdict == "MISS"
    assert stats.variance_ratio_target("rods", {"ratio": {**ratio["ratio"], "ratio": float("nan")}}).verdict == "N/A"
    late = {"r": [True] * 10 + [False] * 90, "f": [True] * 60 + [False] * 40}
    assert stats.silent_target("r", "f", late).verdict == "PASS"
    assert stats.silent_target("f", "r", late).verdict == "MISS"
    assert stats.silent_target("r", "f", {"r": [True, False], "f": [False, True]}).verdict == "MISS"  # no evidence
    assert stats.silent_target("r", "x", late).verdict == "N/A"
    assert stats.Target("t", True, "d").line() == "- **PASS** t: d"
