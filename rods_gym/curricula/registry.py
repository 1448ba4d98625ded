"""One registry of curriculum arms: name -> how to build its task source, with a typed options dataclass.

Every host names arms the same way: ``rods train`` (``data.source`` / ``data.source_options``), the SB3
callback, the features GRPO learner, the TRL / verl / OpenEnv / verifiers adapters and the benchmarks all call
:func:`make_source`::

    from rods_gym.curricula import make_source
    source = make_source("rods", seeds, seed=0, group_size=8, env_id="rods/ToolChain-Features-v0",
                         options={"synth_every": 2})

==================  ===========================================================================================
arm                 what it serves (options)
==================  ===========================================================================================
``fixed``           epochs over the seeds (none)
``augment``         the seeds, every episode in the augmented env: the environment perturbed, no new samples
                    (``augment``: AugmentConfig fields over the arm's default)
``augment_redraw``  ``augment`` plus the task's values redrawn on another world per episode (a new instance
                    each episode: online synthesis without boundary selection) (``augment``)
``offline``         epochs over a set synthesized once, up front, by ``rods synth`` (``path``, required)
``procedural``      a fresh, never-repeated sampler task for every group: the upper reference (``view``)
``rods``            RODS (RODSConfig fields, ``decontaminate``, ``exclude_tools``)
``replay_only``     ablation: variance-prioritized replay of the seeds, no synthesis (non-synthesis RODSConfig
                    fields)
``naive``           ablation: RODS with the structure-blind resampler (as ``rods``)
``rods_random``     ablation: RODS with synthesis parents drawn at random, not from the boundary (as ``rods``)
``rods_augment``    RODS's source trained in the ``augment`` env (as ``rods``, plus ``augment``)
``dapo``            ablation: DAPO-style dynamic sampling, ``rods train`` only (``max_refill_rounds``,
                    ``min_informative_rate``)
``bfcl_rods``       RODS on BFCL-V3 multi-turn tasks (``pool_share``, ``per_parent``, ``pool_size``)
==================  ===========================================================================================

Options arrive as a mapping (a YAML block, a JSON string, keyword arguments) or as the arm's options dataclass;
an unknown or mistyped field is a ``ValueError`` naming the arm, the field and what the arm takes. Arms from
other packages join through the ``rods_gym.arms`` entry-point group: each entry point names an :class:`Arm`.
The registry itself is an immutable mapping built once (:data:`ARMS`); :func:`available_arms` adds the entry
points on each call (no global mutable state).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

from ..augment import FAITHFUL, WITH_REDRAW, AugmentConfig
from ..envs import SPLITS, taskset_path
from ..suite import Suite
from ..synth import make_resampler
from ..task import TaskSpec, read_jsonl
from ..tasksets import HELD_OUT_SPLITS, held_out_tasks
from .augmented import AugmentedRODSSource, AugmentedSeeds, RedrawSeeds, augmented_env_id
from .config import RODSConfig
from .dapo import DynamicSamplingSource
from .fixed import FixedSeeds
from .offline import OfflinePipeline
from .procedural import ProceduralSource
from .rods import NaiveRODSSource, RandomParentRODSSource, ReplayOnlySource, RODSSource
from .source import TaskSource, check_task_source

ENTRY_POINT_GROUP = "rods_gym.arms"


@dataclass(frozen=True)
class ArmContext:
    """What a host tells every arm: the seed tasks, the run's seed, G, and the env it trains in.

    ``env_id`` is the host's plain env: the augmented arms train in its twin
    (:func:`~rods_gym.curricula.augmented.augmented_env_id`); ``None`` means the chat view.
    """

    seeds: tuple[TaskSpec, ...]
    seed: int = 0
    group_size: int = 8
    env_id: str | None = None
    suite: Suite | None = None


# -- options -------------------------------------------------------------------------------------
def _fields_of(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _refuse_unknown(where: str, given: Mapping[str, Any], allowed: Sequence[str]) -> None:
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ValueError(f"{where}: unknown option(s) {unknown}; it takes {sorted(allowed) or 'no options'}")


def _tuple_lists(values: Mapping[str, Any]) -> dict[str, Any]:
    """YAML and JSON give lists where the dataclasses hold tuples."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


@dataclass(frozen=True)
class FlatOptions:
    """Options that are plain fields: unknown names and values of another type than the field's default are
    refused with the field named (an int is accepted for a float field)."""

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any], ctx: ArmContext, where: str) -> Any:
        _refuse_unknown(where, options, _fields_of(cls))
        for f in dataclasses.fields(cls):
            if f.name in options:
                want = type(f.default)
                value = options[f.name]
                ok = isinstance(value, want) and not (isinstance(value, bool) and want is not bool) or (
                    want is float and isinstance(value, int) and not isinstance(value, bool))
                if not ok:
                    raise ValueError(f"{where}: {f.name} must be {want.__name__}, got {value!r}")
        return cls(**options)


