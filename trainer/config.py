"""The training configuration: frozen dataclasses, YAML files and dotted command-line overrides.

``TrainConfig`` groups one dataclass per concern (policy, data, rollout, GRPO, SFT,
evaluation). ``load_config(path, overrides)`` reads a YAML file (sections named like the
fields) and applies ``section.field=value`` overrides whose values are parsed as YAML
(``grpo.lr=1e-4``, ``eval.splits=[dev,test]``). Unknown keys and wrongly typed values are
errors that name the key.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from rods_gym.episode import ERROR_CLASSES

CONFIG_DIR = Path(__file__).resolve().parent / "configs"


@dataclass(frozen=True)
class PolicyConfig:
    """The policy: ``tiny`` (the embedded model built from this config) or a hub name / local path."""

    model: str = "tiny"
    # the embedded model's architecture: llama | lfm2 (transformers' LFM2: a short causal convolution
    # in every other layer, attention in the rest; it learns associative recall, fetching the value
    # written after a key, where the tiny Llama barely does: benchmarks/recall_probe.py)
    architecture: str = "llama"
    compact_tokens: str = "words"  # embedded compact tokenizer: words (one token per name) | pieces (split at _)
    local_files_only: bool = True  # never download at run time; set false to allow hub downloads
    dtype: str = "float32"  # float32 | bfloat16 | float16
    hidden_size: int = 128
    intermediate_size: int = 512
    num_layers: int = 2
    num_heads: int = 4
    max_positions: int = 1024
    init_seed: int = 0
    # recompute activations in the backward pass instead of keeping them (transformers' gradient
    # checkpointing, non-reentrant): less memory for long episodes or large models, ~30% more update time.
    # Generation is unaffected (it runs in eval mode with its KV cache)
    gradient_checkpointing: bool = False


@dataclass(frozen=True)
class LoRAConfig:
    """Low-rank adapters (``peft``'s LoRA) instead of full fine-tuning: the base weights stay frozen and
    only the adapters train, so optimizer state is a few MB, and with ``grpo.beta > 0`` the KL reference
    is the base itself (the adapters switched off) rather than a second copy of the model."""

    rank: int = 0  # 0: off (full fine-tuning)
    alpha: float = 16.0  # the adapters' output is scaled by alpha / rank
    dropout: float = 0.0  # > 0 makes the update's log-probs differ from the sampling ones (ratio != 1)
    # peft's target_modules: "all-linear" (every linear layer but the output head) or module names
    target_modules: tuple[str, ...] = ("all-linear",)
    # also train the warm start (SFT) through adapters (merged into the weights when it ends). Off: the
    # warm start trains every weight, and GRPO's adapters start from its result
    sft: bool = False


@dataclass(frozen=True)
class DataConfig:
    """Environments and task sets. Splits are names (train/dev/test/ood) or JSONL paths; when a
    named split is not built yet, ``fallback_difficulty`` sampler tasks stand in (seeded, disjoint)."""

    # the environment's view (chat or compact) and its limits; every episode plays a task from a task set,
    # so a difficulty in the id (rods/ToolChain-Easy-Compact-v0) changes nothing and is warned about
    env_id: str = "rods/ToolChain-Compact-v0"
    source: str = "fixed"  # a name from rods_gym.trainer.sources.available_sources()
    source_options: Mapping[str, Any] = field(default_factory=dict)
    train_split: str = "train"
    fallback_difficulty: str = "easy"
    fallback_train_tasks: int = 400
    fallback_eval_tasks: int = 200
    env_max_steps: int | None = None  # None: the env's default (8 + 3 calls + 2 turns)
    # compact view only: "ordered" numbers values $0, $1, ... in order of appearance; "shuffled"
    # shows them under a permutation seeded by the task; "typed" names them by type and rank,
    # $email.0 (ToolChainEnv's slot_ids)
    slot_ids: str = "ordered"


@dataclass(frozen=True)
class RolloutConfig:
    group_size: int = 8  # G rollouts per task
    tasks_per_step: int = 16
    temperature: float = 1.0
    # sample from the k most likely tokens only (0: off), then from the smallest set of those whose mass
    # reaches top_p (1.0: off), as transformers' generate and TRL's GRPOConfig. The log-probs the update's
    # ratio uses stay those of the untruncated distribution at temperature (TRL's and verl's choice).
    # Sampled evaluation episodes use them too; greedy ones are unaffected
    top_k: int = 0
    top_p: float = 1.0
    max_action_tokens: int = 24
    max_turns: int = 12
    max_context: int = 1024  # episodes whose context would exceed this stop (counted as truncated)
    turn_slack: int | None = None  # if set, an episode may take the oracle's action count + this many actions
    # training episodes only: subtracted from the reward for every action the env rejects (any
    # error class); evaluation always scores plain progress. 0: off (returns = progress in [0, 1])
    error_penalty: float = 0.0
    # the error classes that pay error_penalty (e.g. [locked_tool]: only calls to a tool the user has not
    # enabled yet, while a retry after invalid arguments stays free). Empty: every class but episode_over
    error_classes: tuple[str, ...] = ()
    # training episodes only: added to the reward of the action that completes the task, so a
    # success is worth 1 + success_bonus and a partial one only its progress. 0: off
    success_bonus: float = 0.0
    # greedy-branch rollouts (VinePPO-style states, ARPO/TreeRL-style branching): per task and step,
    # one greedy episode; where it fails, ``branch_size`` more episodes are sampled from the state
    # before its first miss (an action rejected or without effect, the env's info["effect"]), the
    # prefix replayed as context. They form an advantage group of their own, so the update contrasts the
    # actions tried at exactly the decision greedy decoding gets wrong. The task source observes
    # only the group_size episodes from the start. 0: off (>= 2 otherwise)
    branch_size: int = 0
    # how branch episodes go on after the branch point: "sampled" (at temperature, every action trains) or
    # "greedy" (only the action at the branch point is sampled and trains; greedy decoding finishes the
    # episode, so its return is the greedy policy's return after that action, without sampling noise, and
    # one fully greedy episode from the branch point joins the group: policy improvement of the greedy policy)
    branch_continuation: str = "sampled"
    # also branch each successful greedy episode, before one of its actions drawn uniformly: the update then
    # sees which actions keep greedy successes, not only which repair failures
    branch_successes: bool = False
    # with branch_continuation "greedy": one more episode per branch group whose action at the branch point
    # is the oracle's (teacher-forced, the policy's log-probs of its ids recorded), then greedy. Off-policy
    # guidance as in LUFFY: the group always holds the right action, and it is reinforced only as far as
    # the greedy policy gets further after it than after the actions it samples itself
    branch_oracle: bool = False


@dataclass(frozen=True)
class GRPOConfig:
    lr: float = 2e-4
    weight_decay: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.99)
    adam_eps: float = 1e-8
    warmup_steps: int = 0
    scheduler: str = "constant"  # constant | linear | cosine (over TrainConfig.steps)
    scale_rewards: str = "group"  # group: (R - mean) / (std + eps); batch: / (std of the step's returns + eps), as
                                  # TRL's scale_rewards="batch"; none: Dr.GRPO (R - mean)
    aggregation: str = "token"  # token | sequence | dr_grpo (sum / (n_seqs * max completion tokens))
    eps_low: float = 0.2
    eps_high: float = 0.28
    # the importance ratio: "token" (PPO/GRPO, one per token) or "sequence" (GSPO: one per rollout, the
    # exp of its tokens' mean log-ratio, clipped as a whole; its paper uses eps 3e-4 / 4e-4 with it)
    importance_sampling_level: str = "token"
    beta: float = 0.0  # KL (k3) coefficient to the frozen reference policy; 0 disables it
    # TRL's sync_ref_model: after every ref_sync_steps GRPO steps (0: never) the KL reference moves toward
    # the policy, reference = ref_sync_alpha * policy + (1 - ref_sync_alpha) * reference (TRL's
    # ref_model_sync_steps and ref_model_mixup_alpha; 1.0 copies the policy). Needs grpo.beta > 0, and
    # not with LoRA, whose reference is the base model itself. Checkpoints keep the moved reference
    ref_sync_steps: int = 0
    ref_sync_alpha: float = 0.6
    epochs: int = 1  # inner epochs over each step's rollouts
    minibatches: int = 1  # optimizer steps per epoch
    micro_batch_size: int = 16  # sequences per forward/backward (gradient accumulation, sorted by length)
    max_grad_norm: float = 1.0
    adv_eps: float = 1e-4
    freeze_embeddings: bool = False  # keep the (tied) token embeddings fixed during GRPO
    # weight of an action-level term added to each action's tokens: the action's own reward (its
    # progress gain, minus penalties) standardized over all actions of its group (grpo.action_advantages).
    # 0: plain GRPO (one episode-level advantage for every token of a rollout)
    action_weight: float = 0.0
    # weight of the episode-level advantage on every token (1: GRPO). With action_weight > 0 and
    # episode_weight 0, only the action-level term trains (e.g. GiGPO's step advantages alone: an
    # action earns a signal only where other rollouts of its group acted from the same history)
    episode_weight: float = 1.0
    # how the action-level term groups actions: "group" standardizes each action's own reward over
    # all actions of its group; "state" (GiGPO) compares the discounted return-to-go (action_gamma)
    # of actions taken from the same state (the same history) within the group
    action_grouping: str = "group"
    action_gamma: float = 0.95
    # discount of the episode return that advantages and the curriculum's detector use,
    # R = sum_t gamma**t * r_t over the episode's actions. Below 1, progress made later counts less:
    # a right first call beats an error and a retry, and trying still beats giving up (1: final progress)
    gamma: float = 1.0
    # PPO-ptx (InstructGPT): weight of the warm start's imitation loss on a batch of its oracle
    # demonstrations (``sft_batch`` of them) added to every GRPO optimizer step; 0 disables it
    sft_weight: float = 0.0
    sft_batch: int = 32
    # scale of negative episode advantages (1: plain GRPO; 0: positive-sample reinforcement only)
    negative_weight: float = 1.0
    # credit of a missed action (rejected, or accepted without effect: rollout.MISSES). "episode": its
    # tokens get the episode's advantage like every other action's (GRPO). "nonpositive": never a
    # positive one (min(A, 0)), so an episode that succeeds after a wrong call and a retry reinforces
    # the retry but not the wrong call. The return, and so the incentive to keep trying, is unchanged.
    miss_credit: str = "episode"
    # what a rollout's return is compared with. "group": its group's mean (GRPO). "greedy": the return of
    # one greedy episode of the same task (ReMax's baseline, run beside the group: one more episode per
    # task), and scale_rewards "group" divides by the std of the group's and the greedy return together.
    # A rollout is reinforced only where it beats what greedy decoding does: on a task greedy decoding
    # solves, no sample is pushed up and failing ones are pushed down, so its greedy path keeps its lead.
    baseline: str = "group"
    # DAPO's overlong filtering (TRL's mask_truncated_completions): rollouts the turn or context limit cut
    # off train no token (their returns still count in their groups' advantages)
    mask_truncated: bool = False
    # train on the groups played from the task's start (GRPO). false: only the branch groups
    # (rollout.branch_size) train; the start groups still feed the task source (what RODS observes)
    train_start_groups: bool = True


@dataclass(frozen=True)
class SFTConfig:
    enabled: bool = True
    # seeds: oracle demonstrations of the train split's first ``demos`` tasks (at most its size);
    # sampled: of ``demos`` fresh tasks drawn like the seeds (same strata, held-out tools excluded,
    # none equal to a train/dev/test/OOD task by signature and bindings; envs.build_tasksets)
    data: str = "seeds"
    demos: int = 400
    data_seed: int = 505  # sampler seed of ``data: sampled``
    # chance per oracle tool call that its demonstration first shows a slip: the same call with one
    # argument taken from a neighbouring slot, and its rejection, as context (no loss), then the
    # oracle's call (trainer/recovery.py). Oracle episodes alone never show a rejected call, so the
    # policy never learns what to do after one. Needs the compact view (value slots)
    recovery: float = 0.0
    # chance per demonstration that, in a task with a withheld tool, the oracle first makes every call the
    # available tools allow and says it cannot proceed only when the rest needs the withheld tool
    # (oracle_action's defer_unlock) instead of saying so at once: the same length, another order, so
    # the policy also sees a tool enabled after other calls
    defer_unlock: float = 0.0
    # chance per demonstration, in a task whose last turn needs two or more calls, that the teacher replies that
    # everything is done just before the last of them and the demonstration ends there: a teacher that leaves a
    # compound request partly done, imitated as it is (the warm start then learns the slip; GRPO's return shows it)
    skip_last_call: float = 0.0
    # imitate only tasks whose dependency depth is at most this (0: all depths). Demonstrations of
    # short call chains are the cheap ones; deeper tasks are then learned from reward alone (GRPO)
    max_depth: int = 0
    steps: int = 150
    batch_size: int = 32
    lr: float = 1e-3
    warmup_steps: int = 10
    max_grad_norm: float = 1.0
    # steps between the warm start's checkpoints (RUN_DIR/sft_checkpoint/: model, optimizer, scheduler,
    # step); a killed run resumes from the last one (rods train --resume, rods sft --resume). 0: none
    checkpoint_every: int = 100
    # torch CPU threads during the warm start only (0: the run's ``threads``). Its batches of 32
    # padded sequences use a second core well, unlike the rollouts' small generation steps.
    threads: int = 0
    # mixed precision of the warm start's forward pass: off (fp32) | bf16 (torch.autocast: bf16
    # matmuls, fp32 weights, optimizer and loss). GRPO always runs in the policy's dtype, so that
    # the update's log-probs equal the rollouts'.
    autocast: str = "off"


@dataclass(frozen=True)
class EvalConfig:
    splits: tuple[str, ...] = ("test",)
    tasks: int = 200  # per split: N tasks keeping its mix of turn types and depths (tasks.spread)
    every: int = 0  # GRPO steps between evaluations (0: only before and after)
    batch_episodes: int = 256
    # also this many sampled episodes per task at rollout.temperature (a fixed random stream, so runs
    # compare paired), reported as "sampled" beside the greedy figures: the policy GRPO trains. 0: greedy only
    samples: int = 0
    # torch CPU threads while evaluating (0: the run's ``threads``). Its batches of up to batch_episodes
    # episodes use a second core well (400 greedy test tasks: 32 s on one thread, 21 s on two)
    threads: int = 0


@dataclass(frozen=True)
class TrainConfig:
    name: str = "default"
    run_dir: str = "runs/default"
    seed: int = 0
    steps: int = 1000  # GRPO steps (upper bound; time_limit_min may stop earlier)
    time_limit_min: float = 0.0  # wall-clock budget for the GRPO phase, minutes per run (0: no limit; the main job: 8)
    log_every: int = 1
    checkpoint_every: int = 25
    keep_checkpoints: int = 2
    tensorboard: bool = True
    progress_bar: bool = True
    threads: int = 0  # torch CPU threads per process (0: torch's default)
    # on a GPU: deterministic kernels (torch.use_deterministic_algorithms, cuBLAS's fixed workspace), so that the
    # same seed repeats a run on the same machine and software. Off is faster for large models and lets ops
    # with no deterministic CUDA kernel run (on, torch raises on them naming the op). The CPU repeats either way.
    deterministic: bool = True
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        check_config(self)

    def to_dict(self) -> dict[str, Any]:
        return _plain(dataclasses.asdict(self))


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def env_kwargs(cfg: "TrainConfig") -> dict[str, Any]:
    """``gym.make`` kwargs from ``cfg.data``: only the fields that differ from the env's defaults."""
    out: dict[str, Any] = {} if cfg.data.env_max_steps is None else {"max_steps": cfg.data.env_max_steps}
    if cfg.data.slot_ids != "ordered":
        out["slot_ids"] = cfg.data.slot_ids
    return out


CHOICES = {
    ("grpo", "scale_rewards"): ("group", "batch", "none"),
    ("grpo", "aggregation"): ("token", "sequence", "dr_grpo"),
    ("grpo", "scheduler"): ("constant", "linear", "cosine"),
    ("grpo", "action_grouping"): ("group", "state"),
    ("grpo", "miss_credit"): ("episode", "nonpositive"),
    ("grpo", "baseline"): ("group", "greedy"),
    ("grpo", "importance_sampling_level"): ("token", "sequence"),
    ("rollout", "branch_continuation"): ("sampled", "greedy"),
    ("policy", "dtype"): ("float32", "bfloat16", "float16"),
    ("policy", "compact_tokens"): ("words", "pieces"),
    ("policy", "architecture"): ("llama", "lfm2"),
    ("sft", "data"): ("seeds", "sampled"),
    ("sft", "autocast"): ("off", "bf16"),
    ("data", "slot_ids"): ("ordered", "shuffled", "typed"),
}


def check_truncation(top_k: int, top_p: float) -> None:
    """Refuse a sampling cut that ``generation.truncated_probs`` cannot apply, naming the value: ``top_k``
    an int >= 0 (0: off), ``top_p`` in (0, 1] (1: off)."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be an int >= 0 (0: off), got {top_k!r}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must lie in (0, 1] (1: off), got {top_p!r}")


def check_demo_chances(**chances: float) -> None:
    """Refuse a demonstration chance (``sft.recovery``, ``sft.defer_unlock``, ``sft.skip_last_call``) outside
    [0, 1], naming it and its value."""
    for name, p in chances.items():
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{name} must be a probability in [0, 1], got {p}")


def check_config(cfg: TrainConfig) -> None:
    if not cfg.name.strip() or "/" in cfg.name or cfg.name in (".", ".."):
        raise ValueError(f"config name={cfg.name!r}: a run's name must be a non-empty word without '/' (it names "
                         "runs/<name>; set run_dir for another directory)")
    if not cfg.run_dir.strip():
        raise ValueError("config run_dir: must not be empty")
    for (section, name), allowed in CHOICES.items():
        value = getattr(getattr(cfg, section), name)
        if value not in allowed:
            raise ValueError(f"config {section}.{name}={value!r}: choose one of {allowed}")
    positive = [("rollout", "group_size"), ("rollout", "tasks_per_step"), ("rollout", "max_action_tokens"),
                ("rollout", "max_turns"), ("rollout", "max_context"), ("grpo", "epochs"), ("grpo", "minibatches"),
                ("grpo", "micro_batch_size"), ("sft", "batch_size"), ("eval", "batch_episodes"),
                ("eval", "tasks"), ("policy", "hidden_size"), ("policy", "intermediate_size"),
                ("policy", "num_layers"), ("policy", "num_heads"), ("policy", "max_positions")]
    for section, name in positive:
        if getattr(getattr(cfg, section), name) < 1:
            raise ValueError(f"config {section}.{name} must be >= 1, got {getattr(getattr(cfg, section), name)}")
    if cfg.lora.rank < 0 or cfg.lora.alpha <= 0 or not 0.0 <= cfg.lora.dropout < 1.0:
        raise ValueError(f"config lora: rank must be >= 0 (0: off), alpha > 0 and dropout in [0, 1), got rank "
                         f"{cfg.lora.rank}, alpha {cfg.lora.alpha}, dropout {cfg.lora.dropout}")
    if not cfg.lora.target_modules or not all(isinstance(m, str) and m for m in cfg.lora.target_modules):
        raise ValueError(f"config lora.target_modules must name at least one module (or all-linear), got "
                         f"{list(cfg.lora.target_modules)}")
    if cfg.lora.sft and cfg.lora.rank == 0:
        raise ValueError("config lora.sft is set but lora.rank is 0: set lora.rank to train the warm start through adapters")
    if cfg.lora.sft and cfg.policy.dtype != "float32":
        raise ValueError(f"config lora.sft with policy.dtype={cfg.policy.dtype}: merging the warm start's adapters into "
                         f"{cfg.policy.dtype} weights rounds most of a small update away; train the warm start in full "
                         "(lora.sft: false) or in float32")
    if cfg.rollout.group_size < 2:
        raise ValueError(f"config rollout.group_size must be >= 2: GRPO's advantages compare the rollouts of a "
                         f"task's group, got {cfg.rollout.group_size}")
    from .sources import available_sources  # here, not at the top: the sources import this module

    if cfg.data.source not in available_sources():
        raise ValueError(f"config data.source={cfg.data.source!r}: choose one of {sorted(available_sources())}")
    if cfg.rollout.temperature <= 0:
        raise ValueError("config rollout.temperature must be > 0 (evaluation is greedy by itself)")
    try:
        check_truncation(cfg.rollout.top_k, cfg.rollout.top_p)
    except ValueError as exc:
        raise ValueError(f"config rollout.{exc}") from None
    if not (0 <= cfg.grpo.eps_low < 1 and cfg.grpo.eps_high >= 0):
        raise ValueError("config grpo.eps_low must lie in [0, 1) and grpo.eps_high be >= 0")
    if cfg.rollout.success_bonus < 0:
        raise ValueError(f"config rollout.success_bonus must be >= 0, got {cfg.rollout.success_bonus}")
    if cfg.rollout.error_penalty < 0:
        raise ValueError(f"config rollout.error_penalty must be >= 0 (it is subtracted), got {cfg.rollout.error_penalty}")
    penalized = tuple(c for c in ERROR_CLASSES if c not in ("none", "episode_over"))
    for cls in cfg.rollout.error_classes:
        if cls not in penalized:
            raise ValueError(f"config rollout.error_classes: unknown error class {cls!r}; use some of {list(penalized)}")
    if cfg.rollout.error_classes and cfg.rollout.error_penalty <= 0:
        raise ValueError("config rollout.error_classes is set but rollout.error_penalty is 0: nothing would be paid")
    try:
        check_demo_chances(recovery=cfg.sft.recovery, skip_last_call=cfg.sft.skip_last_call,
                           defer_unlock=cfg.sft.defer_unlock)
    except ValueError as exc:
        raise ValueError(f"config sft.{exc}") from None
    if cfg.grpo.sft_weight < 0 or cfg.grpo.sft_batch < 1:
        raise ValueError("config grpo.sft_weight must be >= 0 and grpo.sft_batch >= 1")
    if cfg.grpo.sft_weight > 0 and not cfg.sft.enabled:
        raise ValueError("config grpo.sft_weight > 0 needs the warm start's demonstrations (sft.enabled: true)")
    if not 0.0 < cfg.grpo.gamma <= 1.0:
        raise ValueError(f"config grpo.gamma must lie in (0, 1], got {cfg.grpo.gamma}")
    if cfg.grpo.episode_weight < 0 or cfg.grpo.action_weight < 0:
        raise ValueError(f"config grpo.episode_weight and grpo.action_weight must be >= 0, got "
                         f"{cfg.grpo.episode_weight} and {cfg.grpo.action_weight}")
    if cfg.grpo.episode_weight == 0 and cfg.grpo.action_weight == 0:
        raise ValueError("config grpo.episode_weight=0 needs grpo.action_weight > 0: with both 0 no token has an advantage")
    if not 0.0 <= cfg.grpo.negative_weight <= 1.0:
        raise ValueError(f"config grpo.negative_weight must lie in [0, 1], got {cfg.grpo.negative_weight}")
    if cfg.eval.samples < 0:
        raise ValueError(f"config eval.samples must be >= 0, got {cfg.eval.samples}")
    if cfg.threads < 0 or cfg.sft.threads < 0 or cfg.eval.threads < 0:
        raise ValueError("config threads, sft.threads and eval.threads must be >= 0 (0: torch's default / the run's "
                         "threads)")
    for name, least in (("steps", 0), ("checkpoint_every", 0), ("keep_checkpoints", 1), ("time_limit_min", 0)):
        if getattr(cfg, name) < least:
            raise ValueError(f"config {name} must be >= {least}, got {getattr(cfg, name)}"
                             + (" (0: no time limit)" if name == "time_limit_min" else ""))
    if cfg.log_every < 1:
        raise ValueError(f"config log_every must be >= 1 (GRPO steps between metric lines), got {cfg.log_every}")
    if cfg.sft.max_depth < 0:
        raise ValueError(f"config sft.max_depth must be >= 0 (0: every depth), got {cfg.sft.max_depth}")
    if cfg.sft.enabled and cfg.sft.demos < 1:
        raise ValueError(f"config sft.demos must be >= 1 while sft.enabled is true (sft.enabled=false skips the warm "
                         f"start), got {cfg.sft.demos}")
    if cfg.sft.enabled and cfg.sft.steps < 1:
        raise ValueError(f"config sft.steps must be >= 1 while sft.enabled is true (sft.enabled=false skips the warm "
                         f"start), got {cfg.sft.steps}")
    nonneg = [("grpo", "lr"), ("grpo", "beta"), ("grpo", "warmup_steps"), ("grpo", "weight_decay"), ("sft", "lr"),
              ("sft", "warmup_steps"), ("sft", "checkpoint_every")]
    for section, name in nonneg:
        if getattr(getattr(cfg, section), name) < 0:
            raise ValueError(f"config {section}.{name} must be >= 0, got {getattr(getattr(cfg, section), name)}")
    g = cfg.grpo
    if g.ref_sync_steps < 0:
        raise ValueError(f"config grpo.ref_sync_steps must be >= 0 (0: off), got {g.ref_sync_steps}")
    if not 0 < g.ref_sync_alpha <= 1:
        raise ValueError(f"config grpo.ref_sync_alpha must lie in (0, 1] (1: the reference becomes a copy of the "
                         f"policy), got {g.ref_sync_alpha}")
    if g.ref_sync_steps and g.beta == 0:
        raise ValueError("config grpo.ref_sync_steps moves the KL reference, and grpo.beta=0 has none: set grpo.beta > 0 "
                         "or grpo.ref_sync_steps=0")
    if g.ref_sync_steps and cfg.lora.rank > 0:
        raise ValueError("config grpo.ref_sync_steps with lora.rank > 0: the reference is the base model under the "
                         "adapters, which does not move; set grpo.ref_sync_steps=0 or train in full")
    for section in ("grpo", "sft"):  # a negative clip coefficient would flip the gradient's sign
        if not getattr(cfg, section).max_grad_norm > 0:
            raise ValueError(f"config {section}.max_grad_norm must be > 0, got {getattr(cfg, section).max_grad_norm}")
    if cfg.rollout.branch_size < 0 or cfg.rollout.branch_size == 1:
        raise ValueError(f"config rollout.branch_size must be 0 (off) or >= 2 (a branch group's advantages compare "
                         f"its episodes), got {cfg.rollout.branch_size}")
    if cfg.rollout.branch_size == 0 and (cfg.rollout.branch_continuation != "sampled" or cfg.rollout.branch_successes):
        raise ValueError("config rollout.branch_continuation and rollout.branch_successes shape branch groups, but "
                         "rollout.branch_size is 0 (no branches): set rollout.branch_size >= 2")
    if cfg.rollout.branch_oracle and (cfg.rollout.branch_size == 0 or cfg.rollout.branch_continuation != "greedy"):
        raise ValueError("config rollout.branch_oracle=true needs branch groups with greedy continuations "
                         f"(rollout.branch_size >= 2 and rollout.branch_continuation=greedy), got branch_size="
                         f"{cfg.rollout.branch_size}, branch_continuation={cfg.rollout.branch_continuation}")
    batch_with = [what for what, on in (("rollout.branch_size > 0", cfg.rollout.branch_size > 0),
                                        ("grpo.action_weight > 0", cfg.grpo.action_weight > 0),
                                        ("grpo.baseline=greedy", cfg.grpo.baseline == "greedy")) if on]
    if cfg.grpo.scale_rewards == "batch" and batch_with:
        raise ValueError(f"config grpo.scale_rewards=batch scales the start groups' advantages by the std of the step's "
                         f"returns; it is not defined with {', '.join(batch_with)} (use group or none there)")
    if not cfg.grpo.train_start_groups and cfg.rollout.branch_size == 0:
        raise ValueError("config grpo.train_start_groups=false trains only branch groups, but rollout.branch_size is 0 "
                         "(no branches): nothing would train")
    if cfg.seed < 0 or cfg.sft.data_seed < 0:
        raise ValueError(f"config seed and sft.data_seed must be >= 0 (they seed numpy generators), got "
                         f"{cfg.seed} and {cfg.sft.data_seed}")
    if cfg.eval.every < 0:
        raise ValueError(f"config eval.every must be >= 0 (GRPO steps between evaluations; 0: only before and "
                         f"after), got {cfg.eval.every}")
    if not cfg.eval.splits or any(not str(s).strip() for s in cfg.eval.splits):
        raise ValueError(f"config eval.splits={list(cfg.eval.splits)!r}: name at least one split (train, dev, test, "
                         "ood) or JSONL file, and no empty ones: the job reports test success before and after GRPO")
    if not cfg.grpo.adv_eps > 0:
        raise ValueError(f"config grpo.adv_eps must be > 0 (it keeps a group's std away from 0; a negative one "
                         f"can flip an advantage's sign), got {cfg.grpo.adv_eps}")
    if not all(0.0 <= b < 1.0 for b in cfg.grpo.adam_betas) or not cfg.grpo.adam_eps > 0:
        raise ValueError(f"config grpo.adam_betas must lie in [0, 1) and grpo.adam_eps be > 0, got "
                         f"{list(cfg.grpo.adam_betas)} and {cfg.grpo.adam_eps}")
    if cfg.policy.model == "tiny" and cfg.policy.hidden_size % cfg.policy.num_heads:
        raise ValueError(f"config policy.hidden_size={cfg.policy.hidden_size} must be a multiple of "
                         f"policy.num_heads={cfg.policy.num_heads} (each head gets an equal share of it)")
    if cfg.rollout.turn_slack is not None and cfg.rollout.turn_slack < 0:
        raise ValueError(f"config rollout.turn_slack must be >= 0 or null (no oracle-based budget), got "
                         f"{cfg.rollout.turn_slack}")


# -- building from mappings, YAML and overrides ------------------------------------------
def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ValueError(f"config {where}: expected a mapping, got {value!r}")
        return from_dict(tp, value, where)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, where)
    if origin is tuple:
        args = typing.get_args(tp)
        one = isinstance(value, (str, int, float)) and not isinstance(value, bool) and "," not in str(value)
        if len(args) == 2 and args[1] is Ellipsis and one:
            value = [value]  # a list of any length: one value is a list of one (eval.splits=test)
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"config {where}: expected a list, got {value!r} (on the command line: {where}=[a,b])")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v, where) for v in value)
        if len(args) != len(value):
            raise ValueError(f"config {where}: expected {len(args)} values, got {len(value)}")
        return tuple(_convert(a, v, where) for a, v in zip(args, value))
    if origin is not None and issubclass(origin, Mapping) or tp is Mapping:
        if not isinstance(value, Mapping):
            raise ValueError(f"config {where}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is float and (isinstance(value, (int, float)) and not isinstance(value, bool)
                        or isinstance(value, str) and _looks_numeric(value)):  # YAML 1.1 reads 1e-4 as a string
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"config {where}: expected a finite number, got {value!r}")
        return number
    if tp in (int, str, bool) and not (isinstance(value, tp) and not (tp is int and isinstance(value, bool))):
        raise ValueError(f"config {where}: expected {tp.__name__}, got {value!r}")
    if tp is float and not isinstance(value, float):
        raise ValueError(f"config {where}: expected a number, got {value!r}")
    return value


def from_dict(cls: type, data: Mapping[str, Any], where: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"config {where or 'top level'}: unknown key(s) {sorted(unknown)}; known: {sorted(names)}")
    kwargs = {k: _convert(hints[k], v, f"{where}.{k}" if where else k) for k, v in data.items()}
    return cls(**kwargs)


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ValueError(f"override {key!r}: {p!r} is not a section")
    node[parts[-1]] = value


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key repeated in one mapping is an error (PyYAML keeps the last
    value silently: ``grpo: {lr: 1e-4, lr: 2e-4}`` would train at 2e-4)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} appears twice in one mapping",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def yaml_load(text: str) -> Any:
    """``yaml.safe_load`` that refuses a key repeated in one mapping."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"override {item!r} must look like key=value (e.g. steps=50 or grpo.lr=1e-4)")
        key, raw = item.split("=", 1)
        try:
            value = yaml_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ValueError(f"override {key.strip()}={raw}: the value is not valid YAML ({problem})") from None
        if isinstance(value, str) and _looks_numeric(raw):
            value = float(raw)
        set_dotted(out, key.strip(), value)
    return out


def _looks_numeric(raw: str) -> bool:
    try:
        float(raw)
        return True
    except ValueError:
        return False


def merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) and k != "source_options":
            out[k] = merge(dict(out[k]), v)
        else:
            out[k] = v
    return out


