"""A critic-free GRPO learner for the features view (``rods/ToolChain-*-Features-v0``), top to bottom.

Why a second learner beside MaskablePPO: the paper's mechanism is specific to group-relative advantages. Each
step trains on B tasks x G episodes; an episode's advantage is its return normalised within its task's group,
``(R - mean) / (std + adv_eps)`` (``scale_rewards="group"``) or ``R - mean`` (``"none"``, Dr.GRPO), and every
step of the episode carries it (outcome-level, as GRPO does for an LLM's tokens). A group whose G returns are
all equal (a *silent* group) has advantage exactly 0 on every step, so it contributes exactly zero policy
gradient; a critic-based learner (return - V(s)) would still move on it. The loss is PPO's clipped surrogate
(clip range ``[1 - eps_low, 1 + eps_high]``) over a masked categorical on the view's candidate actions
(``action_masks()``), a few epochs over minibatches, with optional k3 KL to the initial policy (``beta``, off by
default) and an optional entropy bonus (``ent_coef``); no value network. The MLP policy runs on one core.

Tasks come from any task source through the same contract as :class:`~rods_gym.curricula.CurriculumEnv`: a
:class:`~rods_gym.curricula.TaskSchedule` hands out ``(step, slot, task)`` episodes, G per task; each batch is
rolled out whole with the current policy (``n_envs`` envs stepped in lockstep, one batched forward pass per
step), every episode's return is reported back, so the source observes the batch's groups (the same returns the
update uses: the curriculum costs no extra episode), then the policy is updated. A source that asks for its own
env (``env_id``/``env_kwargs``, the augmentation arms) is trained in it. Usage::

    from rods_gym import load_split
    from rods_gym.curricula import make_source
    from rods_gym.trainer.features_grpo import FeaturesGRPO, FeaturesGRPOConfig

    source = make_source("rods", load_split("train"), seed=0, group_size=8, env_id="rods/ToolChain-Features-v0")
    learner = FeaturesGRPO("rods/ToolChain-Features-v0", source, FeaturesGRPOConfig(), seed=0)
    learner.learn(196_608)                         # env steps; learn(a); learn(b) runs exactly as learn(a + b)
    actions, _ = learner.predict(obs_batch, action_masks=mask_batch, deterministic=True)  # MaskablePPO's signature
    learner.save("grpo.pt")                        # resume: FeaturesGRPO.load("grpo.pt", a fresh source)

The field names of :class:`FeaturesGRPOConfig` are those of the LLM trainer's ``RolloutConfig`` and
``GRPOConfig`` (``trainer/config.py``) where the idea is the same; the objective's pieces are
:mod:`rods_gym.trainer.grpo`'s. docs/features_grpo.md has the defaults' dev figures and the throughput.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rods_gym.curricula import TaskSchedule, TaskSource, source_env_options

from .grpo import SCALES, clipped_surrogate, group_advantages, k3_kl
from .threads import torch_threads

AGGREGATIONS = ("token", "sequence")  # token: mean over steps; sequence: each episode's step mean, then the mean
MASKED_LOGIT = -1e8  # a masked candidate's logit: probability exactly 0, and no inf - inf in the entropy
CHECKPOINT_VERSION = 1


# -- settings ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FeaturesGRPOConfig:
    """The learner's settings. One step = ``tasks_per_step`` tasks x ``group_size`` episodes; the update makes
    ``epochs * minibatches`` optimizer steps over that step's env steps."""

    # rollouts (trainer.config.RolloutConfig's names)
    group_size: int = 8  # G episodes per task
    tasks_per_step: int = 16  # B tasks per step
    n_envs: int = 16  # envs stepped in lockstep (one batched forward pass per env step)
    # the objective (trainer.config.GRPOConfig's names)
    lr: float = 1e-3
    adam_eps: float = 1e-8
    scale_rewards: str = "group"  # group: (R - mean) / (std + adv_eps); none: R - mean (Dr.GRPO)
    aggregation: str = "token"  # token: mean over env steps; sequence: per-episode mean, then over episodes
    eps_low: float = 0.2  # the ratio's clip range: [1 - eps_low, 1 + eps_high]
    eps_high: float = 0.28
    beta: float = 0.0  # k3 KL coefficient to the initial policy; 0: off (no reference is kept)
    epochs: int = 4  # inner epochs over each step's env steps
    minibatches: int = 4  # optimizer steps per epoch
    max_grad_norm: float = 0.5
    adv_eps: float = 1e-4
    # the policy (this learner's own)
    ent_coef: float = 0.0  # entropy bonus (a regulariser: it moves the policy on silent groups too)
    net_arch: tuple[int, ...] = (64, 64)  # MLP hidden sizes (tanh), as MaskablePPO's MlpPolicy

    def __post_init__(self) -> None:
        for name in ("tasks_per_step", "n_envs", "epochs", "minibatches"):
            if getattr(self, name) < 1:
                raise ValueError(f"FeaturesGRPOConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.group_size < 2:
            raise ValueError(f"FeaturesGRPOConfig.group_size must be >= 2 (a group needs a return variance), "
                             f"got {self.group_size}")
        if self.scale_rewards not in SCALES:
            raise ValueError(f"FeaturesGRPOConfig.scale_rewards must be one of {SCALES}, got {self.scale_rewards!r}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"FeaturesGRPOConfig.aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}")
        for name in ("lr", "adam_eps", "max_grad_norm", "adv_eps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"FeaturesGRPOConfig.{name} must be > 0, got {getattr(self, name)}")
        for name in ("eps_low", "eps_high", "beta", "ent_coef"):
            if getattr(self, name) < 0:
                raise ValueError(f"FeaturesGRPOConfig.{name} must be >= 0, got {getattr(self, name)}")
        if not self.net_arch or any(int(h) < 1 for h in self.net_arch):
            raise ValueError(f"FeaturesGRPOConfig.net_arch must be positive layer sizes, got {self.net_arch}")
        object.__setattr__(self, "net_arch", tuple(int(h) for h in self.net_arch))

    @property
    def episodes_per_step(self) -> int:
        return self.tasks_per_step * self.group_size


# -- the policy: an MLP over the flat observation, a categorical over the candidates that exist ---------
class MaskedMLPPolicy(nn.Module):
    """Observation -> tanh MLP -> one logit per candidate; masked candidates get probability 0.
    Initialised as SB3's MlpPolicy (orthogonal, gain sqrt 2; the action layer 0.01: a near-uniform start)."""

    def __init__(self, obs_dim: int, n_actions: int, net_arch: Sequence[int], generator: torch.Generator) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = obs_dim
        for h in net_arch:
            layers += [nn.Linear(width, h), nn.Tanh()]
            width = h
        layers.append(nn.Linear(width, n_actions))
        self.net = nn.Sequential(*layers)
        with torch.no_grad():
            linears = [m for m in self.net if isinstance(m, nn.Linear)]
            for m in linears:
                gain = 0.01 if m is linears[-1] else float(np.sqrt(2))
                m.weight.copy_(_orthogonal(m.weight.shape, gain, generator))
                m.bias.zero_()

    def forward(self, obs: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        """Log-probabilities [n, n_actions] (``MASKED_LOGIT``-level where ``masks`` is False)."""
        logits = self.net(obs).masked_fill(~masks, MASKED_LOGIT)
        return torch.log_softmax(logits, dim=-1)


def _orthogonal(shape: torch.Size, gain: float, generator: torch.Generator) -> torch.Tensor:
    """``nn.init.orthogonal_``'s matrix, drawn from ``generator`` (not torch's global RNG)."""
    rows, cols = shape
    flat = torch.randn(max(rows, cols), min(rows, cols), generator=generator)
    q, r = torch.linalg.qr(flat)
    q = q * torch.sign(torch.diagonal(r))
    return gain * (q if rows >= cols else q.T)


# -- one step's rollouts -------------------------------------------------------------------------------
@dataclass
class Rollouts:
    """A step's episodes, flattened over env steps. Episode ``e`` is member ``e % G`` of slot ``e // G``."""

    step: int  # the schedule's batch step
    tasks: list[Any]  # the B tasks, in slot order
    obs: torch.Tensor  # [N, obs_dim] float32
    masks: torch.Tensor  # [N, n_actions] bool
    actions: torch.Tensor  # [N] long
    logp: torch.Tensor  # [N] sampling log-probs
    episode: torch.Tensor  # [N] long: the episode each env step belongs to
    returns: torch.Tensor  # [B, G] float64: each episode's return, the sum of its rewards (rounded to 1e-9)
    successes: torch.Tensor  # [B, G] bool

    def __len__(self) -> int:
        return int(self.actions.shape[0])


def advantages(returns: torch.Tensor, scale: str = "group", eps: float = 1e-4) -> torch.Tensor:
    """[B, G] returns -> [B, G] advantages (:func:`~rods_gym.trainer.grpo.group_advantages`), with every silent
    group (all G returns equal) set to exactly 0: its centred returns are 0 in exact arithmetic, but a float mean
    of equal values can round, and the claim that a silent group carries no gradient must hold exactly."""
    adv = group_advantages(returns, scale, eps)
    return adv.masked_fill(silent_groups(returns)[:, None], 0.0)


def silent_groups(returns: torch.Tensor) -> torch.Tensor:
    """[B, G] returns -> [B] bool: the groups whose G returns are all equal (zero return variance)."""
    return returns.amax(dim=1) == returns.amin(dim=1)


def step_weights(episode: torch.Tensor, n_episodes: int, aggregation: str) -> torch.Tensor:
    """Per env step, its weight in the loss's mean: 1 (``token``) or 1 / its episode's length (``sequence``)."""
    if aggregation == "token":
        return torch.ones(episode.shape[0])
    lengths = torch.bincount(episode, minlength=n_episodes).clamp(min=1).to(torch.float32)
    return 1.0 / lengths[episode]


def grpo_loss(policy: MaskedMLPPolicy, obs: torch.Tensor, masks: torch.Tensor, actions: torch.Tensor,
              old_logp: torch.Tensor, adv: torch.Tensor, weights: torch.Tensor, config: FeaturesGRPOConfig,
              ref_logp: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The minibatch loss: weighted mean of the clipped surrogate (+ beta * k3 KL) - ent_coef * entropy."""
    logp_all = policy(obs, masks)
    logp = logp_all.gather(1, actions[:, None]).squeeze(1)
    per_step, low, high = clipped_surrogate(logp, old_logp, adv, config.eps_low, config.eps_high)
    w = weights / weights.sum()
    loss = (per_step * w).sum()
    kl = None
    if config.beta > 0:
        if ref_logp is None:
            raise ValueError("beta > 0 needs the reference policy's log-probs")
        kl = k3_kl(logp, ref_logp)
        loss = loss + config.beta * (kl * w).sum()
    entropy = -(logp_all.exp() * logp_all).sum(dim=1)
    if config.ent_coef > 0:
        loss = loss - config.ent_coef * (entropy * w).sum()
    with torch.no_grad():
        stats = {"clip_low": float(low.float().mean()), "clip_high": float(high.float().mean()),
                 "entropy": float(entropy.mean()), "kl_old": float(k3_kl(logp, old_logp).mean()),
                 "kl_ref": float(kl.mean()) if kl is not None else 0.0}
    return loss, stats


# -- the learner ---------------------------------------------------------------------------------------
class FeaturesGRPO:
    """GRPO on the features view with any task source.

    Args:
        env_id: a registered features-view id (``rods/ToolChain-*-Features-v0``; ``Box`` observation, ``Discrete``
            candidates, ``action_masks()``). The training envs are ``gym.make(train_env_id, **train_env_kwargs)``:
            the source's ``env_id`` and ``env_kwargs`` when it has them (the augmented twin), else ``env_id``
            and ``env_kwargs``.
        source: a :class:`~rods_gym.curricula.TaskSource` (a schedule of ``config.tasks_per_step`` tasks
            x ``config.group_size`` episodes is made), a fresh :class:`~rods_gym.curricula.TaskSchedule` with those
            sizes, or ``None`` for a learner that only predicts (``learn`` then refuses).
        config: :class:`FeaturesGRPOConfig`.
        seed: seeds the initial policy, the sampling, the minibatches and every episode's ``reset`` seed.
        envs: the envs to step in lockstep instead of ``config.n_envs`` made ones: a list (any number; e.g. wrapped
            to time them), each with ``reset(seed=, options={"task": ...})`` and ``action_masks()`` (found through
            ``get_wrapper_attr``), or a vector env made without a schedule (a
            :class:`~rods_gym.features_vector.FeaturesVectorEnv`: its sub-envs, which share their compiled tasks).
            The source's env hook is then the caller's business.
    """

    def __init__(self, env_id: str, source: TaskSource | TaskSchedule | None,
                 config: FeaturesGRPOConfig | None = None, *, seed: int = 0,
                 env_kwargs: Mapping[str, Any] | None = None,
                 envs: Sequence[gym.Env] | gym.vector.VectorEnv | None = None) -> None:
        self.env_id = env_id
        self.config = config or FeaturesGRPOConfig()
        self.seed = int(seed)
        self.env_kwargs = dict(env_kwargs or {})
        self.schedule = _schedule(source, self.config)
        hook = self.schedule.source if self.schedule is not None else None
        self.train_env_id = str(getattr(hook, "env_id", None) or env_id)
        self.train_env_kwargs = {**self.env_kwargs, **dict(getattr(hook, "env_kwargs", None) or {})}
        self._envs = _sub_envs(envs) if isinstance(envs, gym.vector.VectorEnv) else None if envs is None else list(envs)
        if envs is not None and not self._envs:
            raise ValueError("FeaturesGRPO: envs is empty (give at least one env, or None to make config.n_envs)")
        spec_env = self._envs[0] if self._envs else gym.make(self.train_env_id, **self.train_env_kwargs)
        obs_space, act_space = spec_env.observation_space, spec_env.action_space
        if not (isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 1
                and isinstance(act_space, gym.spaces.Discrete)):
            raise ValueError(f"FeaturesGRPO needs a flat Box observation and Discrete actions (the features view, "
                             f"rods/ToolChain-*-Features-v0); {self.train_env_id!r} has {obs_space} and {act_space}")
        self.obs_dim, self.n_actions = int(obs_space.shape[0]), int(act_space.n)
        # every random draw comes from these, seeded here and saved with the learner
        self.rng = np.random.default_rng(self.seed)  # episodes' reset seeds
        self.gen = torch.Generator().manual_seed(self.seed)  # initial weights, action sampling, minibatches
        self.predict_gen = torch.Generator().manual_seed(self.seed + 1)  # predict(deterministic=False) only
        self.policy = MaskedMLPPolicy(self.obs_dim, self.n_actions, self.config.net_arch, self.gen)
        self.reference = copy.deepcopy(self.policy).requires_grad_(False) if self.config.beta > 0 else None
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=self.config.lr, eps=self.config.adam_eps)
        self.num_timesteps = 0  # env steps trained on (MaskablePPO's name)
        self.target_timesteps = 0  # the sum of learn()'s budgets so far
        self.episodes = 0
        self.updates = 0
        self.log: list[dict[str, float]] = []  # one row per step (learn's statistics)

    # -- training ------------------------------------------------------------------------------------
    def learn(self, env_steps: int) -> "FeaturesGRPO":
        """Train until ``env_steps`` more env steps have been run, in whole steps (B x G episodes each): the last
        step ends at or after the budget (by less than one step's env steps). Budgets add up, so ``learn(a)``
        then ``learn(b)`` (saved and loaded in between, or not) runs exactly as ``learn(a + b)``."""
        if self.schedule is None:
            raise ValueError("this FeaturesGRPO has no task source (made or loaded with source=None): it can only "
                             "predict")
        if env_steps < 0:
            raise ValueError(f"learn: env_steps must be >= 0, got {env_steps}")
        self.target_timesteps += int(env_steps)
        envs = self.envs
        with torch_threads(1):
            while self.num_timesteps < self.target_timesteps:
                t0 = time.process_time()
                batch = collect(self, envs)
                t1 = time.process_time()
                self._observe(batch)
                adv = advantages(batch.returns, self.config.scale_rewards, self.config.adv_eps)
                stats = self._update(batch, adv.float())
                self.num_timesteps += len(batch)
                self.episodes += int(batch.returns.numel())
                self.log.append({"env_steps": float(self.num_timesteps), "step": float(batch.step),
                                 "return": float(batch.returns.mean()),
                                 "success": float(batch.successes.float().mean()),
                                 "silent_fraction": float(silent_groups(batch.returns).float().mean()),
                                 "rollout_s": t1 - t0, "update_s": time.process_time() - t1, **stats})
        return self

    @property
    def envs(self) -> list[gym.Env]:
        """The envs ``learn`` steps: the given ones, or ``config.n_envs`` made on first use, sharing the tasks they
        compile (:meth:`~rods_gym.features_env.FeaturesEnv.share_caches`: a group's episodes compile a task once)."""
        if self._envs is None:
            envs = [gym.make(self.train_env_id, **self.train_env_kwargs) for _ in range(self.config.n_envs)]
            for env in envs[1:]:
                env.unwrapped.share_caches(envs[0].unwrapped)
            self._envs = envs
        return self._envs

    def _observe(self, batch: Rollouts) -> None:
        """Every episode's return goes back to the schedule, which has the source observe the step's groups (in
        slot order) once the last one is in: the returns the update is about to use."""
        schedule = self.schedule
        assert schedule is not None
        returns, successes = batch.returns.tolist(), batch.successes.tolist()
        observed = [schedule.report(batch.step, slot, r, ok) for slot in range(len(batch.tasks))
                    for r, ok in zip(returns[slot], successes[slot])]
        if not observed[-1]:
            raise RuntimeError(f"FeaturesGRPO: the schedule did not observe step {batch.step} after its last episode")

    def _update(self, batch: Rollouts, adv: torch.Tensor) -> dict[str, float]:
        """``epochs`` passes over the step's env steps in ``minibatches`` random minibatches."""
        cfg = self.config
        step_adv = adv.reshape(-1)[batch.episode]
        weights = step_weights(batch.episode, adv.numel(), cfg.aggregation)
        ref_logp = None
        if self.reference is not None:
            with torch.no_grad():
                ref_logp = self.reference(batch.obs, batch.masks).gather(1, batch.actions[:, None]).squeeze(1)
        totals: dict[str, float] = {}
        n_mb = 0
        for _ in range(cfg.epochs):
            order = torch.randperm(len(batch), generator=self.gen)
            for idx in order.tensor_split(cfg.minibatches):
                if idx.numel() == 0:
                    continue
                loss, stats = grpo_loss(self.policy, batch.obs[idx], batch.masks[idx], batch.actions[idx],
                                        batch.logp[idx], step_adv[idx], weights[idx], cfg,
                                        None if ref_logp is None else ref_logp[idx])
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                stats["grad_norm"] = float(nn.utils.clip_grad_norm_(self.policy.parameters(), cfg.max_grad_norm))
                self.optimizer.step()
                stats["loss"] = float(loss.detach())
                for k, v in stats.items():
                    totals[k] = totals.get(k, 0.0) + v
                n_mb += 1
        self.updates += 1
        return {k: v / max(1, n_mb) for k, v in totals.items()}

    # -- acting --------------------------------------------------------------------------------------
    def predict(self, observation: np.ndarray, state: Any = None, episode_start: Any = None,
                deterministic: bool = False, action_masks: np.ndarray | None = None) -> tuple[np.ndarray, None]:
        """MaskablePPO.predict's signature: actions for a batch of observations ([n, obs_dim], or one
        [obs_dim]), the most likely valid candidate (``deterministic``) or a sample. ``action_masks`` is
        required (without it every candidate position, existing or not, would be allowed)."""
        if action_masks is None:
            raise ValueError("FeaturesGRPO.predict needs action_masks (the env's action_masks())")
        obs = np.asarray(observation, dtype=np.float32)
        single = obs.ndim == 1
        obs_t = torch.from_numpy(obs.reshape(-1, self.obs_dim))
        masks_t = torch.from_numpy(np.asarray(action_masks, dtype=bool).reshape(-1, self.n_actions))
        _check_masks(masks_t, "predict")
        with torch.no_grad(), torch_threads(1):
            logp = self.policy(obs_t, masks_t)
            if deterministic:
                actions = logp.argmax(dim=1)
            else:
                actions = torch.multinomial(logp.exp(), 1, generator=self.predict_gen).squeeze(1)
        out = actions.numpy()
        return (out[0] if single else out), None

    # -- checkpoints ---------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Everything needed to continue identically: settings, weights, optimizer, RNGs, counters, the
        schedule's position and the task source's ``state_dict``."""
        state = {
            "version": CHECKPOINT_VERSION, "env_id": self.env_id, "env_kwargs": self.env_kwargs, "seed": self.seed,
            "config": asdict(self.config), "policy": self.policy.state_dict(),
            "reference": None if self.reference is None else self.reference.state_dict(),
            "optimizer": self.optimizer.state_dict(), "rng": self.rng.bit_generator.state,
            "gen": self.gen.get_state(), "predict_gen": self.predict_gen.get_state(),
            "counters": {"num_timesteps": self.num_timesteps, "target_timesteps": self.target_timesteps,
                         "episodes": self.episodes, "updates": self.updates},
            "log": self.log,
            "schedule": None if self.schedule is None else self.schedule.state_dict(),  # the source's state too
        }
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        torch.save(state, path)

    @classmethod
    def load(cls, path: str | Path, source: TaskSource | TaskSchedule | None = None, *,
             envs: Sequence[gym.Env] | None = None, env_kwargs: Mapping[str, Any] | None = None) -> "FeaturesGRPO":
        """A learner from :meth:`save`. To continue training, pass a fresh ``source`` of the same kind (built as
        the saved one was): its state is restored from the checkpoint. Without one, the learner only predicts."""
        state = torch.load(path, map_location="cpu", weights_only=False)
        if state.get("version") != CHECKPOINT_VERSION:
            raise ValueError(f"{path}: not a FeaturesGRPO checkpoint of version {CHECKPOINT_VERSION}")
        config = FeaturesGRPOConfig(**{**state["config"], "net_arch": tuple(state["config"]["net_arch"])})
        learner = cls(state["env_id"], source, config, seed=state["seed"],
                      env_kwargs=state["env_kwargs"] if env_kwargs is None else env_kwargs, envs=envs)
        learner.policy.load_state_dict(state["policy"])
        if learner.reference is not None:
            learner.reference.load_state_dict(state["reference"])
        learner.optimizer.load_state_dict(state["optimizer"])
        learner.rng.bit_generator.state = state["rng"]
        learner.gen.set_state(state["gen"])
        learner.predict_gen.set_state(state["predict_gen"])
        for k, v in state["counters"].items():
            setattr(learner, k, int(v))
        learner.log = list(state["log"])
        if learner.schedule is not None:
            if state["schedule"] is None:
                raise ValueError(f"{path} was saved without a task source; it cannot continue training")
            learner.schedule.load_state_dict(state["schedule"])
        return learner


def _schedule(source: TaskSource | TaskSchedule | None, config: FeaturesGRPOConfig) -> TaskSchedule | None:
    """The schedule the learner draws its episodes from (checked against ``config``), or None."""
    if source is None:
        return None
    if isinstance(source, TaskSchedule):
        schedule = source
        if (schedule.tasks_per_batch, schedule.group_size) != (config.tasks_per_step, config.group_size):
            raise ValueError(f"FeaturesGRPO: the schedule hands out {schedule.tasks_per_batch} tasks x "
                             f"{schedule.group_size} episodes, the config asks for {config.tasks_per_step} x "
                             f"{config.group_size} (tasks_per_step x group_size)")
        return schedule
    # the schedule checks the source, and refuses DAPO-style select/refill: a step runs the B x G it planned
    return TaskSchedule(source, tasks_per_batch=config.tasks_per_step, group_size=config.group_size)


def _sub_envs(vec: gym.vector.VectorEnv) -> list[gym.Env]:
    """A vector env's sub-envs, which the learner steps itself: a step runs its B x G planned episodes and nothing
    more, where an autoresetting vector step would start episodes the step did not plan."""
    subs = getattr(vec, "envs", None)
    if subs is None:
        raise ValueError(f"FeaturesGRPO: envs={type(vec).__name__} does not expose its sub-envs (.envs); give a "
                         "FeaturesVectorEnv, a SyncVectorEnv or a list of envs")
    if getattr(vec, "schedule", None) is not None:
        raise ValueError("FeaturesGRPO: the vector env has its own schedule; make it without schedule= (the learner's "
                         "schedule picks every episode's task)")
    return list(subs)


def _check_masks(masks: torch.Tensor, where: str) -> None:
    if not bool(masks.any(dim=1).all()):
        raise ValueError(f"FeaturesGRPO.{where}: an action mask with no valid candidate (row "
                         f"{int((~masks.any(dim=1)).nonzero()[0])})")


# -- the rollout: one step's B x G episodes, n envs in lockstep ----------------------------------------
def collect(learner: FeaturesGRPO, envs: Sequence[gym.Env]) -> Rollouts:
    """Runs the schedule's next batch (every episode of it, nothing more) with ``learner``'s policy: each env
    takes the batch's next episode when its own ends; one forward pass per env step for all running envs.

    The seam for a batched vector env: this function is the only code that touches the envs."""
    schedule, cfg = learner.schedule, learner.config
    assert schedule is not None
    source = schedule.source
    planned = [schedule.next_episode() for _ in range(cfg.episodes_per_step)]
    step = planned[0][0]
    tasks = [task for _, _, task in planned[::cfg.group_size]]
    if any(s != step for s, _, _ in planned) or [sl for _, sl, _ in planned] != sorted(sl for _, sl, _ in planned):
        raise RuntimeError(f"FeaturesGRPO: the schedule did not hand out one whole batch (step {step}); "
                           "is another consumer drawing episodes from it?")
    seeds = learner.rng.integers(0, 2**31 - 1, size=len(planned))
    masks_of = [env.get_wrapper_attr("action_masks") for env in envs]
    n_ep = len(planned)
    returns = np.zeros(n_ep, np.float64)
    successes = np.zeros(n_ep, bool)
    obs_log: list[np.ndarray] = []
    mask_log: list[np.ndarray] = []
    act_log: list[torch.Tensor] = []
    logp_log: list[torch.Tensor] = []
    ep_log: list[np.ndarray] = []
    todo = iter(range(n_ep))  # episodes not started yet, in hand-out order

    def begin(e: int, i: int) -> tuple[int, int, np.ndarray]:
        """Env ``e`` starts episode ``i``: (env, episode, first observation)."""
        task = planned[i][2]
        return e, i, envs[e].reset(seed=int(seeds[i]), options={**source_env_options(source, task), "task": task})[0]

    live = [begin(e, i) for e, i in zip(range(len(envs)), todo)]  # (env, episode, observation), env order
    while live:
        obs = np.stack([o for _, _, o in live]).astype(np.float32, copy=False)
        masks = np.stack([masks_of[e]() for e, _, _ in live]).astype(bool, copy=False)
        obs_t, masks_t = torch.from_numpy(obs), torch.from_numpy(masks)
        _check_masks(masks_t, f"collect (env {learner.env_id})")
        with torch.no_grad():
            logp_all = learner.policy(obs_t, masks_t)
            actions = torch.multinomial(logp_all.exp(), 1, generator=learner.gen).squeeze(1)
        obs_log.append(obs)
        mask_log.append(masks)
        act_log.append(actions)
        logp_log.append(logp_all.gather(1, actions[:, None]).squeeze(1))
        ep_log.append(np.array([i for _, i, _ in live]))
        after = []
        for (e, i, _), a in zip(live, actions.tolist()):
            o, r, terminated, truncated, info = envs[e].step(a)
            returns[i] += float(r)
            if not (terminated or truncated):
                after.append((e, i, o))
                continue
            successes[i] = bool(info.get("success", False))
            following = next(todo, None)
            if following is not None:
                after.append(begin(e, following))
        live = after
    b, g = cfg.tasks_per_step, cfg.group_size
    return Rollouts(step=step, tasks=list(tasks), obs=torch.from_numpy(np.concatenate(obs_log)),
                    masks=torch.from_numpy(np.concatenate(mask_log)), actions=torch.cat(act_log),
                    logp=torch.cat(logp_log), episode=torch.from_numpy(np.concatenate(ep_log)).long(),
                    # rounded: the same outcome reached along another path of rewards compares equal
                    returns=torch.from_numpy(returns.round(9).reshape(b, g)),
                    successes=torch.from_numpy(successes.reshape(b, g)))
