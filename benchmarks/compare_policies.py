"""Compare saved policies on one task split, paired by task, with bootstrap confidence intervals.

    python benchmarks/compare_policies.py BASE OTHER [OTHER ...] --split test --samples 4
    python benchmarks/compare_policies.py runs/default/sft_policy runs/default/checkpoints/step-000060/policy

Every policy (a ``save_pretrained`` directory: a warm start, a checkpoint's ``policy/``) plays each
task of the split once greedily and ``--samples`` times sampled at ``--temperature`` from one
fixed random stream (``--seed``), on the training config's environment (``--config``, default
the main job's). Per task, success and progress are averaged over its episodes. Each OTHER is
compared with BASE task by task: the mean difference and its 95% percentile bootstrap interval
over the tasks (``--bootstrap`` resamples). Greedy success on a few hundred tasks flips with small
weight changes; the sampled figures are what GRPO optimizes.

With ``--pool NAME`` the OTHER policies are runs of one arm under different training seeds, e.g.

    python benchmarks/compare_policies.py WARM SEED0/policy SEED1/policy SEED2/policy --pool grpo

and one more row per figure gives the arm's difference from BASE averaged over its seeds, with a
two-level percentile bootstrap (seeds resampled, then tasks), so that the interval carries the
spread between training seeds as well as between tasks (as ``benchmarks/data_efficiency.py`` does).

With ``--show-flips N``, up to N tasks per OTHER policy whose greedy episode succeeds under one policy and
fails under the other are printed after the table: each policy's greedy transcript, decoded (greedy
episodes do not depend on the batch, so they are played again for just those tasks).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import rods_gym.trainer  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)
import numpy as np
import torch

if __name__ == "__main__" and not __package__:  # run as a file: import the package, not its modules by name
    sys.path[0] = str(Path(__file__).resolve().parents[1])
from benchmarks._policy_eval import add_split_args, eval_engine, split_tasks  # noqa: E402
from benchmarks.stats import bootstrap_ci, bootstrap_mean_1d, rng_for  # noqa: E402

METRICS = ("success", "progress")


def per_task(policy_dir: str | Path, tasks: Sequence[Any], config: str, samples: int, temperature: float,
             seed: int, batch_episodes: int = 0, overrides: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """Per-task greedy and sampled success/progress of one policy: ``{"greedy_success": [n_tasks], ...}``.

    ``batch_episodes`` > 0 plays about that many episodes at a time (whole tasks' groups), which
    bounds memory; 0 plays every task's episodes in one batch, as the figures in RESULTS.md were
    measured (the sampled stream depends on the batching; greedy episodes do not)."""
    engine = eval_engine(policy_dir, config, temperature, overrides)
    out: dict[str, np.ndarray] = {}
    generator = torch.Generator().manual_seed(seed)

    def play(repeats: int, greedy: bool) -> list[Any]:
        per_batch = max(1, batch_episodes // repeats) if batch_episodes > 0 else max(len(tasks), 1)
        trajs = []
        for start in range(0, len(tasks), per_batch):
            chunk, _ = engine.run(tasks[start:start + per_batch], repeats, greedy=greedy, seed=start * repeats,
                                  generator=None if greedy else generator)
            for tr in chunk:
                tr.task_index += start
            trajs.extend(chunk)
        return trajs

    runs = [("greedy", play(1, True), 1)]
    if samples > 0:
        runs.append(("sampled", play(samples, False), samples))
    for name, trajs, k in runs:
        for metric in METRICS:
            values = np.zeros(len(tasks))
            for tr in trajs:
                values[tr.task_index] += float(getattr(tr, metric)) / k
            out[f"{name}_{metric}"] = values
    return out


def compare(results: dict[str, dict[str, np.ndarray]], base: str, bootstrap: int, seed: int) -> list[dict[str, Any]]:
    """One row per (policy, figure): mean, and for policies other than ``base`` the paired difference and its CI."""
    rows = []
    for name, figures in results.items():
        for key, values in figures.items():
            row: dict[str, Any] = {"policy": name, "figure": key, "mean": float(values.mean())}
            if name != base:
                ci = bootstrap_mean_1d(values - results[base][key], rng_for(seed, f"{name}/{key}"), samples=bootstrap)
                row.update(diff=ci["mean"], lo=ci["lo"], hi=ci["hi"])
            rows.append(row)
    return rows


def pooled(results: dict[str, dict[str, np.ndarray]], base: str, arm: str, bootstrap: int,
           seed: int) -> list[dict[str, Any]]:
    """One row per figure for the policies other than ``base`` taken as seeds of one arm: the mean over
    seeds and tasks of their paired differences from ``base``, with a two-level bootstrap interval."""
    others = [name for name in results if name != base]
    if not others:
        raise ValueError("pooling needs at least one policy besides the base")
    rows = []
    for key, base_values in results[base].items():
        diffs = np.stack([results[name][key] - base_values for name in others])  # [seeds, tasks]
        ci = bootstrap_ci(diffs, rng_for(seed, f"pool:{arm}/{key}"), samples=bootstrap)
        mean = float(np.mean([results[name][key].mean() for name in others]))
        rows.append({"policy": f"{arm} ({len(others)} seed{'' if len(others) == 1 else 's'})", "figure": key, "mean": mean,
                     "diff": ci["mean"], "lo": ci["lo"], "hi": ci["hi"], "pooled": others})
    return rows


def markdown(rows: Sequence[dict[str, Any]], base: str, n_tasks: int, samples: int) -> str:
    lines = [f"Paired by task over {n_tasks} tasks (greedy: 1 episode; sampled: {samples} per task); "
             f"difference = policy - `{base}`, 95% bootstrap CI.", "",
             "| policy | figure | mean | difference [95% CI] |", "|---|---|---|---|"]
    for r in rows:
        diff = f"{r['diff']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]" if "diff" in r else "(base)"
        lines.append(f"| `{r['policy']}` | {r['figure']} | {r['mean']:.3f} | {diff} |")
    return "\n".join(lines)


def greedy_flips(results: dict[str, dict[str, np.ndarray]], base: str, tasks: Sequence[Any], config: str,
                 overrides: Sequence[str], limit: int) -> str:
    """For each policy besides ``base``, up to ``limit`` tasks whose greedy success differs from ``base``'s
    (its losses first), with both policies' greedy transcripts of them, decoded."""
    out = []
    for name, figures in results.items():
        if name == base:
            continue
        diff = figures["greedy_success"] - results[base]["greedy_success"]
        lost, won = np.flatnonzero(diff < 0).tolist(), np.flatnonzero(diff > 0).tolist()
        out.append(f"\n### `{name}` against `{base}`: greedy successes lost on {len(lost)} tasks, won on {len(won)}")
        shown = (lost + won)[:limit]
        if not shown:
            continue
        texts = {}
        for policy in (base, name):
            engine = eval_engine(policy, config, 1.0, overrides)
            trajs, _ = engine.run([tasks[i] for i in shown], 1, greedy=True, seed=0)
            texts[policy] = [(t.success, engine.policy.tokenizer.decode(t.transcript.ids)) for t in trajs]
        for k, i in enumerate(shown):
            task = tasks[i]
            out.append(f"\n{task.id} ({task.meta.get('stratum', '?')}): "
                       f"{'lost' if diff[i] < 0 else 'won'} by `{name}`")
            for policy in (base, name):
                ok, text = texts[policy][k]
                out += [f"- `{policy}` ({'success' if ok else 'failure'}):", "", f"    {text}", ""]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("policies", nargs="+", help="policy directories; the first is the base")
    add_split_args(ap, samples=4, samples_help="sampled episodes per task (0: greedy only)",
                   out_help="also write the rows as JSON here")
    ap.add_argument("--bootstrap", type=int, default=5000)
    ap.add_argument("--batch-episodes", type=int, default=0,
                    help="play about this many episodes at a time, to bound memory (e.g. 256; a weak policy's 400 x 4 "
                         "sampled 16-turn episodes in one batch held 5 GB); 0: all in one batch, as RESULTS.md measured")
    ap.add_argument("--pool", metavar="NAME", default="",
                    help="the OTHER policies are seeds of one arm called NAME: add its seed-averaged difference "
                         "from BASE with a two-level (seeds, then tasks) bootstrap interval")
    ap.add_argument("--show-flips", type=int, default=0, metavar="N",
                    help="print up to N tasks per OTHER policy whose greedy success differs from BASE's, with both "
                         "greedy transcripts")
    args = ap.parse_intermixed_args(argv)
    if len(args.policies) < 2:
        ap.error("give a base policy and at least one other to compare with it")
    if args.pool and len(set(args.policies)) < len(args.policies):
        ap.error("--pool: a policy is given twice; each training seed's policy once")
    if args.samples < 0 or args.bootstrap < 1 or args.temperature <= 0 or args.batch_episodes < 0 or args.show_flips < 0:
        ap.error("--samples, --batch-episodes and --show-flips must be >= 0, --bootstrap >= 1 and --temperature > 0")
    torch.set_num_threads(args.threads)
    tasks = split_tasks(args)
    results = {p: per_task(p, tasks, args.config, args.samples, args.temperature, args.seed, args.batch_episodes,
                           args.set) for p in args.policies}
    rows = compare(results, args.policies[0], args.bootstrap, args.seed)
    if args.pool:
        rows += pooled(results, args.policies[0], args.pool, args.bootstrap, args.seed)
    print(markdown(rows, args.policies[0], len(tasks), args.samples))
    if args.show_flips:
        print(greedy_flips(results, args.policies[0], tasks, args.config, args.set, args.show_flips))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    from benchmarks._script import run_script

    run_script(main)
