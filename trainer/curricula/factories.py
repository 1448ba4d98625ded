"""The curricula by name, for the trainer's source registry (``rods_gym.trainer.sources``).

Each factory has the signature ``factory(cfg: TrainConfig, seeds, rng_seed) -> TaskSource``
and reads its knobs from ``cfg.data.source_options``:

==============  ============================================================================
source          ``data.source_options``
==============  ============================================================================
rods, naive,    any :class:`RODSConfig` field (``group_size`` is ``rollout.group_size``);
replay_only     ``decontaminate``: splits/JSONL paths variants must not repeat (default
                dev, test, ood); ``exclude_tools``: tools variants never use (default: the
                OOD split's held-out tools)
augment         ``augment``: :class:`rods_gym.augment.AugmentConfig` fields; the trainer
                must build its envs from ``source.env_id`` / ``source.env_kwargs``
offline         ``path`` (required): the JSONL written by ``rods synth --out PATH``
dapo            ``max_refill_rounds``, ``min_informative_rate``
==============  ============================================================================
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import gymnasium as gym

from rods_gym.augment import AugmentConfig
from rods_gym.resampler import NaiveResampler, Resampler, ResamplerConfig, held_out_tasks, held_out_tools
from rods_gym.suite import Suite, default_suite
from rods_gym.task import TaskSpec

from ..task_source import TaskSource
from .arms import AUGMENTED_ENV_ID, AugmentedSeeds, DynamicSamplingSource, OfflinePipeline
from .config import RODSConfig
from .rods import NaiveRODSSource, ReplayOnlySource, RODSSource
from .synthesis import TaskResampler

if TYPE_CHECKING:
    from ..config import TrainConfig

HELD_OUT_SPLITS = ("dev", "test", "ood")
RODS_EXTRA_OPTIONS = ("decontaminate", "exclude_tools")


def default_resampler(suite: Suite | None = None, decontaminate: Sequence[TaskSpec] | None = None,
                      naive: bool = False, exclude_tools: Sequence[str] | None = None) -> TaskResampler:
    """A fresh resampler for RODS: skill-aligned (``Resampler``), or structure-blind
    (``NaiveResampler``) for the "naive" ablation.

    By default it never uses the OOD split's held-out tools and is decontaminated against
    the dev/test/OOD sets on disk (``rods_gym.resampler.held_out_tools/held_out_tasks``).
    """
    suite = suite or default_suite()
    held_tasks = held_out_tasks() if decontaminate is None else list(decontaminate)
    tools = held_out_tools() if exclude_tools is None else tuple(exclude_tools)
    config = ResamplerConfig(exclude_tools=tuple(t for t in tools if t in suite.tools))
    return (NaiveResampler if naive else Resampler)(suite, decontaminate=held_tasks, config=config)


def _options(cfg: "TrainConfig", source: str, allowed: Sequence[str]) -> dict[str, Any]:
    options = dict(cfg.data.source_options)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"data.source_options: source {source!r} does not take {unknown}; it takes {sorted(allowed)}")
    return options


def rods_config(cfg: "TrainConfig", options: Mapping[str, Any]) -> RODSConfig:
    """The :class:`RODSConfig` of ``options`` (its fields only), with G from ``rollout.group_size``."""
    fields = {k: v for k, v in options.items() if k not in RODS_EXTRA_OPTIONS}
    g = cfg.rollout.group_size
    if fields.get("group_size", g) != g:
        raise ValueError(f"data.source_options.group_size={fields['group_size']} differs from rollout.group_size={g}")
    return RODSConfig.from_dict({**fields, "group_size": g})


def _held_out(cfg: "TrainConfig", options: Mapping[str, Any]) -> list[TaskSpec]:
    from ..tasks import load_tasks

    return [t for split in options.get("decontaminate", HELD_OUT_SPLITS) for t in load_tasks(split, cfg.data)]


def _rods_like(cls: type[RODSSource], naive: bool) -> Callable[["TrainConfig", Sequence[TaskSpec], int], TaskSource]:
    def factory(cfg: "TrainConfig", seeds: Sequence[TaskSpec], rng_seed: int) -> TaskSource:
        options = _options(cfg, cls.name, [f.name for f in dataclasses.fields(RODSConfig)] + list(RODS_EXTRA_OPTIONS))
        config = rods_config(cfg, options)
        held_out = _held_out(cfg, options)
        tools = options.get("exclude_tools")
        resampler = default_resampler(decontaminate=held_out, naive=naive,
                                      exclude_tools=None if tools is None else tuple(tools))
        return cls(seeds, resampler, config, rng_seed, decontaminate=held_out)

    factory.__name__ = f"{cls.name}_source"
    return factory


# RODSConfig fields that only synthesis reads: the replay-only ablation refuses them rather than ignore them
SYNTHESIS_FIELDS = ("synthesize", "synth_every", "variants_per_parent", "parents_per_round", "max_generation",
                    "lineage_cap", "signature_cap", "min_admission_yield",
                    "yield_window", "stop_patience")


def replay_only_source(cfg: "TrainConfig", seeds: Sequence[TaskSpec], rng_seed: int) -> TaskSource:
    allowed = [f.name for f in dataclasses.fields(RODSConfig) if f.name not in SYNTHESIS_FIELDS]
    synthesis = sorted(set(cfg.data.source_options) & set(SYNTHESIS_FIELDS))
    if synthesis:
        raise ValueError(f"data.source_options: the replay_only ablation never synthesizes, so {synthesis} would do "
                         "nothing; drop them (data.source=rods synthesizes)")
    options = _options(cfg, "replay_only", allowed)
    return ReplayOnlySource(seeds, rods_config(cfg, options), rng_seed)


def augmented_env_id(env_id: str) -> str:
    """The augmented twin of a registered env id: same view (chat/compact/structured)."""
    if env_id.startswith("rods/ToolChain-Aug"):
        return env_id
    if env_id not in gym.registry:
        raise ValueError(f"data.env_id {env_id!r} is not a registered environment")
    mode = gym.registry[env_id].kwargs.get("mode", "chat")
    return AUGMENTED_ENV_ID if mode == "chat" else f"rods/ToolChain-Aug-{mode.capitalize()}-v0"


def augment_source(cfg: "TrainConfig", seeds: Sequence[TaskSpec], rng_seed: int) -> TaskSource:
    options = _options(cfg, "augment", ["augment"])
    given = options.get("augment", {})
    known = sorted(f.name for f in dataclasses.fields(AugmentConfig))
    if not isinstance(given, Mapping):
        raise ValueError(f"data.source_options.augment must be a mapping of AugmentConfig fields, e.g. "
                         f"{{error_hints: 0.5}}, got {given!r}; its fields: {known}")
    env_kwargs = {"augment": dict(given)} if "augment" in options else {}
    if env_kwargs:  # checked now, not when the first env is built after the warm start
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise ValueError(f"data.source_options.augment: unknown field(s) {unknown}; AugmentConfig takes {known}")
        try:
            AugmentConfig(**env_kwargs["augment"])
        except (TypeError, ValueError) as exc:
            raise ValueError(f"data.source_options.augment: {exc}") from None
    return AugmentedSeeds(seeds, rng_seed, env_id=augmented_env_id(cfg.data.env_id), env_kwargs=env_kwargs)


def offline_source(cfg: "TrainConfig", seeds: Sequence[TaskSpec], rng_seed: int) -> TaskSource:
    options = _options(cfg, "offline", ["path"])
    if "path" not in options:
        raise ValueError("data.source_options.path is required for the offline source: the JSONL of "
                         "`rods synth --n 17000 --out PATH`")
    return OfflinePipeline.from_jsonl(options["path"], rng_seed)


def dapo_source(cfg: "TrainConfig", seeds: Sequence[TaskSpec], rng_seed: int) -> TaskSource:
    options = _options(cfg, "dapo", ["max_refill_rounds", "min_informative_rate"])
    return DynamicSamplingSource(seeds, rng_seed, **options)


SOURCES: dict[str, Callable[["TrainConfig", Sequence[TaskSpec], int], TaskSource]] = {
    "rods": _rods_like(RODSSource, naive=False),
    "naive": _rods_like(NaiveRODSSource, naive=True),
    "replay_only": replay_only_source,
    "augment": augment_source,
    "offline": offline_source,
    "dapo": dapo_source,
}
