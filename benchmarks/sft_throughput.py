"""Warm-start (SFT) throughput on a CPU: fp32 against bf16 autocast (``sft.autocast``).

    python benchmarks/sft_throughput.py --scale cpu      # the figures in benchmarks/RESULTS.md
    python benchmarks/sft_throughput.py --scale smoke    # a few steps, under a minute

The default config's policy (the embedded tiny Llama, built from the config) and batches of the
oracle's demonstrations of fresh tasks drawn like the seeds (``sft.data: sampled``, the main job's
warm-start data), length-grouped as ``train_sft`` draws them. Blocks of ``steps`` optimizer steps
alternate fp32 / bf16 (ABAB...) on the same batches, each block timed after one untimed step, so
the ratio compares blocks measured side by side on a shared machine. Tokens/s counts the padded
tokens through forward+backward. The warm start's quality in bf16 is measured by the main job
(``rods sft sft.autocast=bf16``; RESULTS.md), not here.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import itertools
import os
import platform
import sys
import time
from typing import Sequence

import rods_gym.trainer  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)
import numpy as np
import torch

from rods_gym.envs.build_tasksets import demonstration_tasks
from rods_gym.trainer.config import env_kwargs, load_config
from rods_gym.trainer.policy import make_policy
from rods_gym.trainer.sft import Demo, demo_batches, make_demonstrations, pad_right, sft_loss

SCALES = {"smoke": {"demos": 64, "steps": 3, "rounds": 1}, "cpu": {"demos": 640, "steps": 20, "rounds": 3}}
MODES = ("off", "bf16")


def batches_of(demos: Sequence[Demo], batch_size: int, n: int, pad_id: int, seed: int = 0
               ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The first ``n`` padded batches the warm start would draw (``sft.demo_batches``)."""
    draw = demo_batches(demos, batch_size, np.random.default_rng(seed))
    return [pad_right([d.transcript.ids for d in b], [d.transcript.action_mask for d in b], pad_id)
            for b in itertools.islice(draw, n)]


def time_block(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               batches: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], autocast: str) -> float:
    """Seconds for one optimizer step per batch (after one untimed step on the first batch)."""
    def step(ids: torch.Tensor, attn: torch.Tensor, amask: torch.Tensor) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast == "bf16"):
            loss = sft_loss(model, ids, attn, amask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    step(*batches[0])
    t0 = time.perf_counter()
    for b in batches:
        step(*b)
    return time.perf_counter() - t0


def run(scale: str, config: str = "default", threads: int | None = None) -> dict[str, object]:
    s = SCALES[scale]
    cfg = load_config(config, [])
    n_threads = threads if threads is not None else (cfg.sft.threads or cfg.threads)
    torch.set_num_threads(n_threads)
    policy = make_policy(cfg.policy, "compact", slot_ids=cfg.data.slot_ids)
    tasks = demonstration_tasks(s["demos"], seed=cfg.sft.data_seed, view="compact")
    demos = make_demonstrations(policy, tasks, cfg.data.env_id, env_kwargs(cfg))
    batches = batches_of(demos, cfg.sft.batch_size, s["steps"], policy.pad_id, seed=cfg.seed)
    tokens = sum(int(b[0].numel()) for b in batches)
    model = policy.model
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)  # small: the weights barely move between blocks
    seconds: dict[str, list[float]] = {m: [] for m in MODES}
    for _ in range(s["rounds"]):
        for mode in MODES:
            seconds[mode].append(time_block(model, optimizer, batches, mode))
    per_round = [a / b for a, b in zip(seconds["off"], seconds["bf16"])]
    return {"scale": scale, "threads": n_threads, "steps": s["steps"], "batch_size": cfg.sft.batch_size,
            "padded_tokens_per_block": tokens, "seconds": seconds, "speedup_per_round": per_round,
            "bf16_supported": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())}


def markdown(rep: dict[str, object], argv: Sequence[str]) -> str:
    sec = rep["seconds"]
    assert isinstance(sec, dict)
    tok, steps = int(rep["padded_tokens_per_block"]), int(rep["steps"])  # type: ignore[arg-type]
    lines = [f"Command: `python benchmarks/sft_throughput.py {' '.join(argv)}`  ",
             f"Date: {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}; machine: {platform.platform()}, "
             f"{os.cpu_count()} CPU cores, load {os.getloadavg()[0]:.2f}, torch {torch.__version__}, "
             f"{rep['threads']} thread(s), native bf16 (oneDNN): {rep['bf16_supported']}.",
             "", f"{steps} steps of batch {rep['batch_size']} per block ({tok} padded tokens), blocks alternating.", "",
             "| autocast | s/step (median block) | padded tokens/s |", "|---|---|---|"]
    for mode in MODES:
        med = float(np.median(sec[mode]))
        lines.append(f"| {mode} | {med / steps:.3f} | {tok / med:,.0f} |")
    ratios = ", ".join(f"{r:.2f}" for r in rep["speedup_per_round"])  # type: ignore[union-attr]
    lines += ["", f"bf16 speed-up per round (fp32 time / bf16 time): {ratios}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=sorted(SCALES), default="cpu")
    ap.add_argument("--config", default="default")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: the config's sft.threads)")
    args = ap.parse_args(argv)
    print(markdown(run(args.scale, args.config, args.threads), argv))
    return 0


if __name__ == "__main__":
    from _script import run_script

    run_script(main)