def is_bare_name(text: str) -> bool:
    """Whether a config reference is a bare name (``seeds``), not a path (``./seeds``, ``my.yaml``, ``dir/x``)."""
    return "/" not in text and os.sep not in text and Path(text).suffix not in (".yaml", ".yml")


def resolve_config_path(path: str | Path) -> Path:
    """A config file path, or the name of a shipped config (``default``, ``chat_tiny``, ...).

    A bare name (a string without a directory part or a ``.yaml``/``.yml`` suffix) is the shipped config
    of that name when there is one, even if the working directory holds a file or folder of the same name
    (a run folder called ``seeds`` must not stand in for the ``seeds`` config); write ``./seeds`` for the
    local file."""
    if isinstance(path, str) and is_bare_name(path) and (CONFIG_DIR / f"{path}.yaml").exists():
        return CONFIG_DIR / f"{path}.yaml"
    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(f"config {str(path)!r} is a directory; give a YAML file or a shipped config's name")
    if p.exists():
        return p
    shipped = CONFIG_DIR / f"{path}.yaml"
    if shipped.exists():
        return shipped
    names = sorted(q.stem for q in CONFIG_DIR.glob("*.yaml"))
    raise FileNotFoundError(f"config {str(path)!r} is neither a file nor a shipped config ({', '.join(names)})")


