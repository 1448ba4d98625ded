"""Supervised warm start on oracle demonstrations.

A demonstration is the token stream of an oracle episode built exactly like a rollout
(same chat template, same incremental tokenization, the actions' ids followed by the
end-of-action token), so SFT teaches the format the rollout engine samples. The loss is the
cross-entropy on the agent's tokens only; environment and user tokens are masked out.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from rods_gym.episode import Action, Episode, Reply, ToolCall
from rods_gym.oracle import DONE, oracle_action
from rods_gym.task import TaskSpec

from .config import SFTConfig, TrainConfig, check_demo_chances, env_kwargs
from .generation import no_cache
from .master_weights import MasterWeights
from .policy import Policy
from .rollout import conversation_start, conversation_step
from .transcript import ChatCodec, Transcript

MAX_DEMO_STEPS = 64


@dataclass
class Demo:
    task: TaskSpec
    transcript: Transcript
    success: bool
    skipped_last_call: bool = False  # the teacher said it was done where the oracle makes the last call


SKIP_STREAM = 2  # the third key of a demonstration's skip_last_call draw (kept: the default job's draws)


def done_too_soon(episode: Episode, truth: Action) -> bool:
    """Whether a teacher that skips the last call says it is done instead of ``truth``, the oracle's next action:
    ``truth`` is the last call the task needs, on its last turn, with another of that turn's calls already made
    and no tool or value still withheld."""
    task = episode.task
    last = len(task.turns) - 1
    if not isinstance(truth, ToolCall) or episode.turn != last or episode.locked or episode.pending:
        return False
    return len(episode.todo()) == 1 and any(task.call(cid).turn == last for cid in episode.satisfied)


def make_demonstrations(policy: Policy, tasks: Sequence[TaskSpec], env_id: str,
                        env_kwargs: Mapping[str, Any] | None = None, *, skip_last_call: float = 0.0, seed: int = 0,
                        progress_bar: bool = False) -> list[Demo]:
    """The oracle's episode of every task, as token ids with the agent's tokens marked.

    ``skip_last_call``: the chance, per demonstration whose task needs two or more calls on its last turn,
    that the teacher replies that everything is done where the oracle would make the task's last call
    (``done_too_soon``), ending the demonstration unsolved; drawn from
    ``numpy.random.default_rng([seed, task index, SKIP_STREAM])``.
    """
    check_demo_chances(skip_last_call=skip_last_call)
    codec = ChatCodec(policy)
    env = gym.make(env_id, **dict(env_kwargs or {}))
    demos = []
    for i, task in enumerate(tqdm(tasks, desc="demonstrations", disable=not progress_bar, dynamic_ncols=True)):
        skip = skip_last_call > 0 and np.random.default_rng([seed, i, SKIP_STREAM]).random() < skip_last_call
        obs, info = env.reset(seed=i, options={"task": task})
        messages, tools = conversation_start(env, obs)
        tr = codec.start(messages, tools)
        skipped = False  # a skip ends the episode: a reply on its last turn
        for _ in range(MAX_DEMO_STEPS):
            ep = env.unwrapped.episode
            truth = oracle_action(ep)
            skipped = skip and done_too_soon(ep, truth)
            if skipped:
                truth = Reply(DONE)
            action = env.unwrapped.encode(truth)
            tr.add_action(codec.action_ids(action))
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
            messages, n_new = conversation_step(env, messages, action, obs, info)
            codec.continue_after_action(tr, messages, n_new, tools, stopped=True)
        demos.append(Demo(task, tr, bool(info["success"]), skipped))
    env.close()
    return demos


def oracle_episode(env: gym.Env, seed: int, options: Mapping[str, Any] | None = None) -> Iterator[tuple[Any, Any]]:
    """The oracle's episode on ``env`` from ``reset(seed=seed, options=options)``: per step, the observation
    and the oracle's action on it (stepped once the caller takes the next pair), at most MAX_DEMO_STEPS."""
    obs, _ = env.reset(seed=seed, options=None if options is None else dict(options))
    for _ in range(MAX_DEMO_STEPS):
        action = env.unwrapped.oracle_action()
        yield obs, action
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            return


def demonstration_tasks(cfg: TrainConfig, seeds: Sequence[TaskSpec], mode: str) -> list[TaskSpec]:
    """The tasks the warm start imitates: the first seeds, or fresh tasks drawn like them (``sft.data``)."""
    if cfg.sft.data == "seeds":
        return list(seeds[: cfg.sft.demos])
    from rods_gym.tasksets import demonstration_tasks as fresh

    return fresh(cfg.sft.demos, seed=cfg.sft.data_seed, view=mode)


