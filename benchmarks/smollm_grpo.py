"""Does GRPO move SmolLM2-135M-Instruct on a rods env, and does the RODS curriculum change how much? (issue 49)

    python benchmarks/smollm_grpo.py                                   # rods vs fixed, 3 seeds, one run at a time
    python benchmarks/smollm_grpo.py --steps 10 --eval-tasks 100 --jobs 2   # two runs at a time, one thread each (2-core CPU)
    python benchmarks/smollm_grpo.py --report-only                     # the tables from the runs in --out
    python benchmarks/smollm_grpo.py --steps 1 --seeds 0 --eval-tasks 4 --out /tmp/smollm_smoke   # plumbing only

Protocol. One SFT warm start (``--config``'s ``sft`` section, the run seed 0; or a saved one, ``--warm-start DIR``)
is evaluated greedily on ``--eval-tasks`` evenly spread held-out tasks of each ``--splits`` split. Every arm (``--arms``: task sources,
``rods`` and ``fixed`` by default) and seed (``--seeds``) then runs ``--steps`` GRPO steps from that same policy
(``--lora-rank`` adapters or full fine-tuning), its seed setting the rollouts' sampling and the source's draws,
and is evaluated on the same tasks. The warm start is shared so that the differences measured are GRPO's: each
run's success minus the warm start's, task by task (paired), and RODS minus fixed, paired by seed and task;
95% CIs by a two-level bootstrap over seeds and tasks. The runs go through the data-efficiency benchmark's runner
(``_de_runner``: the trainer's ``grpo_train``, every observed group recorded), so a finished run is reused
(``--out``) and a killed one starts over; ``--jobs N`` runs N of them at a time in their own processes, each with
``--threads``/N torch threads (a 2-core CPU: ``--jobs 2``, the pairs of arms of a seed side by side). Reported beside: step time split into generation, env and update, and
the process's memory, from the trainer's own metrics.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as _dt
import json
import multiprocessing
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the helper modules next to this script (already there when run as a script)
    sys.path.insert(0, str(HERE))

from _de_runner import RUN_FILE, WARM_FILE, ArmJob, EvalSpec, SeedJob, run_warm_start  # noqa: E402
from _de_stats import bootstrap_ci, rng_for  # noqa: E402

from benchmarks import llm_runs  # noqa: E402
from benchmarks.runner import run_jobs  # noqa: E402
from rods_gym.task import stratum_name  # noqa: E402

ARM_DEFAULTS = {  # a budget of tens of groups: RODS calibrates on its first 8 and synthesizes every 2 steps
    "rods": {"calibration_groups": 8, "synth_every": 2, "parents_per_round": 4, "variants_per_parent": 2},
}


def arm_threads(args: argparse.Namespace) -> int:
    """Torch threads of each GRPO run: ``--threads`` shared by the ``--jobs`` runs at a time (at least one)."""
    return max(1, args.threads // args.jobs)


def train_config(args: argparse.Namespace, arm: str | None) -> dict[str, Any]:
    """The run's config as a plain mapping: ``--config`` with ``--set``, the warm start's (``arm`` None) or an arm's."""
    from rods_gym.trainer.config import load_config

    threads = args.threads if arm is None else arm_threads(args)
    extra = ["tensorboard=false", "progress_bar=false", "checkpoint_every=0", "keep_checkpoints=1",
             "time_limit_min=0", "eval.every=0", f"threads={threads}", f"sft.threads={threads}",
             f"eval.threads={threads}", *args.set]
    if args.warm_start:  # a saved warm start: every run loads it, no SFT here
        extra += [f"policy.model={Path(args.warm_start).resolve()}", "sft.enabled=false"]
    if arm is not None:
        extra += [f"data.source={arm}", f"lora.rank={args.lora_rank}", "sft.enabled=false"]
        options = ARM_DEFAULTS.get(arm, {})
        if options:
            extra.append("data.source_options={" + ", ".join(f"{k}: {v}" for k, v in options.items()) + "}")
    return load_config(args.config, extra).to_dict()


