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
from tqdm.auto import tqdm

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
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for tr in trajs:
        by_depth[task_depth(tr.task)].append(tr)  # the signature's depth, for BFCL's tasks too
        by_task[tr.task.id].append(tr)
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
        # each task's success and progress (means over its episodes): what pairs two evaluations task by task
        "per_task": {tid: [float(np.mean([t.success for t in ts])), float(np.mean([t.progress for t in ts]))]
                     for tid, ts in by_task.items()},
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
         generator: torch.Generator | None = None, model: Any = None, bar: tqdm | None = None) -> list[Trajectory]:
    """``repeats`` episodes of each task, ``batch_episodes`` at a time (whole tasks per batch): greedy
    without a ``generator``, else sampled at the engine's temperature from it. Token streams dropped.
    ``bar``: a progress bar advanced by each batch's episodes."""
    trajs: list[Trajectory] = []
    per_batch = max(1, batch_episodes // repeats)
    for start in range(0, len(tasks), per_batch):
        chunk, _ = engine.run(list(tasks[start:start + per_batch]), repeats, greedy=generator is None, seed=start,
                              model=model, generator=generator)
        trajs.extend(strip_tokens(t) for t in chunk)
        if bar is not None:
            bar.update(len(chunk))
    return trajs


def evaluate_sets(engine: RolloutEngine, eval_sets: Mapping[str, Sequence[TaskSpec]], accelerator: Accelerator,
                  batch_episodes: int, model: Any, samples: int = 0, seed: int = 0, *,
                  progress: str | None = None) -> dict[str, dict[str, Any]]:
    """Greedy evaluation of every set, split across processes, summarized on all of them. With
    ``samples`` > 0, also that many episodes per task sampled at the engine's temperature from a
    generator seeded by ``seed`` and the rank, summarized under the set's ``"sampled"`` key.
    What ``rods train`` reports before and after GRPO, ``rods sft`` after its warm start, and ``rods evaluate``.
    ``progress``: the label of a progress bar over this process's episodes (the main process's only; None: no bar)."""
    rank, world = accelerator.process_index, accelerator.num_processes
    mine_per_set = {name: list(tasks)[rank::world] for name, tasks in eval_sets.items()}
    total = sum(len(mine) * (1 + samples) for mine in mine_per_set.values())
    bar = tqdm(total=total, desc=progress, unit="episode", dynamic_ncols=True, leave=False,
               disable=progress is None or not accelerator.is_main_process)

    def summary(mine: list[TaskSpec], repeats: int, generator: torch.Generator | None) -> dict[str, Any]:
        trajs = play(engine, mine, repeats, batch_episodes=batch_episodes, generator=generator, model=model, bar=bar)
        return summarize(gather_object(trajs) if world > 1 else trajs)

    out = {}
    for name, mine in mine_per_set.items():
        out[name] = summary(mine, 1, None)
        if samples > 0:
            generator = torch.Generator(device=engine.policy.device).manual_seed(seed * 1_000_003 + rank)
            out[name]["sampled"] = {"samples": samples, "seed": seed, **summary(mine, samples, generator)}
    bar.close()
    return out


def paired_difference(before: Mapping[str, Any], after: Mapping[str, Any], metric: str = "success", *,
                      resamples: int = 2000, level: float = 0.95, seed: int = 0) -> dict[str, float] | None:
    """after - before of ``metric`` (success or progress) over the tasks both evaluations played, paired by task
    (``summarize``'s ``per_task``), with its percentile bootstrap interval over tasks (``resamples`` draws from a
    generator seeded by ``seed``, so the interval repeats). None when either lacks per-task figures (an
    evaluation saved before they were recorded) or they share no task."""
    column = {"success": 0, "progress": 1}[metric]
    b, a = before.get("per_task"), after.get("per_task")
    shared = sorted(set(b) & set(a)) if b and a else []
    if not shared:
        return None
    diffs = np.array([a[t][column] - b[t][column] for t in shared], dtype=np.float64)
    draws = np.random.default_rng(seed).integers(0, len(diffs), size=(resamples, len(diffs)))
    lo, hi = np.quantile(diffs[draws].mean(axis=1), [(1 - level) / 2, (1 + level) / 2])
    return {"diff": float(diffs.mean()), "lo": float(lo), "hi": float(hi), "tasks": len(shared)}


def evaluate(policy: Policy, tasks: Sequence[TaskSpec], env_id: str, *, settings: RolloutSettings | None = None,
             batch_episodes: int = 256, env_kwargs: Mapping[str, Any] | None = None,
             engine: RolloutEngine | None = None) -> dict[str, Any]:
    """One greedy episode per task in this process (``evaluate_sets`` without processes or sampled
    episodes); returns ``summarize`` of them."""
    if not tasks:
        raise ValueError("evaluate() needs at least one task")
    engine = engine or RolloutEngine(policy, env_id, settings or RolloutSettings(), env_kwargs)
    return summarize(play(engine, tasks, batch_episodes=batch_episodes))
