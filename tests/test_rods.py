"""RODS curriculum: detector, PLR priorities, batch composition, admission, retirement, caps,
the stopping rule, telemetry and exact state round-trips.

Returns are scripted per task (a fake trainer), so each test knows the region of every group.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import replace
from typing import Callable

import numpy as np
import pytest

from rods_gym import SamplerConfig, Suite, TaskSampler, TaskSpec, compute_signature
from rods_gym.resampler import NaiveResampler, Resampler
from rods_gym.curricula import (
    Detector, RODSConfig, RODSSource, ReplayOnlySource, calibrate_kappa, classify, group_stats, rank_probabilities,
    replay_probabilities, staleness_probabilities,
)
from rods_gym.curricula import GroupResult, TaskSource

# returns of one group of G = 8 by region (u = 4 var: 1.0, 0, 0, 0; mu: .5, 1, 0, .5)
PATTERNS: dict[str, tuple[float, ...]] = {
    "boundary": (1, 1, 1, 1, 0, 0, 0, 0),
    "weak_boundary": (1, 1, 1, 1, 1, 1, 1, 0),  # mu .875, u = 4 * .875 * .125 = .4375
    "mastered": (1,) * 8,
    "hard": (0,) * 8,
    "plateau": (0.5,) * 8,
}


class Recording:
    """The real ``Resampler`` (or ``NaiveResampler``), recording the parents it is asked
    about and optionally answering only the first ``limit`` calls."""

    def __init__(self, suite: Suite, limit: int | None = None, naive: bool = False) -> None:
        self.inner = (NaiveResampler if naive else Resampler)(suite)
        self.limit = limit
        self.parents: list[str] = []

    @property
    def stats(self) -> dict[str, int]:
        return self.inner.stats

    def resample(self, task: TaskSpec, n: int, rng: np.random.Generator, exclude=()) -> list[TaskSpec]:
        if self.limit is not None and len(self.parents) >= self.limit:
            return []
        self.parents.append(task.id)
        return self.inner.resample(task, n, rng, exclude)


def crc(task_id: str) -> int:
    return zlib.crc32(task_id.encode())


def drive(src: TaskSource, steps: int, n: int, kind_of: Callable[[TaskSpec], str], start: int = 0) -> list[list[str]]:
    """A fake trainer: per step, a batch, then each task's scripted group of returns."""
    batches = []
    for step in range(start, start + steps):
        tasks = src.next_batch(step, n)
        src.observe(step, [GroupResult(t, PATTERNS[kind_of(t)]) for t in tasks])
        batches.append([t.id for t in tasks])
    return batches


def is_synthetic(t: TaskSpec) -> bool:
    return t.meta.get("source") == "resample"


@pytest.fixture(scope="module")
def seeds(suite: Suite) -> list[TaskSpec]:
    return TaskSampler(suite, SamplerConfig(depth=(1, 2), extra_calls=(0, 0), distractors=(0, 1)), seed=5).sample_many(24)


FIXED = dict(kappa_rule="fixed", kappa=0.25)


# -- detector ----------------------------------------------------------------------------
def test_group_stats_and_regions() -> None:
    assert group_stats(PATTERNS["boundary"]) == (0.5, 1.0)
    mu, u = group_stats(PATTERNS["weak_boundary"])
    assert mu == pytest.approx(0.875) and u == pytest.approx(0.4375)
    regions = {k: classify(*group_stats(v), kappa=0.25, mastered_mu=0.9, hard_mu=0.1) for k, v in PATTERNS.items()}
    assert regions == {"boundary": "boundary", "weak_boundary": "boundary", "mastered": "mastered", "hard": "hard",
                       "plateau": "plateau"}
    # the same group is plateau once kappa is above its u (mu .875 < .9: not mastered)
    assert classify(0.875, 0.4375, kappa=0.5, mastered_mu=0.9, hard_mu=0.1) == "plateau"
    # mu .9 with u .36 < kappa .5: mastered; and hard at mu .1
    mu, u = group_stats((1,) * 9 + (0,))
    assert (mu, round(u, 6)) == (0.9, 0.36) and classify(mu, u, 0.5, 0.9, 0.1) == "mastered"
    mu, u = group_stats((0,) * 9 + (1,))
    assert classify(mu, u, 0.5, 0.9, 0.1) == "hard"
    assert group_stats((2.0, -1.0))[1] == 1.0  # shaped returns outside [0, 1]: u clipped


