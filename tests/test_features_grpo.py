"""The critic-free GRPO learner on the features view (rods_gym.trainer.features_grpo): a silent group carries
exactly zero policy gradient, it learns a small fixed task set, same seed -> same parameters, a resumed run
continues identically, and the curriculum observes every group once with the returns the learner trained on."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
import pytest
import torch

import rods_gym  # noqa: F401  (registers the env ids)
from rods_gym import TaskSpec, load_split
from rods_gym.curricula import DynamicSamplingSource, FixedSeeds, GroupResult, TaskSchedule, make_source
from rods_gym.trainer.features_grpo import (FeaturesGRPO, FeaturesGRPOConfig, Rollouts, advantages, collect,
                                            grpo_loss, step_weights)

ENV_ID = "rods/ToolChain-Easy-Features-v0"
SMALL = FeaturesGRPOConfig(group_size=4, tasks_per_step=4, n_envs=4, epochs=2, minibatches=2)


def spread(n: int, stop: int = 400) -> list[TaskSpec]:
    """``n`` train tasks evenly spaced over the first ``stop`` (the split is ordered by stratum and depth)."""
    tasks = load_split("train")
    return [tasks[int(i)] for i in np.linspace(0, stop - 1, n).round()]


def params(learner: FeaturesGRPO) -> list[torch.Tensor]:
    return [p.detach().clone() for p in learner.policy.parameters()]


def same(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


class Recording(FixedSeeds):
    """Fixed seeds that remember every batch handed out and every group observed."""

    def __init__(self, tasks: Sequence[TaskSpec], seed: int = 0) -> None:
        super().__init__(tasks, seed)
        self.handed: list[tuple[int, list[str]]] = []
        self.observed: list[tuple[int, list[GroupResult]]] = []

    def next_batch(self, step: int, n_tasks: int) -> list[TaskSpec]:
        out = super().next_batch(step, n_tasks)
        self.handed.append((step, [t.id for t in out]))
        return out

    def observe(self, step: int, groups: Sequence[GroupResult]) -> None:
        self.observed.append((step, list(groups)))
        super().observe(step, groups)


class Counting(gym.Wrapper):
    """Counts env steps and episodes, and each episode's (task id, return)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.steps = 0
        self.episodes: list[list[Any]] = []

    def reset(self, **kwargs: Any) -> Any:
        out = self.env.reset(**kwargs)
        self.episodes.append([kwargs["options"]["task"].id, 0.0])
        return out

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        self.steps += 1
        self.episodes[-1][1] += float(out[1])
        return out


class Watched(FeaturesGRPO):
    """Keeps the returns of every step it updated on."""

    trained_returns: list[torch.Tensor]

    def _update(self, batch: Rollouts, adv: torch.Tensor) -> dict[str, float]:
        self.__dict__.setdefault("trained_returns", []).append(batch.returns.clone())
        return super()._update(batch, adv)


def policy_grads(learner: FeaturesGRPO, batch: Rollouts, returns: torch.Tensor,
                 keep: torch.Tensor | None = None) -> list[torch.Tensor]:
    """The gradient of the GRPO loss of ``batch`` (with ``returns`` in place of its own), over the env steps
    ``keep`` (default: all)."""
    cfg = learner.config
    adv = advantages(returns, cfg.scale_rewards, cfg.adv_eps).float().reshape(-1)[batch.episode]
    weights = step_weights(batch.episode, returns.numel(), cfg.aggregation)
    idx = torch.arange(len(batch)) if keep is None else keep.nonzero().squeeze(1)
    learner.policy.zero_grad(set_to_none=False)
    loss, _ = grpo_loss(learner.policy, batch.obs[idx], batch.masks[idx], batch.actions[idx], batch.logp[idx],
                        adv[idx], weights[idx], cfg)
    loss.backward()
    return [p.grad.detach().clone() for p in learner.policy.parameters()]


def test_a_silent_group_carries_exactly_zero_policy_gradient() -> None:
    learner = FeaturesGRPO(ENV_ID, FixedSeeds(spread(8), seed=0), SMALL, seed=0)
    batch = collect(learner, learner.envs)
    b, g = batch.returns.shape
    # every group silent (all G returns equal; different levels per group): every gradient entry is exactly 0
    silent = torch.linspace(0.0, 1.0, b, dtype=torch.float64)[:, None].expand(b, g).clone()
    grads = policy_grads(learner, batch, silent)
    assert all(bool((gr == 0).all()) for gr in grads)
    assert float(advantages(silent).abs().max()) == 0.0
    # one group with a return variance: the gradient is not zero ...
    live = silent.clone()
    live[0] = torch.tensor([0.0, 1.0, 0.0, 0.5], dtype=torch.float64)
    grads_live = policy_grads(learner, batch, live)
    assert any(bool((gr != 0).any()) for gr in grads_live)
    # ... and it is that group's alone: the silent groups' env steps add nothing (token mean: scaled by its share)
    in_group0 = batch.episode < g
    alone = policy_grads(learner, batch, live, keep=in_group0)
    share = float(in_group0.sum()) / len(batch)
    for full, own in zip(grads_live, alone):
        torch.testing.assert_close(full, own * share, rtol=1e-5, atol=1e-9)
    # Dr.GRPO (no std) likewise
    assert float(advantages(silent, scale="none").abs().max()) == 0.0


