"""The whole job behind ``rods train``: policy -> SFT warm start -> evaluation -> GRPO -> evaluation.

Everything lands in ``cfg.run_dir``: ``config.yaml``, ``sft_policy/`` (the warm start),
``sft_checkpoint/`` (while the warm start runs), ``sft_metrics.jsonl``, ``checkpoints/``,
``metrics.jsonl``, ``tensorboard/``, ``eval_before.json``,
``summary.json`` and ``training_curve.png``. With ``resume=True`` finished phases are
skipped and GRPO continues from its latest checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch
from accelerate import Accelerator

import rods_gym  # noqa: F401  (registers the environments)
from rods_gym.curricula import TaskSource
from rods_gym.task import STRATUM_NAMES, TaskSpec, stratum_name

from .checkpoint import latest_checkpoint, latest_policy, refuse_stale_checkpoints
from .messages import note
from .config import TrainConfig, save_config
from .evaluation import evaluate_sets, figures_line, paired_difference
from .loop import LoopResult, eval_scalars, evaluation_engine, grpo_train
from .metrics import MetricsLogger, read_jsonl
from .plots import plot_training_curve
from .lora import add_adapters, is_adapted, merge_adapters
from .policy import Policy, enable_gradient_checkpointing, load_policy, local_model_path, make_policy, save_policy
# the checks before any work (preflight.py) lived here until issue 47: their old import path keeps working
from .preflight import (check_action_tokens, check_chat_template, check_env_difficulty,  # noqa: F401
                        check_lone_launch, check_model_positions, check_policy_for_run, check_prompts_fit,
                        check_view_vocabulary, launched_processes)
from .rollout import RolloutEngine
from .sft import check_demonstrations_fit, demonstrations, env_mode, train_sft
from .sources import make_source
from .threads import torch_threads
from .tasks import load_tasks, spread, using_fallback


def make_accelerator(deterministic: bool = True) -> Accelerator:
    """GPU when there is one; otherwise CPU (``gloo`` when launched with several processes).

    On a GPU, ``deterministic`` turns on deterministic kernels (``deterministic_gpu_kernels``): without
    them two runs with one seed differ (benchmarks/RESULTS.md, "On one GPU")."""
    if deterministic and torch.cuda.is_available():
        deterministic_gpu_kernels()
    return Accelerator(cpu=not torch.cuda.is_available())


def deterministic_gpu_kernels() -> None:
    """Make CUDA repeat itself: torch's deterministic algorithms (embedding and attention backward
    without atomic adds; an op with no deterministic kernel raises, naming itself) and cuBLAS's fixed
    workspace, which torch requires for them (an existing ``CUBLAS_WORKSPACE_CONFIG`` is kept).
    These are process-wide switches; they are never turned off here. cuBLAS reads its workspace setting
    when CUDA starts: in a process that used CUDA before (a notebook) it warns that the setting comes late."""
    if "CUBLAS_WORKSPACE_CONFIG" not in os.environ and torch.cuda.is_initialized():
        warnings.warn("deterministic: CUDA started in this process before CUBLAS_WORKSPACE_CONFIG was set, so cuBLAS "
                      "may not repeat its results; set CUBLAS_WORKSPACE_CONFIG=:4096:8 before the first CUDA use, or "
                      "start a fresh process", stacklevel=3)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


def _print(accelerator: Accelerator, *args: Any) -> None:
    if accelerator.is_main_process:
        print(*args, flush=True)


def curve_points(before: Mapping[str, Any], after: Mapping[str, Any], evals: Sequence[Mapping[str, Any]],
                 steps: int, temperature: float) -> dict[str, list[tuple[int, float]]]:
    """The held-out series of the training-curve figure: greedy success per split (before, every
    periodic evaluation, after) and, where both ends were sampled, sampled success and progress."""
    points: dict[str, list[tuple[int, float]]] = {}
    for split in before:
        points[f"{split} success (greedy)"] = ([(0, before[split]["success"])]
                                               + [(e["step"], e[split]["success"]) for e in evals if split in e]
                                               + [(steps, after[split]["success"])])
        first, last = before[split].get("sampled"), after[split].get("sampled")
        if first and last:
            for metric in ("success", "progress"):
                points[f"{split} {metric} (sampled x{first['samples']}, T={temperature:g})"] = (
                    [(0, first[metric])]
                    + [(e["step"], e[split][f"sampled_{metric}"]) for e in evals if f"sampled_{metric}" in e.get(split, {})]
                    + [(steps, last[metric])])
    return points


def log_before_after(cfg: TrainConfig, run_dir: Path, before: Mapping[str, Any], after: Mapping[str, Any],
                     steps: int) -> None:
    """The evaluations before and after GRPO as eval lines of ``metrics.jsonl`` (``"phase"``: before/after;
    the file is rewritten in step order) and TensorBoard's ``eval_<split>`` charts at step 0 and the last
    step, beside the periodic ones, from a run directory of their own (``tensorboard/before_after``: no
    purge of a resumed GRPO phase touches them, whatever the order TensorBoard reads event files in).
    That directory is written anew each time, so it holds this run's two points only: the before point of a
    warm start from ``rods sft`` or of a job killed before its end included, and no "after" point of an
    earlier, shorter run or of an earlier finish of the same run."""
    def lines(phase: str, step: int, results: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [{"step": step, "split": split, "phase": phase, **eval_scalars(res)} for split, res in results.items()]

    first, last = lines("before", 0, before), lines("after", steps, after)
    path = run_dir / "metrics.jsonl"
    logged = [r for r in read_jsonl(path) if "phase" not in r]
    board = run_dir / "tensorboard" / "before_after"
    if cfg.tensorboard and board.exists():
        shutil.rmtree(board)
    logger = MetricsLogger(path, board if cfg.tensorboard else None)
    logger.rewrite([*first, *logged, *last])
    for rec in first + last:
        logger.log_scalars(rec, rec["step"], prefix=f"eval_{rec['split']}")
    logger.close()


TABLE_KEY = ("success: share of tasks solved; progress: share of a task's required calls made; depth: the longest "
             "chain of calls that each need an earlier call's result")


def stratum_order(name: str) -> tuple[int, str]:
    """Turn types in the order ``STRATUM_NAMES`` lists them (as reports do), others after them by name."""
    known = list(STRATUM_NAMES)
    return (known.index(name) if name in known else len(known), name)


def results_table(before: Mapping[str, Any], after: Mapping[str, Any], temperature: float) -> str:
    """Held-out figures before and after GRPO in words, one row each: greedy success and progress, greedy success
    per depth and per turn type (named as in reports: ``rods_gym.task.stratum_name``), then the sampled
    episodes' success and progress. A figure one side lacks (an ``eval_before.json`` saved before strata were
    reported) shows as nan."""
    def sampled_label(split: str) -> str:
        k = before[split].get("sampled", {}).get("samples", 0)
        return f"sampled, {k} per task at T={temperature:g}"

    rows: list[tuple[str, str, float, float]] = []
    for split in before:
        b, a = before[split], after[split]
        for metric in ("success", "progress"):
            rows.append((split, f"{metric} (greedy)", b[metric], a[metric]))
        # depth keys are ints in a fresh summary and strings once read back from JSON (a resumed run)
        for key, label, order in (("per_depth", "success at depth {} (greedy)", int),
                                  ("per_stratum", "success, {} (greedy)", stratum_order)):
            b_part = {str(k): v for k, v in b.get(key, {}).items()}
            a_part = {str(k): v for k, v in a.get(key, {}).items()}
            for name in sorted(set(b_part) | set(a_part), key=order):
                shown = stratum_name(name) if key == "per_stratum" else name
                rows.append((split, label.format(shown), b_part.get(name, {}).get("success", float("nan")),
                             a_part.get(name, {}).get("success", float("nan"))))
        if "sampled" in b and "sampled" in a:
            for metric in ("success", "progress"):
                rows.append((split, f"{metric} ({sampled_label(split)})", b["sampled"][metric], a["sampled"][metric]))
    width = max(len(r[1]) for r in rows)
    lines = ["", TABLE_KEY, f"{'split':6s} {'figure':{width}s} {'before GRPO':>11s} {'after GRPO':>11s}"]
    lines += [f"{split:6s} {label:{width}s} {x:11.3f} {y:11.3f}" for split, label, x, y in rows]
    return "\n".join(lines)


def verdict_lines(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """after - before, paired by task, with 95% bootstrap intervals over tasks (``evaluation.paired_difference``):
    greedy and sampled success per split, then one verdict line per split on its greedy success."""
    lines = ["", "after - before, paired by task (95% bootstrap interval over the tasks):"]
    verdicts = []
    for split in before:
        pairs = [("greedy", before[split], after[split])]
        if "sampled" in before[split] and "sampled" in after[split]:
            pairs.append(("sampled", before[split]["sampled"], after[split]["sampled"]))
        for kind, b, a in pairs:
            ci = paired_difference(b, a, "success")
            if ci is None:
                lines.append(f"  {split} success ({kind}): no per-task figures to pair (an evaluation saved by an "
                             "older version); run the job again in a new --run-dir")
                continue
            lines.append(f"  {split} success ({kind}): {ci['diff']:+.3f} [{ci['lo']:+.3f}, {ci['hi']:+.3f}] "
                         f"over {ci['tasks']} tasks")
            if kind == "greedy":
                verdicts.append(verdict(split, ci))
    return lines + verdicts


def verdict(split: str, ci: Mapping[str, float]) -> str:
    """One line: did GRPO change held-out greedy success, by the paired interval's sign."""
    figure = f"{ci['diff']:+.3f} [{ci['lo']:+.3f}, {ci['hi']:+.3f}] ({split}, greedy, {ci['tasks']} tasks)"
    if ci["lo"] > 0:
        return f"GRPO improved held-out success by {figure}"
    if ci["hi"] < 0:
        return f"GRPO lowered held-out success by {figure}"
    return f"GRPO did not change held-out success measurably: {figure}"