def demonstrations(cfg: TrainConfig, policy: Policy, seeds: Sequence[TaskSpec], *,
                   progress_bar: bool = False) -> list[Demo]:
    """The oracle demonstrations of the warm start's tasks (``sft.data``), as token ids, those longer than
    ``rollout.max_context`` left out with a warning: the policy never acts past that length in a rollout,
    and a model with learned positions (GPT-2's 1,024) cannot take a longer sequence at all."""
    demos = make_demonstrations(policy, demonstration_tasks(cfg, seeds, env_mode(cfg.data.env_id)), cfg.data.env_id,
                                env_kwargs(cfg), skip_last_call=cfg.sft.skip_last_call, seed=cfg.seed, progress_bar=progress_bar)
    limit = cfg.rollout.max_context
    fit = [d for d in demos if len(d.transcript.ids) <= limit]
    if len(fit) < len(demos):
        longest = max(len(d.transcript.ids) for d in demos)
        what = (f"{len(demos) - len(fit)} of {len(demos)} oracle demonstrations are longer than rollout.max_context="
                f"{limit} tokens (the longest: {longest})")
        if not fit:
            raise ValueError(f"{what}: the warm start has nothing to imitate; {longer_context_hint(cfg, longest)}")
        warnings.warn(f"{what}; the warm start leaves them out", stacklevel=2)
    return fit


def longer_context_hint(cfg: TrainConfig, needed: int) -> str:
    """How to give episodes of ``needed`` tokens room: a longer ``rollout.max_context``, which the embedded
    model's ``policy.max_positions`` must allow too (as ``--config chat_tiny`` sets both), or shorter tasks."""
    size = 1 << max(int(needed) - 1, 1).bit_length()  # the next power of two
    if cfg.policy.model == "tiny":
        return (f"raise rollout.max_context and policy.max_positions together (e.g. rollout.max_context={size} "
                f"policy.max_positions={size}; --config chat_tiny does this for the chat view), or choose shorter tasks")
    return "raise rollout.max_context (up to the model's positions), or choose shorter tasks"


def check_demonstrations_fit(cfg: TrainConfig, policy: Policy, seeds: Sequence[TaskSpec], n: int = 8) -> None:
    """Before any work, on the oracle demonstrations of ``n`` seed tasks spread over the set (the warm start's
    tasks are the seeds or drawn like them): refuse (``ValueError``) a warm start none of whose demonstrations
    would fit ``rollout.max_context``, and warn where most would not (the warm start would leave most of its
    data out), instead of finding out once all of them are built."""
    from .tasks import spread

    if not cfg.sft.enabled or not seeds:
        return
    # the warm start's own tasks where they are cheap to know (the first sft.demos seeds); drawn ones are like the seeds
    pool = demonstration_tasks(cfg, seeds, env_mode(cfg.data.env_id)) if cfg.sft.data == "seeds" else list(seeds)
    if not pool:
        return
    demos = make_demonstrations(policy, spread(pool, n), cfg.data.env_id, env_kwargs(cfg), seed=cfg.seed)
    lengths = [len(d.transcript.ids) for d in demos]
    over = sum(n_ids > cfg.rollout.max_context for n_ids in lengths)
    if not lengths or 2 * over <= len(lengths):
        return
    what = (f"{over} of {len(lengths)} oracle demonstrations of seed tasks spread over the set are longer than "
            f"rollout.max_context={cfg.rollout.max_context} tokens in {cfg.data.env_id!r} (up to {max(lengths)})")
    if over == len(lengths):
        raise ValueError(f"{what}: the warm start would have nothing to imitate; {longer_context_hint(cfg, max(lengths))}")
    warnings.warn(f"{what}: the warm start would leave most of its demonstrations out; "
                  f"{longer_context_hint(cfg, max(lengths))}", stacklevel=2)


def env_mode(env_id: str) -> str:
    """The view (chat, compact, structured) of a registered environment."""
    try:
        env = gym.make(env_id)
    except gym.error.Error as exc:  # an id that is not registered (NameNotFound, VersionNotFound, ...)
        raise ValueError(f"data.env_id {env_id!r}: {exc}") from None
    mode = getattr(env.unwrapped, "mode", None)
    env.close()
    if mode is None:
        raise ValueError(f"environment {env_id!r} is not a rods_gym tool-use environment (rods/ToolChain-*-v0); "
                         "the trainer renders its episodes through their chat/compact views")
    return mode


