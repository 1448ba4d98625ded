"""BFCL-V3 multi-turn throughput on one core: the env's steps/s (chat view, reward included) beside the
ground-truth replay, and the RODS tier-0 resampler's variants/s and verified share.

    python benchmarks/bfcl_throughput.py [--scale smoke|cpu] [--json OUT]

- replay, BFCL: the ground truth of every task run through BFCL's own ``execute_multi_turn_func_call``
  (``eval`` of call strings on instances in its module globals), turn by turn: calls/s.
- replay, ours: the same calls on :class:`rods_gym.bfcl.backend.Backend` (a fresh backend per task): calls/s.
- env: ``BFCLMultiTurnEnv`` (unwrapped) replaying recorded oracle actions (each turn's calls as
  ``<tool_call>`` messages, then a reply): parse + execute + observation + the per-turn check against the
  ground truth's backend (the reward) + reset; steps/s and calls/s (episodes include their resets).
- resampler: ``BFCLResampler.resample(task, 2)`` over the train split (decontaminated against test, typed swaps,
  the parent-fails rule): variants/s, verified share (variants kept / candidates replayed), coverage (parents with
  >= 1 variant) and the candidates each check rejected; then the same with the parent-fails rule off (untimed),
  and how many of those variants the parent's own ground truth passes (what the rule removes).

Needs bfcl-eval (``pip install 'rods-gym[bfcl]'``). Every timed part runs with the garbage collector off.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _script import run_script  # noqa: E402


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - start
    finally:
        gc.enable()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", choices=("smoke", "cpu"), default="cpu")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call

    from rods_gym.bfcl.backend import Backend
    from rods_gym.bfcl.data import load_tasks
    from rods_gym.bfcl.env import BFCLMultiTurnEnv
    from rods_gym.bfcl.resample import BFCLResampler
    from rods_gym.bfcl.split import split_tasks

    tasks = list(load_tasks())
    train = split_tasks("train")
    if args.scale == "smoke":
        tasks, train = tasks[::20], train[::20]
    n_calls = sum(len(turn) for t in tasks for turn in t.ground_truth)

    def bfcl_replay() -> None:
        for k, t in enumerate(tasks):
            for turn in t.ground_truth_strings():
                execute_multi_turn_func_call(turn, dict(t.initial_config), list(t.involved_classes), f"bench{k}",
                                             t.id, long_context=t.long_context, is_evaL_run=True)

    def our_replay() -> None:
        for t in tasks:
            b = Backend(t)
            for turn in t.ground_truth:
                b.run(list(turn))

    _, bfcl_s = timed(bfcl_replay)
    _, ours_s = timed(our_replay)

    env = BFCLMultiTurnEnv()
    scripts = []
    for t in tasks:  # the oracle's actions, recorded once
        env.reset(options={"task": t.id})
        actions, done = [], False
        while not done:
            a = env.oracle_action()
            actions.append(a)
            *_, term, trunc, info = env.step(a)
            done = term or trunc
        assert info["success"], t.id
        scripts.append((t, actions))

    def env_replay() -> int:
        steps = 0
        for t, actions in scripts:
            env.reset(options={"task": t})
            for a in actions:
                env.step(a)
            steps += len(actions)
        return steps

    steps, env_s = timed(env_replay)

    resampler = BFCLResampler(avoid=split_tasks("test"))
    rng = np.random.default_rng(0)

    def resample() -> tuple[int, int]:
        made = covered = 0
        for t in train:
            v = resampler.resample(t, 2, rng)
            made += len(v)
            covered += bool(v)
        return made, covered

    (made, covered), res_s = timed(resample)
    stats = resampler.stats()
    from rods_gym.bfcl.scoring import check_transcript

    no_rule = BFCLResampler(avoid=split_tasks("test"), parent_fails=False)
    rng_off = np.random.default_rng(0)
    pairs = [(t, v) for t in train for v in no_rule.resample(t, 2, rng_off)]
    parent_passes = sum(check_transcript(v, t.ground_truth).success for t, v in pairs)
    figures = {
        "scale": args.scale, "tasks": len(tasks), "gt_calls": n_calls,
        "replay_bfcl_calls_per_s": round(n_calls / bfcl_s), "replay_ours_calls_per_s": round(n_calls / ours_s),
        "env_steps_per_s": round(steps / env_s), "env_calls_per_s": round(n_calls / env_s),
        "env_episodes_per_s": round(len(tasks) / env_s, 1), "env_steps": steps,
        "resample_parents": len(train), "resample_variants": made, "resample_variants_per_s": round(made / res_s, 1),
        "resample_candidates": stats.tried, "resample_verified_share": round(stats.verified / max(stats.tried, 1), 3),
        "resample_coverage": round(covered / len(train), 3),
        "resample_rejected": {"duplicate": stats.duplicate, "replay_failed": stats.replay_failed,
                              "parent_passes": stats.parent_passes},
        "resample_typed_spans": f"{stats.typed_slots}/{stats.spans}",
        "resample_rule_off_variants": len(pairs), "resample_rule_off_parent_passes": parent_passes,
        "machine": f"{platform.processor() or platform.machine()}, python {platform.python_version()}",
    }
    print(f"BFCL ground-truth replay ({len(tasks)} tasks, {n_calls} calls): BFCL's executor "
          f"{figures['replay_bfcl_calls_per_s']:,} calls/s; rods_gym.bfcl.Backend {figures['replay_ours_calls_per_s']:,} calls/s")
    print(f"env (chat view, reward included, resets included): {figures['env_steps_per_s']:,} steps/s = "
          f"{figures['env_calls_per_s']:,} calls/s ({figures['env_episodes_per_s']} episodes/s, {steps} steps)")
    print(f"resampler (tier 0, 2 per parent, {len(train)} train parents): {made} variants, "
          f"{figures['resample_variants_per_s']} variants/s, verified share {figures['resample_verified_share']} "
          f"of {stats.tried} candidates, coverage {figures['resample_coverage']} of parents; rejected "
          f"{figures['resample_rejected']}; stated values with a typed kind {figures['resample_typed_spans']}")
    print(f"resampler without the parent-fails rule: {len(pairs)} variants, of which the parent's ground truth "
          f"passes {parent_passes}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    run_script(main)