def artifacts_block(cfg: TrainConfig, run_dir: Path) -> str:
    """What the run wrote that a user reads next, and how to use each."""
    last = latest_checkpoint(run_dir / "checkpoints")
    rows = [("config.yaml", "the run's whole config", f"rods train --run-dir {run_dir} --resume continues it")]
    if (run_dir / "sft_policy" / "config.json").exists():
        rows.append(("sft_policy/", "the warm start's policy", f"rods evaluate --policy {run_dir / 'sft_policy'}"))
    if last is not None:
        policy = last.relative_to(run_dir) / "policy"
        rows.append((f"{policy}/", "the policy after GRPO", f"rods evaluate --policy {run_dir / policy}"))
    rows += [("summary.json", "every figure above, as JSON", ""),
             ("metrics.jsonl", "one line per GRPO step and per evaluation", "")]
    if cfg.tensorboard:
        rows.append(("tensorboard/", "the same, as charts", f"tensorboard --logdir {run_dir / 'tensorboard'}"))
    rows.append(("training_curve.png", "training reward and held-out success per step", ""))
    width = max(len(r[0]) for r in rows)
    what = max(len(r[1]) for r in rows)
    return "\n".join(["", f"what the run wrote ({run_dir}/):"]
                     + [f"  {name:{width}s}  {text:{what}s}  {use}".rstrip() for name, text, use in rows])


