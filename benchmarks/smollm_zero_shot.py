"""What SmolLM2-135M-Instruct (``policy.model=smollm2-135m``) does before any training, and how fast it decodes.

    python benchmarks/smollm_zero_shot.py --split dev --tasks 30 --samples 1        # the dev comparison of formats
    python benchmarks/smollm_zero_shot.py --split test,ood --tasks 100 --samples 2 --formats compact
    python benchmarks/smollm_zero_shot.py --threads-probe 1,2 --split dev --tasks 16   # 1 vs 2 torch threads, same run
    python benchmarks/smollm_zero_shot.py --threads-probe 1,2 --update-probe --split dev --tasks 8   # also forward+backward

Formats (``FORMATS``): the chat view with the short tool lines of the model's template (``chat-short``, the
default ``TOOL_DOCS``), the chat view with the tools' JSON schemas (``chat-json``), and the compact view.
Per format and split, on ``--tasks`` evenly spaced tasks (``tasks.spread``: every depth and turn type):
greedy and ``--samples`` sampled episodes per task (the trainer's ``RolloutEngine``: batched generation, one KV
cache across turns) at the evaluation limits of ``--config``; success and progress overall, per depth and per
turn type; the first prompt's length; what the first action was (the env's error class for it: ``none`` =
accepted, or why it was rejected; and whether it was a tool call, a question, a reply); and the generation rate
(generated tokens per second of generation, all episodes of a batch decoded together).
``--threads-probe`` plays the same greedy batch with each thread count in turn (ABAB...), in one process;
with ``--update-probe`` it times instead a GRPO loss forward+backward over that batch's episodes (their real
tokens, micro-batches of 4), the update's share of a step.
Machine load (the 1-minute load average) is printed beside every timing: on a shared CPU it moves them.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import rods_gym.trainer  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)
import torch

from rods_gym.renderers.chat import parse_chat_action
from rods_gym.trainer import models
from rods_gym.trainer.config import load_config
from rods_gym.trainer.evaluation import summarize
from rods_gym.trainer.loop import evaluation_engine
from rods_gym.trainer.policy import Policy, load_policy
from rods_gym.trainer.rollout import RolloutEngine, Trajectory
from rods_gym.trainer.tasks import load_tasks, spread

CHAT, COMPACT = "rods/ToolChain-Chat-v0", "rods/ToolChain-Compact-v0"
# format -> (env id, the template's tool docs, limits: an action holds the longest oracle action of the train split,
# 106 chat tokens / 31 compact tokens; the context holds the longest episode of the format)
FORMATS = {"chat-short": (CHAT, "short", ("rollout.max_action_tokens=112", "rollout.max_context=2048")),
           "chat-json": (CHAT, "json", ("rollout.max_action_tokens=112", "rollout.max_context=4096")),
           "compact": (COMPACT, "short", ("rollout.max_action_tokens=40", "rollout.max_context=1024"))}


def format_engine(policy: Policy, fmt: str, args: argparse.Namespace) -> RolloutEngine:
    """The evaluation engine of ``fmt``: its view and limits in ``--config``, the policy's template set to its docs."""
    env_id, docs, limits = FORMATS[fmt]
    policy.tokenizer.chat_template = models.TOOL_DOCS[docs]
    return evaluation_engine(load_config(args.config, [f"data.env_id={env_id}", *limits, *args.set]), policy)


def load_average() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def first_action_kind(engine: RolloutEngine, tr: Trajectory) -> tuple[str, str]:
    """(what the first action was: call / ask / reply / malformed, the env's error class for it) from a fresh
    env reset like the episode's."""
    if not tr.action_spans:
        return "none", "none"
    a, b = tr.action_spans[0]
    text = engine.codec.action_text(tr.transcript.ids[a:b])
    if engine.mode == "chat":
        kind = {"ToolCall": "call", "Ask": "ask", "Reply": "reply"}.get(type(parse_chat_action(text)).__name__, "malformed")
    else:
        head = text.split()[:1]
        kind = head[0] if head and head[0] in ("call", "ask", "reply") else "malformed"
    env = engine.envs[0]
    env.reset(seed=tr.reset_seed, options={"task": tr.task, **tr.env_options})
    _, _, _, _, info = env.step(text)
    return kind, str(info["error"])