@dataclass(frozen=True)
class NoOptions(FlatOptions):
    """An arm without options."""


def _rods_config(options: Mapping[str, Any], ctx: ArmContext, where: str) -> RODSConfig:
    """The RODSConfig of ``options`` (its fields only), G from the host; a G that differs is named."""
    fields = _tuple_lists(options)
    if fields.get("group_size", ctx.group_size) != ctx.group_size:
        raise ValueError(f"{where}: group_size={fields['group_size']} differs from the host's G={ctx.group_size}")
    try:
        return RODSConfig.from_dict({**fields, "group_size": int(ctx.group_size)})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class RODSOptions:
    """RODS and its structure/parent ablations: every :class:`RODSConfig` field (flat), plus

    - ``decontaminate``: split names or JSONL paths whose tasks variants must not repeat (default dev, test, ood);
    - ``exclude_tools``: tools variants never use (default: the OOD split's held-out tools).
    """

    config: RODSConfig = RODSConfig()
    decontaminate: tuple[str, ...] = HELD_OUT_SPLITS
    exclude_tools: tuple[str, ...] | None = None
    EXTRA: ClassVar[tuple[str, ...]] = ("decontaminate", "exclude_tools")

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any], ctx: ArmContext, where: str) -> "RODSOptions":
        _refuse_unknown(where, options, _fields_of(RODSConfig) + list(cls.EXTRA))
        extra = _tuple_lists({k: options[k] for k in cls.EXTRA if k in options})
        config = _rods_config({k: v for k, v in options.items() if k not in cls.EXTRA}, ctx, where)
        return cls(config, **extra)

    def held_out(self) -> list[TaskSpec]:
        """The tasks named by ``decontaminate`` (a split not built yet contributes none)."""
        out: list[TaskSpec] = []
        for name in self.decontaminate:
            if name in SPLITS:
                out.extend(held_out_tasks((name,)) if taskset_path(name).exists() else [])
            elif Path(name).is_file():
                out.extend(read_jsonl(name))
            else:
                raise ValueError(f"decontaminate: {name!r} is neither a split {SPLITS} nor an existing JSONL file")
        return out


# RODSConfig fields that only synthesis reads: the replay-only ablation refuses them rather than ignore them
SYNTHESIS_FIELDS = ("synthesize", "synth_every", "variants_per_parent", "parents_per_round", "max_generation",
                    "lineage_cap", "signature_cap", "min_admission_yield", "yield_window", "stop_patience")


@dataclass(frozen=True)
class ReplayOnlyOptions:
    """The replay-only ablation: the detector and replay fields of :class:`RODSConfig` (synthesis refused)."""

    config: RODSConfig = RODSConfig()

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any], ctx: ArmContext, where: str) -> "ReplayOnlyOptions":
        synthesis = sorted(set(options) & set(SYNTHESIS_FIELDS))
        if synthesis:
            raise ValueError(f"{where}: the replay_only ablation never synthesizes, so {synthesis} would do nothing; "
                             "drop them (arm rods synthesizes)")
        _refuse_unknown(where, options, [f for f in _fields_of(RODSConfig) if f not in SYNTHESIS_FIELDS])
        return cls(_rods_config(options, ctx, where))


def _augment_config(given: Any, default: AugmentConfig, where: str) -> AugmentConfig:
    """``given`` (AugmentConfig fields, or an AugmentConfig) over the arm's ``default``."""
    if isinstance(given, AugmentConfig):
        return given
    known = _fields_of(AugmentConfig)
    if not isinstance(given, Mapping):
        raise ValueError(f"{where}: augment must be a mapping of AugmentConfig fields, e.g. {{error_hints: 0.5}}, "
                         f"got {given!r}; its fields: {known}")
    _refuse_unknown(f"{where}: augment", given, known)
    try:
        return dataclasses.replace(default, **given)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: augment: {exc}") from None


# The augmentation arms' environments (rods_gym.augment): ``augment`` is the paper's baseline (no redraw, so the task
# instance is the seed's); ``augment_redraw`` is the same plus the task's values re-instantiated per episode.
FAITHFUL_AUGMENT, REDRAW_AUGMENT = FAITHFUL, WITH_REDRAW


@dataclass(frozen=True)
class AugmentOptions:
    """``augment``: :class:`~rods_gym.augment.AugmentConfig` fields over the arm's default configuration."""

    augment: AugmentConfig = FAITHFUL_AUGMENT
    DEFAULT: ClassVar[AugmentConfig] = FAITHFUL_AUGMENT

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any], ctx: ArmContext, where: str) -> "AugmentOptions":
        _refuse_unknown(where, options, ["augment"])
        return cls(_augment_config(options.get("augment", {}), cls.DEFAULT, where))

    def env_kwargs(self) -> dict[str, Any]:
        return {"augment": dataclasses.asdict(self.augment)}