def warm_start(cfg: TrainConfig, policy: Policy, seeds: list, accelerator: Accelerator, run_dir: Path,
               resume: bool, log: Callable[..., None]) -> dict[str, Any]:
    """SFT on oracle demonstrations (``sft.data``); saves ``sft_policy/``. Returns its record."""
    sft_dir, ckpt_dir = run_dir / "sft_policy", run_dir / "sft_checkpoint"
    main = accelerator.is_main_process
    if resume and not (sft_dir / "config.json").exists() and latest_checkpoint(run_dir / "checkpoints") is not None:
        log(f"resume: {run_dir} holds GRPO checkpoints but no finished warm start (sft_policy/): it is trained again "
            "(deterministically, as the run trained it) to measure the policy before GRPO; copy sft_policy/ and "
            "eval_before.json with the checkpoints to skip that")
    if resume and (sft_dir / "config.json").exists():
        policy.model.load_state_dict(load_policy(sft_dir, dtype=cfg.policy.dtype).model.state_dict())
        log(f"sft: the warm start is done; its policy is loaded from {sft_dir}")
        return json.loads((run_dir / "sft.json").read_text()) if (run_dir / "sft.json").exists() else {}
    if not resume and main and ckpt_dir.exists():  # a new run's warm start starts over
        shutil.rmtree(ckpt_dir)
    accelerator.wait_for_everyone()
    t0 = time.perf_counter()
    demos = demonstrations(cfg, policy, seeds, progress_bar=cfg.progress_bar and main)
    logger: MetricsLogger | None = None
    resumed_from = 0

    def on_start(restored: Sequence[float]) -> None:
        """Before the first step, with the losses a checkpoint restored ([] when none)."""
        nonlocal logger, resumed_from
        resumed_from = len(restored)
        if resumed_from:
            log(f"sft: resuming the warm start from its step-{resumed_from} checkpoint ({ckpt_dir})")
        if main:  # the loss of every step: sft_metrics.jsonl and TensorBoard's sft/loss (a directory of its own: the
            # GRPO phase's purge on resume must not touch it); steps an interrupted warm start logged past its
            # checkpoint are purged
            logger = MetricsLogger(run_dir / "sft_metrics.jsonl",
                                   run_dir / "tensorboard" / "sft" if cfg.tensorboard else None,
                                   purge_step=resumed_from + 1)
            logger.rewrite([{"step": i + 1, "loss": v} for i, v in enumerate(restored)])

    def on_step(step: int, loss: float) -> None:
        if logger is not None:
            logger.log({"step": step + 1, "loss": loss}, step + 1, prefix="sft")

    if cfg.policy.gradient_checkpointing:
        enable_gradient_checkpointing(policy.model)
    if cfg.lora.sft:  # the warm start trains adapters, merged into the weights when it ends
        policy.model = add_adapters(policy.model, cfg.lora, seed=cfg.seed)
    with torch_threads(cfg.sft.threads):
        losses = train_sft(policy, demos, cfg.sft, seed=cfg.seed, accelerator=accelerator, on_start=on_start,
                           on_step=on_step, checkpoint_dir=ckpt_dir, progress_bar=cfg.progress_bar)
    if is_adapted(policy.model):
        policy.model = merge_adapters(policy.model)
    if logger is not None:
        logger.close()
    record = {"data": cfg.sft.data, "demos": len(demos), "steps": cfg.sft.steps, "final_loss": losses[-1] if losses else None,
              "seconds": time.perf_counter() - t0,
              "demo_tokens": sum(len(d.transcript) for d in demos), "agent_tokens": sum(sum(d.transcript.action_mask) for d in demos),
              "skipped_last_call": sum(d.skipped_last_call for d in demos)}  # the teacher's slips (sft.skip_last_call)
    if resumed_from:
        record["resumed_from_step"] = resumed_from
    if main:
        save_policy(policy, sft_dir)
        (run_dir / "sft.json").write_text(json.dumps(record, indent=2))
        shutil.rmtree(ckpt_dir, ignore_errors=True)  # the finished warm start supersedes its checkpoint
    accelerator.wait_for_everyone()
    slips = record["skipped_last_call"]
    slips = f", {slips} of them ending where the teacher skips the last call" if slips else ""
    log(f"sft: {len(demos)} demonstrations ({cfg.sft.data}){slips}, {cfg.sft.steps} steps, final loss {record['final_loss']:.3f}, "
        f"{record['seconds']:.0f}s")
    return record