def test_detector_ema_over_appearances() -> None:
    det = Detector(RODSConfig(ema_rate=0.5, **FIXED))
    s = det.update("t", PATTERNS["mastered"])
    assert (s.mu, s.u, s.n) == (1.0, 0.0, 1) and det.region("t") == "mastered"
    s = det.update("t", PATTERNS["boundary"])  # mu .5 u 1 -> EMA .75, .5
    assert (s.mu, s.u, s.n, s.last_u) == (0.75, 0.5, 2, 1.0) and det.region("t") == "boundary"
    s = det.update("t", PATTERNS["hard"])  # -> .375, .25
    assert (s.mu, s.u) == (0.375, 0.25) and det.region("t") == "boundary"  # u == kappa counts as boundary
    s = det.update("t", PATTERNS["hard"])  # -> .1875, .125
    assert det.region("t") == "plateau"
    assert det.score("t") == 0.125 and det.score("never-seen") == 1.0
    with pytest.raises(ValueError, match="at least 2 returns"):
        det.update("t", (1.0,))


def test_calibrate_kappa_hand_computed() -> None:
    us = [0, 0, 0, 0, 0, 0, 0.4375, 0.4375, 0.75, 1.0]
    # candidates: .4375 -> share .4 (in the band, at its middle), .75 -> .2, 1.0 -> .1
    assert calibrate_kappa(us, (0.3, 0.5), 0.05, 0.25) == 0.4375
    # band (.15, .25): .75 -> share .2 is its middle
    assert calibrate_kappa(us, (0.15, 0.25), 0.05, 0.25) == 0.75
    # nothing lands in the band: the closest share wins (1.0 -> .9 is the only candidate)
    assert calibrate_kappa([1.0] * 9 + [0.0], (0.3, 0.5), 0.05, 0.25) == 1.0
    # every group silent: the default, never below kappa_min
    assert calibrate_kappa([0.0] * 10, (0.3, 0.5), 0.05, 0.25) == 0.25
    assert calibrate_kappa([0.0] * 10, (0.3, 0.5), 0.3, 0.25) == 0.3
    # kappa_min removes tiny candidates: .01 would give share .5 but is below kappa_min
    assert calibrate_kappa([0.01] * 5 + [0.8] * 3 + [0] * 2, (0.3, 0.5), 0.05, 0.25) == 0.8


def test_kappa_calibrated_on_the_seeds(seeds: list[TaskSpec]) -> None:
    cfg = RODSConfig(kappa_rule="calibrate", kappa=0.25, calibration_groups=8, anchor_frac=0.0, synthesize=False)
    src = RODSSource(seeds, None, cfg, rng_seed=1)
    # 4 of every 10 seeds get weak-boundary groups (u .4375), the rest silent-hard ones (u 0)
    kinds = {t.id: "weak_boundary" if i % 10 < 4 else "hard" for i, t in enumerate(seeds)}
    first_us: list[float] = []  # u of each seed's first appearance, in order
    for step in range(10):
        tasks = src.next_batch(step, 4)
        for t in tasks:
            if t.id not in src.detector.stats and t.id not in [x for x, _ in first_us]:
                first_us.append((t.id, group_stats(PATTERNS[kinds[t.id]])[1]))
        src.observe(step, [GroupResult(t, PATTERNS[kinds[t.id]]) for t in tasks])
        if len(first_us) < 8:
            assert src.kappa == 0.25 and src.telemetry()["kappa_calibrated"] == 0.0
        else:
            break
    assert src.telemetry()["kappa_calibrated"] == 1.0
    us = [u for _, u in first_us[:8]]
    assert 0.0 in us and 0.4375 in us
    assert src.kappa == calibrate_kappa(us, (0.3, 0.5), 0.05, 0.25)
    # calibration happens once: later steps leave kappa alone
    k = src.kappa
    drive(src, 3, 4, lambda t: kinds[t.id], start=step + 1)
    assert src.kappa == k


