"""Trainer throughput on a CPU: rollout and update tokens/s, the step-time breakdown, and the
same single-turn workload through TRL's ``GRPOTrainer``.

    python benchmarks/trainer_throughput.py --scale cpu      # the figures in benchmarks/RESULTS.md
    python benchmarks/trainer_throughput.py --scale smoke    # a few steps, under a minute
    python benchmarks/trainer_throughput.py --scale cpu --no-trl --out /tmp/trainer.md

1. **Multi-turn GRPO** (the default job's workload, ``configs/default.yaml``): the default tiny
   Llama (built from the config, nothing downloaded), warm-started by a short SFT on the seed
   tasks; rollout tokens/s (generated tokens per second of generation), update tokens/s
   (sequence tokens through forward+backward per second of update) and where a step goes.
2. **Single-turn, ours vs TRL** (when ``trl`` is installed): the same weights, prompts (the
   compact env's first observation of the first ``prompts`` train seeds), reward (the env's
   progress after the one generated action), G, prompts per step, micro-batch (one optimizer
   step per step, gradients accumulated), max completion tokens, temperature 1 (no top-k/top-p),
   loss (ours ``token`` = TRL ``dapo``, or ours ``dr_grpo`` = TRL ``dr_grpo``), clip range,
   beta 0 (no reference model), one inner epoch, learning rate, fp32, one torch thread, no vLLM.
   Both stop a completion at the tokenizer's eos. Runs alternate ours/TRL (ABBA...) in one
   process, each from the same saved weights, and drop their first ``warmup`` steps.
   Throughput = (generated + trained tokens) / step time; trained tokens are the real (unpadded)
   prompt + completion tokens through forward+backward, counted the same way for both.

Timings on a shared CPU vary with the load; the report prints the machine, load and date.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import math
import os
import platform
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import rods_gym.trainer  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)
import gymnasium as gym
import numpy as np
import torch
import yaml

from rods_gym.task import TaskSpec
from rods_gym.trainer.config import TrainConfig, env_kwargs, load_config
from rods_gym.trainer.loop import grpo_train
from rods_gym.trainer.pipeline import make_accelerator
from rods_gym.trainer.policy import Policy, load_policy, make_policy, save_policy
from rods_gym.trainer.sft import make_demonstrations, train_sft
from rods_gym.trainer.sources import make_source
from rods_gym.trainer.tasks import load_tasks
from rods_gym.trainer.transcript import ChatCodec

LOSSES = {"token": "dapo", "dr_grpo": "dr_grpo"}  # our grpo.aggregation -> TRL loss_type


@dataclass(frozen=True)
class Scale:
    prompts: int  # distinct prompts: first observations of the first N train seeds
    tasks_per_step: int  # prompts per step
    group_size: int  # G completions per prompt
    max_tokens: int  # max completion tokens
    micro_batch: int  # sequences per forward/backward
    warmup: int  # steps of each run not measured
    steps: int  # measured steps of each run
    rounds: int  # runs of each trainer, alternated ours/TRL
    sft_steps: int  # SFT warm start before measuring (0: the untrained policy)
    multi_steps: int  # measured steps of the multi-turn default job (0: skip it)
    multi_overrides: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.tasks_per_step * self.group_size) % self.micro_batch:
            raise ValueError(f"scale: tasks_per_step*group_size={self.tasks_per_step * self.group_size} must be a "
                             f"multiple of micro_batch={self.micro_batch} (TRL accumulates whole micro-batches)")


SCALES = {name: Scale(**{**d, "multi_overrides": tuple(d.get("multi_overrides", ()))})
          for name, d in yaml.safe_load((Path(__file__).resolve().parent / "configs" /
                                         "trainer_throughput.yaml").read_text()).items()}


def trl_version() -> str | None:
    try:
        import trl
    except ImportError:
        return None
    return str(trl.__version__)


# -- measurements -------------------------------------------------------------------------------

def warm_policy(cfg: TrainConfig, seeds: Sequence[TaskSpec], sft_steps: int) -> Policy:
    """The default tiny policy, optionally warm-started by ``sft_steps`` of SFT on the oracle's demonstrations."""
    policy = make_policy(cfg.policy, "compact", slot_ids=cfg.data.slot_ids)
    if sft_steps > 0:
        demos = make_demonstrations(policy, seeds, cfg.data.env_id, env_kwargs(cfg))
        train_sft(policy, demos, dataclasses.replace(cfg.sft, steps=sft_steps), seed=cfg.seed)
    return policy