@dataclass(frozen=True)
class RedrawOptions(AugmentOptions):
    augment: AugmentConfig = REDRAW_AUGMENT
    DEFAULT: ClassVar[AugmentConfig] = REDRAW_AUGMENT


@dataclass(frozen=True)
class RODSAugmentOptions:
    """``rods_augment``: RODS's options and the ``augment`` env's."""

    rods: RODSOptions = RODSOptions()
    env: AugmentOptions = AugmentOptions()

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any], ctx: ArmContext, where: str) -> "RODSAugmentOptions":
        rods = {k: v for k, v in options.items() if k != "augment"}
        env = {k: v for k, v in options.items() if k == "augment"}
        return cls(RODSOptions.from_mapping(rods, ctx, where), AugmentOptions.from_mapping(env, ctx, where))


@dataclass(frozen=True)
class OfflineOptions:
    """``path``: the JSONL written by ``rods synth --n 17000 --out PATH`` (required)."""

    path: str = ""

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any], ctx: ArmContext, where: str) -> "OfflineOptions":
        _refuse_unknown(where, options, ["path"])
        if not options.get("path"):
            raise ValueError(f"{where}: path is required: the JSONL of `rods synth --n 17000 --out PATH`")
        return cls(str(options["path"]))


@dataclass(frozen=True)
class ProceduralOptions(FlatOptions):
    """``view``: the env view each fresh task is oracle-solved in before it is handed out."""

    view: str = "structured"


@dataclass(frozen=True)
class DAPOOptions(FlatOptions):
    max_refill_rounds: int = 3
    min_informative_rate: float = 0.25


@dataclass(frozen=True)
class BFCLRodsOptions(FlatOptions):
    pool_share: float = 0.5
    per_parent: int = 2
    pool_size: int = 512


# -- the arms ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Arm:
    """A curriculum arm: its name, a one-line summary, its options type and how to build its source.

    ``options`` is a frozen dataclass with a ``from_mapping(options, ctx, where)`` classmethod; ``build(ctx,
    options)`` returns the task source. ``trains_augmented``: the source carries ``env_id``/``env_kwargs`` of an
    augmented env the host must train in (it evaluates in the plain one).
    """

    name: str
    summary: str
    options: type
    build: Callable[[ArmContext, Any], TaskSource]
    trains_augmented: bool = False
    needs_refill: bool = False  # select/refill: only rods train's loop can run it


def _train_env(ctx: ArmContext) -> str:
    return augmented_env_id(ctx.env_id or "rods/ToolChain-v0")


def _rods_like(cls: type[RODSSource], naive: bool = False) -> Callable[[ArmContext, RODSOptions], TaskSource]:
    def build(ctx: ArmContext, opts: RODSOptions) -> TaskSource:
        held = opts.held_out()
        resampler = make_resampler(ctx.suite, decontaminate=held, naive=naive, exclude_tools=opts.exclude_tools)
        return cls(ctx.seeds, resampler, opts.config, ctx.seed, decontaminate=held, suite=ctx.suite)

    return build


def _rods_augment(ctx: ArmContext, opts: RODSAugmentOptions) -> TaskSource:
    held = opts.rods.held_out()
    resampler = make_resampler(ctx.suite, decontaminate=held, exclude_tools=opts.rods.exclude_tools)
    return AugmentedRODSSource(ctx.seeds, resampler, opts.rods.config, ctx.seed, decontaminate=held, suite=ctx.suite,
                               env_id=_train_env(ctx), env_kwargs=opts.env.env_kwargs())


def _bfcl_rods(ctx: ArmContext, opts: BFCLRodsOptions) -> TaskSource:
    from ..bfcl.trainer import BFCLRodsSource  # BFCL's data and backends load only when this arm is built

    return BFCLRodsSource(ctx.seeds, ctx.seed, **dataclasses.asdict(opts))


def _arms(*arms: Arm) -> Mapping[str, Arm]:
    return MappingProxyType({a.name: a for a in arms})