def test_a_silent_group_is_exact_even_when_the_float_mean_rounds() -> None:
    r = torch.full((1, 7), 0.1, dtype=torch.float64)
    assert float(advantages(r).abs().max()) == 0.0
    assert float(advantages(torch.tensor([[0.1, 0.1, 0.2]]), scale="none").abs().max()) > 0.0


def greedy_success(learner_predict: Any, tasks: Sequence[TaskSpec]) -> float:
    env = gym.make(ENV_ID)
    wins = 0
    for task in tasks:
        obs, _ = env.reset(seed=0, options={"task": task})
        done, info = False, {}
        while not done:
            a, _ = learner_predict(obs[None], action_masks=env.unwrapped.action_masks()[None], deterministic=True)
            obs, _, term, trunc, info = env.step(int(a[0]))
            done = term or trunc
        wins += bool(info["success"])
    return wins / len(tasks)


def random_predict(seed: int) -> Any:
    rng = np.random.default_rng(seed)

    def predict(obs: Any, action_masks: np.ndarray, deterministic: bool = True) -> Any:
        return np.array([rng.choice(np.flatnonzero(m)) for m in action_masks]), None

    return predict


def test_learns_a_small_fixed_task_set_well_above_the_random_agent() -> None:
    # 8 single-turn tasks of every stratum and depth 1-5 (multi-turn tasks stay near 0 for every learner so far)
    single = [t for t in load_split("train") if t.meta["stratum"] != "multi_turn"]
    tasks = [single[int(i)] for i in np.linspace(0, len(single) - 1, 8).round()]
    config = FeaturesGRPOConfig(group_size=8, tasks_per_step=8, n_envs=8)
    learner = FeaturesGRPO(ENV_ID, FixedSeeds(tasks, seed=0), config, seed=0).learn(6_000)
    random = np.mean([greedy_success(random_predict(k), tasks) for k in range(3)])
    learned = greedy_success(learner.predict, tasks)
    assert learned >= 0.5 and learned >= random + 0.3, (learned, random)
    first, last = learner.log[0]["success"], np.mean([r["success"] for r in learner.log[-3:]])
    assert last >= 0.6 and last >= first + 0.3, (first, last)  # the sampled episodes it trained on


def test_same_seed_same_parameters_other_seed_other_parameters() -> None:
    runs = [FeaturesGRPO(ENV_ID, FixedSeeds(spread(8), seed=0), SMALL, seed=s).learn(300) for s in (0, 0, 1)]
    assert same(params(runs[0]), params(runs[1]))
    assert not same(params(runs[0]), params(runs[2]))
    assert runs[0].num_timesteps == runs[1].num_timesteps >= 300


def test_a_resumed_run_continues_identically(tmp_path: Path) -> None:
    config = FeaturesGRPOConfig(group_size=4, tasks_per_step=4, n_envs=4, epochs=2, minibatches=2, beta=0.05,
                                ent_coef=0.01)  # the reference policy and the entropy term travel too
    whole = FeaturesGRPO(ENV_ID, FixedSeeds(spread(8), seed=3), config, seed=3).learn(500)
    first = FeaturesGRPO(ENV_ID, FixedSeeds(spread(8), seed=3), config, seed=3).learn(200)
    first.save(tmp_path / "grpo.pt")
    assert first.num_timesteps < whole.num_timesteps  # the save is mid-run
    resumed = FeaturesGRPO.load(tmp_path / "grpo.pt", FixedSeeds(spread(8), seed=99)).learn(300)
    assert same(params(resumed), params(whole))
    assert (resumed.num_timesteps, resumed.episodes, resumed.updates) == (whole.num_timesteps, whole.episodes,
                                                                         whole.updates)
    assert resumed.schedule.source.state_dict() == whole.schedule.source.state_dict()
    timing = {"rollout_s", "update_s"}
    assert [{k: v for k, v in r.items() if k not in timing} for r in resumed.log] == \
        [{k: v for k, v in r.items() if k not in timing} for r in whole.log]
    # the optimizer's moments came along: one more step still agrees
    assert same(params(resumed.learn(100)), params(whole.learn(100)))


