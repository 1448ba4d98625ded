"""The GRPO training loop (CleanRL style: one function, top to bottom).

Per step: the task source names the step's tasks; every process rolls out G episodes of its
share of them; returns are gathered so the source observes every group (and stays identical
on every process). A dynamic-sampling source (:class:`~.curricula.arms.DynamicSampling`, the
DAPO arm) then gets refill rounds (more tasks, rolled out and observed the same way) and
selects the groups to train on; other sources train on every group. Advantages are computed
within each group; each process trains on the kept groups it rolled out; the policy is updated for
``grpo.epochs`` epochs of ``grpo.minibatches`` optimizer steps, each accumulated over
micro-batches, with gradients averaged across processes by ``accelerate``; metrics go to
JSONL/TensorBoard; checkpoints and evaluations happen on schedule.
"""

from __future__ import annotations

import copy
import math
import shutil
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import gather_object
from tqdm.auto import tqdm

from rods_gym.curricula import DynamicSampling, GroupResult, TaskSource, check_task_source, source_env_options
from rods_gym.task import TaskSpec

from .checkpoint import (check_world_size, finish_checkpoint, latest_checkpoint, load_rank_rng, load_trainer_state,
                         refuse_stale_checkpoints, set_global_rng_state, write_rank_rng)
from .config import TrainConfig, env_kwargs
from .evaluation import evaluate_sets, strip_tokens
from .grpo import Batch, LossSettings, grpo_loss, group_advantages, make_batch, token_logprobs
from .lora import adapters_off, add_adapters, is_adapted, load_adapter
from .master_weights import MasterWeights
from .metrics import MetricsLogger, memory_mb
from .policy import Policy, enable_gradient_checkpointing, load_policy, save_policy
from .rollout import RolloutEngine, RolloutSettings, RolloutStats, Trajectory
from .sft import advance_schedule
from .sources import make_source
from .threads import torch_threads


@dataclass
class LoopResult:
    steps_done: int
    history: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    stopped_by_time: bool = False


def rollout_settings(cfg: TrainConfig) -> RolloutSettings:
    """How training episodes run (``rollout.turn_slack`` budgets actions per task, see RolloutConfig)."""
    r = cfg.rollout
    return RolloutSettings(max_action_tokens=r.max_action_tokens, max_turns=r.max_turns, max_context=r.max_context,
                           temperature=r.temperature, turn_slack=r.turn_slack)


def grpo_loss_settings(cfg: TrainConfig) -> LossSettings:
    """The GRPO loss's settings: clipping, KL weight and aggregation from ``grpo``, at the rollout temperature."""
    g, r = cfg.grpo, cfg.rollout
    return LossSettings(eps_low=g.eps_low, eps_high=g.eps_high, beta=g.beta, aggregation=g.aggregation,
                        temperature=r.temperature, max_len=r.max_action_tokens * r.max_turns)


def eval_settings(cfg: TrainConfig) -> RolloutSettings:
    """How evaluation episodes run: as training, but never with the oracle-derived ``turn_slack`` budget
    (an evaluated policy gets the plain ``max_turns`` limit, whatever the training shaping)."""
    return replace(rollout_settings(cfg), turn_slack=None)


def evaluation_engine(cfg: TrainConfig, policy: Policy) -> RolloutEngine:
    """The engine every evaluation runs in: ``data.env_id``'s plain environment (``env_kwargs``, never a
    source's augmented twin) at the evaluation limits (``eval_settings``)."""
    return RolloutEngine(policy, cfg.data.env_id, eval_settings(cfg), env_kwargs(cfg))


def lr_lambda(cfg: TrainConfig) -> Callable[[int], float]:
    g, total = cfg.grpo, max(cfg.steps, 1)

    def f(step: int) -> float:
        if step < g.warmup_steps:
            return (step + 1) / g.warmup_steps
        frac = min((step - g.warmup_steps) / max(total - g.warmup_steps, 1), 1.0)
        if g.scheduler == "linear":
            return 1.0 - frac
        if g.scheduler == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * frac))
        return 1.0

    return f