MAX_BASE_DEPTH = 8


def read_config_file(path: str | Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file's mapping. A top-level ``base: NAME_OR_PATH`` key (a shipped config such as
    ``default``, or a file, relative to this one) is read first and this file's keys are merged
    over it, so a config of your own can change a few fields of the main job's."""
    p = resolve_config_path(path).resolve()
    if p in chain or len(chain) >= MAX_BASE_DEPTH:
        raise ValueError(f"config file {p}: its base chain {' -> '.join(str(c) for c in (*chain, p))} "
                         f"{'loops' if p in chain else f'is deeper than {MAX_BASE_DEPTH}'}")
    try:
        loaded = yaml_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValueError(f"config file {p}:{where}: not valid YAML ({problem})") from None
    if not isinstance(loaded, Mapping):
        raise ValueError(f"config file {p}: the top level must be a mapping")
    data = dict(loaded)
    if "base" not in data:
        return data
    base = data.pop("base")
    if not isinstance(base, str):
        raise ValueError(f"config file {p}: base must be a config name or path, got {base!r}")
    relative, shipped = p.parent / base, CONFIG_DIR / f"{base}.yaml"
    if not relative.is_file() and not shipped.is_file():
        raise FileNotFoundError(f"config file {p}: base {base!r} is neither a file next to it ({relative}) nor a "
                                f"shipped config ({', '.join(sorted(q.stem for q in CONFIG_DIR.glob('*.yaml')))})")
    # as for --config: a bare name is the shipped config of that name when there is one (./NAME: the file)
    if is_bare_name(base) and shipped.is_file():
        target = shipped
    else:
        target = relative if relative.is_file() else shipped
    inherited = read_config_file(target, (*chain, p))
    if "name" in data and "run_dir" not in data:  # a run of its own: runs/<its name>, not the base's directory
        inherited.pop("run_dir", None)
    return merge(inherited, data)