class StepClock:
    """Wraps a task source and notes when each step's bookkeeping ends (``telemetry`` is the last call of a step)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.ends: list[float] = []

    def next_batch(self, step: int, n_tasks: int) -> list[TaskSpec]:
        return self.inner.next_batch(step, n_tasks)

    def observe(self, step: int, groups: Sequence[Any]) -> None:
        self.inner.observe(step, groups)

    def telemetry(self) -> dict[str, float]:
        self.ends.append(time.perf_counter())
        return self.inner.telemetry()

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)

    def __getattr__(self, name: str) -> Any:  # env_id, env_kwargs, env_options, extra_rollouts, ...
        if name == "inner":  # not set yet (e.g. while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


def wall_intervals(ends: Sequence[float], warmup: int) -> list[float]:
    """Seconds between consecutive step ends, for the steps after ``warmup`` (step k: end k-1 -> end k)."""
    return [b - a for a, b in zip(ends[warmup - 1:], ends[warmup:])] if warmup >= 1 else []


def our_steps(cfg: TrainConfig, policy_dir: Path, seeds: Sequence[TaskSpec], run_dir: Path, warmup: int) -> list[dict[str, float]]:
    """``grpo_train`` from the saved weights; one record per measured step."""
    torch.set_num_threads(1)
    policy = load_policy(policy_dir, dtype=cfg.policy.dtype)
    source = StepClock(make_source(cfg.data.source, cfg, seeds, rng_seed=cfg.seed))
    history = grpo_train(cfg, policy, seeds, run_dir=run_dir, accelerator=make_accelerator(cfg.deterministic),
                         source=source).history
    measured = history[warmup:]
    walls = wall_intervals(source.ends, warmup)
    if len(walls) != len(measured):
        raise RuntimeError(f"{len(source.ends)} step ends noted for {len(history)} steps")
    out = []
    for h, wall in zip(measured, walls):
        upd_tokens = h["update_tokens_per_s"] * h["time_update"]
        out.append({"step_s": h["time_step"], "wall_s": wall,
                    "gen_s": h["time_gen"], "env_s": h["time_env"], "update_s": h["time_update"],
                    "other_s": h["time_step"] - h["time_gen"] - h["time_env"] - h["time_update"],
                    "gen_tokens": float(h["gen_tokens"]), "update_tokens": upd_tokens,
                    "completions": float(h["episodes"]), "reward": h["reward_mean"], "turns": h["turns"]})
    return out


def trl_steps(cfg: TrainConfig, policy_dir: Path, seeds: Sequence[TaskSpec], out_dir: Path, warmup: int) -> list[dict[str, float]]:
    """The single-turn workload through ``trl.GRPOTrainer`` with ``cfg``'s settings; one record per measured step."""
    with warnings.catch_warnings():  # transformers' deprecation notices about arguments TRL passes
        warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
        return _trl_steps(cfg, policy_dir, seeds, out_dir, warmup)