def in_own_process(fn: Callable[[Any], dict[str, Any]], job: Any) -> dict[str, Any]:
    """``fn(job)`` in a spawned process, so that its memory goes back when it ends: SmolLM2-135M's SFT and evaluation
    leave about 10 GB in the process that ran them, which beside two GRPO runs (about 7.5 GB each) ran a 24 GB
    machine out of memory (measured 2026-12-07)."""
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=1, mp_context=ctx, initializer=llm_runs.quiet) as pool:
        return pool.submit(fn, job).result()


def run_all(args: argparse.Namespace, log=print) -> dict[str, Any]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    evals = EvalSpec(tuple((s, args.eval_tasks) for s in args.splits), args.batch_episodes)
    warm_job = SeedJob(0, train_config(args, None), str(out / "warm_start"), evals, args.threads)
    if args.report_only:
        warm = json.loads((out / "warm_start" / WARM_FILE).read_text())
    else:
        t0 = time.perf_counter()
        warm = in_own_process(run_warm_start, warm_job)
        log(f"warm start: {time.perf_counter() - t0:.0f} s (SFT {warm['sft'].get('seconds', 0):.0f} s, evaluation "
            f"{warm['eval_seconds']:.0f} s); " + ", ".join(f"{k} {v['mean_success']:.3f}" for k, v in warm["eval"].items()))
    runs: dict[str, dict[int, dict[str, Any]]] = {a: {} for a in args.arms}
    jobs = []
    for seed in args.seeds:  # seed-major: a stopped job leaves whole pairs of arms
        for arm in args.arms:
            train = train_config(args, arm)
            per_step = train["rollout"]["tasks_per_step"] * train["rollout"]["group_size"]
            jobs.append(ArmJob(arm, seed, train, str(out / f"seed{seed}" / arm), warm["policy_dir"],
                               (args.steps * per_step,), evals, arm_threads(args)))
    if args.report_only:
        for job in jobs:
            f = Path(job.out_dir) / RUN_FILE
            if f.exists():
                runs[job.arm][job.seed] = json.loads(f.read_text())
        return {"warm": warm, "runs": runs}
    by_job = {job.job(): job for job in jobs}
    done = run_jobs(list(by_job), llm_runs.run_arm, workers=args.jobs, context="spawn", initializer=llm_runs.quiet,
                    path_of=lambda j: Path(by_job[j].out_dir) / RUN_FILE, log=log)
    if done.failures:
        raise RuntimeError("GRPO runs failed: " + "; ".join(done.failures))
    for job in jobs:  # in the jobs' order, as --report-only reads them
        rec = runs[job.arm][job.seed] = done.records[job.job()]
        last = rec["points"][-1]["eval"]
        log(f"{job.arm} seed {job.seed}: {rec['steps']} steps in {rec['train_seconds']:.0f} s (+ evaluation "
            f"{rec['eval_seconds']:.0f} s); " + ", ".join(f"{k} {v['mean_success']:.3f}" for k, v in last.items()))
    return {"warm": warm, "runs": runs}


def task_strata(args: argparse.Namespace) -> dict[str, str]:
    """Each held-out task's turn type (``meta["stratum"]``), by task id, for ``--splits``."""
    from rods_gym.trainer.config import load_config
    from rods_gym.trainer.tasks import load_tasks

    data = load_config(args.config, args.set).data
    return {t.id: str(t.meta.get("stratum")) for split in args.splits for t in load_tasks(split, data)}


def paired(a: np.ndarray, b: np.ndarray, label: str, samples: int = 2000) -> dict[str, float]:
    """mean(a - b) over a ``[seeds, tasks]`` matrix (b broadcast when it is one row) and its 95% CI."""
    return bootstrap_ci(a - b, rng_for(0, label), samples)


def per_turn_type(ids: Sequence[str], before: np.ndarray, after: Mapping[str, np.ndarray],
                  strata: Mapping[str, str]) -> dict[str, dict[str, float]]:
    """Mean success per turn type (a task's stratum, in words): ``n`` tasks, the warm start and each arm (over its
    seeds)."""
    names = np.array([stratum_name(strata[i]) for i in ids])
    out: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(names.tolist()):
        cols = names == name
        out[name] = {"n": int(cols.sum()), "warm_start": float(before[cols].mean()),
                     **{arm: float(a[:, cols].mean()) for arm, a in after.items()}}
    return out