EVAL_BEFORE = "eval_before.json"  # the warm start's evaluation, written by rods sft and by the job before GRPO


def job_evaluation(cfg: TrainConfig, engine: RolloutEngine, eval_sets: Mapping[str, Sequence[TaskSpec]],
                   accelerator: Accelerator, samples: int | None = None, *,
                   label: str = "evaluation") -> dict[str, dict[str, Any]]:
    """The job's evaluation of ``engine``'s policy on ``eval.threads``: greedy, plus ``samples`` (default
    ``eval.samples``) episodes per task sampled from the run seed's stream; what rods sft, rods train
    (before and after GRPO) and rods evaluate report. A progress bar named ``label`` unless ``progress_bar=false``."""
    with torch_threads(cfg.eval.threads):
        return evaluate_sets(engine, eval_sets, accelerator, cfg.eval.batch_episodes, engine.policy.model,
                             cfg.eval.samples if samples is None else samples, cfg.seed,
                             progress=label if cfg.progress_bar else None)


def same_evaluation(saved: Mapping[str, Any], eval_sets: Mapping[str, Sequence[TaskSpec]], samples: int,
                    seed: int = 0) -> bool:
    """Whether a saved evaluation (``evaluate_sets``' result) covers ``eval_sets``' splits, as many tasks
    of each (a split's first N, spread) and ``samples`` sampled episodes per task from the stream of ``seed``
    (the run's: a run resumed with another seed samples other episodes after GRPO)."""
    if set(saved) != set(eval_sets):
        return False
    for split, tasks in eval_sets.items():
        res = saved[split]
        sampled = res.get("sampled", {})
        if res.get("episodes") != len(tasks) or sampled.get("samples", 0) != samples:
            return False
        if samples > 0 and sampled.get("seed") != seed:
            return False
    return True


