"""Environment augmentation: the same task instances in a perturbed environment.

Two named configurations of one wrapper, :class:`AugmentWrapper` (a ``gymnasium.Wrapper`` around
:class:`~rods_gym.env.ToolChainEnv`), serve two curriculum arms:

* ``augment`` (:data:`FAITHFUL`, ``AugmentConfig()``, ``AugmentConfig.faithful()``): the paper's baseline,
  environment augmentation as EnvTuning defines it. The environment is perturbed, the task instance is not:
  the values the user states, the required calls, their arguments and bindings and the answer stay those
  of the seed. **No new samples.**
* ``augment_redraw`` (:data:`WITH_REDRAW`, ``AugmentConfig.redraw()``): the same perturbations plus
  ``redraw_world``: with probability 0.5 per episode the task's values are re-instantiated on another world
  seed (:meth:`rods_gym.resampler.Resampler.redraw`), a new instance of the seed's structure each time.
  That is per-episode instance resampling (online synthesis without boundary selection), not augmentation.

Per episode, each perturbation with its own intensity in [0, 1] (:class:`AugmentConfig`):

================  ==================================================================  ==============
perturbation      what changes                                                        views
================  ==================================================================  ==============
error_hints       each error message gets an actionable hint (what was wrong, how     chat
                  to fix it: the closest tool name, the missing argument and its
                  type, which available tool yields an unknown id...) with this
                  probability
rename_tools      this share of the task's tools get another name (verb synonym,      chat
                  camelCase, domain prefix or version suffix), consistently in the
                  schemas, tool messages, errors and unlock messages
rename_params     this share of their parameters get another name (camelCase,         chat
                  ``_ref`` for ids, ...); the agent's calls are translated back, and
                  the original names are then unknown
reorder_params    probability that a tool's parameters are listed in another order    chat
paraphrase        probability that a tool's description is reworded                  chat
distractors       extra distractor tools: Binomial(max_extra_distractors, p) per      all
                  episode, preferring the task's domains and kinds
perturb_world     Binomial(max_world_edits, p) edits of the episode's world: extra    all (seen in
                  records (a search or list may also return them) and changed         tool results)
                  fields of records the task never touches; an edit that would
                  change a used output or fail a required call is dropped
                  (:mod:`rods_gym.world_perturbation`)
redraw_world      probability that the task's values are re-instantiated on another   all
                  world seed: a new instance (``augment_redraw`` only; 0 in
                  ``augment``)
================  ==================================================================  ==============

The chat-only perturbations live in the chat view's translating renderer
(:class:`rods_gym.renderers.augmented_chat.AugmentedChatRenderer`), which the wrapper installs in chat mode.
The compact and structured views keep their closed vocabularies and fixed spaces, so renaming would leave
the vocabulary, reordering would move argument slots, and their error observations are an error class and
the parameters it concerns, without text for hints or paraphrases. The features view never shows a tool's
or a value's identity (a candidate is described by what it does relative to the conversation), so renaming,
reordering and paraphrasing would change nothing there. Distractors add tools to every view (in the
features view: call candidates for them), and a perturbed world shows in every view's tool results.
``docs/augmentation.md`` has the per-view table and the changelog.

The oracle (``rods_gym.solve(env)``) solves every augmented episode. All draws come from the wrapper's own
generator, seeded by ``AugmentConfig.seed`` and by ``reset(seed=...)``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Callable, Mapping

import gymnasium as gym
import numpy as np

from .renderers.augmented_chat import AugmentedChatRenderer, EpisodeAugmentation, paraphrase
from .resampler import Resampler
from .task import TaskSpec
from .world_perturbation import WorldPerturbation, perturb_world

__all__ = ["AugmentConfig", "AugmentWrapper", "EpisodeAugmentation", "FAITHFUL", "PRESETS", "WITH_REDRAW",
           "make_augmented_env", "paraphrase"]

RNG_SALT = 0xA06


@dataclass(frozen=True)
class AugmentConfig:
    """Intensities in [0, 1] per perturbation (0 turns it off), the bounds of the counted ones, and the
    wrapper's seed. The defaults are the faithful baseline (``redraw_world=0``: no new samples)."""

    error_hints: float = 1.0
    rename_tools: float = 0.5
    rename_params: float = 0.3
    reorder_params: float = 0.5
    paraphrase: float = 0.5
    distractors: float = 0.5
    perturb_world: float = 0.5
    redraw_world: float = 0.0
    max_extra_distractors: int = 3
    max_world_edits: int = 6
    seed: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.type == "float" or isinstance(getattr(self, f.name), float):
                value = getattr(self, f.name)
                if not 0.0 <= value <= 1.0:
                    raise ValueError(f"AugmentConfig.{f.name} must lie in [0, 1], got {value}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"AugmentConfig.seed must be a non-negative int, got {self.seed!r}")
        for name in ("max_extra_distractors", "max_world_edits"):
            if getattr(self, name) < 0:
                raise ValueError(f"AugmentConfig.{name} must be >= 0, got {getattr(self, name)}")

    @classmethod
    def faithful(cls, seed: int = 0) -> "AugmentConfig":
        """Arm ``augment``, the paper's baseline: the environment perturbed, the task instance kept (the defaults)."""
        return cls(seed=seed)

    @classmethod
    def redraw(cls, seed: int = 0) -> "AugmentConfig":
        """Arm ``augment_redraw``: the faithful perturbations plus, with probability 0.5 per episode, the task's
        values re-instantiated on another world seed (per-episode instance resampling)."""
        return cls(redraw_world=0.5, seed=seed)

    @classmethod
    def full(cls, seed: int = 0) -> "AugmentConfig":
        """Every faithful perturbation at intensity 1 (no redraw: the task instance is kept)."""
        return cls(error_hints=1.0, rename_tools=1.0, rename_params=1.0, reorder_params=1.0, paraphrase=1.0,
                   distractors=1.0, perturb_world=1.0, redraw_world=0.0, seed=seed)

    @classmethod
    def off(cls, seed: int = 0) -> "AugmentConfig":
        """No perturbation (the wrapper is then the identity)."""
        return cls(error_hints=0.0, rename_tools=0.0, rename_params=0.0, reorder_params=0.0, paraphrase=0.0,
                   distractors=0.0, perturb_world=0.0, redraw_world=0.0, seed=seed)

    @property
    def keeps_instances(self) -> bool:
        """Whether every episode runs the seed's own task instance (no redraw): augmentation proper."""
        return self.redraw_world == 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PRESETS: dict[str, Callable[[int], AugmentConfig]] = {
    "faithful": AugmentConfig.faithful, "redraw": AugmentConfig.redraw, "full": AugmentConfig.full,
    "off": AugmentConfig.off}
FAITHFUL = AugmentConfig.faithful()  # arm "augment"
WITH_REDRAW = AugmentConfig.redraw()  # arm "augment_redraw"


# -- the wrapper ------------------------------------------------------------------------------------
class AugmentWrapper(gym.Wrapper):
    """Environment augmentation around a :class:`~rods_gym.env.ToolChainEnv` (see the module docstring).

    ``config``: an :class:`AugmentConfig`, a dict of its fields, or a preset name (``faithful``, ``redraw``,
    ``full``, ``off``: :data:`PRESETS`). ``info["augment"]`` reports what the episode got: ``redrawn`` (bool),
    ``extra_distractors``, ``extra_records`` and ``changed_records`` (the world edits kept), and in chat mode
    ``renamed_tools``, ``renamed_params``, ``reordered``, ``paraphrased``.
    """

    def __init__(self, env: gym.Env, config: AugmentConfig | Mapping[str, Any] | str = FAITHFUL) -> None:
        super().__init__(env)
        base = env.unwrapped
        from .env import ToolChainEnv, config_of

        if not isinstance(base, ToolChainEnv):
            raise TypeError(f"AugmentWrapper wraps a ToolChainEnv, got {type(base).__name__}")
        if config is None:
            raise TypeError("augment must be an AugmentConfig, a dict of its fields or a preset name, not None")
        if isinstance(config, str):
            if config not in PRESETS:
                raise ValueError(f"augment: unknown preset {config!r}; choose one of {sorted(PRESETS)} "
                                 "(or pass an AugmentConfig or a dict of its fields)")
            config = PRESETS[config](0)
        self.config: AugmentConfig = config_of(AugmentConfig, config, "augment")
        self.rng = np.random.default_rng([self.config.seed, RNG_SALT])
        self.resampler = Resampler(base.suite) if self.config.redraw_world > 0 else None
        self.chat = base.mode == "chat"
        if self.chat:
            base.renderer = AugmentedChatRenderer(base.renderer, self)
        self.world_edits = WorldPerturbation()
        self._report: dict[str, Any] = {}

    @property
    def plan(self) -> EpisodeAugmentation | None:
        """The chat-level changes of the current episode (``None`` outside chat mode)."""
        return self.env.unwrapped.renderer.plan if self.chat else None

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """The env's episode, then (in this order, each from the wrapper's generator): the task-level changes
        (redraw, distractors; the episode restarts on the changed task), then the world edits, written into
        the episode's own state (no view's first observation reads the world, so it stands)."""
        if seed is not None:
            self.rng = np.random.default_rng([seed, self.config.seed, RNG_SALT])
        obs, info = self.env.reset(seed=seed, options=options)
        base = self.env.unwrapped
        task = base.task
        augmented = self.augment_task(task)
        if augmented is not task:
            obs, info = self.env.reset(options={"task": augmented})
        self.world_edits = self.perturb_world(augmented)
        self.world_edits.apply(base.episode.state, base.suite)
        self._report = {"redrawn": augmented.world_seed != task.world_seed or augmented.calls != task.calls,
                        "extra_distractors": len(augmented.distractors) - len(task.distractors),
                        "extra_records": self.world_edits.added, "changed_records": self.world_edits.changed}
        if self.chat:
            plan = self.plan
            assert plan is not None
            self._report.update({
                "renamed_tools": sum(a != t for t, a in plan.tool_alias.items()),
                "renamed_params": sum(a != p for m in plan.param_alias.values() for p, a in m.items()),
                "reordered": sum(o != self._names(t) for t, o in plan.param_order.items()),
                "paraphrased": sum(d != base.suite.tools[t].description for t, d in plan.descriptions.items()),
            })
        info["augment"] = dict(self._report)
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        info["augment"] = dict(self._report)
        return obs, reward, terminated, truncated, info

    def _names(self, tool: str) -> tuple[str, ...]:
        return self.env.unwrapped.suite.tools[tool].param_names

    def augment_task(self, task: TaskSpec) -> TaskSpec:
        """The task-level changes: with ``redraw_world``, the values re-drawn on another world (a new instance;
        ``augment_redraw`` only); extra distractor tools (the calls, values and answer stay the task's)."""
        cfg = self.config
        out = task
        if self.resampler is not None and self.rng.random() < cfg.redraw_world:
            redrawn = self.resampler.redraw(task, self.rng)
            if redrawn is not None:
                out = redrawn
        if cfg.distractors > 0 and cfg.max_extra_distractors > 0:
            k = int(self.rng.binomial(cfg.max_extra_distractors, cfg.distractors))
            extra = self._extra_distractors(out, k)
            if extra:
                out = replace(out, distractors=out.distractors + extra)
        return out

    def perturb_world(self, task: TaskSpec) -> WorldPerturbation:
        """Binomial(``max_world_edits``, ``perturb_world``) edits of the task's world that keep the task the
        same task (:func:`rods_gym.world_perturbation.perturb_world`)."""
        cfg = self.config
        if cfg.perturb_world <= 0 or cfg.max_world_edits <= 0:
            return WorldPerturbation()
        k = int(self.rng.binomial(cfg.max_world_edits, cfg.perturb_world))
        return perturb_world(task, self.env.unwrapped.suite, self.rng, k)

    def _extra_distractors(self, task: TaskSpec, k: int) -> tuple[str, ...]:
        if k <= 0:
            return ()
        suite = self.env.unwrapped.suite
        used = set(task.tools)
        doms = {suite.tools[t].domain for t in used}
        kinds = {suite.tools[t].kind for t in used}
        free = [t for t in suite.tool_names if t not in used]
        similar = [t for t in free if suite.tools[t].domain in doms or suite.tools[t].kind in kinds]
        pool = similar if len(similar) >= k else free
        k = min(k, len(pool))
        picks = self.rng.choice(len(pool), size=k, replace=False)
        return tuple(pool[int(j)] for j in sorted(picks))

    def oracle_action(self) -> Any:
        """The oracle's next action in this episode's names and the env's action format."""
        return self.env.unwrapped.oracle_action()


def make_augmented_env(augment: AugmentConfig | Mapping[str, Any] | str | None = None,
                       **env_kwargs: Any) -> AugmentWrapper:
    """A :class:`~rods_gym.env.ToolChainEnv` (``env_kwargs``) inside an :class:`AugmentWrapper` (``augment``: a
    config, a dict of its fields or a preset name; default the faithful baseline): the entry point of
    ``rods/ToolChain-Aug-*-v0``."""
    from .env import ToolChainEnv

    return AugmentWrapper(ToolChainEnv(**env_kwargs), augment if augment is not None else FAITHFUL)
