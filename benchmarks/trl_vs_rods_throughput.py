"""Multi-turn GRPO throughput on a rods env: TRL's ``GRPOTrainer`` through ``rods_gym.integrations.trl`` against
our trainer (``rods train``'s GRPO loop), same tiny model, same tasks, same steps. Needs ``pip install -e ".[trl]"``.

    python benchmarks/trl_vs_rods_throughput.py                 # the figure in benchmarks/RESULTS.md
    python benchmarks/trl_vs_rods_throughput.py --steps 2 --rounds 1 --sft-steps 20   # a smoke run, about a minute
    python benchmarks/trl_vs_rods_throughput.py --model smollm2-135m --config smollm2_cpu --sft-steps 0 \
        --policy-dir runs/smollm/dev_sft_compact/sft_policy --rounds 1 --steps 2 --tasks-per-step 4 --group-size 4 \
        --max-action-tokens 40 --micro-batch 8      # SmolLM2-135M-Instruct (its warm-started copy), the RESULTS.md row

Workload: the default config's job (the embedded 4-layer tiny Llama on the compact view, nothing downloaded),
warm-started by ``--sft-steps`` of SFT on the oracle's demonstrations and saved; each run loads those weights.
``--model`` picks another policy (``smollm2-135m``: SmolLM2-135M-Instruct, ``rods_gym.trainer.models``; with
``--config smollm2_cpu`` for its SFT settings), ``--policy-dir`` a saved policy to start from instead (e.g. a warm
start made by ``rods sft``; then no SFT runs here).
Both trainers draw their tasks from the fixed seeds with the same seed (``data.source=fixed``: the same task
sequence, checked), run ``tasks-per-step`` tasks x G multi-turn episodes per step (at most ``max_turns`` actions of
at most ``max_action_tokens`` tokens, and the env's own step limit; the default job's ``turn_slack`` is off for ours,
temperature 1, no top-k/top-p), and one optimizer step per step over the
whole batch (micro-batches of ``micro_batch`` sequences, gradients accumulated), loss ours ``token`` = TRL ``dapo``,
clip 0.2/0.28, beta 0, one epoch, the same learning rate, fp32, one torch thread, no vLLM. Ours: one batched decode
per turn over all live episodes with a shared-prefix KV cache (``rods_gym.trainer.rollout``). TRL: its
``_generate_single_turn`` (transformers ``generate``) per turn over the live episodes, called by the adapter's
``rollout_func``. Runs alternate ours/TRL (ABBA...) in one process and drop their first ``--warmup`` steps.
Throughput = (generated + trained tokens) / step time; trained tokens are the real (unpadded) prompt + completion
tokens of the step's episodes through forward+backward, counted the same way for both.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Sequence

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402

from rods_gym.task import TaskSpec  # noqa: E402
from rods_gym.trainer.config import TrainConfig, env_kwargs, load_config  # noqa: E402
from rods_gym.trainer.policy import load_policy, save_policy  # noqa: E402
from rods_gym.curricula import FixedSeeds  # noqa: E402
from rods_gym.trainer.tasks import load_tasks  # noqa: E402
from trainer_throughput import LOSSES, load_average, our_steps, summarize, trl_version, wall_intervals, warm_policy  # noqa: E402


def job_config(args: argparse.Namespace) -> TrainConfig:
    """The default job's config with the benchmark's settings, shared by both trainers."""
    return load_config(args.config, [
        f"steps={args.warmup + args.steps}", "time_limit_min=0", "checkpoint_every=0", "tensorboard=false",
        "progress_bar=false", "threads=1", "policy.dtype=float32", "data.source=fixed",
        *([f"policy.model={args.model}"] if args.model else []),
        f"rollout.tasks_per_step={args.tasks_per_step}", f"rollout.group_size={args.group_size}",
        f"rollout.max_turns={args.max_turns}", f"rollout.max_action_tokens={args.max_action_tokens}",
        "rollout.turn_slack=null",  # the TRL adapter bounds episodes by max_turns and the env's step limit only
        "rollout.temperature=1.0", "grpo.beta=0.0", "grpo.aggregation=token",
        "grpo.epochs=1", "grpo.minibatches=1", f"grpo.micro_batch_size={args.micro_batch}", "grpo.scheduler=constant",
        "grpo.warmup_steps=0", "grpo.weight_decay=0.0", "eval.every=0",
    ])


class TaskLog:
    """Wraps a task source and records the task ids of every batch it hands out (TRL's side)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.batches = inner, inner.name, []

    def next_batch(self, step: int, n: int) -> list[TaskSpec]:
        tasks = self.inner.next_batch(step, n)
        self.batches.append([t.id for t in tasks])
        return tasks

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def theirs(cfg: TrainConfig, policy_dir: Path, seeds: Sequence[TaskSpec], out_dir: Path, warmup: int, max_completion: int
           ) -> tuple[list[dict[str, float]], list[list[str]]]:
    with warnings.catch_warnings():  # transformers' deprecation notices about arguments TRL passes
        warnings.filterwarnings("ignore", category=FutureWarning)
        return _theirs(cfg, policy_dir, seeds, out_dir, warmup, max_completion)


def _theirs(cfg: TrainConfig, policy_dir: Path, seeds: Sequence[TaskSpec], out_dir: Path, warmup: int,
            max_completion: int) -> tuple[list[dict[str, float]], list[list[str]]]:
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from rods_gym.integrations.sources import make_source
    from rods_gym.integrations.trl import TRLCurriculum

    torch.set_num_threads(1)
    r, g = cfg.rollout, cfg.grpo
    policy = load_policy(policy_dir, dtype=cfg.policy.dtype)
    source = TaskLog(make_source("fixed", seeds, seed=cfg.seed, group_size=r.group_size))
    curriculum = TRLCurriculum(source, cfg.data.env_id, tasks_per_batch=r.tasks_per_step, group_size=r.group_size,
                               max_turns=r.max_turns, env_kwargs=env_kwargs(cfg))
    acc: dict[str, float] = defaultdict(float)
    records: list[dict[str, float]] = []
    ends: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001, ANN201
            acc.clear()
            acc["t0"] = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001, ANN201
            now = time.perf_counter()
            ends.append(now)
            step = now - acc["t0"]
            records.append({"step_s": step, "gen_s": acc["gen_s"], "env_s": acc["rollout_s"] - acc["gen_s"],
                            "update_s": step - acc["score_s"], "other_s": acc["score_s"] - acc["rollout_s"],
                            "gen_tokens": acc["gen_tokens"], "update_tokens": acc["update_tokens"],
                            "completions": acc["completions"], "reward": acc["reward"] / max(acc["completions"], 1.0),
                            "turns": acc["turns"] / max(acc["completions"], 1.0)})

    n_seq = r.tasks_per_step * r.group_size
    args = GRPOConfig(
        output_dir=str(out_dir), use_cpu=True, report_to="none", save_strategy="no", logging_steps=1,
        disable_tqdm=True, bf16=False, fp16=False, seed=cfg.seed, max_steps=cfg.steps, dataloader_num_workers=0,
        per_device_train_batch_size=g.micro_batch_size, gradient_accumulation_steps=n_seq // g.micro_batch_size,
        num_generations=r.group_size, shuffle_dataset=False, max_completion_length=max_completion,
        generation_kwargs={"max_new_tokens": r.max_action_tokens}, temperature=r.temperature, top_k=0, top_p=1.0,
        use_vllm=False, log_completions=False, mask_truncated_completions=False,
        learning_rate=g.lr, lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch",
        adam_beta1=g.adam_betas[0], adam_beta2=g.adam_betas[1], adam_epsilon=g.adam_eps, weight_decay=g.weight_decay,
        max_grad_norm=g.max_grad_norm, beta=g.beta, epsilon=g.eps_low, epsilon_high=g.eps_high,
        loss_type=LOSSES[g.aggregation], scale_rewards=g.scale_rewards, num_iterations=g.epochs, log_level="error",
    )
    trainer = GRPOTrainer(model=policy.model, args=args, processing_class=policy.tokenizer,
                          train_dataset=curriculum.dataset(args), reward_funcs=curriculum.reward_funcs,
                          rollout_func=curriculum.rollout, callbacks=[curriculum.callback(), Clock()])
    trainer.remove_callback(PrinterCallback)

    def timed(key: str, fn: Callable[..., Any], note: Callable[[Any], None] | None = None) -> Callable[..., Any]:
        def wrapper(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            out = fn(*a, **kw)
            acc[key] += time.perf_counter() - t
            if note is not None:
                note(out)
            return out
        return wrapper

    def note_rollout(out: dict[str, list]) -> None:
        acc["completions"] += len(out["completion_ids"])
        acc["gen_tokens"] += sum(sum(m) for m in out["env_mask"])
        acc["update_tokens"] += sum(len(p) + len(c) for p, c in zip(out["prompt_ids"], out["completion_ids"]))
        acc["reward"] += sum(out["rods_return"])

    def note_generate(out: Any) -> None:
        acc["turns"] += len(out[0])  # one action per live episode per call

    trainer._generate_single_turn = timed("gen_s", trainer._generate_single_turn, note_generate)
    trainer._generate_and_score_completions = timed("score_s", trainer._generate_and_score_completions)
    trainer.rollout_func = timed("rollout_s", trainer.rollout_func, note_rollout)
    trainer.train()
    if len(records) != cfg.steps:
        raise RuntimeError(f"TRL ran {len(records)} steps, expected {cfg.steps}")
    out = records[warmup:]
    for rec, wall in zip(out, wall_intervals(ends, warmup), strict=True):
        rec["wall_s"] = wall
    return out, source.batches


def pct(part: float, whole: float) -> str:
    return f"{part:.2f} ({100 * part / whole:.0f}%)"


def markdown(argv: Sequence[str], args: argparse.Namespace, o: dict[str, float], t: dict[str, float],
             per_round: list[tuple[str, float]], same_tasks: bool, n_params: int, warm_s: float, load_start: str,
             policy_name: str) -> str:
    n_seq = args.tasks_per_step * args.group_size
    rows = [("**total tokens/s** ((generated + trained) / step time)", "total_tok_s", ".0f"),
            ("total tokens/s, wall clock", "total_tok_s_wall", ".0f"),
            ("rollout tokens/s (generated / generation time)", "rollout_tok_s", ".0f"),
            ("update tokens/s (trained / update time)", "update_tok_s", ".0f"),
            ("step time (s)", "step_s", ".2f"), ("- generation (s)", "gen_s", ".2f"),
            ("- env steps + tokenizing observations (s)", "env_s", ".2f"),
            ("- update: forward+backward+optimizer (s)", "update_s", ".2f"), ("- other (s)", "other_s", ".2f"),
            ("generated tokens per step", "gen_tokens", ".0f"), ("trained tokens per step", "update_tokens", ".0f"),
            ("actions per episode", "turns", ".2f"), ("mean reward", "reward", ".3f")]
    lines = ["## Multi-turn GRPO on a rods env: TRL `GRPOTrainer` (rods_gym.integrations.trl) vs ours (issue 42)", "",
             f"- command: `python benchmarks/trl_vs_rods_throughput.py {' '.join(argv)}`".rstrip(),
             f"- date: {_dt.datetime.now().isoformat(timespec='minutes')}",
             f"- machine: {os.cpu_count()}-core CPU ({platform.processor() or platform.machine()}), Python "
             f"{platform.python_version()}, torch {torch.__version__}, trl {trl_version()}, one torch thread; shared "
             f"(load average at start {load_start}, at end {load_average()})",
             f"- policy: {policy_name}, {n_params / 1e6:.2f}M parameters, fp32, "
             + (f"loaded from {args.policy_dir}" if args.policy_dir else
                f"warm-started by {args.sft_steps} SFT steps ({warm_s:.0f} s)") + "; "
             f"{args.tasks_per_step} tasks x G={args.group_size} = {n_seq} episodes per step, "
             f"at most {args.max_turns} actions of {args.max_action_tokens} tokens; {args.rounds} round(s), "
             f"{args.steps} measured steps per run after {args.warmup} warm-up; same task sequence: "
             f"{'yes' if same_tasks else 'NO'}", "",
             f"| figure | ours | TRL {trl_version()} | ours/TRL |", "|---|---|---|---|"]
    for name, key, fmt in rows:
        ratio = o[key] / t[key] if key.endswith("tok_s") else (t[key] / o[key] if key.endswith("_s") and o[key] else None)
        lines.append(f"| {name} | {format(o[key], fmt)} | {format(t[key], fmt)} | "
                     + (f"{ratio:.2f}x |" if ratio is not None else " |"))
    lines += ["", "Time rows: TRL/ours (above 1: ours is faster). TRL's \"other\" is its reward call, advantages and "
              "padding; ours' is the task source and advantages.", "",
              f"**ours/TRL total throughput: {o['total_tok_s'] / t['total_tok_s']:.2f}x.** Per run (total tokens/s, in "
              "run order): " + ", ".join(f"{who} {v:.0f}" for who, v in per_round) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="default")
    ap.add_argument("--model", default=None, help="policy.model (default: the config's; tiny, smollm2-135m, a hub name "
                    "or a local path), warm-started by --sft-steps")
    ap.add_argument("--policy-dir", default=None, help="a saved policy both trainers start from (no SFT here)")
    ap.add_argument("--steps", type=int, default=4, help="measured steps per run")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2, help="runs of each trainer, alternated")
    ap.add_argument("--sft-steps", type=int, default=150)
    ap.add_argument("--tasks-per-step", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-turns", type=int, default=16)
    ap.add_argument("--max-action-tokens", type=int, default=16)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--out", default=None, help="also write the Markdown report here")
    args = ap.parse_args(argv)
    if trl_version() is None:
        raise ValueError("TRL is not installed: pip install -e '.[trl]'")
    if args.warmup < 1 or args.steps < 1 or args.rounds < 1:
        raise ValueError("--warmup, --steps and --rounds must be >= 1")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    torch.set_num_threads(1)
    load_start = load_average()
    cfg = job_config(args)
    # TRL bounds the tokens after the prompt; ours bounds prompt + completion (rollout.max_context)
    max_completion = cfg.rollout.max_context - 128
    seeds = load_tasks(cfg.data.train_split, cfg.data)
    runs: dict[str, list[dict[str, float]]] = {"ours": [], "trl": []}
    per_round: list[tuple[str, float]] = []
    trl_batches: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        t0 = time.perf_counter()
        policy = load_policy(args.policy_dir) if args.policy_dir else warm_policy(cfg, seeds, args.sft_steps)
        warm_s = time.perf_counter() - t0
        n_params = sum(p.numel() for p in policy.model.parameters())
        policy_dir = save_policy(policy, tmp_path / "policy")
        for rnd in range(args.rounds):
            for who in (("ours", "trl") if rnd % 2 == 0 else ("trl", "ours")):
                run_dir = tmp_path / f"{who}-{rnd}"
                if who == "ours":
                    steps = our_steps(cfg, policy_dir, seeds, run_dir, args.warmup)
                else:
                    steps, batches = theirs(cfg, policy_dir, seeds, run_dir, args.warmup, max_completion)
                    trl_batches = trl_batches or batches
                runs[who].extend(steps)
                per_round.append((who, summarize(steps)["total_tok_s"]))
                print(f"round {rnd} {who}: {per_round[-1][1]:.0f} tokens/s", flush=True)
    # ours draws from FixedSeeds(seeds, seed=cfg.seed) too (data.source=fixed): the sequence it serves is this one
    fixed = FixedSeeds(seeds, seed=cfg.seed)
    same_tasks = trl_batches == [[t.id for t in fixed.next_batch(s, args.tasks_per_step)] for s in range(cfg.steps)]
    text = markdown(argv, args, summarize(runs["ours"]), summarize(runs["trl"]), per_round, same_tasks, n_params,
                    warm_s, load_start, cfg.policy.model if not args.policy_dir else f"{cfg.policy.model} (warm start)")
    print(text, flush=True)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    from _script import run_script

    run_script(main)