def test_kappa_quantile_rule(seeds: list[TaskSpec]) -> None:
    cfg = RODSConfig(kappa_rule="quantile", anchor_frac=0.0, synthesize=False)
    src = RODSSource(seeds, None, cfg, rng_seed=1)
    kinds = {t.id: ("boundary", "weak_boundary", "hard")[i % 3] for i, t in enumerate(seeds)}
    drive(src, 6, 4, lambda t: kinds[t.id])
    seen = [t for t in src.pool.ids("active") if t in src.detector.stats]
    expected = max(0.05, float(np.quantile([src.detector.stats[t].u for t in seen], 0.6)))
    assert src.kappa == pytest.approx(expected)


# -- PLR priorities ----------------------------------------------------------------------
def test_plr_priorities_hand_computed() -> None:
    # scores .9, .1, .5 -> ranks 1, 3, 2; h = rank^(-1/.3)
    h = np.array([1.0, 3 ** (-10 / 3), 2 ** (-10 / 3)])
    assert h.round(6).tolist() == [1.0, 0.02568, 0.099213]
    p_rank = rank_probabilities([0.9, 0.1, 0.5], beta=0.3)
    assert p_rank.round(5).tolist() == [0.88897, 0.02283, 0.0882]
    # staleness: step 10, last seen 0, 5, 8 -> 10, 5, 2 over 17
    p_stale = staleness_probabilities([0, 5, 8], step=10)
    assert p_stale.tolist() == pytest.approx([10 / 17, 5 / 17, 2 / 17])
    p = replay_probabilities([0.9, 0.1, 0.5], [0, 5, 8], 10, beta=0.3, rho=0.3)
    assert p.tolist() == pytest.approx((0.7 * p_rank + 0.3 * p_stale).tolist())
    assert p.round(4).tolist() == [0.7988, 0.1042, 0.097]
    # ties are ordered by the tie-break key
    assert rank_probabilities([0.5, 0.5], 0.3, tiebreak=[0.9, 0.1]).round(4).tolist() == [0.0903, 0.9097]
    assert staleness_probabilities([3, 3], step=3).tolist() == [0.5, 0.5]


def test_replay_follows_the_boundary(seeds: list[TaskSpec]) -> None:
    """After one sweep, replay draws the boundary seeds far more often than silent ones."""
    cfg = RODSConfig(anchor_frac=0.0, synthesize=False, **FIXED)
    src = RODSSource(seeds, None, cfg, rng_seed=3)
    boundary = {t.id for i, t in enumerate(seeds) if i % 4 == 0}  # 6 of 24
    kind = lambda t: "boundary" if t.id in boundary else "plateau"  # noqa: E731  (plateau seeds stay active)
    drive(src, 10, 4, kind)  # unseen seeds score 1.0: mostly a sweep first
    picks = sum(drive(src, 25, 4, kind, start=10), [])
    share = sum(t in boundary for t in picks) / len(picks)
    print(f"boundary share of replay: {share:.3f}")
    # 6 of 24 active tasks: uniform replay would give 0.25. rank^(-1/0.3) is very peaked
    # (rank 2 weighs 0.1 of rank 1), so without replacement a batch takes the top task almost
    # surely and fills up more evenly; measured 0.49 with this seed.
    assert share > 0.4


# -- batch composition -------------------------------------------------------------------
def test_anchors_stratified_by_depth(suite: Suite) -> None:
    d1 = TaskSampler(suite, SamplerConfig(depth=(1, 1), extra_calls=(0, 0)), seed=1).sample_many(6)
    d2 = TaskSampler(suite, SamplerConfig(depth=(2, 2), extra_calls=(0, 0)), seed=2).sample_many(2)
    assert [compute_signature(t, suite).depth for t in d1 + d2] == [1] * 6 + [2] * 2
    src = RODSSource(d1 + d2, None, RODSConfig(anchor_frac=1.0, staged_frac=0.0, synthesize=False), rng_seed=0)
    b1, b2 = [src.next_batch(s, 4) for s in range(2)]
    for b in (b1, b2):  # quotas 4 * 6/8 = 3 and 4 * 2/8 = 1, exactly
        assert sum(t in d1 for t in b) == 3 and sum(t in d2 for t in b) == 1
    assert sorted(t.id for t in b1 + b2) == sorted(t.id for t in d1 + d2)  # one epoch per stratum


