"""Greedy evaluation of a policy on a task list: success, progress, per depth and per turn type.

Reusable by benchmarks: ``evaluate(policy, tasks, env_id)`` runs one greedy episode per task
through the batched rollout engine and returns plain numbers.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping, Sequence

import numpy as np

from rods_gym import compute_signature, default_suite
from rods_gym.task import TaskSpec

from .policy import Policy
from .rollout import RolloutEngine, RolloutSettings, Trajectory


def summarize(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """Success, progress, turns and error rate of finished trajectories, overall, per depth, and per
    turn type: the stratum a task set's task was drawn in (``meta["stratum"]``: plain, answer,
    multi_turn, missing_param, missing_tool; tasks without one are left out of ``per_stratum``).
    The strata fail differently: their errors are systematic (a withheld tool, a second user turn)
    where plain tasks mostly fail on one value slot, so a change of policy can move them apart."""
    suite = default_suite()
    by_depth: dict[int, list[Trajectory]] = defaultdict(list)
    by_stratum: dict[str, list[Trajectory]] = defaultdict(list)
    for tr in trajs:
        by_depth[compute_signature(tr.task, suite).depth].append(tr)
        stratum = tr.task.meta.get("stratum")
        if stratum:
            by_stratum[str(stratum)].append(tr)
    actions = sum(tr.turns for tr in trajs)
    return {
        "episodes": len(trajs),
        "success": float(np.mean([tr.success for tr in trajs])) if trajs else 0.0,
        "progress": float(np.mean([tr.progress for tr in trajs])) if trajs else 0.0,
        "turns": float(np.mean([tr.turns for tr in trajs])) if trajs else 0.0,
        "error_rate": sum(tr.errors for tr in trajs) / max(actions, 1),
        "truncated": float(np.mean([tr.truncated for tr in trajs])) if trajs else 0.0,
        "per_depth": {int(d): _group_figures(ts) for d, ts in sorted(by_depth.items())},
        "per_stratum": {name: _group_figures(ts) for name, ts in sorted(by_stratum.items())},
    }


def _group_figures(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """Episodes, success and progress of one group of trajectories (a depth, a turn type)."""
    return {"n": len(trajs), "success": float(np.mean([t.success for t in trajs])),
            "progress": float(np.mean([t.progress for t in trajs]))}


def figures_line(figures: Mapping[str, Any]) -> str:
    """One line of an evaluation's headline figures: greedy success and progress, and the sampled
    episodes' (``evaluate_sets``' ``"sampled"`` entry) where there are any."""
    line = f"success {figures['success']:.3f} progress {figures['progress']:.3f}"
    sampled = figures.get("sampled")
    if sampled:
        line += f"; sampled x{sampled['samples']}: success {sampled['success']:.3f} progress {sampled['progress']:.3f}"
    return line


def evaluate(policy: Policy, tasks: Sequence[TaskSpec], env_id: str, *, settings: RolloutSettings | None = None,
             batch_episodes: int = 256, env_kwargs: Mapping[str, Any] | None = None,
             engine: RolloutEngine | None = None) -> dict[str, Any]:
    """One greedy episode per task; returns ``summarize`` of them plus ``tasks``."""
    if not tasks:
        raise ValueError("evaluate() needs at least one task")
    engine = engine or RolloutEngine(policy, env_id, settings or RolloutSettings(), env_kwargs)
    trajs: list[Trajectory] = []
    for start in range(0, len(tasks), batch_episodes):
        chunk, _ = engine.run(tasks[start:start + batch_episodes], 1, greedy=True, seed=start)
        trajs.extend(chunk)
    return summarize(trajs)