def with_local_model_path(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with a local ``policy.model`` path made absolute (``policy.local_model_path``), as a run saves
    it: a resume from another working directory then loads the same model."""
    return replace(cfg, policy=replace(cfg.policy, model=local_model_path(cfg.policy.model)))


def apply_threads(cfg: TrainConfig) -> None:
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)


@dataclass
class RunInputs:
    """What a run reads before it does any work (``prepare_inputs``)."""

    mode: str  # the environment's view
    seeds: list[TaskSpec]
    eval_sets: dict[str, list[TaskSpec]]
    policy: Policy
    source: TaskSource | None  # the GRPO loop's task source (None where no GRPO follows)


def prepare_inputs(cfg: TrainConfig, *, check_source: bool = True, resume: bool = False) -> RunInputs:
    """The environment's view, the seed and evaluation task sets, the policy and the task source
    (``check_source=False``: none, where no GRPO follows).

    A mistake in any of them (``data.source`` and its options included) raises ``ValueError`` or
    ``OSError`` naming it before the run writes anything or starts its warm start: a ``rollout.max_context``
    beyond the model's positions, and (chat view) a chat template that drops the tools or cannot render
    the view's conversations, included. ``resume``: a ``policy.model`` that cannot be loaded any more (a
    deleted directory, a relative path from elsewhere) is built from the run's own saved policy instead.
    """
    mode = env_mode(cfg.data.env_id)
    seeds = load_tasks(cfg.data.train_split, cfg.data)
    eval_sets = {s: spread(load_tasks(s, cfg.data), cfg.eval.tasks) for s in cfg.eval.splits}
    source = make_source(cfg.data.source, cfg, seeds, cfg.seed) if check_source else None
    policy = make_run_policy(cfg, mode, eval_sets, resume=resume)
    # the embedded policy is built for this view: no vocabulary to check
    check_policy_for_run(cfg, policy, mode, {"train": seeds, **eval_sets}, vocabulary=cfg.policy.model != "tiny")
    if not (resume and (Path(cfg.run_dir) / "sft_policy" / "config.json").exists()):  # a warm start still to train
        check_demonstrations_fit(cfg, policy, seeds)
    return RunInputs(mode, seeds, eval_sets, policy, source)


def make_run_policy(cfg: TrainConfig, mode: str, eval_sets: Mapping[str, Sequence[TaskSpec]], *,
                    resume: bool = False) -> Policy:
    """The run's policy: ``policy.model``'s, or, resumed and that cannot be loaded, the run's own latest saved
    policy (its latest GRPO checkpoint's ``policy/``, else ``sft_policy/``: the same model and tokenizer, whose
    weights the warm start and the GRPO loop replace by their saved ones anyway), with a note saying so.
    Refused (the load error, with why) where the resume still needs the base model's own weights: a warm start
    to train (no ``sft_policy/`` yet), or with ``sft.enabled=false`` an evaluation before GRPO to run again."""
    try:
        return make_policy(cfg.policy, mode, slot_ids=cfg.data.slot_ids)
    except OSError as exc:
        run_dir = Path(cfg.run_dir)
        saved = latest_policy(run_dir) if resume else None
        if saved is None:
            raise
        sft_done = (run_dir / "sft_policy" / "config.json").exists()
        before = run_dir / EVAL_BEFORE
        before_reused = before.exists() and same_evaluation(json.loads(before.read_text()), eval_sets,
                                                            cfg.eval.samples, cfg.seed)
        if cfg.sft.enabled and not sft_done:
            why = "the warm start (no sft_policy/ yet) is trained from the base model"
        elif not cfg.sft.enabled and cfg.lora.rank > 0:
            why = ("with sft.enabled=false and lora.rank > 0 GRPO's adapters sit on the base model's own weights (a saved "
                   "policy holds them merged with the adapters)")
        elif not cfg.sft.enabled and not before_reused:
            why = (f"with sft.enabled=false the evaluation before GRPO runs on the base model ({before} is missing "
                   "or was measured on other tasks or samples)")
        else:
            why = ""
        if why:
            raise FileNotFoundError(f"{exc}; the run's own {saved} cannot stand in for it: {why}") from exc
        policy = load_policy(saved, dtype=cfg.policy.dtype)
        note(f"resume: policy.model {cfg.policy.model} cannot be loaded here ({exc}); the policy is built from the "
              f"run's own {saved} (the same model and tokenizer, with the run's trained weights)")
        return replace(policy, name=cfg.policy.model)


def run_training(cfg: TrainConfig, *, resume: bool = False, inputs: RunInputs | None = None) -> dict[str, Any]:
    """The whole job; ``inputs`` from ``prepare_inputs(cfg)`` (built here when not given)."""
    refuse_stale_checkpoints(cfg.run_dir, resume=resume)  # before the warm start, not after it
    cfg = with_local_model_path(cfg)  # what config.yaml and the checkpoints save
    apply_threads(cfg)
    inputs = inputs if inputs is not None else prepare_inputs(cfg, resume=resume)
    mode, seeds, eval_sets, policy = inputs.mode, inputs.seeds, inputs.eval_sets, inputs.policy
    accelerator = make_accelerator(cfg.deterministic)
    policy.model.to(accelerator.device)  # a GPU's from the start: the evaluation before GRPO runs there too
    log = lambda *a: _print(accelerator, *a)  # noqa: E731
    run_dir = Path(cfg.run_dir)
    log(f"run {cfg.name} in {run_dir}/: env {cfg.data.env_id} ({mode} view), {len(seeds)} seed tasks, eval on "
        + ", ".join(f"{k} ({len(v)} tasks)" for k, v in eval_sets.items()) + f", {accelerator.num_processes} process(es)")
    if not resume and (run_dir / "sft_policy" / "config.json").exists() and cfg.sft.enabled:
        log(f"note: {run_dir / 'sft_policy'} holds a finished warm start; this new run trains its own and replaces "
            "it (--resume reuses it)")
    if accelerator.is_main_process:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, run_dir / "config.yaml")
    t_job = time.perf_counter()
    for split in [cfg.data.train_split, *cfg.eval.splits]:
        if using_fallback(split):
            log(f"note: envs/tasksets/{split}.jsonl is not built; using seeded {cfg.data.fallback_difficulty} "
                "sampler tasks instead")

    n_params = sum(p.numel() for p in policy.model.parameters())
    log(f"policy {policy.name}: {n_params / 1e6:.2f}M parameters, vocabulary {len(policy.tokenizer)}")
    if cfg.sft.enabled and cfg.policy.model != "tiny" and not (run_dir / "sft_policy" / "config.json").exists():
        log(f"note: the warm start trains {cfg.policy.model} further ({cfg.sft.steps} SFT steps at lr {cfg.sft.lr:g}) "
            "before GRPO; for GRPO alone on it, pass sft.enabled=false")
    sft_record = warm_start(cfg, policy, seeds, accelerator, run_dir, resume, log) if cfg.sft.enabled else {}

    engine = evaluation_engine(cfg, policy)
    before_file = run_dir / EVAL_BEFORE
    before = json.loads(before_file.read_text()) if resume and before_file.exists() else None
    if before is not None and not same_evaluation(before, eval_sets, cfg.eval.samples, cfg.seed):
        log(f"resume: {before_file} was measured on other tasks or samples than eval.* and seed now name; the evaluation "
            "before GRPO runs again on the warm start, so before and after compare the same episodes")
        before = None
    if before is None:
        before = job_evaluation(cfg, engine, eval_sets, accelerator, label="evaluation before GRPO")
        if accelerator.is_main_process:
            before_file.write_text(json.dumps(before, indent=2))
    for split, res in before.items():
        log(f"before GRPO: {split} {figures_line(res)}")

    t_grpo = time.perf_counter()
    loop: LoopResult = grpo_train(cfg, policy, seeds, run_dir=run_dir, accelerator=accelerator, eval_sets=eval_sets,
                                  resume=resume, source=inputs.source, evaluate_last=False)
    grpo_seconds = time.perf_counter() - t_grpo
    after = job_evaluation(cfg, engine, eval_sets, accelerator, label="evaluation after GRPO")
    summary = {
        "name": cfg.name, "env_id": cfg.data.env_id, "policy": policy.name, "parameters": n_params,
        "processes": accelerator.num_processes, "sft": sft_record, "grpo_steps": loop.steps_done,
        "grpo_seconds_this_run": grpo_seconds, "stopped_by_time": loop.stopped_by_time,
        # episodes: the steps' batches (n * G each); rollouts: every episode generated, refills and branches included
        "episodes": sum(h["episodes"] for h in loop.history), "rollouts": sum(h.get("rollouts", h["episodes"]) for h in loop.history),
        "before": before, "after": after,
        "job_seconds_this_run": time.perf_counter() - t_job,
    }
    if accelerator.is_main_process:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        log_before_after(cfg, run_dir, before, after, loop.steps_done)
        points = curve_points(before, after, loop.evals, loop.steps_done, cfg.rollout.temperature)
        plot_training_curve(loop.history, points, run_dir / "training_curve.png",
                            title=f"{cfg.name}: {policy.name} on {cfg.data.env_id}")
    log(results_table(before, after, cfg.rollout.temperature))
    extra = summary["rollouts"] - summary["episodes"]
    episodes = f"{summary['episodes']} episodes" + (f" (+{extra} more rolled out: refills or branches)" if extra else "")
    log(f"GRPO: {loop.steps_done} step{'' if loop.steps_done == 1 else 's'}, {episodes}, {grpo_seconds:.0f}s; "
        f"job {summary['job_seconds_this_run']:.0f}s; curve {run_dir / 'training_curve.png'}")
    if loop.stopped_by_time:
        log(f"note: GRPO stopped at step {loop.steps_done} of {cfg.steps}: time_limit_min={cfg.time_limit_min:g} "
            f"(minutes of GRPO this run) ran out; `--resume steps={cfg.steps}` continues it, time_limit_min=0 "
            "lifts the limit")
    if accelerator.is_main_process:
        log(artifacts_block(cfg, run_dir))
    log("\n".join(verdict_lines(before, after)))
    return summary