@dataclass
class RolloutRound:
    """One round of a step's rollouts: this process's trajectories and every process's groups."""

    groups: list[GroupResult]  # every task's group, in task order (what the source observes)
    light: list[list[Trajectory]]  # every task's trajectories, without token streams
    local: dict[int, list[Trajectory]]  # task index -> this process's trajectories of it (with token streams)
    stats: RolloutStats  # this process's generation/env time and tokens


ROLLOUT_SEED_BLOCK = 100_000  # env reset seeds per (step, round, process)


def rollout_seed(step: int, round_: int, rank: int, world: int, rounds_per_step: int) -> int:
    """The first env reset seed of one process's rollouts in one round of a step (round 0: the
    step's batch, 1..: refills); every (step, round, process) gets its own block of 100,000 seeds."""
    return ((step * rounds_per_step + round_) * world + rank) * ROLLOUT_SEED_BLOCK


def rollout_round(engine: RolloutEngine, source: TaskSource, tasks: Sequence[TaskSpec], group_size: int,
                  accelerator: Accelerator, *, generator: torch.Generator, model: Any, seed: int) -> RolloutRound:
    """``group_size`` rollouts of every task; process ``rank`` runs tasks ``rank, rank + world, ...``
    and the summaries are gathered so every process builds the same groups."""
    rank, world = accelerator.process_index, accelerator.num_processes
    options = [source_env_options(source, t) for t in tasks]
    mine = list(range(rank, len(tasks), world))
    if len(mine) * max(group_size, 1) > ROLLOUT_SEED_BLOCK:
        raise ValueError(f"{len(mine)} tasks x {group_size} rollouts on one process exceed the "
                         f"{ROLLOUT_SEED_BLOCK:,} env reset seeds of a round")
    trajs, stats = [], RolloutStats()
    if mine:
        trajs, stats = engine.run([tasks[i] for i in mine], group_size, generator=generator, seed=seed,
                                  env_options=[options[i] for i in mine], model=model)
    local: dict[int, list[Trajectory]] = {i: [] for i in mine}
    for tr in trajs:
        tr.task_index = mine[tr.task_index]
        local[tr.task_index].append(tr)
    light_trajs = [strip_tokens(tr) for tr in trajs]
    gathered = gather_object(light_trajs) if world > 1 else light_trajs
    by_task: list[list[Trajectory]] = [[] for _ in tasks]
    for tr in gathered:
        by_task[tr.task_index].append(tr)
    groups = [GroupResult(task=tasks[i], returns=tuple(t.ret for t in grp), successes=tuple(t.success for t in grp),
                          env_options=options[i])
              for i, grp in enumerate(by_task)]
    return RolloutRound(groups, by_task, local, stats)


def select_groups(source: Any, rounds: Sequence[RolloutRound]) -> list[int]:
    """Positions (over all rounds' groups, in order) of the groups ``source.select`` keeps."""
    groups = [grp for rnd in rounds for grp in rnd.groups]
    where = {id(grp): j for j, grp in enumerate(groups)}
    chosen = source.select(groups)
    unknown = [grp.task.id for grp in chosen if id(grp) not in where]
    if unknown:
        raise ValueError(f"task source {source.name!r}: select() returned groups it was not given (tasks {unknown})")
    kept = [where[id(grp)] for grp in chosen]
    if len(set(kept)) != len(kept):
        raise ValueError(f"task source {source.name!r}: select() returned a group more than once")
    return kept


def reference_logprobs(ref_model: torch.nn.Module, batch: Batch, micro: int, temperature: float) -> torch.Tensor:
    device = next(ref_model.parameters()).device
    parts = []
    with torch.no_grad():
        for s in range(0, len(batch), micro):
            idx = torch.arange(s, min(s + micro, len(batch)))
            sub = batch.select(idx)
            lp, _ = token_logprobs(ref_model, sub.input_ids.to(device), sub.attention_mask.to(device), temperature)
            full = torch.zeros(len(idx), batch.old_logp.shape[1])
            full[:, : lp.shape[1]] = lp.cpu()
            parts.append(full)
    return torch.cat(parts)