ARMS: Mapping[str, Arm] = _arms(
    Arm("fixed", "fixed-data RL: epochs over the seeds", NoOptions, lambda ctx, o: FixedSeeds(ctx.seeds, ctx.seed)),
    Arm("augment", "environment augmentation (the paper's baseline): the seeds in a perturbed env, no new samples",
        AugmentOptions, lambda ctx, o: AugmentedSeeds(ctx.seeds, ctx.seed, env_id=_train_env(ctx),
                                                      env_kwargs=o.env_kwargs()), trains_augmented=True),
    Arm("augment_redraw", "augmentation plus per-episode redraw of the task's values (instance resampling)",
        RedrawOptions, lambda ctx, o: RedrawSeeds(ctx.seeds, ctx.seed, env_id=_train_env(ctx),
                                                  env_kwargs=o.env_kwargs()), trains_augmented=True),
    Arm("offline", "offline pipeline: epochs over a set synthesized once, up front (rods synth)", OfflineOptions,
        lambda ctx, o: OfflinePipeline.from_jsonl(o.path, ctx.seed)),
    Arm("procedural", "a fresh sampler task for every group (the upper reference)", ProceduralOptions,
        lambda ctx, o: ProceduralSource(ctx.seed, view=o.view, suite=ctx.suite)),
    Arm("rods", "RODS: variance boundary -> signature-exact resampling -> replay pool", RODSOptions,
        _rods_like(RODSSource)),
    Arm("replay_only", "ablation: variance-prioritized replay of the seeds, no synthesis", ReplayOnlyOptions,
        lambda ctx, o: ReplayOnlySource(ctx.seeds, o.config, ctx.seed, suite=ctx.suite)),
    Arm("naive", "ablation: RODS with the structure-blind resampler", RODSOptions,
        _rods_like(NaiveRODSSource, naive=True)),
    Arm("rods_random", "ablation: RODS with synthesis parents drawn at random", RODSOptions,
        _rods_like(RandomParentRODSSource)),
    Arm("rods_augment", "RODS's source trained in the augment env", RODSAugmentOptions, _rods_augment,
        trains_augmented=True),
    Arm("dapo", "ablation: DAPO-style dynamic sampling over the seeds (rods train only)", DAPOOptions,
        lambda ctx, o: DynamicSamplingSource(ctx.seeds, ctx.seed, **dataclasses.asdict(o)), needs_refill=True),
    Arm("bfcl_rods", "RODS on BFCL-V3 multi-turn tasks (tier-0 variants, replay pool)", BFCLRodsOptions, _bfcl_rods),
)


def available_arms() -> dict[str, Arm]:
    """The built-in :data:`ARMS` and every :class:`Arm` of the ``rods_gym.arms`` entry-point group."""
    arms = dict(ARMS)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        arm = ep.load()
        if not isinstance(arm, Arm) or arm.name != ep.name:
            raise TypeError(f"entry point {ep.name!r} of {ENTRY_POINT_GROUP} must name an Arm called {ep.name!r}, "
                            f"got {arm!r}")
        arms[ep.name] = arm
    return arms


def arm_names() -> tuple[str, ...]:
    return tuple(sorted(available_arms()))


def parse_options(name: str, options: Mapping[str, Any] | Any | None, ctx: ArmContext, where: str | None = None) -> Any:
    """Arm ``name``'s options dataclass from a mapping (or the dataclass itself); errors name the arm and field.
    ``where`` says where the options came from in messages (default ``options of arm NAME``)."""
    arms = available_arms()
    if name not in arms:
        raise ValueError(f"unknown curriculum arm {name!r}; choose one of {tuple(sorted(arms))}")
    arm = arms[name]
    if isinstance(options, arm.options):
        return options
    if options is not None and not isinstance(options, Mapping):
        raise ValueError(f"{where or f'options of arm {name!r}'} must be a mapping or {arm.options.__name__}, got "
                         f"{options!r}")
    return arm.options.from_mapping(dict(options or {}), ctx, where or f"options of arm {name!r}")


def make_source(name: str, seeds: Sequence[TaskSpec], *, seed: int = 0, group_size: int = 8, env_id: str | None = None,
                options: Mapping[str, Any] | Any | None = None, suite: Suite | None = None,
                where: str | None = None) -> TaskSource:
    """The task source of arm ``name`` over ``seeds`` (see the module's table).

    Args:
        seeds: the seed tasks (the train split's 400 for the suite; BFCL's for ``bfcl_rods``).
        seed: the run's seed (the source's generators).
        group_size: G, the host's rollouts per task (RODS's detector needs it).
        env_id: the host's plain env id (the augmented arms train in its twin).
        options: the arm's options, as a mapping or its options dataclass.
        suite: the domains (default: the built-in suite).
        where: where the options came from, for error messages (e.g. ``data.source_options``).
    """
    if not seeds:
        raise ValueError(f"arm {name!r} needs at least one seed task")
    ctx = ArmContext(tuple(seeds), int(seed), int(group_size), env_id, suite)
    opts = parse_options(name, options, ctx, where)
    source = available_arms()[name].build(ctx, opts)
    check_task_source(source, name)
    return source
