"""The boundary detector: regions of tasks from the returns training already computed.

It reads only the G returns of each task's group (the ones the GRPO advantages use), never
the policy or the environment, so detection costs no extra rollout, forward pass or env step.

Per appearance: ``mu = mean(returns)``, ``u = 4 * var(returns)`` (population variance; in
[0, 1] for returns in [0, 1] by Popoviciu, clipped there otherwise). Per task: an EMA of
both over its appearances (the first appearance sets them). Regions, on the EMA values:

* ``boundary``  u >= kappa
* ``mastered``  mu >= mastered_mu and u < kappa
* ``hard``      mu <= hard_mu and u < kappa
* ``plateau``   the rest (u < kappa, mu in between: consistent partial progress)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from .config import RODSConfig

REGIONS = ("boundary", "mastered", "hard", "plateau")


def group_stats(returns: Sequence[float]) -> tuple[float, float]:
    """``(mu, u)`` of one group: mean return and 4 x population variance, u clipped to [0, 1]."""
    r = np.asarray(returns, dtype=np.float64)
    return float(r.mean()), float(min(1.0, 4.0 * r.var()))


def classify(mu: float, u: float, kappa: float, mastered_mu: float, hard_mu: float) -> str:
    if u >= kappa:
        return "boundary"
    if mu >= mastered_mu:
        return "mastered"
    if mu <= hard_mu:
        return "hard"
    return "plateau"


def calibrate_kappa(us: Sequence[float], band: tuple[float, float], kappa_min: float, default: float) -> float:
    """The kappa that makes the share of ``us`` at or above it fall in ``band``.

    Candidates are the observed values of u (at least ``kappa_min``); among those whose
    boundary share lies in the band, the one closest to the band's middle wins; if none
    does, the one whose share is closest to the band. Ties go to the larger kappa. With no
    candidate at all (every group silent), ``max(default, kappa_min)``.
    """
    u = np.asarray(us, dtype=np.float64)
    cands = np.unique(u[u >= kappa_min])
    if cands.size == 0:
        return float(max(default, kappa_min))
    lo, hi = band
    mid = 0.5 * (lo + hi)
    best, best_key = float(cands[0]), (np.inf, np.inf)
    for c in cands:
        share = float(np.mean(u >= c))
        outside = max(lo - share, share - hi, 0.0)
        key = (outside, abs(share - mid))
        if key <= best_key:  # ``<=``: later (larger) candidates win ties
            best, best_key = float(c), key
    return best


@dataclass
class TaskStats:
    """A task's detector record: EMA of mu and u, and its last raw measurement."""

    mu: float
    u: float
    n: int = 1
    last_mu: float = 0.0
    last_u: float = 0.0


class Detector:
    """Per-task EMA of (mu, u) and the region rule, with kappa calibration."""

    def __init__(self, config: RODSConfig) -> None:
        self.config = config
        self.kappa = float(config.kappa)
        self.calibrated = config.kappa_rule == "fixed"
        self.stats: dict[str, TaskStats] = {}
        self._calibration_us: list[float] = []

    # -- measurement -------------------------------------------------------------------
    def update(self, task_id: str, returns: Sequence[float]) -> TaskStats:
        if len(returns) < 2:
            raise ValueError(f"task {task_id!r}: a group needs at least 2 returns to have a variance, "
                             f"got {len(returns)}")
        mu, u = group_stats(returns)
        s = self.stats.get(task_id)
        if s is None:
            s = self.stats[task_id] = TaskStats(mu, u, 1, mu, u)
        else:
            a = self.config.ema_rate
            s.mu = (1.0 - a) * s.mu + a * mu
            s.u = (1.0 - a) * s.u + a * u
            s.n += 1
            s.last_mu, s.last_u = mu, u
        return s

    def region(self, task_id: str) -> str:
        s = self.stats[task_id]
        return classify(s.mu, s.u, self.kappa, self.config.mastered_mu, self.config.hard_mu)

    def score(self, task_id: str) -> float:
        """The replay score of a task: its EMA of u, or ``unseen_score`` if never observed."""
        s = self.stats.get(task_id)
        return self.config.unseen_score if s is None else s.u

    def forget(self, task_id: str) -> None:
        self.stats.pop(task_id, None)

    # -- kappa -------------------------------------------------------------------------
    def add_calibration(self, u: float) -> None:
        """A seed's first-appearance u; once ``calibration_groups`` are in, kappa is calibrated (rule "calibrate")."""
        cfg = self.config
        if self.calibrated or cfg.kappa_rule != "calibrate":
            return
        self._calibration_us.append(float(u))
        if len(self._calibration_us) >= cfg.calibration_groups:
            self.kappa = calibrate_kappa(self._calibration_us, cfg.boundary_band, cfg.kappa_min, cfg.kappa)
            self.calibrated = True
            self._calibration_us = []

    def requantile(self, task_ids: Sequence[str]) -> None:
        """Rule "quantile": kappa = the (1 - band middle) quantile of the tasks' EMA u (at least kappa_min)."""
        cfg = self.config
        if cfg.kappa_rule != "quantile":
            return
        us = [self.stats[t].u for t in task_ids if t in self.stats]
        if not us:
            return
        mid = 0.5 * sum(cfg.boundary_band)
        self.kappa = float(max(cfg.kappa_min, np.quantile(np.asarray(us), 1.0 - mid)))
        self.calibrated = True

    # -- state -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"kappa": self.kappa, "calibrated": self.calibrated, "calibration_us": list(self._calibration_us),
                "stats": [[k, asdict(v)] for k, v in self.stats.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.kappa = float(state["kappa"])
        self.calibrated = bool(state["calibrated"])
        self._calibration_us = [float(x) for x in state["calibration_us"]]
        self.stats = {k: TaskStats(**v) for k, v in state["stats"]}