def test_batch_composition_fractions(suite: Suite, seeds: list[TaskSpec]) -> None:
    cfg = RODSConfig(synth_every=1, parents_per_round=2, variants_per_parent=4, **FIXED)
    src = RODSSource(seeds, Recording(suite), cfg, rng_seed=0)
    seed_ids = {t.id for t in seeds}
    kind = lambda t: "boundary"  # noqa: E731
    tasks = src.next_batch(0, 16)
    assert len(tasks) == 16 and len({t.id for t in tasks}) == 16
    assert src.telemetry() == {}  # nothing observed yet
    src.observe(0, [GroupResult(t, PATTERNS["boundary"]) for t in tasks])
    staged = list(src._queue)
    assert len(staged) == 8  # 2 parents x 4 variants, all new
    tasks = src.next_batch(1, 16)
    ids = [t.id for t in tasks]
    # 25% anchors (seeds), 25% newly staged (oldest first), the rest replay from the active pool
    assert all(i in seed_ids for i in ids[:4])
    assert ids[4:8] == staged[:4]
    assert all(src.pool[i].status == "active" for i in ids[8:])
    assert len(set(ids)) == 16
    src.observe(1, [GroupResult(t, PATTERNS[kind(t)]) for t in tasks])
    tel = src.telemetry()
    assert (tel["batch/anchors"], tel["batch/staged"], tel["batch/replay"]) == (4, 4, 8)
    # with a batch of 10: round(2.5) -> 3 anchors, floor(2.5) -> 2 staged, 5 replayed
    src.next_batch(2, 10)
    assert src._batch == {"anchors": 3, "staged": 2, "replay": 5}


# -- admission, retirement, caps ---------------------------------------------------------
def test_admission_on_first_appearance(suite: Suite, seeds: list[TaskSpec]) -> None:
    cfg = RODSConfig(synth_every=1, parents_per_round=1, variants_per_parent=3, anchor_frac=0.0, staged_frac=0.5,
                     quarantine_release=2, **FIXED)
    src = RODSSource(seeds, Recording(suite, limit=1), cfg, rng_seed=0)
    kinds: dict[str, str] = {}
    kind = lambda t: kinds.get(t.id, "boundary")  # noqa: E731
    drive(src, 1, 4, kind)
    v0, v1, v2 = src._queue
    assert all(src.pool[v].status == "staged" and src.pool[v].generation == 1 for v in (v0, v1, v2))
    kinds.update({v0: "plateau", v1: "mastered", v2: "hard"})
    drive(src, 1, 4, kind, start=1)  # v0 and v1 appear
    assert src.pool[v0].status == "active" and v1 not in src.pool and v1 not in src.detector.stats
    drive(src, 1, 4, kind, start=2)  # v2 appears: hard -> quarantined
    assert src.pool[v2].status == "quarantined" and v2 not in src.pool.ids("active")
    tel = src.telemetry()
    assert tel["admission/quarantined"] == 1 and tel["admission/admitted_total"] == 1
    assert tel["admission/dropped_total"] == 1 and tel["admission/yield"] == pytest.approx(1 / 3)
    drive(src, 2, 4, kind, start=3)  # released after 2 steps (at the end of step 4), staged again
    assert src.pool[v2].status == "staged" and src.pool[v2].retried and src._queue == [v2]
    drive(src, 1, 4, kind, start=5)  # hard again -> archived, kept
    assert src.pool[v2].status == "archived"
    assert src.telemetry()["admission/yield"] == pytest.approx(1 / 3)  # a retry is no new decision