def test_a_vector_env_runs_as_the_same_envs_would() -> None:
    from rods_gym.features_vector import FeaturesVectorEnv

    def run(envs: Any) -> FeaturesGRPO:
        return FeaturesGRPO(ENV_ID, FixedSeeds(spread(8), seed=2), SMALL, seed=2, envs=envs).learn(300)

    vec = run(FeaturesVectorEnv(3))
    listed = run([gym.make(ENV_ID) for _ in range(3)])
    assert same(params(vec), params(listed)) and vec.num_timesteps == listed.num_timesteps
    with pytest.raises(ValueError, match="own schedule"):
        run(FeaturesVectorEnv(2, schedule=TaskSchedule(FixedSeeds(spread(4)), tasks_per_batch=4, group_size=4)))


def test_predict_only_learner_loads_without_a_source(tmp_path: Path) -> None:
    learner = FeaturesGRPO(ENV_ID, FixedSeeds(spread(8), seed=0), SMALL, seed=0).learn(100)
    learner.save(tmp_path / "grpo.pt")
    loaded = FeaturesGRPO.load(tmp_path / "grpo.pt")
    env = gym.make(ENV_ID)
    obs, _ = env.reset(options={"task": spread(8)[3]})
    mask = env.unwrapped.action_masks()
    one, _ = loaded.predict(obs, action_masks=mask, deterministic=True)
    batch, _ = learner.predict(np.stack([obs, obs]), action_masks=np.stack([mask, mask]), deterministic=True)
    assert mask[int(one)] and int(one) == int(batch[0]) == int(batch[1])
    sampled, _ = loaded.predict(np.stack([obs] * 64), action_masks=np.stack([mask] * 64))
    assert mask[sampled].all()
    with pytest.raises(ValueError, match="only\\s+predict"):
        loaded.learn(10)


def test_the_curriculum_observes_every_group_once_with_the_learners_returns() -> None:
    source = Recording(spread(10), seed=1)
    envs = [Counting(gym.make(ENV_ID)) for _ in range(3)]
    learner = Watched(ENV_ID, source, SMALL, seed=1, envs=envs).learn(400)
    b, g = SMALL.tasks_per_step, SMALL.group_size
    steps = [s for s, _ in source.handed]
    assert steps == [s for s, _ in source.observed] == list(range(len(steps))) == list(range(learner.updates))
    for (_, ids), (_, groups), trained in zip(source.handed, source.observed, learner.trained_returns):
        assert [gr.task.id for gr in groups] == ids and all(len(gr.returns) == g for gr in groups)
        assert torch.equal(torch.tensor([gr.returns for gr in groups], dtype=torch.float64), trained)
    # no extra episode or env step: the envs ran exactly the episodes the learner trained on
    assert sum(e.steps for e in envs) == learner.num_timesteps
    ran = sorted((tid, round(r, 9)) for e in envs for tid, r in e.episodes)
    assert len(ran) == learner.episodes == len(steps) * b * g
    assert ran == sorted((gr.task.id, r) for _, groups in source.observed for gr in groups for r in gr.returns)


def test_a_source_that_asks_for_its_env_is_trained_in_it() -> None:
    source = make_source("augment", spread(8), seed=0, group_size=SMALL.group_size, env_id=ENV_ID)
    learner = FeaturesGRPO(ENV_ID, source, SMALL, seed=0).learn(50)
    assert learner.train_env_id == source.env_id == "rods/ToolChain-Aug-Features-v0" != learner.env_id
    assert all(env.spec.id == source.env_id for env in learner.envs) and learner.num_timesteps >= 50


def test_bad_settings_and_envs_are_refused_with_a_clear_error() -> None:
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        FeaturesGRPOConfig(group_size=1)
    with pytest.raises(ValueError, match="scale_rewards"):
        FeaturesGRPOConfig(scale_rewards="batch")
    with pytest.raises(ValueError, match="Box observation and Discrete"):
        FeaturesGRPO("rods/ToolChain-Easy-Structured-v0", FixedSeeds(spread(4)), SMALL)
    with pytest.raises(ValueError, match="tasks_per_step x group_size"):
        FeaturesGRPO(ENV_ID, TaskSchedule(FixedSeeds(spread(4)), tasks_per_batch=2, group_size=4), SMALL)
    with pytest.raises(ValueError, match="select/refill"):
        FeaturesGRPO(ENV_ID, DynamicSamplingSource(spread(4)), SMALL)
    learner = FeaturesGRPO(ENV_ID, None, SMALL)
    with pytest.raises(ValueError, match="action_masks"):
        learner.predict(np.zeros((1, learner.obs_dim), np.float32))
    with pytest.raises(ValueError, match="no valid candidate"):
        learner.predict(np.zeros((1, learner.obs_dim), np.float32),
                        action_masks=np.zeros((1, learner.n_actions), bool))
