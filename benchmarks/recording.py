"""What a curriculum saw during a run: a task source wrapper that records every group it observes (the same
returns the learner trained on), and the figures read from those records (silent fractions over training, the
RODS regions and their variance, which seeds the groups descend from).

Per group: the training step, the task id, whether the task is one of the seeds, ``mu`` and ``u = 4 var`` of its
returns, whether it was silent (all returns equal: zero return variance, so zero GRPO gradient), its size (the
episodes it cost) and, for a source with a RODS detector, the region that detector assigns it at this appearance
(computed on a copy of the detector, so the source is untouched).
"""

from __future__ import annotations

import copy
import zlib
from collections import defaultdict
from typing import Any, Mapping, Sequence

import numpy as np

from .stats import bootstrap_mean_1d, ratio_ci, rng_for

REGIONS = ("boundary", "plateau", "mastered", "hard")
POOL_KEYS = ("active_seeds", "active_synthetic", "staged", "quarantined", "archived")
TELEMETRY_KEYS = ("kappa", "variance_ratio", "boundary_fraction", "pool/active_seeds", "pool/active_synthetic",
                  "pool/staged", "pool/quarantined", "pool/archived", "pool/signature_classes",
                  "synth/staged_total", "admission/yield", "admission/admitted_total", "admission/dropped_total",
                  "admission/evicted_total")
DYNAMIC_SAMPLING_ATTRS = frozenset({"refill", "select", "max_refill_rounds"})  # DynamicSampling's members

Runs = Mapping[int, Mapping[str, Any]]  # seed -> run record (with "groups" and "steps")


def group_records(step: int, groups: Sequence[Any], source: Any, seed_ids: frozenset[str]) -> list[dict[str, Any]]:
    """One record per observed group (see the module docstring). Call it before ``source.observe(step, groups)``."""
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


def describe_task(task: Any) -> dict[str, Any]:
    """What a trained-on task is, structurally: its signature (class key, depth, calls, turn type) and, for a
    synthesized one, its lineage (parent, root, tier, generation). Reads the task only (no random draw)."""
    from rods_gym import compute_signature, default_suite

    sig = compute_signature(task, default_suite())
    turn = "multi_turn" if sig.n_turns > 1 else "+".join(sig.turn_types[0]) if sig.turn_types else "?"
    meta = task.meta or {}
    return {"sig": f"{zlib.crc32(repr(sig.key).encode()):08x}", "depth": int(sig.depth),
            "calls": int(sig.n_calls), "turn": turn, "parent": meta.get("parent"), "root": meta.get("root"),
            "tier": meta.get("tier"), "generation": meta.get("generation")}


