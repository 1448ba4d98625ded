"""GRPO on fresh tasks: does RL improve a policy beyond the tasks it sees again?

    python benchmarks/grpo_probe.py runs/default/sft_policy /tmp/probe/lr0 --steps 60 grpo.lr=0
    python benchmarks/grpo_probe.py runs/default/sft_policy /tmp/probe/lr3e-4 --steps 60 grpo.lr=3e-4 grpo.sft_weight=0

A curriculum that replays tasks (fixed seeds, RODS's pool) lets a small policy raise its training
reward by learning those tasks. Here every GRPO step trains on tasks never seen before: ``steps *
rollout.tasks_per_step`` tasks drawn like the seeds (``envs.build_tasksets.demonstration_tasks`` with
``--data-seed``, its own world range, none equal to a checked-in task), taken in a fixed order, so
the training reward can only rise through skills that transfer. Every setting trains on the same
task sequence: ``grpo.lr=0`` is the reference run (the policy never changes), and the per-quarter
training figures of any other setting compare with it quarter by quarter. After training, the test
split is evaluated as the main job does (greedy, plus ``eval.samples`` episodes per task at the
rollout temperature). Overrides are the training config's (``--config``, default the main job's).
Writes ``OUT/probe.json``; GRPO checkpoints land in ``OUT/checkpoints``.

``--fit N`` asks the opposite question, whether GRPO can fit tasks at all: the training tasks are the
first N train-split tasks the starting policy fails greedily, all N in every step
(``rollout.tasks_per_step`` = N, the fixed source), and the report adds the greedy success on them
after training (0 before, by construction) beside the test figures.

    python benchmarks/grpo_probe.py runs/default/sft_policy /tmp/fit --fit 16 --steps 40 eval.samples=0

``--strata missing_tool,multi_turn`` draws the fresh tasks from those turn types only (``--strata-share
0.5``: half of them, the rest drawn like the seeds): whether GRPO learns a rule that a whole kind of task
follows (say that a tool is missing, then call it once enabled) when the batch is made of that kind.
Compare per turn type with ``compare_policies.py --stratum``.

    python benchmarks/grpo_probe.py runs/default/sft_policy /tmp/tool --steps 80 --strata missing_tool,multi_turn grpo.lr=1e-4

``--lowrank R`` trains only rank-R LoRA adapters of the decoder's linear layers (the trainer's own
``lora.rank=R lora.alpha=2R``, through peft; checkpoints hold the merged weights): whether an update of low
capacity learns such a rule while forgetting less of the other kinds. (RESULTS.md's low-rank figures were
measured with an earlier home-made parametrization of the same scale, alpha / r = 2, and lora_A drawn as
randn / sqrt(in_features) where peft draws it Kaiming-uniform.)

    python benchmarks/grpo_probe.py runs/default/sft_policy /tmp/lr4 --steps 80 --lowrank 4 --strata missing_tool,multi_turn grpo.lr=1e-3
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any, Sequence

import rods_gym.trainer  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)
import numpy as np
import torch
from accelerate import Accelerator

from rods_gym.envs.build_tasksets import STRATA, demonstration_tasks
from rods_gym.task import TaskSpec
from rods_gym.trainer.config import load_config
from rods_gym.trainer.evaluation import evaluate_sets, figures_line
from rods_gym.trainer.loop import evaluation_engine, grpo_train
from rods_gym.trainer.policy import load_policy
from rods_gym.trainer.rollout import RolloutEngine
from rods_gym.trainer.task_source import FixedSeeds
from rods_gym.trainer.tasks import load_tasks, spread

QUARTER_METRICS = ("success", "progress", "tool_error_rate", "turns", "entropy", "zero_std_frac")


def quarters(history: Sequence[dict[str, Any]], parts: int = 4) -> list[dict[str, float]]:
    """The mean of ``QUARTER_METRICS`` over ``parts`` consecutive, near-equal blocks of steps."""
    out = []
    for block in np.array_split(np.arange(len(history)), min(parts, len(history))):
        rows = [history[i] for i in block]
        out.append({"steps": [int(rows[0]["step"]), int(rows[-1]["step"])],
                    **{m: float(np.mean([r[m] for r in rows])) for m in QUARTER_METRICS}})
    return out


def failed_tasks(engine: RolloutEngine, tasks: Sequence[TaskSpec], n: int) -> list[TaskSpec]:
    """The first ``n`` of ``tasks`` whose greedy episode fails (in order)."""
    out: list[TaskSpec] = []
    for start in range(0, len(tasks), 64):
        trajs, _ = engine.run(tasks[start:start + 64], 1, greedy=True, seed=start)
        out += [t.task for t in trajs if not t.success]
        if len(out) >= n:
            return out[:n]
    raise ValueError(f"--fit {n}: the policy fails only {len(out)} of the {len(tasks)} train tasks greedily")


def fresh_tasks(n: int, seed: int, strata: Sequence[str] = (), share: float = 1.0) -> list[TaskSpec]:
    """``n`` fresh tasks drawn like the seeds (``demonstration_tasks``, sampler seed ``seed``). With ``strata``,
    ``round(n * share)`` of them are of those turn types (``meta["stratum"]``; the draw is widened until it
    holds enough) and the rest are drawn like the seeds from sampler seed ``seed + 1``, so that a run can
    train on, say, the tasks with a withheld tool alone (share 1) or half of the time (share 0.5)."""
    if not strata:
        return demonstration_tasks(n, seed=seed)
    want = round(n * share)
    size = 3 * want
    for _ in range(8):  # each draw doubles; 8 cover any stratum holding more than 1/700 of the tasks
        chosen = [t for t in demonstration_tasks(size, seed=seed) if t.meta.get("stratum") in strata]
        if len(chosen) >= want:
            return chosen[:want] + (demonstration_tasks(n - want, seed=seed + 1) if n > want else [])
        size *= 2
    raise ValueError(f"--strata {','.join(strata)}: only {len(chosen)} of {size // 2} fresh tasks are of these turn types")


PROBE_OUTPUTS = frozenset({"probe.json", "checkpoints", "metrics.jsonl", "tensorboard"})


def clear_output(out: Path, policy_dir: Path) -> None:
    """Make ``out`` an empty directory, refusing to delete anything the probe did not write: the policy
    (or a directory holding it, such as its run directory) and any directory holding other files than
    an earlier (possibly interrupted) probe's ``PROBE_OUTPUTS``."""
    out_r, policy_r = out.resolve(), policy_dir.resolve()
    if out_r == policy_r or out_r in policy_r.parents:
        raise ValueError(f"OUT {out} holds the policy {policy_dir}, and the probe would delete it; give another OUT")
    foreign = sorted(p.name for p in out.iterdir() if p.name not in PROBE_OUTPUTS) if out.is_dir() else []
    if foreign or (out.exists() and not out.is_dir()):
        raise ValueError(f"OUT {out} holds files a probe does not write ({', '.join(foreign[:4]) or 'it is a file'}); "
                         "the probe replaces its OUT, so give a new or empty directory")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)