def test_retirement_rules_and_seeds_never_deleted(suite: Suite, seeds: list[TaskSpec]) -> None:
    few = seeds[:6]
    cfg = RODSConfig(anchor_frac=0.0, synthesize=False, **FIXED)
    src = RODSSource(few, None, cfg, rng_seed=0)
    kinds = {few[0].id: "mastered", few[1].id: "hard"}
    kind = lambda t: kinds.get(t.id, "boundary")  # noqa: E731
    drive(src, 1, 6, kind)  # all six replayed (pool == batch)
    assert src.pool[few[0].id].status == "active"  # mastered once
    drive(src, 1, 6, kind, start=1)
    assert src.pool[few[0].id].status == "archived"  # mastered twice -> archive
    assert src.pool[few[1].id].status == "active"  # hard twice: not yet
    drive(src, 1, 6, kind, start=2)
    assert src.pool[few[1].id].hard == 3 and src.pool[few[1].id].status == "archived"
    # a pool of only mastered seeds: all archived, none deleted, batches keep coming (anchors)
    src2 = RODSSource(seeds, None, cfg, rng_seed=0)
    drive(src2, 30, 8, lambda t: "mastered")
    assert len(src2.pool) == len(seeds) and all(t.id in src2.pool for t in seeds)
    assert src2.pool.counts()["archived"] == len(seeds)
    assert len(src2.next_batch(30, 8)) == 8


def test_archived_seed_returns_when_boundary_again(seeds: list[TaskSpec]) -> None:
    cfg = RODSConfig(anchor_frac=1.0, staged_frac=0.0, synthesize=False, **FIXED)
    src = RODSSource(seeds[:4], None, cfg, rng_seed=0)
    drive(src, 2, 4, lambda t: "mastered")
    assert src.pool.counts()["archived"] == 4
    drive(src, 1, 4, lambda t: "boundary", start=2)  # EMA u: .5 >= .25 -> boundary again
    assert src.pool.counts()["active"] == 4 and src.telemetry()["admission/reactivated"] == 4


def test_synthetic_eviction_and_capacity(suite: Suite, seeds: list[TaskSpec]) -> None:
    few = seeds[:4]
    cfg = RODSConfig(synth_every=1, parents_per_round=1, variants_per_parent=3, anchor_frac=0.0, staged_frac=0.75,
                     max_uses=3, non_boundary_evict=3, capacity=6, **FIXED)
    src = RODSSource(few, Recording(suite, limit=1), cfg, rng_seed=0)
    kinds: dict[str, str] = {}
    kind = lambda t: kinds.get(t.id, "boundary")  # noqa: E731
    drive(src, 1, 4, kind)
    a, b, c = src._queue
    kinds.update({a: "plateau", b: "boundary", c: "weak_boundary"})
    drive(src, 1, 4, kind, start=1)  # a, b, c admitted: 4 seeds + 3 = 7 active > capacity 6
    # the lowest-priority synthetic task goes: a (plateau, u 0) below c (u .4375) and b (u 1)
    assert a not in src.pool and src.pool[b].status == src.pool[c].status == "active"
    assert src.telemetry()["admission/evicted"] == 1 and src.telemetry()["pool/active"] == 6
    assert all(t.id in src.pool for t in few)


def test_eviction_rules_non_boundary_and_overuse(suite: Suite, seeds: list[TaskSpec]) -> None:
    few = seeds[:2]
    cfg = RODSConfig(synth_every=1, parents_per_round=1, variants_per_parent=2, anchor_frac=0.0, staged_frac=1.0,
                     max_uses=3, non_boundary_evict=3, **FIXED)
    src = RODSSource(few, Recording(suite, limit=1), cfg, rng_seed=0)
    kinds: dict[str, str] = {}
    kind = lambda t: kinds.get(t.id, "boundary")  # noqa: E731
    drive(src, 1, 2, kind)
    a, b = src._queue
    kinds.update({a: "plateau", b: "boundary"})
    drive(src, 1, 2, kind, start=1)  # a, b admitted (their first use)
    assert src.pool[a].status == src.pool[b].status == "active"
    drive(src, 1, 4, kind, start=2)  # pool of 4 = batch: second use
    assert src.pool[a].non_boundary == 2 and src.pool[b].uses == 2
    drive(src, 1, 4, kind, start=3)  # third use: a non-boundary 3x -> evicted; b used 3x -> evicted
    assert a not in src.pool and b not in src.pool
    assert src.telemetry()["admission/evicted"] == 2
    assert all(t.id in src.pool for t in few)