def sft_loss(model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor, action_mask: torch.Tensor,
             n_tokens: float | None = None) -> torch.Tensor:
    """Cross-entropy of the agent's tokens (``action_mask`` aligned with ``ids``), summed / ``n_tokens``."""
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=positions, **no_cache(model)).logits[:, :-1].float()
    target_mask = action_mask[:, 1:].float()
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
    denom = float(n_tokens) if n_tokens is not None else target_mask.sum().clamp(min=1.0)
    return (nll.view_as(target_mask) * target_mask).sum() / denom


def pad_right(seqs: Sequence[Sequence[int]], masks: Sequence[Sequence[int]], pad_id: int
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    amask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (s, m) in enumerate(zip(seqs, masks)):
        ids[i, : len(s)] = torch.as_tensor(list(s))
        attn[i, : len(s)] = 1
        amask[i, : len(s)] = torch.as_tensor(list(m))
    return ids, attn, amask


def length_grouped_batches(lengths: Sequence[int], batch_size: int, rng: np.random.Generator,
                           mega: int = 8) -> list[list[int]]:
    """One epoch of batches (popped from the end): shuffled, then sorted by length inside
    mega-batches of ``mega`` batches so each batch pads little (like HF's ``group_by_length``)."""
    order = rng.permutation(len(lengths))
    batches: list[list[int]] = []
    span = batch_size * mega
    for start in range(0, len(order), span):
        chunk = sorted(order[start:start + span].tolist(), key=lambda i: lengths[i])
        batches += [chunk[k:k + batch_size] for k in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def demo_batches(demos: Sequence[Demo], batch_size: int, rng: np.random.Generator) -> Iterator[list[Demo]]:
    """Minibatches of ``demos`` without end, epoch after epoch of ``length_grouped_batches``."""
    lengths = [len(d.transcript) for d in demos]
    while True:
        batches = length_grouped_batches(lengths, batch_size, rng)
        while batches:
            yield [demos[i] for i in batches.pop()]


def warmup_cosine(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    span = max(total - warmup, 1)
    return 0.5 * (1.0 + math.cos(math.pi * min(step - warmup, span) / span))


def advance_schedule(scheduler: torch.optim.lr_scheduler.LRScheduler) -> None:
    """``scheduler.step()``, also after an optimizer step that did not happen (a GRPO step without an update):
    the schedule follows the training steps, not the optimizer's."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step", category=UserWarning)
        scheduler.step()


SFT_STATE = "sft_state.pt"
SFT_SETTINGS = "settings.json"  # the settings a checkpoint was made with, readable without loading it
UNTRACKED = ("enabled", "threads", "checkpoint_every")  # SFTConfig fields that leave the trained weights as they are


def sft_settings(cfg: SFTConfig, seed: int) -> dict[str, Any]:
    """What a warm start's weights depend on: its config (but threads and checkpointing) and the run's seed."""
    return {**{k: v for k, v in dataclasses.asdict(cfg).items() if k not in UNTRACKED}, "seed": seed}


def check_sft_checkpoint(path: str | Path, settings: Mapping[str, Any]) -> None:
    """A warm start's checkpoint in ``path`` must have been made with ``settings`` (``sft_settings``, each
    key compared): it is continued only by the warm start it belongs to. Nothing to check when there is none."""
    file = Path(path) / SFT_SETTINGS
    if not file.exists():
        return
    saved = json.loads(file.read_text())
    # a field added since the checkpoint was made reads as its default, with which that warm start ran
    known = {**dataclasses.asdict(SFTConfig()), **saved}
    differ = {k: (known.get(k), v) for k, v in settings.items() if known.get(k) != v}
    if differ:
        named = "; ".join(f"{k if k in ('seed', 'demonstrations') else 'sft.' + k}: {a!r} there, {b!r} now"
                          for k, (a, b) in differ.items())
        raise ValueError(f"the warm start's checkpoint in {path} belongs to another warm start ({named}); "
                         "restore those settings to resume it, or delete it to start the warm start over")


def load_sft_checkpoint(path: Path) -> dict[str, Any] | None:
    """The warm start's checkpoint in ``path`` (``train_sft``'s ``checkpoint_dir``), or None."""
    file = Path(path) / SFT_STATE
    return torch.load(file, map_location="cpu", weights_only=False) if file.exists() else None


def _save_sft_checkpoint(path: Path, state: dict[str, Any], settings: Mapping[str, Any]) -> None:
    """Written to a temporary file and renamed, so a run killed while saving keeps the previous one."""
    path.mkdir(parents=True, exist_ok=True)
    (path / SFT_SETTINGS).write_text(json.dumps(dict(settings), indent=2))
    tmp = path / (SFT_STATE + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path / SFT_STATE)


def train_sft(policy: Policy, demos: Sequence[Demo], cfg: SFTConfig, *, seed: int = 0, accelerator: Any = None,
              on_start: Callable[[list[float]], None] | None = None, on_step: Callable[[int, float], None] | None = None,
              checkpoint_dir: str | Path | None = None, progress_bar: bool = False) -> list[float]:
    """``cfg.steps`` AdamW steps on minibatches drawn epoch-wise from ``demos``; returns the losses.

    With an ``accelerate.Accelerator`` over several processes, each process takes its share of
    every minibatch and gradients are averaged.

    ``checkpoint_dir``: every ``cfg.checkpoint_every`` steps the model, optimizer, scheduler, step
    and losses are saved there (``sft_state.pt``, by the main process); a checkpoint found there
    when training starts is continued from, the draw of minibatches replayed to its step, so a
    killed warm start resumes to the weights an uninterrupted one reaches. ``on_start(losses)`` is
    called once before the first step with the losses a checkpoint restored ([] when none), and
    ``on_step(step, loss)`` after every step trained here.
    """
    if not demos:
        raise ValueError("SFT needs at least one demonstration")
    rank = accelerator.process_index if accelerator is not None else 0
    world = accelerator.num_processes if accelerator is not None else 1
    main = accelerator.is_main_process if accelerator is not None else True
    model = policy.model
    draw = demo_batches(demos, cfg.batch_size, np.random.default_rng(seed))
    losses: list[float] = []
    settings = {**sft_settings(cfg, seed), "demonstrations": len(demos)}
    if checkpoint_dir is not None:
        check_sft_checkpoint(checkpoint_dir, settings)
    saved = load_sft_checkpoint(Path(checkpoint_dir)) if checkpoint_dir is not None else None
    if saved is not None:
        model.load_state_dict(saved["model"])
    # fp32 copies of a bf16 policy's weights (none for fp32); only what trains (the adapters under LoRA)
    masters = MasterWeights([p for p in model.parameters() if p.requires_grad])
    optimizer = torch.optim.AdamW(masters.tensors, lr=cfg.lr, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_cosine(s, cfg.warmup_steps, cfg.steps))
    if saved is not None:
        masters.load_state_dict(saved.get("master_weights"))
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        losses = list(saved["losses"])
        for _ in range(saved["step"]):  # the minibatches already trained on
            next(draw)
    start = len(losses)
    if on_start is not None:
        on_start(list(losses))
    if accelerator is not None:  # the scheduler is not prepared: accelerate's wrapper steps it once per process
        model, optimizer = accelerator.prepare(model, optimizer)
    device = next(model.parameters()).device
    bar = tqdm(total=cfg.steps, initial=start, desc="sft", disable=not (progress_bar and main), dynamic_ncols=True)
    model.train()
    for step in range(start, cfg.steps):
        batch = next(draw)
        mine = batch[rank::world]
        ids, attn, amask = pad_right([d.transcript.ids for d in mine], [d.transcript.action_mask for d in mine],
                                     policy.pad_id)
        total = sum(sum(d.transcript.action_mask) for d in batch) / world  # DDP averages: global token mean
        loss = sft_loss(model, ids.to(device), attn.to(device), amask.to(device), n_tokens=total)
        optimizer.zero_grad(set_to_none=True)
        if accelerator is not None:
            accelerator.backward(loss)
            masters.step(optimizer, cfg.max_grad_norm, lambda m: accelerator.clip_grad_norm_(model.parameters(), m))
        else:
            loss.backward()
            masters.step(optimizer, cfg.max_grad_norm)
        advance_schedule(scheduler)
        # each process's loss is its tokens' sum over 1/world of the global token count: the global loss is their mean
        value = float(accelerator.reduce(loss.detach(), reduction="mean")) if world > 1 else float(loss.detach())
        losses.append(value)
        if on_step is not None:
            on_step(step, value)
        bar.set_postfix(loss=f"{value:.3f}", refresh=False)
        bar.update(1)
        done = step + 1
        if checkpoint_dir is not None and cfg.checkpoint_every and done % cfg.checkpoint_every == 0 and done < cfg.steps:
            if main:
                inner = accelerator.unwrap_model(model) if accelerator is not None else model
                _save_sft_checkpoint(Path(checkpoint_dir), {
                    "step": done, "losses": losses, "model": inner.state_dict(), "optimizer": optimizer.state_dict(),
                    "master_weights": masters.state_dict(), "scheduler": scheduler.state_dict()}, settings)
            if accelerator is not None:
                accelerator.wait_for_everyone()
    bar.close()
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    if accelerator is not None:
        policy.model = accelerator.unwrap_model(model)
    return losses