def probe(policy_dir: str | Path, out: str | Path, *, steps: int, data_seed: int = 777, config: str = "default",
          overrides: Sequence[str] = (), eval_tasks: int = 400, threads: int = 1, fit: int = 0,
          strata: Sequence[str] = (), strata_share: float = 1.0, lowrank: int = 0) -> dict[str, Any]:
    """GRPO from ``policy_dir`` for ``steps`` steps on fresh tasks (``strata``/``strata_share``: see
    ``fresh_tasks``), or, with ``fit``, on that many train tasks it fails, all in every step; the run's
    quarters and test figures. ``lowrank`` > 0: only LoRA adapters of that rank train (``lora.rank``,
    ``lora.alpha`` = 2 x rank; an override naming them wins)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if fit < 0:
        raise ValueError(f"--fit must be >= 0 (0: fresh tasks), got {fit}")
    unknown = sorted(set(strata) - set(STRATA))
    if unknown:
        raise ValueError(f"--strata: unknown turn type(s) {unknown}; choose from {', '.join(STRATA)}")
    if strata and not 0.0 < strata_share <= 1.0:
        raise ValueError(f"--strata-share must be in (0, 1], got {strata_share}")
    if lowrank < 0:
        raise ValueError(f"--lowrank must be >= 0 (0: every parameter trains), got {lowrank}")
    if strata and fit:
        raise ValueError("--strata picks fresh tasks; --fit trains on failed train tasks: give one of them")
    if fit:
        overrides = [*overrides, f"rollout.tasks_per_step={fit}"]
    out = Path(out)
    base = load_config(config, list(overrides))
    seeds_drawn = {data_seed, data_seed + 1} if strata and strata_share < 1 else {data_seed}
    if not fit and base.sft.data == "sampled" and base.sft.data_seed in seeds_drawn:
        raise ValueError(f"--data-seed {data_seed} draws from the warm start's own sft.data_seed "
                         f"{base.sft.data_seed}: its demonstrations would be the training tasks; pick another seed")
    adapters = [f"lora.rank={lowrank}", f"lora.alpha={2 * lowrank}"] if lowrank else []
    cfg = load_config(config, [*adapters, *overrides, f"run_dir={out}", f"steps={steps}", "time_limit_min=0", "progress_bar=false",
                               "tensorboard=false", "eval.every=0"])
    if eval_tasks < 1:
        raise ValueError(f"--eval-tasks must be >= 1 (test tasks, keeping the split's mix), got {eval_tasks}")
    torch.set_num_threads(threads)
    policy = load_policy(policy_dir, dtype=cfg.policy.dtype)  # before OUT is touched: a bad path loses nothing
    clear_output(out, Path(policy_dir))
    engine = evaluation_engine(cfg, policy)
    if fit:
        tasks = failed_tasks(engine, load_tasks(cfg.data.train_split, cfg.data), fit)
    else:
        tasks = fresh_tasks(steps * cfg.rollout.tasks_per_step, data_seed, strata, strata_share)
    accelerator = Accelerator(cpu=True)
    t0 = time.perf_counter()
    result = grpo_train(cfg, policy, load_tasks(cfg.data.train_split, cfg.data), run_dir=out, accelerator=accelerator,
                        source=FixedSeeds(tasks, seed=cfg.seed))
    seconds = time.perf_counter() - t0
    test = spread(load_tasks("test", cfg.data), eval_tasks)
    figures = evaluate_sets(engine, {"test": test}, accelerator, cfg.eval.batch_episodes, policy.model,
                            cfg.eval.samples, cfg.seed)["test"]
    report = {"policy": str(policy_dir), "overrides": list(overrides), "steps": result.steps_done,
              "tasks_per_step": cfg.rollout.tasks_per_step, "group_size": cfg.rollout.group_size,
              "data_seed": data_seed, "strata": list(strata), "strata_share": strata_share if strata else None,
              "lowrank": lowrank,
              "grpo_seconds": seconds, "quarters": quarters(result.history), "test": figures}
    if fit:
        fitted, _ = engine.run(tasks, 1, greedy=True, seed=0)
        report.update(data_seed=None, fit={"tasks": fit, "greedy_success": float(np.mean([t.success for t in fitted]))})
    (out / "probe.json").write_text(json.dumps(report, indent=2))
    return report


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("policy", help="the starting policy (a save_pretrained directory, e.g. a run's sft_policy)")
    ap.add_argument("out", help="output directory (replaced)")
    ap.add_argument("--steps", type=int, default=60, help="GRPO steps (each on rollout.tasks_per_step new tasks)")
    ap.add_argument("--data-seed", type=int, default=777, help="sampler seed of the fresh training tasks")
    ap.add_argument("--config", default="default", help="training config (default: the main job's)")
    ap.add_argument("--eval-tasks", type=int, default=400, help="test tasks evaluated after training")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--fit", type=int, default=0, metavar="N",
                    help="train on the first N train tasks the policy fails greedily, all N every step (0: fresh tasks)")
    ap.add_argument("--strata", default="", help="train on fresh tasks of these turn types (comma-separated: "
                    + ", ".join(STRATA) + ")")
    ap.add_argument("--strata-share", type=float, default=1.0,
                    help="with --strata: the share of training tasks of those types (the rest drawn like the seeds)")
    ap.add_argument("--lowrank", type=int, default=0, metavar="R",
                    help="train only rank-R updates of the decoder's linear layers (LoRA-style; 0: every parameter)")
    ap.add_argument("overrides", nargs="*", help="config overrides, key=value (e.g. grpo.lr=3e-4)")
    args = ap.parse_intermixed_args(argv)  # overrides may follow the options
    try:
        report = probe(args.policy, args.out, steps=args.steps, data_seed=args.data_seed, config=args.config,
                       overrides=args.overrides, eval_tasks=args.eval_tasks, threads=args.threads, fit=args.fit,
                       strata=[x for x in args.strata.split(",") if x], strata_share=args.strata_share,
                       lowrank=args.lowrank)
    except ValueError as exc:
        ap.error(str(exc))
    for q in report["quarters"]:
        print(f"steps {q['steps'][0]}-{q['steps'][1]}: success {q['success']:.3f} progress {q['progress']:.3f} "
              f"tool errors/action {q['tool_error_rate']:.3f} entropy {q['entropy']:.3f}")
    if "fit" in report:
        print(f"fitted tasks ({report['fit']['tasks']}, all failed greedily before): greedy success "
              f"{report['fit']['greedy_success']:.3f}")
    print(f"test ({report['test']['episodes']} tasks): greedy {figures_line(report['test'])}; "
          f"GRPO {report['grpo_seconds']:.0f}s")
    return report


if __name__ == "__main__":
    from _script import run_script

    run_script(main)