def summed_over_processes(accelerator: Accelerator, values: Sequence[float | torch.Tensor]) -> list[float]:
    """The element-wise sums of ``values`` over every process (this process's own when it runs alone).

    The float32 vector is reduced on the accelerator's device: NCCL, the multi-GPU backend, reduces
    CUDA tensors only (a CPU tensor there fails with "No backend type associated with device type cpu").
    """
    local = torch.tensor([float(v) for v in values], dtype=torch.float32)
    if accelerator.num_processes == 1:
        return local.tolist()
    return accelerator.reduce(local.to(accelerator.device), reduction="sum").cpu().tolist()


def make_reference(cfg: TrainConfig, policy: Policy, run_dir: Path, accelerator: Accelerator,
                   resuming: bool) -> torch.nn.Module | None:
    """The frozen KL reference (``grpo.beta > 0``): the base under LoRA adapters (switched off when used), else
    the policy GRPO starts from, saved as ``run_dir/reference`` by the run that began and loaded from there."""
    if cfg.grpo.beta <= 0:
        return None
    if is_adapted(policy.model):
        return policy.model
    ref_dir = run_dir / "reference"
    if not resuming and accelerator.is_main_process:
        save_policy(policy, ref_dir)
    accelerator.wait_for_everyone()
    if (ref_dir / "config.json").exists():
        ref_model = load_policy(ref_dir, dtype=cfg.policy.dtype).model
    else:  # resumed from checkpoints copied without reference/: the policy handed in is GRPO's start
        if accelerator.is_main_process:
            print(f"note: {ref_dir} is missing; the KL reference is the policy this run starts from "
                  "(its warm start), as when the run began", flush=True)
        ref_model = copy.deepcopy(policy.model)
    ref_model = ref_model.to(policy.device).eval()
    ref_model.requires_grad_(False)
    return ref_model