def final_eval(by_seed: Mapping[int, Mapping[str, Any]], seeds: Sequence[int], split: str, key: str) -> np.ndarray:
    """``[seeds, tasks]``: each run's last evaluation of ``split`` (``key``: success or progress, per task)."""
    return np.array([by_seed[s]["points"][-1]["eval"][split][key] for s in seeds], dtype=np.float64)


def summarize(loaded: Mapping[str, Any], splits: Sequence[str], strata: Mapping[str, str]) -> dict[str, Any]:
    """The tables' figures; ``strata`` maps each evaluated task id to its turn type (``meta["stratum"]``)."""
    warm, runs = loaded["warm"], loaded["runs"]
    out: dict[str, Any] = {"splits": {}, "steps": {}}
    for split in splits:
        before = np.array(warm["eval"][split]["success"], dtype=np.float64)[None, :]
        before_progress = np.array(warm["eval"][split]["progress"], dtype=np.float64)[None, :]
        entry: dict[str, Any] = {"warm_start": bootstrap_ci(before, rng_for(0, f"warm/{split}")), "arms": {}}
        after: dict[str, np.ndarray] = {}
        for arm, by_seed in runs.items():
            seeds = sorted(by_seed)
            if not seeds:
                continue
            after[arm] = final_eval(by_seed, seeds, split, "success")
            entry["arms"][arm] = {"seeds": seeds, "after": bootstrap_ci(after[arm], rng_for(0, f"{arm}/{split}")),
                                  "minus_warm_start": paired(after[arm], before, f"{arm}-warm/{split}"),
                                  "progress_minus_warm_start": paired(final_eval(by_seed, seeds, split, "progress"),
                                                                      before_progress, f"{arm}-warm-progress/{split}"),
                                  "per_seed": [float(x) for x in after[arm].mean(axis=1)]}
        entry["per_turn_type"] = per_turn_type(warm["tasks"][split]["ids"], before[0], after, strata)
        if "rods" in after and "fixed" in after:
            common = sorted(set(runs["rods"]) & set(runs["fixed"]))
            entry["rods_minus_fixed"] = paired(final_eval(runs["rods"], common, split, "success"),
                                               final_eval(runs["fixed"], common, split, "success"), f"rods-fixed/{split}")
        out["splits"][split] = entry
    for arm, by_seed in runs.items():
        hist = [h for rec in by_seed.values() for h in rec["history"]]
        if hist:
            mean = lambda k: float(np.mean([h[k] for h in hist]))  # noqa: E731
            out["steps"][arm] = {k: mean(k) for k in ("time_step", "time_gen", "time_env", "time_update", "reward_mean",
                                                     "zero_std_frac", "success", "gen_tokens", "mem_rss_mb")}
            out["steps"][arm]["mem_rss_mb_max"] = float(max(h["mem_rss_mb"] for h in hist))
            out["steps"][arm]["steps"] = len(hist)
    return out


def _ci(c: Mapping[str, float], signed: bool = False) -> str:
    f = "+.3f" if signed else ".3f"
    return f"{c['mean']:{f}} [{c['lo']:{f}}, {c['hi']:{f}}]"


