"""RODS: Reward-driven Online Data Synthesis, as a :class:`~rods_gym.curricula.TaskSource`.

One training step, seen from the source::

    tasks = source.next_batch(step, n)       # anchors + staged synthetic + PLR replay
    ...   the trainer runs G rollouts per task and computes its advantages ...
    source.observe(step, groups)             # the same returns: detector, admission,
                                             # retirement, kappa, capacity, synthesis every T

The source never calls the policy or an environment; synthesis calls the resampler, which
builds and oracle-verifies new tasks on the simulated backend (no policy involved).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from rods_gym.signature import compute_signature
from rods_gym.suite import Suite, default_suite
from rods_gym.task import TaskSpec

from .source import GroupResult
from .config import RODSConfig
from .detector import REGIONS, Detector
from .pool import PoolEntry, ReplayPool, replay_probabilities
from .synthesis import SeenContent, TaskResampler, YieldMonitor, weighted_pick

STATE_VERSION = 1
SYNTH_STREAM = 0x5EED5  # synthesis draws from default_rng([rng_seed, step, SYNTH_STREAM])
TOTALS = ("admitted", "dropped", "quarantined", "archived", "evicted", "reactivated", "released",
          "synth_rounds", "synth_attempted", "synth_produced", "synth_staged", "synth_seconds")


class RODSSource:
    """The RODS curriculum (README, "Curricula and RODS") over ``seeds``, synthesizing through ``resampler``.

    Args:
        seeds: the seed tasks (e.g. the 400 of the train split); never deleted.
        resampler: makes variants of a task (``rods_gym.resampler.Resampler``; ``NaiveResampler``
            for the "naive" ablation). May be ``None`` only when ``config.synthesize`` is off.
        config: every knob of the loop.
        rng_seed: seeds the batch sampler and (with the step) each synthesis round.
        decontaminate: held-out tasks (dev/test) whose content a variant must not repeat (an
            exact check here; the resampler applies its own, broader decontamination).
        suite: the domains, for signatures (default: the built-in suite).
    """

    name = "rods"

    def __init__(self, seeds: Sequence[TaskSpec], resampler: TaskResampler | None, config: RODSConfig = RODSConfig(),
                 rng_seed: int = 0, *, decontaminate: Sequence[TaskSpec] = (), suite: Suite | None = None) -> None:
        if not seeds:
            raise ValueError(f"{type(self).__name__} needs at least one seed task")
        if config.synthesize and resampler is None:
            raise ValueError(f"{type(self).__name__}: config.synthesize is on but no resampler was given")
        if rng_seed < 0:
            raise ValueError(f"rng_seed must be >= 0, got {rng_seed}")
        if config.synthesize and config.capacity <= len(seeds):
            raise ValueError(f"RODSConfig.capacity={config.capacity} leaves no room beside the {len(seeds)} seed tasks, "
                             "which are never evicted: every synthetic task would be evicted on arrival; raise it "
                             f"above {len(seeds)} (default 800)")
        dup = [k for k, v in Counter(t.id for t in seeds).items() if v > 1]
        if dup:
            raise ValueError(f"seed task ids must be unique; repeated: {dup[:5]}")
        self.config = config
        self.resampler = resampler
        self.rng_seed = int(rng_seed)
        self.rng = np.random.default_rng(self.rng_seed)
        self.suite = suite or default_suite()
        self.detector = Detector(config)
        self.pool = ReplayPool()
        self.yields = YieldMonitor(config)
        self.seed_ids = [t.id for t in seeds]
        self._strata: dict[int, list[str]] = {}
        for t in seeds:
            sig, depth = self._signature(t)
            self.pool.add(PoolEntry(t, "seed", "active", sig, depth, root=t.id, generation=0, added_step=0))
            self._strata.setdefault(depth, []).append(t.id)
        self._cycles: dict[int, list[str]] = {d: [] for d in self._strata}
        self._known = SeenContent(seeds)
        self._contaminated = SeenContent(decontaminate)
        self._queue: list[str] = []  # staged task ids, first in first out
        self._outstanding: Counter[str] = Counter()  # handed out by next_batch, not yet observed
        self._observed_steps = 0
        self._seen = 0  # distinct tasks trained on
        self._totals: dict[str, float] = dict.fromkeys(TOTALS, 0)
        self._batch: dict[str, int] = {"anchors": 0, "staged": 0, "replay": 0}
        self._last: dict[str, float] = {}
        self._resampler_totals: dict[str, float] = {}

    # -- helpers -----------------------------------------------------------------------
    def _signature(self, task: TaskSpec) -> tuple[str, int]:
        sig = compute_signature(task, self.suite)
        return repr(sig.key), sig.depth

    @property
    def kappa(self) -> float:
        return self.detector.kappa

    @property
    def extra_rollouts(self) -> int:
        return 0

    # -- batches -----------------------------------------------------------------------
    def next_batch(self, step: int, n_tasks: int) -> list[TaskSpec]:
        if n_tasks < 1:
            raise ValueError(f"next_batch: n_tasks must be >= 1, got {n_tasks}")
        cfg = self.config
        n_anchor = min(n_tasks, math.floor(cfg.anchor_frac * n_tasks + 0.5))
        n_staged = min(len(self._queue), math.floor(cfg.staged_frac * n_tasks))
        n_replay = n_tasks - n_anchor - n_staged
        anchors = self._anchors(n_anchor)
        staged, self._queue = self._queue[:n_staged], self._queue[n_staged:]
        replay = self._replay(n_replay, step, exclude=set(anchors) | set(staged))
        ids = anchors + staged + replay
        for tid in ids:
            self.pool[tid].last_step = step
            self._outstanding[tid] += 1
        self._batch = {"anchors": len(anchors), "staged": len(staged), "replay": len(replay)}
        return [self.pool[t].task for t in ids]

    def _anchors(self, k: int) -> list[str]:
        """``k`` seeds, stratified by depth: proportional quotas, remainders drawn by their fractions;
        within a stratum, epochs over a seeded permutation."""
        if k <= 0:
            return []
        depths = sorted(self._strata)
        sizes = np.array([len(self._strata[d]) for d in depths], dtype=np.float64)
        quota = k * sizes / sizes.sum()
        counts = np.floor(quota).astype(np.int64)
        rest = k - int(counts.sum())
        if rest > 0:
            frac = quota - counts
            extra = self.rng.choice(len(depths), size=rest, replace=False, p=frac / frac.sum())
            counts[extra] += 1
        out = []
        for d, c in zip(depths, counts):
            cycle = self._cycles[d]
            for _ in range(int(c)):
                if not cycle:
                    cycle.extend(self._strata[d][int(i)] for i in self.rng.permutation(len(self._strata[d])))
                out.append(cycle.pop())
        return out

    def _fill(self, k: int, exclude: set[str]) -> list[str]:
        """``k`` seeds not yet in the batch (uniformly), or stratified anchors when too few are left."""
        free = [t for t in self.seed_ids if t not in exclude]
        if len(free) >= k:
            return [free[int(i)] for i in self.rng.choice(len(free), size=k, replace=False)]
        return free + self._anchors(k - len(free))

    def _replay(self, k: int, step: int, exclude: set[str]) -> list[str]:
        """``k`` active tasks by PLR priority (rank of EMA u, plus staleness), without replacement;
        when the active pool runs short, seeds fill the rest."""
        if k <= 0:
            return []
        cands = [e for e in self.pool.with_status("active") if e.task.id not in exclude]
        if len(cands) <= k:
            picked = [e.task.id for e in cands]
            return picked + self._fill(k - len(picked), exclude | set(picked))
        cfg = self.config
        scores = [self.detector.score(e.task.id) for e in cands]
        last = [e.last_step if e.last_step >= 0 else e.added_step for e in cands]
        p = replay_probabilities(scores, last, step, cfg.plr_beta, cfg.staleness_mix, tiebreak=self.rng.random(len(cands)))
        picks = self.rng.choice(len(cands), size=k, replace=False, p=p)
        return [cands[int(i)].task.id for i in picks]

    # -- feedback ----------------------------------------------------------------------
    def observe(self, step: int, groups: Sequence[GroupResult]) -> None:
        cfg = self.config
        for g in groups:
            if self._outstanding[g.task.id] <= 0:
                raise ValueError(f"observe(step={step}): task {g.task.id!r} was not handed out by next_batch "
                                 "(or was already observed)")
        regions: list[str] = []
        raw_u: list[float] = []
        silent: list[bool] = []
        decisions: Counter[str] = Counter()
        seed_us: list[float] = []
        for g in groups:
            tid = g.task.id
            self._outstanding[tid] -= 1
            if self._outstanding[tid] == 0:
                del self._outstanding[tid]
            if tid not in self.pool:  # evicted while its rollouts ran (batches overlapping, e.g. under SB3)
                continue
            e = self.pool[tid]
            first = tid not in self.detector.stats
            s = self.detector.update(tid, g.returns)
            region = self.detector.region(tid)
            regions.append(region)
            raw_u.append(s.last_u)
            silent.append(bool(np.std(g.returns) == 0.0))
            if first:
                self._seen += 1
                if e.is_seed:
                    seed_us.append(s.last_u)
            e.uses += 1
            e.non_boundary = 0 if region == "boundary" else e.non_boundary + 1
            e.mastered += region == "mastered"
            e.hard += region == "hard"
            if e.status == "staged":
                decisions[self._admit(e, region, step)] += 1
            elif e.status == "active":
                decisions[self._retire(e, region, step)] += 1
            elif e.status == "archived" and region == "boundary":  # an archived seed, back as an anchor
                e.mastered = e.hard = 0
                self.pool.set_status(tid, "active", step)
                decisions["reactivated"] += 1
        # kappa moves between steps only: every decision of a step uses one kappa
        for u in seed_us:
            self.detector.add_calibration(u)
        self.detector.requantile(self.pool.ids("active"))
        decisions["evicted"] += self._enforce_capacity(step)
        decisions["released"] += self._release_quarantine(step)
        self._observed_steps += 1
        synth: dict[str, float] = {}
        if cfg.synthesize and self._observed_steps % cfg.synth_every == 0:
            synth = self._synthesize(step)
        for k in ("admitted", "dropped", "quarantined", "archived", "evicted", "reactivated", "released"):
            self._totals[k] += decisions[k]
        self._last = self._telemetry(regions, raw_u, silent, decisions, synth)

    def _admit(self, e: PoolEntry, region: str, step: int) -> str:
        """A staged task's first appearance: boundary or plateau in, mastered out, hard aside."""
        tid = e.task.id
        if region in ("boundary", "plateau"):
            self.pool.set_status(tid, "active", step)
            verdict = "admitted"
        elif region == "mastered":
            self._delete(tid)
            verdict = "dropped"
        elif e.retried:  # hard again after quarantine
            self.pool.set_status(tid, "archived", step)
            verdict = "archived"
        else:
            self.pool.set_status(tid, "quarantined", step)
            verdict = "quarantined"
            held = self.pool.ids("quarantined")
            for old in held[: max(0, len(held) - self.config.quarantine_capacity)]:
                self._delete(old)
        if not e.retried:
            self.yields.record(verdict == "admitted")
        return verdict

    def _retire(self, e: PoolEntry, region: str, step: int) -> str:
        cfg = self.config
        if e.mastered >= cfg.mastered_to_archive or e.hard >= cfg.hard_to_archive:
            self.pool.set_status(e.task.id, "archived", step)
            return "archived"
        if not e.is_seed and (e.uses >= cfg.max_uses or e.non_boundary >= cfg.non_boundary_evict):
            self._delete(e.task.id)
            return "evicted"
        return "kept"

    def _delete(self, tid: str) -> None:
        self.pool.remove(tid)  # asserts it is not a seed
        self.detector.forget(tid)

    def _enforce_capacity(self, step: int) -> int:
        """Evict the lowest-priority active synthetic tasks (lowest EMA u, then stalest) while over capacity."""
        active = list(self.pool.with_status("active"))
        over = len(active) - self.config.capacity
        if over <= 0:
            return 0
        synthetic = [e for e in active if not e.is_seed]
        synthetic.sort(key=lambda e: (self.detector.score(e.task.id), e.last_step))
        for e in synthetic[:over]:
            self._delete(e.task.id)
        return min(over, len(synthetic))

    def _release_quarantine(self, step: int) -> int:
        """Quarantined tasks get one more try, staged again, after ``quarantine_release`` steps."""
        n = 0
        for e in list(self.pool.with_status("quarantined")):
            if not e.retried and step - e.status_step >= self.config.quarantine_release:
                e.retried = True
                self.pool.set_status(e.task.id, "staged", step)
                self._queue.append(e.task.id)
                n += 1
        return n

    # -- synthesis ---------------------------------------------------------------------
    def _synthesize(self, step: int) -> dict[str, float]:
        cfg = self.config
        out = dict.fromkeys(("round", "parents", "attempted", "produced", "staged", "duplicates", "contaminated",
                             "capped", "seconds"), 0.0)
        if not self.yields.check() or len(self._queue) >= cfg.staged_capacity:
            return out
        assert self.resampler is not None
        live_sig = Counter(e.signature for e in self.pool.entries.values() if not e.is_seed and e.status != "archived")
        live_root = Counter(e.root for e in self.pool.entries.values() if not e.is_seed and e.status != "archived")
        parents = [e for e in self.pool.with_status("active")
                   if self._may_parent(e) and e.generation < cfg.max_generation
                   and live_root[e.root] < cfg.lineage_cap and live_sig[e.signature] < cfg.signature_cap]
        rng = np.random.default_rng([self.rng_seed, int(step), SYNTH_STREAM])
        picks = weighted_pick(rng, self._parent_weights(parents), cfg.parents_per_round)
        out["round"] = 1.0
        before = self._resampler_stats()
        t0 = time.perf_counter()
        for i in picks:
            parent = parents[i]
            parent.parent_uses += 1
            out["parents"] += 1
            variants = self.resampler.resample(parent.task, cfg.variants_per_parent, rng, exclude=self._known)
            out["attempted"] += cfg.variants_per_parent
            out["produced"] += len(variants)
            for v in variants:
                if v in self._contaminated:
                    out["contaminated"] += 1
                    continue
                if v in self._known or v.id in self.pool:
                    out["duplicates"] += 1
                    continue
                sig, depth = self._signature(v)
                if (live_root[parent.root] >= cfg.lineage_cap or live_sig[sig] >= cfg.signature_cap
                        or len(self._queue) >= cfg.staged_capacity):
                    out["capped"] += 1
                    continue
                self._known.add(v)
                self.pool.add(PoolEntry(v, "synthetic", "staged", sig, depth, root=parent.root,
                                        generation=parent.generation + 1, added_step=step, status_step=step))
                self._queue.append(v.id)
                live_root[parent.root] += 1
                live_sig[sig] += 1
                out["staged"] += 1
        out["seconds"] = time.perf_counter() - t0
        for k, v in self._resampler_stats().items():  # the resampler's own counters, this source's share
            self._resampler_totals[k] = self._resampler_totals.get(k, 0.0) + v - before.get(k, 0.0)
        for k in ("attempted", "produced", "staged", "seconds"):
            self._totals[f"synth_{k}"] += out[k]
        self._totals["synth_rounds"] += 1
        return out

    def _may_parent(self, e: PoolEntry) -> bool:
        """Whether an active task may be a synthesis parent: observed and on the boundary."""
        return e.task.id in self.detector.stats and self.detector.region(e.task.id) == "boundary"

    def _parent_weights(self, parents: Sequence[PoolEntry]) -> list[float]:
        """Parents are drawn in proportion to these weights: their EMA of u."""
        return [self.detector.score(e.task.id) for e in parents]

    def _resampler_stats(self) -> dict[str, float]:
        stats = getattr(self.resampler, "stats", None)  # e.g. variants per fallback tier, rejections
        if not isinstance(stats, dict):
            return {}
        return {k: float(v) for k, v in stats.items() if isinstance(v, (int, float))}

    # -- telemetry ---------------------------------------------------------------------
    def _telemetry(self, regions: list[str], raw_u: list[float], silent: list[bool], decisions: Counter[str],
                   synth: dict[str, float]) -> dict[str, float]:
        n = max(1, len(regions))
        t: dict[str, float] = {
            "silent_fraction": sum(silent) / n,
            "boundary_fraction": regions.count("boundary") / n,
            "u_mean": float(np.mean(raw_u)) if raw_u else 0.0,
            "kappa": self.detector.kappa,
            "kappa_calibrated": float(self.detector.calibrated),
        }
        for r in REGIONS:
            t[f"region/{r}"] = regions.count(r) / n
        ub = [u for u, r in zip(raw_u, regions) if r == "boundary"]
        urest = [u for u, r in zip(raw_u, regions) if r != "boundary"]
        if ub and urest and np.mean(urest) > 0:
            t["variance_ratio"] = float(np.mean(ub) / np.mean(urest))
        counts = self.pool.counts()
        active_seeds = sum(1 for e in self.pool.with_status("active") if e.is_seed)
        entropy, classes = self.pool.signature_entropy()
        t.update({f"pool/{k}": float(v) for k, v in counts.items()})
        t.update({"pool/active_seeds": float(active_seeds), "pool/active_synthetic": float(counts["active"] - active_seeds),
                  "pool/signature_entropy": entropy, "pool/signature_classes": float(classes),
                  "tasks_seen": float(self._seen)})
        y = self.yields.yield_
        if y is not None:
            t["admission/yield"] = y
        for k in ("admitted", "dropped", "quarantined", "archived", "evicted", "reactivated", "released"):
            t[f"admission/{k}"] = float(decisions[k])
            t[f"admission/{k}_total"] = float(self._totals[k])
        t["synth/active"] = float(self.config.synthesize and not self.yields.stopped)
        for k, v in synth.items():
            t[f"synth/{k}"] = float(v)
        for k in ("rounds", "attempted", "produced", "staged", "seconds"):
            t[f"synth/{k}_total"] = float(self._totals[f"synth_{k}"])
        t.update({f"batch/{k}": float(v) for k, v in self._batch.items()})
        t.update({f"resampler/{k}": float(v) for k, v in self._resampler_totals.items()})
        return t

    def telemetry(self) -> dict[str, float]:
        return dict(self._last)

    # -- state -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "name": self.name,
            "config": self.config.to_dict(),
            "rng_seed": self.rng_seed,
            "rng": self.rng.bit_generator.state,
            "detector": self.detector.state_dict(),
            "pool": self.pool.state_dict(),
            "yields": self.yields.state_dict(),
            "cycles": [[d, list(c)] for d, c in self._cycles.items()],
            "queue": list(self._queue),
            "outstanding": [[k, v] for k, v in self._outstanding.items()],
            "known": self._known.state_dict(),
            "observed_steps": self._observed_steps,
            "seen": self._seen,
            "totals": dict(self._totals),
            "resampler_totals": dict(self._resampler_totals),
            "batch": dict(self._batch),
            "last": dict(self._last),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"{self.name} state: version {state.get('version')!r}, expected {STATE_VERSION}")
        if state["name"] != self.name:
            raise ValueError(f"state of source {state['name']!r} loaded into source {self.name!r}")
        saved = RODSConfig.from_dict(state["config"])
        if saved != self.config:
            diff = sorted(k for k, v in self.config.to_dict().items() if state["config"].get(k) != v
                          and not (k == "boundary_band" and tuple(state["config"][k]) == v))
            raise ValueError(f"{self.name} state was saved with a different RODSConfig (fields {diff})")
        pool = ReplayPool()
        pool.load_state_dict(state["pool"])
        seeds = [e.task.id for e in pool.entries.values() if e.is_seed]
        if seeds != self.seed_ids:
            raise ValueError(f"{self.name} state holds other seed tasks than this source "
                             f"({len(seeds)} saved, {len(self.seed_ids)} here)")
        self.pool = pool
        self.rng_seed = int(state["rng_seed"])
        self.rng.bit_generator.state = state["rng"]
        self.detector.load_state_dict(state["detector"])
        self.yields.load_state_dict(state["yields"])
        self._cycles = {int(d): list(c) for d, c in state["cycles"]}
        self._queue = list(state["queue"])
        self._outstanding = Counter({k: int(v) for k, v in state["outstanding"]})
        self._known.load_state_dict(state["known"])
        self._observed_steps = int(state["observed_steps"])
        self._seen = int(state["seen"])
        self._totals = dict(state["totals"])
        self._resampler_totals = dict(state["resampler_totals"])
        self._batch = dict(state["batch"])
        self._last = dict(state["last"])


class ReplayOnlySource(RODSSource):
    """Ablation "replay_only": the detector and variance-prioritized replay over the seeds, no synthesis."""

    name = "replay_only"

    def __init__(self, seeds: Sequence[TaskSpec], config: RODSConfig = RODSConfig(), rng_seed: int = 0, *,
                 suite: Suite | None = None) -> None:
        super().__init__(seeds, None, replace(config, synthesize=False), rng_seed, suite=suite)


class NaiveRODSSource(RODSSource):
    """Ablation "naive": RODS whose resampler ignores structure (pass a ``NaiveResampler``)."""

    name = "naive"


class RandomParentRODSSource(RODSSource):
    """Ablation "rods_random": RODS whose synthesis parents are drawn uniformly from every observed
    active task, whatever its region, instead of from the variance boundary in proportion to u.
    Replay priorities, admission and retirement are RODS's own."""

    name = "rods_random"

    def _may_parent(self, e: PoolEntry) -> bool:
        return e.task.id in self.detector.stats

    def _parent_weights(self, parents: Sequence[PoolEntry]) -> list[float]:
        return [1.0] * len(parents)