def test_lineage_and_signature_caps(suite: Suite, seeds: list[TaskSpec]) -> None:
    cfg = RODSConfig(synth_every=1, parents_per_round=4, variants_per_parent=4, lineage_cap=2, **FIXED)
    src = RODSSource(seeds, Recording(suite), cfg, rng_seed=0)
    capped = 0.0
    for step in range(6):
        drive(src, 1, 8, lambda t: "boundary", start=step)
        capped += src.telemetry().get("synth/capped", 0.0)
    live = [e for e in src.pool.entries.values() if not e.is_seed and e.status != "archived"]
    assert live, "synthesis produced nothing"
    per_root = {}
    for e in live:
        per_root[e.root] = per_root.get(e.root, 0) + 1
        assert e.root in {t.id for t in seeds}  # variants of variants keep the seed as root
    assert max(per_root.values()) <= 2
    assert capped >= 2  # 4 variants of one root, at most 2 live: the cap turned some down
    cfg = RODSConfig(synth_every=1, parents_per_round=4, variants_per_parent=4, signature_cap=1, **FIXED)
    src = RODSSource(seeds, Recording(suite), cfg, rng_seed=0)
    drive(src, 4, 8, lambda t: "boundary")
    sigs = [e.signature for e in src.pool.entries.values() if not e.is_seed and e.status != "archived"]
    assert sigs and len(sigs) == len(set(sigs))  # at most one live synthetic task per class
    assert src._totals["synth_produced"] > len(sigs)  # the cap turned some down


def test_max_generation_limits_variants_of_variants(suite: Suite, seeds: list[TaskSpec]) -> None:
    cfg = RODSConfig(synth_every=1, parents_per_round=8, variants_per_parent=1, max_generation=1,
                     staged_frac=0.5, **FIXED)
    res = Recording(suite)
    src = RODSSource(seeds, res, cfg, rng_seed=0)
    drive(src, 8, 8, lambda t: "boundary")
    assert any(e.generation == 1 and e.status == "active" for e in src.pool.entries.values())
    assert all(src.pool[p].generation == 0 for p in res.parents if p in src.pool)
    assert max(e.generation for e in src.pool.entries.values()) == 1


def test_synthesis_every_T_from_boundary_parents(suite: Suite, seeds: list[TaskSpec]) -> None:
    cfg = RODSConfig(synth_every=3, parents_per_round=3, variants_per_parent=2, **FIXED)
    res = Recording(suite)
    src = RODSSource(seeds, res, cfg, rng_seed=0)
    boundary = {t.id for i, t in enumerate(seeds) if i % 3 == 0}
    kind = lambda t: "boundary" if t.id in boundary or is_synthetic(t) else "hard"  # noqa: E731
    rounds = []
    for step in range(9):
        before = len(res.parents)
        drive(src, 1, 8, kind, start=step)
        rounds.append(src.telemetry().get("synth/round", 0.0))
        for p in res.parents[before:]:
            assert src.detector.region(p) == "boundary"
    assert rounds == [0, 0, 1, 0, 0, 1, 0, 0, 1]
    assert src.telemetry()["synth/rounds_total"] == 3 and len(res.parents) > 0


def test_dedup_and_decontamination(suite: Suite, seeds: list[TaskSpec]) -> None:
    test_split = TaskSampler(suite, SamplerConfig(depth=(1, 1)), seed=77).sample_many(2)

    class Repeating:  # TEST DOUBLE: returns a seed's content, a test task's content and a new task
        def resample(self, task, n, rng, exclude=()):
            fresh = TaskSampler(suite, SamplerConfig(depth=(1, 1)), seed=78).sample(int(rng.integers(0, 1000)))
            return [replace(seeds[0], id=f"copy-{rng.integers(1e9)}"), replace(test_split[0], id=f"leak-{rng.integers(1e9)}"),
                    replace(fresh, id=f"new-{fresh.id}")]

    cfg = RODSConfig(synth_every=1, parents_per_round=1, variants_per_parent=3, **FIXED)
    src = RODSSource(seeds, Repeating(), cfg, rng_seed=0, decontaminate=test_split)
    drive(src, 1, 4, lambda t: "boundary")
    tel = src.telemetry()
    assert (tel["synth/attempted"], tel["synth/produced"], tel["synth/staged"]) == (3, 3, 1)
    assert (tel["synth/duplicates"], tel["synth/contaminated"]) == (1, 1)
    assert [i.split("-")[0] for i in src._queue] == ["new"]