class RecordingSource:
    """A task source that records every group it observes (:attr:`groups`) and its telemetry after each batch
    (:attr:`telemetry_log`), and otherwise is ``inner``: other attributes (``env_id``, ``env_kwargs``, ...) are
    the inner source's. Wrapping a dynamic-sampling source (DAPO) gives a :class:`DynamicRecordingSource`."""

    def __new__(cls, inner: Any = None, seed_ids: Any = (), describe: bool = False) -> "RecordingSource":  # copy/pickle
        from rods_gym.curricula import DynamicSampling

        if cls is RecordingSource and isinstance(inner, DynamicSampling):
            cls = DynamicRecordingSource
        return super().__new__(cls)

    def __init__(self, inner: Any, seed_ids: Sequence[str], describe: bool = False) -> None:
        self.inner = inner
        self.name = inner.name
        self.seed_ids = frozenset(seed_ids)
        self.groups: list[dict[str, Any]] = []
        self.telemetry_log: list[dict[str, float]] = []
        self.batches = 0
        self.describe = describe
        self.catalog: dict[str, dict[str, Any]] = {}  # with ``describe``: task id -> describe_task(task)

    def __getattr__(self, name: str) -> Any:
        if name == "inner" or name in DYNAMIC_SAMPLING_ATTRS:  # not set yet (copy/pickle); or not forwarded
            raise AttributeError(name)
        return getattr(self.inner, name)

    def next_batch(self, step: int, n_tasks: int) -> list[Any]:
        self.batches += 1
        return self.inner.next_batch(step, n_tasks)

    def observe(self, step: int, groups: Sequence[Any]) -> None:
        self.groups.extend(group_records(step, groups, self.inner, self.seed_ids))
        if self.describe:
            for g in groups:
                if g.task.id not in self.catalog:
                    self.catalog[g.task.id] = describe_task(g.task)
        self.inner.observe(step, groups)
        tel = self.inner.telemetry()
        self.telemetry_log.append({"step": int(step), **{k: float(tel[k]) for k in TELEMETRY_KEYS if k in tel}})

    def telemetry(self) -> dict[str, float]:
        return self.inner.telemetry()

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)

    @property
    def extra_rollouts(self) -> int:
        return int(getattr(self.inner, "extra_rollouts", 0))

    @property
    def rollouts(self) -> int:
        """Episodes observed so far (every group, DAPO's refills included)."""
        return sum(g["size"] for g in self.groups)

    episodes_observed = rollouts

    @property
    def distinct_tasks(self) -> int:
        return len({g["task"] for g in self.groups})