def grpo_train(cfg: TrainConfig, policy: Policy, seeds: Sequence[TaskSpec], *, run_dir: str | Path,
               accelerator: Accelerator, eval_sets: Mapping[str, Sequence[TaskSpec]] | None = None,
               resume: bool = False, source: TaskSource | None = None, evaluate_last: bool = True) -> LoopResult:
    """GRPO on ``source``'s tasks (by default ``data.source`` over ``seeds``). ``evaluate_last=False``: no
    periodic evaluation (``eval.every``) at the last step, for a caller that evaluates the final policy itself
    (the job's evaluation after GRPO), instead of the same episodes twice."""
    run_dir = Path(run_dir)
    ckpt_root = run_dir / "checkpoints"
    rank, world = accelerator.process_index, accelerator.num_processes
    main = accelerator.is_main_process
    r, g = cfg.rollout, cfg.grpo
    if r.tasks_per_step % world:
        raise ValueError(f"rollout.tasks_per_step={r.tasks_per_step} must be divisible by the number of processes ({world})")
    eval_sets = dict(eval_sets or {})

    # -- state: source, optimizer, scheduler, generator; restored from the latest checkpoint -----
    # on the accelerator's device from the start (a pretrained model without a warm start is still on the CPU
    # here): the sampling generator and the reference model are made on the policy's device
    policy.model.to(accelerator.device)
    if source is None:
        source = make_source(cfg.data.source, cfg, seeds, rng_seed=cfg.seed)  # checked there
    else:
        check_task_source(source)  # a source of your own: what it lacks, before any rollout
    generator = torch.Generator(device=policy.device).manual_seed(cfg.seed * 1_000_003 + rank)
    start_step, history, evals = 0, [], []
    refuse_stale_checkpoints(run_dir, resume=resume)
    ckpt = latest_checkpoint(ckpt_root) if resume else None
    if ckpt is not None:
        check_world_size(ckpt, world)
    if cfg.policy.gradient_checkpointing:
        enable_gradient_checkpointing(policy.model)
    if is_adapted(policy.model) and ckpt is None:
        raise ValueError("grpo_train: the policy already has LoRA adapters and no checkpoint is resumed; pass the plain "
                         "model (rods_gym.trainer.lora.merge_adapters), and lora.rank adds GRPO's own")
    if cfg.lora.rank > 0:  # adapters on the policy GRPO starts from; the base weights stay frozen
        policy.model = add_adapters(policy.model, cfg.lora, seed=cfg.seed)
        if main:
            trains = sum(p.numel() for p in policy.model.parameters() if p.requires_grad)
            total = sum(p.numel() for p in policy.model.parameters())
            print(f"lora: rank-{cfg.lora.rank} adapters on {', '.join(cfg.lora.target_modules)}: {trains:,} of {total:,} "
                  f"parameters train ({trains / total:.1%})", flush=True)
    ref_model = make_reference(cfg, policy, run_dir, accelerator, resuming=ckpt is not None)
    if ckpt is not None and is_adapted(policy.model):
        load_adapter(policy.model, ckpt / "policy")
    elif ckpt is not None:
        policy.model.load_state_dict(load_policy(ckpt / "policy", dtype=cfg.policy.dtype).model.state_dict())
    trainable = [p for p in policy.model.parameters() if p.requires_grad]
    masters = MasterWeights(trainable)  # fp32 copies of a bf16 policy's weights (none for fp32)
    optimizer = torch.optim.AdamW(masters.tensors, lr=g.lr, betas=tuple(g.adam_betas), eps=g.adam_eps,
                                  weight_decay=g.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))
    if ckpt is not None:
        state = load_trainer_state(ckpt)
        optimizer.load_state_dict(state["optimizer"])
        masters.load_state_dict(state.get("master_weights"))
        scheduler.load_state_dict(state["scheduler"])
        source.load_state_dict(state["source"])
        set_global_rng_state(state["global_rng"])
        load_rank_rng(ckpt, rank, generator)
        start_step, history, evals = int(state["step"]), list(state["history"]), list(state["evals"])
        if main and start_step >= cfg.steps:
            print(f"resume: GRPO is already done (checkpoint {ckpt.name}, step {start_step} of {cfg.steps}); nothing "
                  "trains, the evaluation after GRPO runs again (raise steps=N to train on)", flush=True)
        elif main:
            print(f"resume: GRPO continues from checkpoint {ckpt.name} (step {start_step} of {cfg.steps})", flush=True)
    model, optimizer = accelerator.prepare(policy.model, optimizer)
    optimizer.zero_grad(set_to_none=True)
    unwrapped = accelerator.unwrap_model(model)
    engine = RolloutEngine(policy, source_env_id(source, cfg), rollout_settings(cfg), source_env_kwargs(source, cfg))
    # evaluation always uses the plain environment (a source may train on, e.g., an augmented twin)
    same_env = (engine.env_id == cfg.data.env_id and engine.env_kwargs == env_kwargs(cfg)
                and rollout_settings(cfg) == eval_settings(cfg))
    eval_engine = engine if same_env else evaluation_engine(cfg, policy)
    logger = None
    if main:
        # TensorBoard drops what an interrupted run logged past the checkpoint (replayed now; everything when
        # it had none)
        logger = MetricsLogger(run_dir / "metrics.jsonl", run_dir / "tensorboard" if cfg.tensorboard else None,
                               purge_step=start_step + 1)
        logger.rewrite(log_records(history, evals))
    loss_settings = grpo_loss_settings(cfg)

    def save(step: int) -> None:
        tmp = (ckpt_root / f"step-{step:06d}").with_name(f"step-{step:06d}.tmp")
        if main and tmp.exists():  # a killed run's half-written checkpoint (its RNG files may be another world's)
            shutil.rmtree(tmp)
        accelerator.wait_for_everyone()
        write_rank_rng(tmp, rank, generator)
        accelerator.wait_for_everyone()
        if main:
            state = {"step": step, "optimizer": optimizer.state_dict(), "master_weights": masters.state_dict(),
                     "scheduler": scheduler.state_dict(), "source": source.state_dict(), "history": history,
                     "evals": evals, "config": cfg.to_dict(), "world_size": world}
            finish_checkpoint(ckpt_root, step, state, lambda p: save_policy(Policy(unwrapped, policy.tokenizer,
                              policy.eos_id, policy.stop_ids, policy.pad_id, policy.name), p), cfg.keep_checkpoints)
        accelerator.wait_for_everyone()

    # a dynamic-sampling source (DAPO) gets up to max_refill_rounds extra rollout rounds per step
    dynamic = isinstance(source, DynamicSampling)
    refill_rounds = int(source.max_refill_rounds) if dynamic else 0  # type: ignore[attr-defined]

    t_start = time.perf_counter()
    bar = tqdm(total=cfg.steps, initial=start_step, desc="grpo", disable=not (main and cfg.progress_bar),
               dynamic_ncols=True)
    result = LoopResult(steps_done=start_step, history=history, evals=evals)
    for step in range(start_step, cfg.steps):
        if cfg.time_limit_min > 0:
            # every process must stop at the same step
            out_of_time, = summed_over_processes(accelerator, [time.perf_counter() - t_start > 60.0 * cfg.time_limit_min])
            if out_of_time > 0:
                result.stopped_by_time = True
                break
        t0 = time.perf_counter()
        # 1. tasks and rollouts: round 0 is the step's batch; a dynamic-sampling source (DAPO) then asks
        #    for refill rounds. Every process rolls out its share of each round and sees every group.
        rounds: list[RolloutRound] = []
        more = source.next_batch(step, r.tasks_per_step)
        if len(more) != r.tasks_per_step:
            raise ValueError(f"task source {source.name!r} gave {len(more)} tasks for step {step + 1}; "
                             f"next_batch must return rollout.tasks_per_step={r.tasks_per_step}")
        for round_ in range(1 + refill_rounds):
            if round_ > 0:
                more = source.refill(step)  # type: ignore[attr-defined]
                if not more:
                    break
            seed = rollout_seed(step, round_, rank, world, 1 + refill_rounds)
            rnd = rollout_round(engine, source, more, r.group_size, accelerator, generator=generator, model=unwrapped,
                                seed=seed)
            source.observe(step, rnd.groups)
            rounds.append(rnd)

        # 2. the groups to train on: the source's selection (DAPO: informative groups), else all of them.
        #    Each process trains on the kept groups it rolled out, with advantages within each group
        #    computed from the returns the source observed.
        every = [(round_, i) for round_, rnd in enumerate(rounds) for i in range(len(rnd.groups))]
        kept = select_groups(source, rounds) if dynamic else list(range(len(every)))
        mine_ids = [(round_, i) for round_, i in (every[j] for j in kept) if i % world == rank]
        trajs = [tr for round_, i in mine_ids for tr in rounds[round_].local[i]]
        returns = torch.tensor([rounds[round_].groups[i].returns for round_, i in mine_ids], dtype=torch.float32)
        advantages = group_advantages(returns, g.scale_rewards, g.adv_eps).view(-1).tolist() if mine_ids else []

        # 3. the update (skipped, on every process alike, when the source kept no group). A process
        #    with fewer trajectories than minibatches pads with null rows (no generated token: no loss,
        #    no statistics) so that every process runs the same optimizer steps and collectives.
        t1 = time.perf_counter()
        sums = {"tokens": 0.0, "clip_low": 0.0, "clip_high": 0.0, "entropy": 0.0, "kl": 0.0, "kl_old": 0.0,
                "ratio": 0.0}
        losses, grad_norms, update_tokens = [], [], 0.0
        if kept:
            n_null = max(0, g.minibatches - len(trajs))
            batch = make_batch([tr.transcript.ids for tr in trajs] + [[policy.pad_id] * 2] * n_null,
                               [tr.transcript.action_mask for tr in trajs] + [[0, 0]] * n_null,
                               [tr.transcript.logprobs for tr in trajs] + [[0.0, 0.0]] * n_null,
                               advantages + [0.0] * n_null, policy.pad_id)
            real = torch.tensor([1.0] * len(trajs) + [0.0] * n_null)
            update_tokens = float(batch.attention_mask[: len(trajs)].sum()) * g.epochs
            if ref_model is not None:
                with adapters_off(unwrapped) if ref_model is policy.model else nullcontext():
                    batch.ref_logp = reference_logprobs(ref_model, batch, g.micro_batch_size, r.temperature)
            model.train()
            for epoch in range(g.epochs):
                order = np.random.default_rng([cfg.seed, step, epoch]).permutation(len(batch))
                for mb in np.array_split(order, g.minibatches):
                    mb_batch = batch.select(mb)
                    totals = summed_over_processes(accelerator, [mb_batch.action_mask.sum(), real[mb].sum()])
                    n_tokens, n_seqs = totals[0] / world, totals[1] / world
                    if n_tokens == 0.0:  # nothing generated in this minibatch on any process: no loss, no step
                        continue
                    # micro-batches of similar lengths pad little; the global normalizers keep the sum exact
                    by_len = sorted(mb.tolist(), key=lambda i: int(batch.attention_mask[i].sum()))
                    micro = [by_len[s:s + g.micro_batch_size] for s in range(0, len(by_len), g.micro_batch_size)]
                    mb_loss = 0.0
                    for k, idx in enumerate(micro):
                        sync = k == len(micro) - 1
                        with accelerator.no_sync(model) if (world > 1 and not sync) else nullcontext():
                            loss, st = grpo_loss(model, batch.select(idx), loss_settings, n_tokens=n_tokens,
                                                 n_seqs=n_seqs)
                            accelerator.backward(loss)
                        mb_loss += float(loss.detach())
                        for key in sums:
                            sums[key] += st[key]
                    grad_norms.append(masters.step(optimizer, g.max_grad_norm,
                                                   lambda m: accelerator.clip_grad_norm_(model.parameters(), m)))
                    optimizer.zero_grad(set_to_none=True)
                    losses.append(mb_loss)
            model.eval()
        advance_schedule(scheduler)  # also after a step without an update
        t2 = time.perf_counter()

        # 4. metrics (over all processes; rewards over every rollout of the step, refills included)
        record = step_record(accelerator, source, rounds, kept, sums, losses, grad_norms, update_tokens,
                             times=(t0, t1, t2), lr=float(scheduler.get_last_lr()[0]))
        record["step"] = step + 1
        history.append(record)
        if main and logger is not None and (step + 1) % cfg.log_every == 0:
            logger.log(record, step + 1)
        bar.set_postfix(reward=f"{record['reward_mean']:.3f}", success=f"{record['success']:.2f}",
                        s_per_step=f"{record['time_step']:.1f}", refresh=False)
        bar.update(1)

        # 5. periodic evaluation and checkpoint
        if eval_sets and cfg.eval.every and (step + 1) % cfg.eval.every == 0 and (evaluate_last or step + 1 < cfg.steps):
            with torch_threads(cfg.eval.threads):
                res = evaluate_sets(eval_engine, eval_sets, accelerator, cfg.eval.batch_episodes, unwrapped,
                                    cfg.eval.samples, cfg.seed,
                                    progress=f"evaluation at step {step + 1}" if cfg.progress_bar else None)
            evals.append({"step": step + 1, **{k: eval_scalars(v) for k, v in res.items()}})
            if main and logger is not None:
                for rec in eval_records(evals[-1]):
                    logger.log(rec, step + 1, prefix=f"eval_{rec['split']}")
        if cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0:
            save(step + 1)
        result.steps_done = step + 1
    bar.close()
    if result.steps_done > start_step and not (cfg.checkpoint_every and result.steps_done % cfg.checkpoint_every == 0):
        save(result.steps_done)
    if logger is not None:
        logger.close()
    policy.model = unwrapped
    return result