def load_config(path: str | Path | None = None, overrides: Sequence[str] | Mapping[str, Any] = ()) -> TrainConfig:
    """The config file ``path`` (a shipped name or a YAML path; None: the code's defaults) with ``overrides``:
    ``["grpo.lr=1e-4", ...]`` as on the command line, or a mapping, nested (``{"grpo": {"lr": 1e-4}}``) or
    dotted (``{"grpo.lr": 1e-4}``)."""
    data: dict[str, Any] = read_config_file(path) if path is not None else {}
    extra = parse_overrides(overrides) if not isinstance(overrides, Mapping) else undot(overrides)
    derived = data.get("run_dir") in (None, f"runs/{data.get('name')}")  # the file's run_dir follows its name
    data = merge(data, extra)
    if "name" in data and "run_dir" not in extra and derived:  # a renamed run moves with its name
        data["run_dir"] = f"runs/{data['name']}"
    try:
        return from_dict(TrainConfig, data)
    except ValueError as exc:
        if path is not None and (not extra or _file_alone_fails_alike(path, exc)):
            raise ValueError(f"{exc} (in the config file {resolve_config_path(path)} or its base)") from None
        raise


def undot(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """A mapping whose dotted keys (``"grpo.lr"``) are nested (``{"grpo": {"lr": ...}}``), merged with its nested ones."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(value, Mapping) and str(key).split(".")[-1] != "source_options":  # a source's own keys stay
            value = undot(value)
        nested: dict[str, Any] = {}
        set_dotted(nested, str(key), value)
        out = merge(out, nested)
    return out


def _file_alone_fails_alike(path: str | Path, exc: ValueError) -> bool:
    """Whether the config file without the overrides fails with the same error: the mistake is the file's."""
    try:
        from_dict(TrainConfig, read_config_file(path))
    except ValueError as own:
        return str(own) == str(exc)
    return False


def save_config(cfg: TrainConfig, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
