"""Detection is free: for the same batches, RODS's detector adds no policy forward pass and no
environment step. A counting harness (a seeded random masked policy on the structured env)
runs G rollouts per task, once feeding RODS and once feeding nothing."""

from __future__ import annotations

from typing import Sequence

import gymnasium as gym
import numpy as np

from rods_gym import SamplerConfig, Suite, TaskSampler, TaskSpec, ToolChainEnv
from rods_gym.resampler import Resampler
from rods_gym.curricula import RODSConfig, RODSSource
from rods_gym.curricula import GroupResult

G = 8


class CountingPolicy:
    """A seeded random policy over the valid actions; counts its forward passes."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.forward_passes = 0

    def __call__(self, masks: np.ndarray, nvec: np.ndarray) -> np.ndarray:
        self.forward_passes += 1
        out, offset = [], 0
        for n in nvec:
            valid = np.flatnonzero(masks[offset: offset + n])
            out.append(int(valid[int(self.rng.integers(0, len(valid)))]))
            offset += n
        return np.array(out)


class CountingEnv(gym.Wrapper):
    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.steps = 0
        self.resets = 0

    def reset(self, **kw):  # type: ignore[override]
        self.resets += 1
        return self.env.reset(**kw)

    def step(self, action):  # type: ignore[override]
        self.steps += 1
        return self.env.step(action)


def rollouts(policy: CountingPolicy, env: CountingEnv, tasks: Sequence[TaskSpec], step: int) -> list[GroupResult]:
    groups = []
    base = env.unwrapped
    for i, task in enumerate(tasks):
        returns, successes = [], []
        for g in range(G):
            env.reset(seed=1000 * step + G * i + g, options={"task": task})
            total, done, info = 0.0, False, {}
            for _ in range(200):
                _, r, term, trunc, info = env.step(policy(base.action_masks(), base.action_space.nvec))
                total += float(r)
                if term or trunc:
                    done = True
                    break
            assert done
            returns.append(total)
            successes.append(bool(info["success"]))
        groups.append(GroupResult(task, tuple(returns), tuple(successes)))
    return groups


def test_detection_adds_no_policy_or_env_calls(suite: Suite) -> None:
    seeds = TaskSampler(suite, SamplerConfig(depth=(1, 2), extra_calls=(0, 0)), seed=9).sample_many(16)
    cfg = RODSConfig(synth_every=1, parents_per_round=2, variants_per_parent=2, kappa_rule="fixed", kappa=0.25)
    source = RODSSource(seeds, Resampler(suite), cfg, rng_seed=0)

    # with the detector: the RODS loop, counting around every curriculum call
    policy, env = CountingPolicy(7), CountingEnv(ToolChainEnv(mode="structured", suite=suite))
    batches, returns = [], []
    for step in range(3):
        before = (policy.forward_passes, env.steps, env.resets)
        tasks = source.next_batch(step, 6)
        assert (policy.forward_passes, env.steps, env.resets) == before
        groups = rollouts(policy, env, tasks, step)
        during = (policy.forward_passes, env.steps, env.resets)
        source.observe(step, groups)
        source.telemetry()
        source.state_dict()
        assert (policy.forward_passes, env.steps, env.resets) == during  # detection + synthesis: zero calls
        batches.append(tasks)
        returns.append([g.returns for g in groups])
    with_detector = (policy.forward_passes, env.steps, env.resets)
    tel = source.telemetry()
    assert len(source.detector.stats) >= 6 and tel["synth/staged"] + tel["batch/staged"] > 0  # it did work
    assert 0.0 < tel["u_mean"] and "boundary_fraction" in tel

    # without it: the same batches, the same seeds, nothing observes the returns
    policy2, env2 = CountingPolicy(7), CountingEnv(ToolChainEnv(mode="structured", suite=suite))
    returns_again = []
    for step, tasks in enumerate(batches):
        returns_again.append([g.returns for g in rollouts(policy2, env2, tasks, step)])
    without_detector = (policy2.forward_passes, env2.steps, env2.resets)
    assert with_detector == without_detector
    assert returns_again == returns  # the very same rollouts
    assert with_detector[2] == 3 * 6 * G and with_detector[1] >= with_detector[2]
    print(f"forward passes / env steps / resets, with and without the detector: {with_detector}")