def play(engine: RolloutEngine, tasks: Sequence[Any], repeats: int, batch: int, generator: torch.Generator | None
         ) -> tuple[list[Trajectory], float, int]:
    """Episodes of every task (greedy without a generator), ``batch`` episodes per generation batch; returns the
    trajectories, the seconds of generation and the tokens generated."""
    trajs: list[Trajectory] = []
    gen_s, gen_tokens = 0.0, 0
    per = max(1, batch // repeats)
    for start in range(0, len(tasks), per):
        chunk, stats = engine.run(list(tasks[start:start + per]), repeats, greedy=generator is None, seed=start,
                                  generator=generator)
        trajs.extend(chunk)
        gen_s += stats.gen_time
        gen_tokens += stats.gen_tokens
    return trajs, gen_s, gen_tokens


def measure(policy: Policy, fmt: str, split: str, tasks: Sequence[Any], args: argparse.Namespace) -> dict[str, Any]:
    engine = format_engine(policy, fmt, args)
    prompts = [engine.prompt_length(t) for t in tasks]
    load = load_average()
    t0 = time.perf_counter()
    greedy, gen_s, gen_tokens = play(engine, tasks, 1, args.batch, None)
    wall = time.perf_counter() - t0
    first = Counter(first_action_kind(engine, tr) for tr in greedy)
    out: dict[str, Any] = {
        "format": fmt, "split": split, "env_id": engine.env_id, "tasks": len(tasks),
        "limits": dataclasses.asdict(engine.settings), "prompt_tokens_mean": sum(prompts) / len(prompts),
        "prompt_tokens_max": max(prompts), "greedy": summarize(greedy),
        "first_action": {f"{k} / {e}": n / len(greedy) for (k, e), n in first.most_common()},
        "gen_tokens": gen_tokens, "gen_seconds": gen_s, "gen_tokens_per_s": gen_tokens / max(gen_s, 1e-9),
        "wall_seconds": wall, "threads": torch.get_num_threads(), "load_at_start": load, "load_at_end": load_average()}
    if args.samples > 0:
        t0 = time.perf_counter()
        sampled, s_gen, s_tokens = play(engine, tasks, args.samples, args.batch,
                                        torch.Generator().manual_seed(args.seed))
        out["sampled"] = {**summarize(sampled), "samples": args.samples, "temperature": engine.settings.temperature,
                          "gen_tokens_per_s": s_tokens / max(s_gen, 1e-9), "wall_seconds": time.perf_counter() - t0}
    for env in engine.envs:
        env.close()
    return out


def update_seconds(policy: Policy, trajs: Sequence[Trajectory], micro: int = 4) -> tuple[float, int]:
    """Seconds of a GRPO loss forward+backward over ``trajs`` (advantage 1 each, micro-batches of ``micro``
    sequences, gradients dropped after) and the real tokens it covered."""
    from rods_gym.trainer.grpo import LossSettings, grpo_loss, make_batch

    batch = make_batch([t.transcript.ids for t in trajs], [t.transcript.action_mask for t in trajs],
                       [t.transcript.logprobs for t in trajs], [1.0] * len(trajs), policy.pad_id)
    policy.model.train()
    t0 = time.perf_counter()
    for start in range(0, len(batch), micro):
        loss, _ = grpo_loss(policy.model, batch.select(torch.arange(start, min(start + micro, len(batch)))),
                            LossSettings())
        loss.backward()
    seconds = time.perf_counter() - t0
    policy.model.zero_grad(set_to_none=True)
    policy.model.eval()
    return seconds, int(batch.attention_mask.sum())


def threads_probe(policy: Policy, counts: Sequence[int], tasks: Sequence[Any], args: argparse.Namespace,
                  rounds: int = 2) -> list[dict[str, Any]]:
    """The same greedy batch (the first format, the first split's tasks) with each thread count, alternated;
    with ``--update-probe``, the forward+backward over its episodes instead."""
    engine = format_engine(policy, args.formats[0], args)
    trajs = engine.run(list(tasks), 1, greedy=True)[0] if args.update_probe else []
    rows = []
    for rnd in range(rounds):
        for n in (counts if rnd % 2 == 0 else list(reversed(counts))):
            torch.set_num_threads(n)
            load = load_average()
            t0 = time.perf_counter()
            if args.update_probe:
                seconds, tokens = update_seconds(policy, trajs)
                what = "update (forward+backward)"
            else:
                _, seconds, tokens = play(engine, tasks, 1, args.batch, None)
                what = "generated"
            rows.append({"threads": n, "round": rnd, "what": what, "tokens": tokens, "seconds": seconds,
                         "tokens_per_s": tokens / max(seconds, 1e-9), "wall_seconds": time.perf_counter() - t0,
                         "load_at_start": load, "load_at_end": load_average()})
            print(f"threads {n}: {rows[-1]['tokens_per_s']:.1f} {what} tokens/s ({tokens} tokens, "
                  f"{rows[-1]['wall_seconds']:.0f} s, load {load} -> {rows[-1]['load_at_end']})", flush=True)
    return rows


def _pct(res: dict[str, Any], key: str) -> str:
    return "  ".join(f"{k} {v['success']:.2f}" for k, v in res.get(key, {}).items())


def markdown(rows: Sequence[dict[str, Any]], argv: Sequence[str]) -> str:
    lines = ["## SmolLM2-135M-Instruct before training (benchmarks/smollm_zero_shot.py)", "",
             f"- command: `python benchmarks/smollm_zero_shot.py {' '.join(argv)}`".rstrip(),
             f"- date: {_dt.datetime.now().isoformat(timespec='minutes')}; machine: {os.cpu_count()}-core CPU "
             f"({platform.processor() or platform.machine()}), torch {torch.__version__}, shared", "",
             "| format | split | tasks | prompt tokens (mean / max) | greedy success | greedy progress | sampled success "
             "| turns | gen tokens/s (threads, load) | first action: most common |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g, s = r["greedy"], r.get("sampled")
        top = "; ".join(f"{k} {v:.2f}" for k, v in list(r["first_action"].items())[:3])
        lines.append(f"| {r['format']} | {r['split']} | {r['tasks']} | {r['prompt_tokens_mean']:.0f} / {r['prompt_tokens_max']} "
                     f"| {g['success']:.3f} | {g['progress']:.3f} | "
                     + (f"{s['success']:.3f} (x{s['samples']}, T={s['temperature']:g})" if s else "-")
                     + f" | {g['turns']:.1f} | {r['gen_tokens_per_s']:.1f} ({r['threads']}, {r['load_at_start']}) | {top} |")
    lines += ["", "Greedy success per depth and turn type:", ""]
    for r in rows:
        lines.append(f"- {r['format']} {r['split']}: {_pct(r['greedy'], 'per_depth')} | {_pct(r['greedy'], 'per_stratum')}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", default="dev", help="comma-separated splits (dev to choose; test,ood to report)")
    ap.add_argument("--tasks", type=int, default=30, help="tasks per split, evenly spread over depths and turn types")
    ap.add_argument("--formats", default=",".join(FORMATS), help=f"comma-separated, from {', '.join(FORMATS)}")
    ap.add_argument("--samples", type=int, default=1, help="sampled episodes per task (0: greedy only)")
    ap.add_argument("--config", default="smollm2_cpu", help="trainer config whose evaluation limits apply")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config overrides (repeatable)")
    ap.add_argument("--batch", type=int, default=64, help="episodes per generation batch")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--threads-probe", default="", help="comma-separated thread counts to compare (then nothing else)")
    ap.add_argument("--update-probe", action="store_true", help="with --threads-probe: time forward+backward passes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="also write the rows as JSON here (Markdown beside it)")
    args = ap.parse_args(argv)
    args.formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    unknown = sorted(set(args.formats) - set(FORMATS))
    if unknown:
        ap.error(f"--formats: unknown {unknown}; choose from {sorted(FORMATS)}")
    torch.set_num_threads(args.threads)
    policy = load_policy(models.SMOLLM2_135M.name)
    data = load_config(args.config).data
    splits = [s.strip() for s in args.split.split(",") if s.strip()]
    sets = {s: spread(load_tasks(s, data), args.tasks) for s in splits}
    if args.threads_probe:
        rows = threads_probe(policy, [int(n) for n in args.threads_probe.split(",")], sets[splits[0]], args)
        if args.out:
            Path(args.out).write_text(json.dumps(rows, indent=1))
        return 0
    rows = []
    for split, tasks in sets.items():
        for fmt in args.formats:
            rows.append(measure(policy, fmt, split, tasks, args))
            r = rows[-1]
            print(f"{fmt} {split}: greedy success {r['greedy']['success']:.3f} progress {r['greedy']['progress']:.3f}, "
                  f"prompt {r['prompt_tokens_mean']:.0f} tokens, {r['gen_tokens_per_s']:.1f} gen tokens/s, "
                  f"{r['wall_seconds']:.0f} s (load {r['load_at_start']} -> {r['load_at_end']}); first action "
                  + "; ".join(f"{k} {v:.2f}" for k, v in list(r["first_action"].items())[:4]), flush=True)
            if args.out:
                Path(args.out).write_text(json.dumps(rows, indent=1, default=str))
    text = markdown(rows, argv)
    print(text)
    if args.out:
        Path(args.out).with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    from _script import run_script

    run_script(main)