def markdown(summary: Mapping[str, Any], args: argparse.Namespace, argv: Sequence[str], meta: Mapping[str, Any]) -> str:
    lines = ["## SmolLM2-135M-Instruct: SFT warm start, then GRPO (benchmarks/smollm_grpo.py)", "",
             f"- command: `python benchmarks/smollm_grpo.py {' '.join(argv)}`".rstrip(),
             f"- date: {meta['date']}; machine: {meta['machine']}; load average {meta['load_start']} at start, "
             f"{meta['load_end']} at end; wall time {meta['wall_min']:.0f} min",
             f"- config `{args.config}` + `{' '.join(args.set)}`; {args.steps} GRPO steps per run, "
             + (f"LoRA rank {args.lora_rank}" if args.lora_rank else "full fine-tuning")
             + f"; arms {', '.join(args.arms)} x seeds {', '.join(map(str, args.seeds))} from one shared warm start; "
             f"greedy evaluation on {args.eval_tasks} evenly spread tasks per split; 95% CIs: two-level bootstrap over "
             "seeds x tasks, paired by task (and seed)", ""]
    for split, entry in summary["splits"].items():
        lines += [f"| {split} | greedy success [95% CI] | minus the warm start (paired) | per seed "
                  "| progress minus the warm start (paired) |", "|---|---|---|---|---|",
                  f"| warm start (SFT) | {_ci(entry['warm_start'])} | | | |"]
        for arm, e in entry["arms"].items():
            lines.append(f"| {arm} | {_ci(e['after'])} | {_ci(e['minus_warm_start'], True)} | "
                         + ", ".join(f"{x:.3f}" for x in e["per_seed"])
                         + f" | {_ci(e['progress_minus_warm_start'], True)} |")
        if "rods_minus_fixed" in entry:
            lines.append(f"| **rods - fixed** (paired) | | {_ci(entry['rods_minus_fixed'], True)} | | |")
        arms = list(entry["arms"])
        lines += ["", f"| {split}: turn type | tasks | warm start | " + " | ".join(arms) + " |",
                  "|---|---|---|" + "---|" * len(arms)]
        for name, row in entry["per_turn_type"].items():
            lines.append(f"| {name} | {row['n']} | {row['warm_start']:.3f} | "
                         + " | ".join(f"{row[a]:.3f}" for a in arms) + " |")
        lines.append("")
    lines += ["| arm | step (s) | generation (s) | env (s) | update (s) | generated tokens/step | reward | silent groups "
              "| RSS MB (max) |", "|---|---|---|---|---|---|---|---|---|"]
    for arm, s in summary["steps"].items():
        lines.append(f"| {arm} | {s['time_step']:.1f} | {s['time_gen']:.1f} | {s['time_env']:.1f} | {s['time_update']:.1f} "
                     f"| {s['gen_tokens']:.0f} | {s['reward_mean']:.3f} | {s['zero_std_frac']:.2f} "
                     f"| {s['mem_rss_mb']:.0f} ({s['mem_rss_mb_max']:.0f}) |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="smollm2_cpu", help="trainer config (shipped name or YAML path)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config overrides (repeatable)")
    ap.add_argument("--arms", default="rods,fixed")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=8, help="GRPO steps per run")
    ap.add_argument("--lora-rank", type=int, default=0, help="LoRA adapters of this rank (0: full fine-tuning)")
    ap.add_argument("--splits", default="test")
    ap.add_argument("--eval-tasks", type=int, default=50, help="evenly spread tasks per split")
    ap.add_argument("--batch-episodes", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2, help="torch threads of the warm start, shared by the GRPO runs")
    ap.add_argument("--jobs", type=int, default=1, help="GRPO runs at a time (processes), each with threads/jobs threads")
    ap.add_argument("--warm-start", default=None, help="a saved policy (e.g. RUN/sft_policy of rods sft --config "
                    "smollm2_cpu) to start every run from instead of training the warm start here")
    ap.add_argument("--out", default="runs/smollm/grpo")
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args(argv)
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    args.splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    if args.steps < 1 or args.eval_tasks < 1 or args.jobs < 1 or not args.arms or not args.seeds:
        ap.error("--steps, --eval-tasks and --jobs must be >= 1, --arms and --seeds non-empty")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    load_start = f"{os.getloadavg()[0]:.1f}"
    t0 = time.perf_counter()
    loaded = run_all(args, log=lambda m: print(m, flush=True))
    summary = summarize(loaded, args.splits, task_strata(args))
    meta = {"date": _dt.datetime.now().isoformat(timespec="minutes"), "load_start": load_start,
            "load_end": f"{os.getloadavg()[0]:.1f}", "wall_min": (time.perf_counter() - t0) / 60,
            "machine": f"{os.cpu_count()}-core CPU ({platform.processor() or platform.machine()}), shared"}
    text = markdown(summary, args, argv, meta)
    print(text)
    (Path(args.out) / "summary.json").write_text(json.dumps({"meta": meta, "summary": summary}, indent=1))
    (Path(args.out) / "report.md").write_text(text)
    return 0


if __name__ == "__main__":
    from _script import run_script

    run_script(main)
