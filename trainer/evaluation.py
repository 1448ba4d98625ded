"""Greedy evaluation of a policy on a task list: success, progress, per depth and per turn type.

``evaluate_sets`` is the one evaluation every command reports (greedy, optionally sampled
episodes, split across processes); ``evaluate(policy, tasks, env_id)`` is its one-process greedy
form for benchmarks and tests. Both return plain numbers.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import gather_object

from rods_gym.resampler import task_depth
from rods_gym.task import TaskSpec

from .policy import Policy
from .rollout import RolloutEngine, RolloutSettings, Trajectory


def summarize(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """Success, progress, turns and error rate of finished trajectories, overall, per depth, and per
    turn type: the stratum a task set's task was drawn in (``meta["stratum"]``: plain, answer,
    multi_turn, missing_param, missing_tool; tasks without one are left out of ``per_stratum``).
    The strata fail differently: their errors are systematic (a withheld tool, a second user turn)
    where plain tasks mostly fail on one value slot, so a change of policy can move them apart."""
    by_depth: dict[int, list[Trajectory]] = defaultdict(list)
    by_stratum: dict[str, list[Trajectory]] = defaultdict(list)
    for tr in trajs:
        by_depth[task_depth(tr.task)].append(tr)  # the signature's depth, for BFCL's tasks too
        stratum = tr.task.meta.get("stratum")
        if stratum:
            by_stratum[str(stratum)].append(tr)
    actions = sum(tr.turns for tr in trajs)
    return {
        "episodes": len(trajs),
        "success": float(np.mean([tr.success for tr in trajs])) if trajs else 0.0,
        "progress": float(np.mean([tr.progress for tr in trajs])) if trajs else 0.0,
        "turns": float(np.mean([tr.turns for tr in trajs])) if trajs else 0.0,
        "tool_error_rate": sum(tr.errors for tr in trajs) / max(actions, 1),
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


def strip_tokens(tr: Trajectory) -> Trajectory:
    """A trajectory without its token stream (for gathering summaries across processes)."""
    out = copy.copy(tr)
    out.transcript = type(tr.transcript)()
    return out


def play(engine: RolloutEngine, tasks: Sequence[TaskSpec], repeats: int = 1, *, batch_episodes: int = 256,
         generator: torch.Generator | None = None, model: Any = None) -> list[Trajectory]:
    """``repeats`` episodes of each task, ``batch_episodes`` at a time (whole tasks per batch): greedy
    without a ``generator``, else sampled at the engine's temperature from it. Token streams dropped."""
    trajs: list[Trajectory] = []
    per_batch = max(1, batch_episodes // repeats)
    for start in range(0, len(tasks), per_batch):
        chunk, _ = engine.run(list(tasks[start:start + per_batch]), repeats, greedy=generator is None, seed=start,
                              model=model, generator=generator)
        trajs.extend(strip_tokens(t) for t in chunk)
    return trajs


def evaluate_sets(engine: RolloutEngine, eval_sets: Mapping[str, Sequence[TaskSpec]], accelerator: Accelerator,
                  batch_episodes: int, model: Any, samples: int = 0, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Greedy evaluation of every set, split across processes, summarized on all of them. With
    ``samples`` > 0, also that many episodes per task sampled at the engine's temperature from a
    generator seeded by ``seed`` and the rank, summarized under the set's ``"sampled"`` key.
    What ``rods train`` reports before and after GRPO, ``rods sft`` after its warm start, and ``rods evaluate``."""
    rank, world = accelerator.process_index, accelerator.num_processes

    def summary(mine: list[TaskSpec], repeats: int, generator: torch.Generator | None) -> dict[str, Any]:
        trajs = play(engine, mine, repeats, batch_episodes=batch_episodes, generator=generator, model=model)
        return summarize(gather_object(trajs) if world > 1 else trajs)

    out = {}
    for name, tasks in eval_sets.items():
        mine = list(tasks)[rank::world]
        out[name] = summary(mine, 1, None)
        if samples > 0:
            generator = torch.Generator(device=engine.policy.device).manual_seed(seed * 1_000_003 + rank)
            out[name]["sampled"] = {"samples": samples, "seed": seed, **summary(mine, samples, generator)}
    return out


def evaluate(policy: Policy, tasks: Sequence[TaskSpec], env_id: str, *, settings: RolloutSettings | None = None,
             batch_episodes: int = 256, env_kwargs: Mapping[str, Any] | None = None,
             engine: RolloutEngine | None = None) -> dict[str, Any]:
    """One greedy episode per task in this process (``evaluate_sets`` without processes or sampled
    episodes); returns ``summarize`` of them."""
    if not tasks:
        raise ValueError("evaluate() needs at least one task")
    engine = engine or RolloutEngine(policy, env_id, settings or RolloutSettings(), env_kwargs)
    return summarize(play(engine, tasks, batch_episodes=batch_episodes))