def step_record(accelerator: Accelerator, source: TaskSource, rounds: Sequence[RolloutRound], kept: Sequence[int],
                sums: Mapping[str, float], losses: Sequence[float], grad_norms: Sequence[float], update_tokens: float,
                *, times: tuple[float, float, float], lr: float) -> dict[str, Any]:
    """One step's metrics over all processes: rewards over every rollout of the step (refills included), the
    loss's statistics per trained token, throughput and time, the source's telemetry (``source/...``)."""
    world = accelerator.num_processes
    t0, t1, t2 = times
    rs = [rnd.stats for rnd in rounds]
    local_totals = {**sums, "gen_time": sum(s.gen_time for s in rs), "env_time": sum(s.env_time for s in rs),
                    "gen_tokens": float(sum(s.gen_tokens for s in rs)), "update_tokens": update_tokens,
                    "loss": float(np.mean(losses)) if losses else 0.0,
                    "grad_norm": float(np.mean(grad_norms)) if grad_norms else 0.0}
    tot = dict(zip(local_totals, summed_over_processes(accelerator, list(local_totals.values()))))
    groups = [grp for rnd in rounds for grp in rnd.light]
    all_trajs = [t for grp in groups for t in grp]
    rets = np.array([t.ret for t in all_trajs])
    stds = [float(np.std(gr.returns)) for rnd in rounds for gr in rnd.groups]
    actions = sum(t.turns for t in all_trajs)
    ntok = max(tot["tokens"], 1.0)
    record = {
        "reward_mean": float(rets.mean()), "reward_std": float(rets.std()),
        "zero_std_frac": float(np.mean([s == 0.0 for s in stds])),
        "success": float(np.mean([t.success for t in all_trajs])),
        "progress": float(np.mean([t.progress for t in all_trajs])),
        "turns": float(np.mean([t.turns for t in all_trajs])),
        "tool_error_rate": sum(t.errors for t in all_trajs) / max(actions, 1),
        "truncated": float(np.mean([t.truncated for t in all_trajs])),
        # each process's loss is its share of the global normalizer, so the global loss is their mean
        # (loss and grad_norm are 0 on a step without an update: the source kept no group)
        "loss": tot["loss"] / world, "grad_norm": tot["grad_norm"] / world,
        "kl": tot["kl"] / ntok, "kl_old": tot["kl_old"] / ntok,
        "clip_frac": (tot["clip_low"] + tot["clip_high"]) / ntok, "clip_low": tot["clip_low"] / ntok,
        "clip_high": tot["clip_high"] / ntok, "entropy": tot["entropy"] / ntok, "ratio": tot["ratio"] / ntok,
        "gen_tokens": int(tot["gen_tokens"]),
        "trained_tokens": int(tot["tokens"]),  # the generated tokens the loss covered, over all inner epochs
        "rollout_tokens_per_s": tot["gen_tokens"] / max(tot["gen_time"] / world, 1e-9),
        "update_tokens_per_s": tot["update_tokens"] / max(t2 - t1, 1e-9),
        "tokens_per_s": (tot["gen_tokens"] + tot["update_tokens"]) / max(t2 - t0, 1e-9),
        "time_gen": tot["gen_time"] / world, "time_env": tot["env_time"] / world, "time_update": t2 - t1,
        "time_step": t2 - t0, "lr": lr,
        # episodes: the step's batch (n * G, every arm's budget); rollouts: all generated, refills included
        "episodes": sum(len(grp) for grp in rounds[0].light), "rollouts": len(all_trajs),
        "extra_rollouts": int(getattr(source, "extra_rollouts", 0)),
        "groups": len(groups), "groups_kept": len(kept), "refill_rounds": len(rounds) - 1,
        **memory_mb(accelerator.device),  # the main process's (what a leak would show first)
    }
    record.update({f"source/{k}": float(v) for k, v in source.telemetry().items()})
    return record