def _trl_steps(cfg: TrainConfig, policy_dir: Path, seeds: Sequence[TaskSpec], out_dir: Path, warmup: int) -> list[dict[str, float]]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(1)
    r, g = cfg.rollout, cfg.grpo
    policy = load_policy(policy_dir, dtype=cfg.policy.dtype)
    env = gym.make(cfg.data.env_id, **env_kwargs(cfg))
    rows = []
    for i, t in enumerate(seeds):
        obs, _ = env.reset(options={"task": t})
        rows.append({"prompt": [{"role": "user", "content": obs}], "task_index": i})

    def progress_reward(prompts: list, completions: list, task_index: list, **_: Any) -> list[float]:
        out = []
        for comp, i in zip(completions, task_index):
            env.reset(options={"task": seeds[i]})
            _, reward, *_ = env.step(comp[0]["content"].strip())
            out.append(float(reward))
        return out

    acc: dict[str, float] = defaultdict(float)  # the current step's phase times and token counts
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
            score = acc["score_s"]
            records.append({"step_s": step, "gen_s": acc["gen_s"], "env_s": acc["env_s"],
                            "update_s": step - score, "other_s": score - acc["gen_s"] - acc["env_s"],
                            "gen_tokens": acc["gen_tokens"], "update_tokens": acc["update_tokens"],
                            "completions": acc["completions"], "reward": acc["reward"] / max(acc["completions"], 1.0),
                            "turns": 1.0})

    n_seq = r.tasks_per_step * r.group_size
    args = GRPOConfig(
        output_dir=str(out_dir), use_cpu=True, report_to="none", save_strategy="no", logging_steps=cfg.log_every,
        disable_tqdm=True, bf16=False, fp16=False, seed=cfg.seed, max_steps=cfg.steps, dataloader_num_workers=0,
        per_device_train_batch_size=g.micro_batch_size, gradient_accumulation_steps=n_seq // g.micro_batch_size,
        num_generations=r.group_size, max_completion_length=r.max_action_tokens, temperature=r.temperature,
        top_k=0, top_p=1.0, use_vllm=False, log_completions=False, mask_truncated_completions=False,
        learning_rate=g.lr, lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch",
        adam_beta1=g.adam_betas[0], adam_beta2=g.adam_betas[1], adam_epsilon=g.adam_eps, weight_decay=g.weight_decay,
        max_grad_norm=g.max_grad_norm, beta=g.beta, epsilon=g.eps_low, epsilon_high=g.eps_high,
        loss_type=LOSSES[g.aggregation], scale_rewards=g.scale_rewards, num_iterations=g.epochs,
    )
    trainer = GRPOTrainer(model=policy.model, reward_funcs=[progress_reward], args=args,
                          train_dataset=Dataset.from_list(rows), processing_class=policy.tokenizer, callbacks=[Clock()])
    trainer.remove_callback(PrinterCallback)  # logs every step like ours (metrics.jsonl), without printing them
    for hook in ("_generate_single_turn", "_calculate_rewards", "_generate_and_score_completions"):
        if not callable(getattr(trainer, hook, None)):
            raise RuntimeError(f"trl {trl_version()}: GRPOTrainer has no {hook}(); the timing hooks need trl 1.16.x")

    def timed(key: str, fn: Callable[..., Any], note: Callable[[tuple, Any], None] | None = None) -> Callable[..., Any]:
        def wrapper(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            out = fn(*a, **kw)
            acc[key] += time.perf_counter() - t
            if note is not None:
                note(a, out)
            return out
        return wrapper

    def note_generation(a: tuple, out: Any) -> None:
        prompt_ids, completion_ids = a[0], out[0]
        acc["completions"] += len(completion_ids)
        acc["gen_tokens"] += sum(len(c) for c in completion_ids)
        acc["update_tokens"] += sum(len(p) + len(c) for p, c in zip(prompt_ids, completion_ids))

    def note_rewards(a: tuple, out: Any) -> None:
        acc["reward"] += float(out.sum())

    # instance attributes shadow the methods, so the trainer calls these timed wrappers
    trainer._generate_single_turn = timed("gen_s", trainer._generate_single_turn, note_generation)
    trainer._calculate_rewards = timed("env_s", trainer._calculate_rewards, note_rewards)
    trainer._generate_and_score_completions = timed("score_s", trainer._generate_and_score_completions)
    trainer.train()
    if len(records) != cfg.steps:
        raise RuntimeError(f"TRL ran {len(records)} steps, expected {cfg.steps}")
    out = records[warmup:]
    for rec, wall in zip(out, wall_intervals(ends, warmup), strict=True):
        rec["wall_s"] = wall
    return out


def single_turn_config(scale: Scale, config: str, loss: str) -> TrainConfig:
    return load_config(config, [
        f"steps={scale.warmup + scale.steps}", "time_limit_min=0", "checkpoint_every=0", "tensorboard=false",
        "progress_bar=false", "threads=1", "policy.dtype=float32", "data.source=fixed",
        f"rollout.tasks_per_step={scale.tasks_per_step}", f"rollout.group_size={scale.group_size}",
        f"rollout.max_action_tokens={scale.max_tokens}", "rollout.max_turns=1", "rollout.temperature=1.0",
        "grpo.beta=0.0", f"grpo.aggregation={loss}", "grpo.epochs=1", "grpo.minibatches=1",
        f"grpo.micro_batch_size={scale.micro_batch}", "grpo.scheduler=constant", "grpo.warmup_steps=0",
        "grpo.weight_decay=0.0",
    ])


# -- summaries ----------------------------------------------------------------------------------

def summarize(steps: Sequence[dict[str, float]]) -> dict[str, float]:
    """Totals over measured steps -> per-step means and token rates."""
    if not steps:
        raise ValueError("no measured steps (raise --steps above the warm-up)")
    tot = {k: float(sum(s[k] for s in steps)) for k in steps[0]}
    n = len(steps)
    out = {k: tot[k] / n for k in tot}
    out.update({
        "steps": float(n),
        "rollout_tok_s": tot["gen_tokens"] / tot["gen_s"],
        "update_tok_s": tot["update_tokens"] / tot["update_s"],
        "total_tok_s": (tot["gen_tokens"] + tot["update_tokens"]) / tot["step_s"],
        "total_tok_s_wall": (tot["gen_tokens"] + tot["update_tokens"]) / tot["wall_s"],
        "completion_len": tot["gen_tokens"] / tot["completions"],
        "reward": tot["reward"] / n,
    })
    return out


def ratios(ours: dict[str, float], trl: dict[str, float]) -> dict[str, float]:
    """ours / TRL throughput (higher is better for us) and TRL / ours phase times."""
    return {
        "total": ours["total_tok_s"] / trl["total_tok_s"],
        "total_wall": ours["total_tok_s_wall"] / trl["total_tok_s_wall"],
        "rollout": ours["rollout_tok_s"] / trl["rollout_tok_s"],
        "update": ours["update_tok_s"] / trl["update_tok_s"],
        "env_s": trl["env_s"] / ours["env_s"],
        "other_s": trl["other_s"] / ours["other_s"] if ours["other_s"] > 0 else math.inf,
    }


@dataclass
class Report:
    scale: str
    multi: dict[str, float] | None
    ours: dict[str, float]
    trl: dict[str, float] | None
    ratios: dict[str, float] | None
    trl_version: str | None
    trl_note: str
    policy: str
    n_params: int
    sft_steps: int
    warm_s: float
    per_round: list[tuple[str, float]]  # (trainer, total tokens/s) of each run, in run order
    load_start: str = "n/a"

    def round_ratios(self) -> list[float]:
        """ours/TRL total tokens/s within each round (a round runs each trainer once, back to back)."""
        pairs = [dict(self.per_round[i:i + 2]) for i in range(0, len(self.per_round) - 1, 2)]
        return [p["ours"] / p["trl"] for p in pairs if set(p) == {"ours", "trl"}]


def run_benchmark(scale_name: str, *, config: str = "default", loss: str = "token", use_trl: bool = True,
                  sft_steps: int | None = None, multi: bool = True) -> Report:
    scale = SCALES[scale_name]
    if loss not in LOSSES:
        raise ValueError(f"--loss {loss!r}: choose one of {sorted(LOSSES)}")
    torch.set_num_threads(1)
    load_start = load_average()
    version = trl_version() if use_trl else None
    trl_note = ("TRL comparison skipped (--no-trl)." if not use_trl else
                "TRL is not installed (pip install -e '.[bench]'); comparison skipped." if version is None else "")
    base = load_config(config)
    seeds = load_tasks(base.data.train_split, base.data)
    prompts = seeds[:scale.prompts]
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        t0 = time.perf_counter()
        sft_steps = scale.sft_steps if sft_steps is None else sft_steps
        policy = warm_policy(base, seeds, sft_steps)
        warm_s = time.perf_counter() - t0
        policy_dir = save_policy(policy, tmp_path / "policy")
        n_params = sum(p.numel() for p in policy.model.parameters())

        multi_summary = None
        if multi and scale.multi_steps > 0:
            mcfg = load_config(config, [f"steps={scale.warmup + scale.multi_steps}", "time_limit_min=0",
                                        "checkpoint_every=0", "tensorboard=false", "progress_bar=false", "threads=1",
                                        *scale.multi_overrides])
            multi_summary = summarize(our_steps(mcfg, policy_dir, seeds, tmp_path / "multi", scale.warmup))

        single = single_turn_config(scale, config, loss)
        check_same_prompts(policy, single.data.env_id, prompts, env_kwargs(single))
        runs: dict[str, list[dict[str, float]]] = {"ours": [], "trl": []}
        per_round: list[tuple[str, float]] = []
        order = ["ours", "trl"] if version else ["ours"]
        for rnd in range(scale.rounds):
            for who in (order if rnd % 2 == 0 else order[::-1]):  # ABBA: both see the same drift in load
                run_dir = tmp_path / f"{who}-{rnd}"
                fn = our_steps if who == "ours" else trl_steps
                steps = fn(single, policy_dir, prompts, run_dir, scale.warmup)
                if torch.get_num_threads() != 1:
                    raise RuntimeError(f"the {who} run changed torch's thread count to {torch.get_num_threads()}")
                runs[who].extend(steps)
                per_round.append((who, summarize(steps)["total_tok_s"]))
        ours = summarize(runs["ours"])
        theirs = summarize(runs["trl"]) if runs["trl"] else None
    return Report(scale_name, multi_summary, ours, theirs, ratios(ours, theirs) if theirs else None, version,
                  trl_note, policy.name, n_params, sft_steps, warm_s, per_round, load_start)


def check_same_prompts(policy: Policy, env_id: str, tasks: Sequence[TaskSpec],
                       kwargs: dict[str, Any] | None = None) -> None:
    """Our rollout's prompt ids must equal what TRL's ``apply_chat_template`` makes of the same observation."""
    codec, env = ChatCodec(policy), gym.make(env_id, **(kwargs or {}))
    for t in tasks:
        obs, _ = env.reset(options={"task": t})
        conv = [{"role": "user", "content": obs}]
        ours = codec.start(conv, None).ids
        theirs = policy.tokenizer.apply_chat_template([conv], add_generation_prompt=True, tokenize=True,
                                                      return_dict=True)["input_ids"][0]
        if list(theirs) != list(ours):
            raise RuntimeError(f"task {t.id}: prompt ids differ between our codec and apply_chat_template")


# -- report -------------------------------------------------------------------------------------

def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def _pct(part: float, whole: float) -> str:
    return f"{part:.3f} ({100 * part / whole:.0f}%)"


def markdown(rep: Report, argv: Sequence[str], loss: str) -> str:
    s = SCALES[rep.scale]
    lines = [f"## Trainer throughput (issue 4; `--scale {rep.scale}`)", "",
             f"- command: `python benchmarks/trainer_throughput.py {' '.join(argv)}`".rstrip(),
             f"- date: {_dt.datetime.now().isoformat(timespec='minutes')}",
             f"- machine: {os.cpu_count()}-core CPU ({platform.processor() or platform.machine()}), "
             f"Python {platform.python_version()}, torch {torch.__version__}, one torch thread; shared with other jobs "
             f"(1/5/15-min load average at start {rep.load_start}, at end {load_average()}), so compare figures "
             "measured in the same run",
             f"- policy: {rep.policy}, {rep.n_params / 1e6:.2f}M parameters, fp32, "
             + (f"warm-started by {rep.sft_steps} SFT steps ({rep.warm_s:.0f} s)" if rep.sft_steps else "untrained"), ""]
    if rep.multi is not None:
        m = rep.multi
        lines += ["### Multi-turn GRPO (the default config's job)", "",
                  f"{int(m['steps'])} measured steps after {s.warmup} warm-up; mean turns/episode {m['turns']:.1f}, "
                  f"mean reward {m['reward']:.3f}, {m['completions']:.0f} episodes/step"
                  + (f" (overrides: {', '.join(s.multi_overrides)})" if s.multi_overrides else "") + ".", "",
                  "| metric | value |", "|---|---|",
                  f"| rollout tokens/s (generated tokens / generation time) | {m['rollout_tok_s']:.0f} |",
                  f"| update tokens/s (sequence tokens / update time) | {m['update_tok_s']:.0f} |",
                  f"| total tokens/s ((generated + trained) / step time) | {m['total_tok_s']:.0f} |",
                  f"| generated / trained tokens per step | {m['gen_tokens']:.0f} / {m['update_tokens']:.0f} |",
                  f"| step time (s) | {m['step_s']:.3f} |",
                  f"| - generation | {_pct(m['gen_s'], m['step_s'])} |",
                  f"| - environment + tokenizing observations | {_pct(m['env_s'], m['step_s'])} |",
                  f"| - update (batching, forward+backward, optimizer) | {_pct(m['update_s'], m['step_s'])} |",
                  f"| - other (task source, advantages) | {_pct(m['other_s'], m['step_s'])} |", ""]
    o, t = rep.ours, rep.trl
    n_seq = s.tasks_per_step * s.group_size
    lines += ["### Single-turn GRPO: ours vs TRL" if t else "### Single-turn GRPO (ours; TRL not run)", "",
              f"{s.prompts} prompts (first observations of the compact env), {s.tasks_per_step} prompts x G={s.group_size} "
              f"= {n_seq} completions per step, micro-batch {s.micro_batch} ({n_seq // s.micro_batch} accumulated, one "
              f"optimizer step), max {s.max_tokens} completion tokens (both stop at `<eos>`), temperature 1.0, loss "
              f"ours `{loss}` = TRL `{LOSSES[loss]}`, eps 0.2/0.28, beta 0, one epoch, fp32, one thread; "
              f"{s.rounds} run(s) each, alternated, {s.steps} measured steps per run after {s.warmup} warm-up.", ""]
    header = "| figure | ours |" + (f" TRL {rep.trl_version} |" if t else "") + (" ours/TRL |" if t else "")
    lines += [header, "|---|---|" + ("---|---|" if t else "")]

    def row(name: str, key: str, fmt: str, ratio: float | None = None) -> str:
        cells = f"| {name} | {format(o[key], fmt)} |"
        if t:
            cells += f" {format(t[key], fmt)} | " + (f"{ratio:.2f}x |" if ratio is not None else " |")
        return cells

    q = rep.ratios or {}
    lines += [
        row("**total tokens/s** ((generated + trained) / step time)", "total_tok_s", ".0f", q.get("total")),
        row("total tokens/s, wall clock (incl. per-step logging/bookkeeping)", "total_tok_s_wall", ".0f",
            q.get("total_wall")),
        row("rollout tokens/s (generated / generation time)", "rollout_tok_s", ".0f", q.get("rollout")),
        row("update tokens/s (trained / update time)", "update_tok_s", ".0f", q.get("update")),
        row("step time (s)", "step_s", ".3f", t["step_s"] / o["step_s"] if t else None),
        row("- generation (s)", "gen_s", ".3f", t["gen_s"] / o["gen_s"] if t else None),
        row("- env reset+step / reward function (s)", "env_s", ".3f", q.get("env_s")),
        row("- update: forward+backward+optimizer (s)", "update_s", ".3f", t["update_s"] / o["update_s"] if t else None),
        row("- other (s)", "other_s", ".3f", q.get("other_s")),
        row("generated tokens per step", "gen_tokens", ".0f"),
        row("trained tokens per step", "update_tokens", ".0f"),
        row("mean completion length (tokens)", "completion_len", ".2f"),
        row("mean reward", "reward", ".3f"),
    ]
    if t:
        lines += ["", "Time ratios in the step-time rows are TRL/ours (above 1: we are faster). Ours' \"other\" is the "
                  "task source and advantages; TRL's is prompt tokenizing, decoding, padding and advantages (ours "
                  "tokenizes prompts in the env phase)."]
        verdict = "met" if q["total"] >= 1.5 else "**missed**"
        rr = rep.round_ratios()
        lines += ["", f"**ours/TRL total throughput: {q['total']:.2f}x** (target 1.5x: {verdict}); "
                      f"within each round: median {float(np.median(rr)):.2f}x, range {min(rr):.2f}-{max(rr):.2f}x. "
                      f"Per run (total tokens/s, in run order): "
                      + ", ".join(f"{who} {v:.0f}" for who, v in rep.per_round) + "."]
    else:
        lines += ["", rep.trl_note]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=sorted(SCALES), default="cpu")
    ap.add_argument("--config", default="default", help="the training config the policy and multi-turn job come from")
    ap.add_argument("--loss", choices=sorted(LOSSES), default="token",
                    help="our aggregation (token = TRL dapo, dr_grpo = TRL dr_grpo)")
    ap.add_argument("--sft-steps", type=int, default=None, help="warm start steps (default: the scale's)")
    ap.add_argument("--no-trl", action="store_true", help="skip the TRL comparison")
    ap.add_argument("--no-multi", action="store_true", help="skip the multi-turn default job")
    ap.add_argument("--out", default=None, help="also write the Markdown report here")
    args = ap.parse_args(argv)
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()  # "Loading weights" bars of every reload
    rep = run_benchmark(args.scale, config=args.config, loss=args.loss, use_trl=not args.no_trl,
                        sft_steps=args.sft_steps, multi=not args.no_multi)
    text = markdown(rep, argv, args.loss)
    print(text, flush=True)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    from _script import run_script

    run_script(main)