def test_stopping_rule_on_admission_yield(suite: Suite, seeds: list[TaskSpec]) -> None:
    cfg = RODSConfig(synth_every=1, parents_per_round=2, variants_per_parent=4, yield_window=8, stop_patience=2,
                     staged_frac=0.5, **FIXED)
    res = Recording(suite)
    src = RODSSource(seeds, res, cfg, rng_seed=0)
    kind = lambda t: "mastered" if is_synthetic(t) else "boundary"  # noqa: E731  every newcomer dropped
    active = []
    for step in range(12):
        drive(src, 1, 8, kind, start=step)
        active.append(src.telemetry()["synth/active"])
    assert src.telemetry()["admission/yield"] == 0.0
    stop = active.index(0.0)
    assert all(a == 1.0 for a in active[:stop]) and all(a == 0.0 for a in active[stop:])
    # 8 variants staged per round, 4 appear per step (all dropped): the window (8) is full after
    # step 2's groups; step 2's round is the first low one, step 3's the second -> stopped there
    assert stop == 3
    calls = len(res.parents)
    drive(src, 5, 8, kind, start=12)
    assert len(res.parents) == calls  # no more resampler calls


def test_synthesis_continues_while_yield_is_high(suite: Suite, seeds: list[TaskSpec]) -> None:
    cfg = RODSConfig(synth_every=1, parents_per_round=2, variants_per_parent=4, yield_window=8, stop_patience=2,
                     **FIXED)
    src = RODSSource(seeds, Recording(suite), cfg, rng_seed=0)
    drive(src, 12, 8, lambda t: "boundary")
    assert src.telemetry()["synth/active"] == 1.0 and src.telemetry()["admission/yield"] == 1.0


# -- telemetry, errors, state ------------------------------------------------------------
def test_telemetry_per_step(suite: Suite, seeds: list[TaskSpec]) -> None:
    cfg = RODSConfig(synth_every=1, parents_per_round=2, variants_per_parent=2, **FIXED)
    src = RODSSource(seeds, Recording(suite), cfg, rng_seed=0)
    tasks = src.next_batch(0, 8)
    order = ["boundary", "boundary", "weak_boundary", "mastered", "hard", "hard", "plateau", "mastered"]
    src.observe(0, [GroupResult(t, PATTERNS[k]) for t, k in zip(tasks, order)])
    tel = src.telemetry()
    assert tel["silent_fraction"] == 5 / 8  # mastered, hard, plateau groups have std 0
    assert tel["boundary_fraction"] == 3 / 8
    assert (tel["region/boundary"], tel["region/mastered"], tel["region/hard"], tel["region/plateau"]) == \
        (3 / 8, 2 / 8, 2 / 8, 1 / 8)
    assert "variance_ratio" not in tel  # the rest has u = 0: ratio undefined, not logged
    assert tel["u_mean"] == pytest.approx((1 + 1 + 0.4375) / 8)
    assert tel["pool/active"] == len(seeds) and tel["pool/staged"] == tel["synth/staged"] > 0
    assert tel["pool/signature_entropy"] > 0 and tel["pool/signature_classes"] >= 2
    assert tel["synth/attempted"] == 4 and tel["synth/seconds"] > 0 and tel["tasks_seen"] == 8
    assert tel["kappa"] == 0.25
    tasks = src.next_batch(1, 8)
    order = ["boundary"] * 4 + ["weak_boundary"] * 2 + ["weak_boundary", "weak_boundary"]
    src.observe(1, [GroupResult(t, PATTERNS[k]) for t, k in zip(tasks, order)])
    assert src.telemetry()["silent_fraction"] == 0.0
    json.dumps(src.telemetry(), allow_nan=False)  # loggable as strict JSON


