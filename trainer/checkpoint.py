"""Checkpoints of a GRPO run, written atomically under ``RUN_DIR/checkpoints/step-NNNNNN``.

A checkpoint holds the policy (``policy/``, ``save_pretrained`` format: reloadable by any
tool), and ``trainer_state.pt``: optimizer, scheduler, step, the task source's
``state_dict``, the metrics history, and the RNG states (torch/numpy/python global states
and, per process, the trainer's own ``torch.Generator`` in ``rng-rankR.pt``). It is written
into ``step-NNNNNN.tmp`` and renamed when complete, so a run killed while saving leaves the
previous checkpoint intact.
"""

from __future__ import annotations

import copy
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "trainer_state.pt"


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:06d}"


def latest_checkpoint(root: str | Path) -> Path | None:
    root = Path(root)
    if not root.exists():
        return None
    done = sorted(p for p in root.glob("step-*") if p.is_dir() and not p.name.endswith(".tmp")
                  and (p / STATE_FILE).exists())
    return done[-1] if done else None


def latest_policy(run_dir: str | Path) -> Path | None:
    """A run directory's latest saved policy (a ``save_pretrained`` directory): its newest checkpoint's
    ``policy/``, else its warm start's ``sft_policy/`` (None: neither)."""
    ckpt = latest_checkpoint(Path(run_dir) / "checkpoints")
    candidates = ([ckpt / "policy"] if ckpt is not None else []) + [Path(run_dir) / "sft_policy"]
    return next((c for c in candidates if (c / "config.json").exists()), None)


def policy_dir(path: str | Path) -> Path:
    """A saved policy directory as the user may name it: the directory itself, or a GRPO checkpoint
    (``RUN/checkpoints/step-N``) whose ``policy/`` it holds."""
    p = Path(path).expanduser()
    if not (p / "config.json").exists() and (p / "policy" / "config.json").exists():
        return p / "policy"
    return p


def run_of_policy(path: str | Path) -> Path | None:
    """The run directory a saved policy belongs to (``RUN/sft_policy``, ``RUN/checkpoints/step-N/policy``),
    when it holds the run's ``config.yaml``; None for a policy saved anywhere else."""
    p = policy_dir(path).resolve()
    if p.name == "sft_policy":
        run = p.parent
    elif p.name == "policy" and p.parent.parent.name == "checkpoints":
        run = p.parent.parent.parent
    else:
        return None
    return run if (run / "config.yaml").exists() else None


def refuse_stale_checkpoints(run_dir: str | Path, *, resume: bool) -> None:
    """A new (not resumed) run must not start over an earlier run's checkpoints: they would outlive
    the new ones (pruning keeps the highest step numbers) and a later resume would pick them up."""
    ckpt = latest_checkpoint(Path(run_dir) / "checkpoints")
    if ckpt is not None and not resume:
        raise ValueError(f"{run_dir} holds checkpoints of an earlier run (latest: {ckpt.name}); continue it with "
                         "--resume, or start the new run in another --run-dir")


def global_rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_global_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def write_rank_rng(tmp: Path, rank: int, generator: torch.Generator) -> None:
    tmp.mkdir(parents=True, exist_ok=True)
    torch.save({"generator": generator.get_state()}, tmp / f"rng-rank{rank}.pt")


def finish_checkpoint(root: Path, step: int, state: dict[str, Any], save_model: Any, keep: int) -> Path:
    """Main process: write the policy and trainer state into the tmp dir, rename it, prune old ones."""
    final = step_dir(root, step)
    tmp = final.with_name(final.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    save_model(tmp / "policy")
    torch.save({**state, "global_rng": global_rng_state()}, tmp / STATE_FILE)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    done = sorted(p for p in root.glob("step-*") if p.is_dir() and not p.name.endswith(".tmp"))
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def checkpoint_processes(path: Path) -> int:
    """How many processes wrote the checkpoint at ``path`` (one ``rng-rankR.pt`` each)."""
    return len(list(path.glob("rng-rank*.pt")))


def check_world_size(path: Path, world: int) -> None:
    """A checkpoint resumes only under the number of processes that wrote it: each process's share of
    every step's tasks, and its sampling generator, depend on it."""
    wrote = checkpoint_processes(path)
    if wrote != world:
        how = (f"e.g. accelerate launch --multi_gpu --num_processes {wrote} -m rods_gym.cli train --resume ... "
               "(--multi_gpu is needed on a CPU too)" if wrote > 1 else "rods train --resume ..., in one process")
        raise ValueError(f"checkpoint {path} was written by {wrote} process(es); resume it with {wrote} "
                         f"(this run has {world}): {how}")


def load_trainer_state(path: Path) -> dict[str, Any]:
    return torch.load(path / STATE_FILE, map_location="cpu", weights_only=False)


def load_rank_rng(path: Path, rank: int, generator: torch.Generator) -> None:
    file = path / f"rng-rank{rank}.pt"
    if not file.exists():
        raise FileNotFoundError(f"checkpoint {path} has no RNG state for process {rank}; it was written by a run "
                                "with fewer processes (resume with the same number of processes)")
    generator.set_state(torch.load(file, map_location="cpu", weights_only=False)["generator"])


def check_source_resumes(run_dir: str | Path, source: Any) -> None:
    """Before any work: the task source the config names can take the state of the run's latest GRPO checkpoint
    (the same curriculum with the same options). Otherwise a ``ValueError`` saying so, instead of a failure
    after the warm start and the evaluation before GRPO. A run with no checkpoint yet has nothing to check."""
    ckpt = latest_checkpoint(Path(run_dir) / "checkpoints")
    if ckpt is None or source is None:
        return
    state = load_trainer_state(ckpt)
    saved = state.get("source")
    try:
        copy.deepcopy(source).load_state_dict(saved)
    except (ValueError, KeyError, TypeError) as exc:
        detail = f"its state has no {exc}" if isinstance(exc, KeyError) else str(exc)
        wrote = ((state.get("config") or {}).get("data") or {}).get("source")
        here = getattr(source, "name", None)
        which = (f"the {wrote!r} source's state, and this run names {here!r}" if wrote and here and wrote != here
                 else "the state of another task source or other data.source_options than this run names")
        raise ValueError(f"--resume: checkpoint {ckpt.name} holds {which} ({detail}); resume with the data.source "
                         f"and data.source_options of {Path(run_dir) / 'config.yaml'}") from None

