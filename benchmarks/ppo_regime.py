"""Where PPO's held-out success comes from: MaskablePPO from scratch in the ``features`` view
(rods_gym.renderers.features), trained on a fresh procedural task every episode and on the fixed
400 train tasks, with greedy (deterministic) success on the train and held-out test splits along the
budget, beside the random masked agent.

    python benchmarks/ppo_regime.py [--scale smoke|cpu] [--seed 0] [--json OUT]

Two questions (issue 40, item 2):
1. Can held-out success rise well above the random agent at all? (procedural arm, target: test >= 0.3,
   multi-call and multi-turn tasks included; the per-depth / per-turn-type table says where.)
2. Is there a budget at which PPO on the fixed 400 clearly learns (train >= random + 0.3) while
   held-out success lags (train - test large)? The curve of the fixed arm says where, if anywhere.
Printed PASS/MISS lines check both; a MISS is a result (reported, never tuned on test).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

if __name__ == "__main__" and not __package__:  # run as a file: import the package, not its modules by name
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import yaml  # noqa: E402

from benchmarks._ppo_view import (Evaluator, PPOConfig, TaskStream, greedy, make_model, make_view_env,  # noqa: E402
                                  masked, procedural_stream, random_masked)
from benchmarks._multiturn import describe, probe  # noqa: E402
from benchmarks._script import run_script  # noqa: E402
from benchmarks.evaluator import spread  # noqa: E402

from rods_gym import TaskSpec, load_split  # noqa: E402

VIEW = "features"
SCALES_FILE = Path(__file__).resolve().parent / "configs" / "ppo_regime.yaml"
PROCEDURAL_TARGET = 0.3  # test success of the procedural arm
LEARN_MARGIN = 0.3  # fixed arm's train success over the random agent's
GAP_TARGET = 0.15  # fixed arm's train - test success at the same point


def with_overrides(ppo: PPOConfig, text: str) -> PPOConfig:
    """``ppo`` with ``key=value`` fields replaced (``net_arch=128-128``)."""
    fields = {f.name: f.type for f in dataclasses.fields(PPOConfig)}
    changes: dict[str, Any] = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        if key not in fields or not value:
            raise ValueError(f"--ppo: {item!r} is not key=value with a key among {sorted(fields)}")
        default = getattr(ppo, key)
        changes[key] = tuple(int(v) for v in value.split("-")) if isinstance(default, tuple) else type(default)(value)
        if isinstance(default, int) and not isinstance(default, bool) and changes[key] <= 0:
            raise ValueError(f"--ppo: {key} must be positive")
    return dataclasses.replace(ppo, **changes)


def load_scale(name: str) -> dict[str, Any]:
    """A scale of ``configs/ppo_regime.yaml``: points, eval_tasks and its PPOConfig."""
    scales = yaml.safe_load(SCALES_FILE.read_text())
    if name not in scales:
        raise ValueError(f"--scale {name!r}: {SCALES_FILE} has {sorted(scales)}")
    scale = dict(scales[name])
    ppo = dict(scale["ppo"])
    if "net_arch" in ppo:
        ppo["net_arch"] = tuple(ppo["net_arch"])
    return {**scale, "points": tuple(scale["points"]), "ppo": PPOConfig(**ppo)}


def bucket(task: TaskSpec) -> str:
    n = len(task.calls)
    return "depth 1" if n == 1 else "depth 2-5" if n <= 5 else "depth 6+"


def turn_type(task: TaskSpec) -> str:
    if len(task.turns) > 1:
        return "multi-turn"
    t = task.turns[0]
    return "missing param" if t.withheld else "missing tool" if t.locked else "plain"


def breakdown(tasks: Sequence[TaskSpec], success: dict[str, float]) -> dict[str, tuple[float, int]]:
    groups: dict[str, list[float]] = {}
    for t in tasks:
        for key in (bucket(t), turn_type(t)):
            groups.setdefault(key, []).append(success[t.id])
    return {k: (float(np.mean(v)), len(v)) for k, v in sorted(groups.items())}


def run_arm(arm: str, points: Sequence[int], ppo: PPOConfig, seed: int, evaluator: Evaluator,
            fixed_set: list[TaskSpec], train: list[TaskSpec], test: list[TaskSpec],
            env_kwargs: dict[str, Any], probe_tasks: dict[str, list[TaskSpec]] | None = None,
            save: Path | None = None) -> dict[str, Any]:
    """Train one arm from scratch; greedy success on ``train`` and ``test`` at every point."""
    if arm == "procedural":
        fns = [lambda i=i: masked(TaskStream(make_view_env(VIEW, **env_kwargs), procedural_stream(1000 * seed + i, VIEW)))
               for i in range(ppo.n_envs)]
    else:
        fns = [lambda: masked(make_view_env(VIEW, task_set=fixed_set, **env_kwargs)) for _ in range(ppo.n_envs)]
    model = make_model(VIEW, fns, ppo, seed)
    curve, done, train_s = [], 0, 0.0
    for point in points:
        start = time.perf_counter()
        model.learn(point - done, reset_num_timesteps=False)
        train_s += time.perf_counter() - start
        done = point
        act = greedy(model)
        tr, te = evaluator(train, act), evaluator(test, act)
        row = {"steps": int(model.num_timesteps), "train": float(np.mean(list(tr.values()))),
               "test": float(np.mean(list(te.values()))), "train_s": round(train_s, 1)}
        if arm == "procedural":
            row["tasks_seen"] = int(sum(model.env.get_attr("tasks_seen")))
        curve.append(row)
        print(f"  {arm:10s} {row['steps']:>8d} steps  train {row['train']:.3f}  test {row['test']:.3f}  "
              f"({train_s:.0f} s training)", flush=True)
    curve[-1]["held_out_success"] = {t.id: float(te[t.id]) for t in test}  # per task, for paired comparisons
    curve[-1]["test_breakdown"] = breakdown(test, te)
    curve[-1]["train_breakdown"] = breakdown(train, tr)
    out: dict[str, Any] = {"curve": curve}
    if arm == "procedural":  # the training episodes by user turns: how many reached a later turn, how many succeeded
        outcomes: Counter = sum(model.env.get_attr("outcomes"), Counter())
        out["training_episodes"] = {f"{turns} turns": {
            "episodes": sum(v for (n, _, _), v in outcomes.items() if n == turns),
            "reached a later turn": sum(v for (n, t, _), v in outcomes.items() if n == turns and t > 0),
            "success": sum(v for (n, _, ok), v in outcomes.items() if n == turns and ok)}
            for turns in sorted({n for n, _, _ in outcomes})}
        print(f"  {arm:10s} training episodes: {out['training_episodes']}")
    for name, tasks in (probe_tasks or {}).items():
        out.setdefault("probe", {})[name] = figures = probe(model, tasks, **env_kwargs)
        print(f"  {arm:10s} probe on {name}: {describe(figures)}", flush=True)
    if save is not None:
        model.save(save / f"{arm}_seed{seed}.zip")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=("smoke", "cpu"), default="smoke", help=f"a scale of {SCALES_FILE.name}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", default="procedural,fixed", help="comma-separated: procedural, fixed")
    parser.add_argument("--order", choices=("ranked", "shuffled"), default="shuffled",
                        help="the features view's candidate_order")
    parser.add_argument("--held-out", choices=("test", "dev"), default="test",
                        help="the held-out split evaluated (tune settings on dev, report test)")
    parser.add_argument("--ppo", default="", help="PPOConfig overrides, e.g. learning_rate=1e-3,n_epochs=8,net_arch=128-128")
    parser.add_argument("--points", default="", help="comma-separated env-step points (default: the scale's)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--probe", action="store_true",
                        help="after training, the multi-turn probe (benchmarks/_multiturn.py) on the held-out split's and "
                             "the train split's multi-turn tasks")
    parser.add_argument("--save", type=Path, help="save each arm's final model here (ARM_seedN.zip)")
    parser.add_argument("--env-kwargs", default="{}",
                        help='JSON dict of FeaturesEnv kwargs for training and evaluation, e.g. {"turn_cues": true} (the -v1 view)')
    args = parser.parse_args()
    arms = [a for a in args.arms.split(",") if a]
    unknown = sorted(set(arms) - {"procedural", "fixed"})
    if unknown:
        raise ValueError(f"--arms: unknown arm(s) {unknown}; choose from procedural, fixed")
    torch.set_num_threads(1)
    scale = load_scale(args.scale)
    n = scale["eval_tasks"]
    fixed_set, test_split = load_split("train"), load_split(args.held_out)
    ppo = with_overrides(scale["ppo"], args.ppo)
    points = tuple(int(p) for p in args.points.split(",")) if args.points else scale["points"]
    train, test = spread(fixed_set, n), spread(test_split, n)  # the splits are ordered by stratum
    extra = json.loads(args.env_kwargs)
    if not isinstance(extra, dict) or "candidate_order" in extra:
        raise ValueError("--env-kwargs must be a JSON dict of FeaturesEnv kwargs (the order is --order)")
    env_kwargs = {"candidate_order": args.order, **extra}
    evaluator = Evaluator(VIEW, **env_kwargs)
    rand = random_masked(VIEW, args.seed)
    rand_train, rand_test = evaluator(train, rand), evaluator(test, rand)
    out: dict[str, Any] = {"scale": args.scale, "seed": args.seed, "view": VIEW, "order": args.order, "eval_tasks": n,
                           "env_kwargs": extra,
                           "held_out": args.held_out, "ppo": ppo.__dict__ | {"net_arch": list(ppo.net_arch)},
                           "random": {"train": float(np.mean(list(rand_train.values()))),
                                      "test": float(np.mean(list(rand_test.values())))}, "arms": {}}
    print(f"ppo_regime ({args.scale}, seed {args.seed}, view {VIEW} {args.order}, greedy success on {n} train / {n} "
          f"{args.held_out} tasks; {ppo})")
    print(f"  random masked agent: train {out['random']['train']:.3f}  test {out['random']['test']:.3f}")
    for arm in arms:
        probe_tasks = {args.held_out: test_split, "train": fixed_set} if args.probe else None
        out["arms"][arm] = run_arm(arm, points, ppo, args.seed, evaluator, fixed_set, train, test,
                                   env_kwargs, probe_tasks, args.save)
    report(out)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))
    return 0


def report(out: dict[str, Any]) -> None:
    rt, re = out["random"]["train"], out["random"]["test"]
    for arm, res in out["arms"].items():
        last = res["curve"][-1]
        print(f"  {arm} at {last['steps']} steps, test by depth / turn type:  " + ", ".join(
            f"{k} {v:.3f} (n={c})" for k, (v, c) in last["test_breakdown"].items()))
    if "procedural" in out["arms"]:
        best = max(r["test"] for r in out["arms"]["procedural"]["curve"])
        ok = best >= PROCEDURAL_TARGET
        print(f"  {'PASS' if ok else 'MISS'} procedural arm: held-out test success {best:.3f} "
              f"(target >= {PROCEDURAL_TARGET}; random {re:.3f})")
    if "fixed" in out["arms"]:
        rows = out["arms"]["fixed"]["curve"]
        hit = [r for r in rows if r["train"] >= rt + LEARN_MARGIN and r["train"] - r["test"] >= GAP_TARGET]
        if hit:
            r = hit[0]
            print(f"  PASS fixed-400 saturates: at {r['steps']} steps train {r['train']:.3f} (random {rt:.3f} + "
                  f"{r['train'] - rt:.3f}), test {r['test']:.3f} (gap {r['train'] - r['test']:.3f} >= {GAP_TARGET})")
        else:
            r = max(rows, key=lambda r: r["train"] - r["test"])
            print(f"  MISS fixed-400 saturates: no point with train >= random + {LEARN_MARGIN} and a gap >= "
                  f"{GAP_TARGET}; largest gap at {r['steps']} steps: train {r['train']:.3f}, test {r['test']:.3f}")


if __name__ == "__main__":
    run_script(main)
