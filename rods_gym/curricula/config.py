"""``RODSConfig``: every number of the RODS loop (README, "Curricula and RODS"), with its default."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

KAPPA_RULES = ("calibrate", "quantile", "fixed")


@dataclass(frozen=True)
class RODSConfig:
    """Knobs of the RODS curriculum. Defaults follow the RODS loop as the README describes it ("Curricula and RODS").

    Detector: per task, the mean ``mu`` and the variance ``s2`` of its G returns give
    ``u = 4 * s2`` (in [0, 1] for returns in [0, 1]), averaged over the task's appearances by
    an EMA. Regions: boundary ``u >= kappa``; mastered ``mu >= mastered_mu``; hard
    ``mu <= hard_mu``; plateau the rest.
    """

    # -- detector ----------------------------------------------------------------------
    group_size: int = 8  # G, rollouts per task; the trainer (or the SB3 wrapper) reads it
    ema_rate: float = 0.5  # weight of a task's newest appearance in its EMA of mu and u
    kappa_rule: str = "calibrate"  # "calibrate" once on the seeds, "quantile" every step, or "fixed"
    kappa: float = 0.25  # the fixed kappa, and kappa before calibration
    calibration_groups: int = 64  # seed groups (first appearances) observed before kappa is calibrated
    boundary_band: tuple[float, float] = (0.3, 0.5)  # boundary share calibration aims for
    kappa_min: float = 0.05  # kappa never goes below this: a silent group (u = 0) is never boundary
    mastered_mu: float = 0.9
    hard_mu: float = 0.1
    # -- batch -------------------------------------------------------------------------
    anchor_frac: float = 0.25  # share of each batch drawn from the seeds (stratified by depth)
    staged_frac: float = 0.25  # at most this share of newly staged synthetic tasks
    plr_beta: float = 0.3  # rank priority h = rank^(-1/beta)
    staleness_mix: float = 0.3  # rho: P = (1 - rho) * P_rank + rho * P_staleness
    unseen_score: float = 1.0  # u assumed for a pool task never observed (optimistic: try it soon)
    # -- synthesis ---------------------------------------------------------------------
    synthesize: bool = True
    synth_every: int = 5  # T: a synthesis round after every T observed steps
    variants_per_parent: int = 4  # m
    parents_per_round: int = 8  # boundary parents per round (drawn in proportion to their u)
    max_generation: int = 3  # variants of variants, at most this deep
    lineage_cap: int = 24  # live (staged, active, quarantined) synthetic tasks per seed root
    signature_cap: int = 48  # live synthetic tasks per signature class (against mode collapse)
    staged_capacity: int = 64  # tasks waiting for their first appearance (FIFO); synthesis stops at it
    # -- pool and retirement -----------------------------------------------------------
    capacity: int = 800  # active tasks (seeds included); over it the lowest-priority synthetic goes
    mastered_to_archive: int = 2  # mastered this many times -> archive
    hard_to_archive: int = 3  # hard this many times -> archive
    max_uses: int = 16  # a synthetic task trained on this many times is evicted
    non_boundary_evict: int = 3  # a synthetic task non-boundary this many appearances in a row is evicted
    quarantine_capacity: int = 200  # hard newcomers held aside (oldest leave first)
    quarantine_release: int = 50  # steps after which a quarantined task is staged again (once)
    # -- stopping ----------------------------------------------------------------------
    min_admission_yield: float = 0.10
    yield_window: int = 64  # admission decisions in the rolling yield window
    stop_patience: int = 2  # synthesis rounds in a row with the full window under the yield -> stop

    def __post_init__(self) -> None:
        def need(ok: bool, what: str) -> None:
            if not ok:
                raise ValueError(f"RODSConfig.{what}")

        for f in fields(self):  # the type of each default, so that a YAML typo is named, not a failed comparison
            value, default = getattr(self, f.name), f.default
            if isinstance(default, bool):
                ok = isinstance(value, bool)
            elif isinstance(default, int):
                ok = isinstance(value, int) and not isinstance(value, bool)
            elif isinstance(default, float):
                ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            elif isinstance(default, tuple):
                ok = isinstance(value, tuple) and len(value) == len(default) and all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
            else:
                ok = isinstance(value, type(default))
            need(ok, f"{f.name} must be {type(default).__name__}"
                 + (f" of {len(default)} numbers" if isinstance(default, tuple) else "") + f", got {value!r}")

        need(self.group_size >= 2, f"group_size must be >= 2 (variance needs two returns), got {self.group_size}")
        need(0.0 < self.ema_rate <= 1.0, f"ema_rate must lie in (0, 1], got {self.ema_rate}")
        need(self.kappa_rule in KAPPA_RULES, f"kappa_rule must be one of {KAPPA_RULES}, got {self.kappa_rule!r}")
        need(0.0 < self.kappa <= 1.0, f"kappa must lie in (0, 1], got {self.kappa}")
        need(0.0 < self.kappa_min <= 1.0, f"kappa_min must lie in (0, 1], got {self.kappa_min}")
        lo, hi = self.boundary_band
        need(0.0 < lo <= hi < 1.0, f"boundary_band must be 0 < low <= high < 1, got {self.boundary_band}")
        need(self.calibration_groups >= 1, f"calibration_groups must be >= 1, got {self.calibration_groups}")
        need(0.0 <= self.hard_mu < self.mastered_mu <= 1.0,
             f"need 0 <= hard_mu < mastered_mu <= 1, got {self.hard_mu}, {self.mastered_mu}")
        for name in ("anchor_frac", "staged_frac", "staleness_mix"):
            need(0.0 <= getattr(self, name) <= 1.0, f"{name} must lie in [0, 1], got {getattr(self, name)}")
        need(self.anchor_frac + self.staged_frac <= 1.0,
             f"anchor_frac + staged_frac must be <= 1, got {self.anchor_frac} + {self.staged_frac}")
        need(self.plr_beta > 0.0, f"plr_beta must be > 0, got {self.plr_beta}")
        need(0.0 <= self.unseen_score <= 1.0, f"unseen_score must lie in [0, 1], got {self.unseen_score}")
        for name in ("synth_every", "variants_per_parent", "parents_per_round", "max_generation", "lineage_cap",
                     "signature_cap", "staged_capacity", "capacity", "mastered_to_archive", "hard_to_archive",
                     "max_uses", "non_boundary_evict", "quarantine_capacity", "quarantine_release", "yield_window",
                     "stop_patience"):
            need(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        need(0.0 <= self.min_admission_yield <= 1.0,
             f"min_admission_yield must lie in [0, 1], got {self.min_admission_yield}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RODSConfig":
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"RODSConfig: unknown fields {sorted(unknown)}")
        kw = dict(d)
        if "boundary_band" in kw:
            kw["boundary_band"] = tuple(kw["boundary_band"])
        return cls(**kw)