class DynamicRecordingSource(RecordingSource):
    """A :class:`RecordingSource` around a dynamic-sampling source: its refills and selection are the inner's,
    except that with ``budget`` set (the rollouts the arm may reach, ``group_size`` each refill task) a refill
    round gets only the tasks that still fit, so that DAPO's refills keep to the equal rollout budget."""

    budget: int | None = None
    group_size: int = 1

    @property
    def max_refill_rounds(self) -> int:
        return int(self.inner.max_refill_rounds)

    def refill(self, step: int) -> list[Any]:
        more = self.inner.refill(step)
        if self.budget is None:
            return more
        return more[:max(0, (self.budget - self.rollouts) // max(self.group_size, 1))]

    def select(self, groups: Sequence[Any]) -> list[Any]:
        return self.inner.select(groups)


# -- figures of the recorded groups --------------------------------------------------------------------
def by_step(groups: Sequence[Mapping[str, Any]]) -> dict[int, list[Mapping[str, Any]]]:
    out: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for g in groups:
        out[int(g["step"])].append(g)
    return out


def late_silent_flags(runs: Runs) -> list[bool]:
    """Silent flags of every group in the second half of training (pooled over seeds)."""
    return [bool(g["silent"]) for r in runs.values() for g in r["groups"] if 2 * int(g["step"]) >= int(r["steps"])]


def silent_windows(runs: Runs, n_windows: int = 4) -> list[float]:
    """Silent-group fraction in ``n_windows`` equal windows of training steps (fewer when there are fewer
    steps), pooled over seeds."""
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


def region_variance(runs: Runs, boot: Mapping[str, int], arm: str) -> dict[str, Any]:
    """Group variance u by detector region, pooled over seeds and steps, with CIs; the boundary-vs-rest ratio;
    and the same ratio *one appearance ahead* (region assigned at a task's previous appearance, u measured at the
    next one), which the region did not see."""
    groups = [g for s in sorted(runs) for g in runs[s]["groups"] if g["region"] is not None]
    out: dict[str, Any] = {"regions": {}}
    for r in REGIONS:
        us = [g["u"] for g in groups if g["region"] == r]
        out["regions"][r] = bootstrap_mean_1d(us, rng_for(boot["seed"], f"{arm}/region/{r}"), boot["samples"])
    out["ratio"] = ratio_ci([g["u"] for g in groups if g["region"] == "boundary"],
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
    out["ratio_next_appearance"] = ratio_ci(ahead_b, ahead_r, rng_for(boot["seed"], f"{arm}/ratio_ahead"),
                                            boot["samples"])
    return out


def region_shares(runs: Runs) -> dict[str, Any]:
    """Share of groups per region, and of the boundary groups that are seeds, first vs second half."""
    out: dict[str, Any] = {}
    for half in ("first", "second"):
        gs = [g for r in runs.values() for g in r["groups"]
              if (2 * int(g["step"]) >= int(r["steps"])) == (half == "second") and g["region"] is not None]
        n = max(1, len(gs))
        out[half] = {reg: sum(g["region"] == reg for g in gs) / n for reg in REGIONS}
        b = [g for g in gs if g["region"] == "boundary"]
        out[half]["boundary_seed_share"] = float(np.mean([g["seed_task"] for g in b])) if b else float("nan")
        out[half]["mu_mean"] = float(np.mean([g["mu"] for g in gs])) if gs else float("nan")
    return out


def root_id(task_id: str) -> str:
    """The seed a task descends from: synthetic ids are ``ROOT~HASH`` (possibly repeated)."""
    return task_id.split("~", 1)[0]


def group_profile(runs: Runs, kind: str) -> dict[str, dict[str, float]]:
    """Per depth or turn type (``kind``) of each group's root seed (train split; other tasks: "other"): the share
    of all groups, of the boundary groups, mean mu, and the silent fraction in the second half."""
    from rods_gym import load_split

    meta = {t.id: (str(t.meta["knobs"]["depth"]) if kind == "depth" else str(t.meta.get("stratum")))
            for t in load_split("train")}
    groups = [(g, 2 * int(g["step"]) >= int(r["steps"])) for r in runs.values() for g in r["groups"]]
    cell = [meta.get(root_id(g["task"]), "other") for g, _ in groups]
    n_all = max(1, len(groups))
    n_b = max(1, sum(g["region"] == "boundary" for g, _ in groups))
    out = {}
    for c in sorted(set(cell)):
        mine = [(g, late) for (g, late), k in zip(groups, cell) if k == c]
        late = [g["silent"] for g, lt in mine if lt]
        out[c] = {"groups": len(mine) / n_all, "boundary": sum(g["region"] == "boundary" for g, _ in mine) / n_b,
                  "mu": float(np.mean([g["mu"] for g, _ in mine])),
                  "silent_late": float(np.mean(late)) if late else float("nan")}
    return out


def mean_last_telemetry(runs: Runs) -> dict[str, float]:
    """The source's telemetry after its last batch, mean over seeds."""
    lasts = [r["telemetry"][-1] for r in runs.values() if r.get("telemetry")]
    keys = sorted({k for t in lasts for k in t if k != "step"})
    return {k: float(np.mean([t[k] for t in lasts if k in t])) for k in keys}


def step_telemetry(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per training step of one LLM-trainer run: silent fraction, regions, boundary-vs-rest variance ratio (from
    the recorded groups) and the source's own pool telemetry (from the trainer's history)."""
    history = {int(h["step"]) - 1: h for h in run["history"]}  # history steps are 1-based
    out = []
    for step, gs in sorted(by_step(run["groups"]).items()):
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


def dapo_refills(runs: Runs) -> dict[str, Any]:
    """Whether DAPO's dynamic sampling actually happened: refill groups beyond the batch, and the extra rollouts
    the source counted."""
    silent_steps = refill_groups = 0
    for r in runs.values():
        for step, gs in by_step(r["groups"]).items():
            tasks = int(r["history"][0]["episodes"]) // max(1, gs[0]["size"]) if r["history"] else len(gs)
            refill_groups += max(0, len(gs) - tasks)
            silent_steps += any(g["silent"] for g in gs[:tasks])
    extra = [float(r["history"][-1].get("extra_rollouts", 0)) if r["history"] else 0.0 for r in runs.values()]
    return {"refill_groups": refill_groups, "steps_with_silent_groups": silent_steps, "extra_rollouts": extra,
            "active": bool(refill_groups > 0 or any(extra))}