def eval_scalars(summary: Mapping[str, Any]) -> dict[str, float]:
    """An evaluation's headline numbers, flat: greedy ``success``, ``progress``, ...; the sampled
    episodes' as ``sampled_success``, ``sampled_progress``, ... (per-depth tables are left out)."""
    out = {k: float(v) for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    sampled = summary.get("sampled")
    if isinstance(sampled, Mapping):
        out.update({f"sampled_{k}": v for k, v in eval_scalars(sampled).items()})
    return out


def source_env_id(source: TaskSource, cfg: TrainConfig) -> str:
    """The env the source asks for (e.g. the augmented twin), else ``data.env_id``."""
    return str(getattr(source, "env_id", None) or cfg.data.env_id)


def source_env_kwargs(source: TaskSource, cfg: TrainConfig) -> dict[str, Any]:
    """The training environments' kwargs: ``env_kwargs``, then the source's own."""
    return {**env_kwargs(cfg), **dict(getattr(source, "env_kwargs", None) or {})}


def eval_records(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The log lines of one entry of ``evals`` (one per split)."""
    return [{"step": entry["step"], "split": k, **v} for k, v in entry.items() if k != "step"]


def log_records(history: Sequence[Mapping[str, Any]], evals: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Training records and evaluation records in step order (what metrics.jsonl holds)."""
    by_step: dict[int, list[dict[str, Any]]] = {}
    for e in evals:
        by_step.setdefault(int(e["step"]), []).extend(eval_records(e))
    out: list[dict[str, Any]] = []
    for rec in history:
        out.append(dict(rec))
        out.extend(by_step.get(int(rec["step"]), []))
    return out