def test_config_and_input_errors(seeds: list[TaskSpec]) -> None:
    with pytest.raises(ValueError, match="group_size"):
        RODSConfig(group_size=1)
    with pytest.raises(ValueError, match="kappa_rule"):
        RODSConfig(kappa_rule="median")
    with pytest.raises(ValueError, match="anchor_frac \\+ staged_frac"):
        RODSConfig(anchor_frac=0.6, staged_frac=0.6)
    with pytest.raises(ValueError, match="no resampler"):
        RODSSource(seeds, None, RODSConfig())
    with pytest.raises(ValueError, match="unique"):
        RODSSource(seeds + seeds[:1], None, RODSConfig(synthesize=False))
    src = RODSSource(seeds, None, RODSConfig(synthesize=False))
    with pytest.raises(ValueError, match="not handed out"):
        src.observe(0, [GroupResult(seeds[0], PATTERNS["boundary"])])
    tasks = src.next_batch(0, 2)
    with pytest.raises(ValueError, match="at least 2 returns"):
        src.observe(0, [GroupResult(tasks[0], (1.0,))])
    with pytest.raises(ValueError, match="n_tasks"):
        src.next_batch(1, 0)
    assert RODSConfig.from_dict(RODSConfig(kappa=0.3).to_dict()) == RODSConfig(kappa=0.3)


def _rods(suite: Suite, seeds: list[TaskSpec]) -> RODSSource:
    cfg = RODSConfig(synth_every=2, parents_per_round=2, variants_per_parent=3, calibration_groups=6,
                     quarantine_release=3, max_uses=4)
    return RODSSource(seeds, Recording(suite), cfg, rng_seed=42)


def _kind(t: TaskSpec) -> str:
    return ("boundary", "weak_boundary", "mastered", "hard", "plateau")[crc(t.id) % 5]


def _timeless(state: dict) -> dict:
    """A state without the wall-clock synthesis seconds (telemetry only, never a decision input)."""
    state = dict(state)
    state["totals"] = {k: v for k, v in state["totals"].items() if k != "synth_seconds"}
    state["last"] = {k: v for k, v in state["last"].items() if not k.startswith("synth/seconds")}
    return state


def test_state_round_trip_is_exact(suite: Suite, seeds: list[TaskSpec]) -> None:
    """k steps, save, restore into a fresh source, go on: the same batches as without the break."""
    k, more = 7, 8
    straight = _rods(suite, seeds)
    expected = drive(straight, k + more, 8, _kind)
    first = _rods(suite, seeds)
    head = drive(first, k, 8, _kind)
    state = json.loads(json.dumps(first.state_dict()))  # survives a JSON checkpoint
    resumed = _rods(suite, seeds)
    resumed.load_state_dict(state)
    assert resumed.telemetry() == first.telemetry()
    tail = drive(resumed, more, 8, _kind, start=k)
    assert head + tail == expected
    assert _timeless(resumed.state_dict()) == _timeless(straight.state_dict())
    assert straight._totals["synth_staged"] > 0 and straight.pool.counts()["active"] > len(seeds) // 2
    assert straight.telemetry()["resampler/produced"] == straight._totals["synth_produced"] > 0
    # a state from another configuration or seed set is refused, naming the difference
    other = RODSSource(seeds, Recording(suite), RODSConfig(synth_every=3), rng_seed=42)
    with pytest.raises(ValueError, match="synth_every"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="seed tasks"):
        RODSSource(seeds[:-1], Recording(suite), first.config, rng_seed=42).load_state_dict(state)
    with pytest.raises(ValueError, match="replay_only"):
        ReplayOnlySource(seeds, first.config).load_state_dict(state)


def test_sources_satisfy_the_interface(seeds: list[TaskSpec]) -> None:
    src = ReplayOnlySource(seeds, RODSConfig(), rng_seed=0)
    assert isinstance(src, TaskSource) and src.name == "replay_only" and not src.config.synthesize
    assert src.extra_rollouts == 0
    assert math.isclose(src.config.staleness_mix, 0.3) and src.config.capacity == 800
