"""The incremental features view (rods_gym/renderers/features.py) against the straightforward one it replaced
(tests/features_reference.py, the renderer at 88d36dc): the same observations to the bit, the same masks, the
same candidate actions at the same positions, the same rewards, terminations and infos, step by step over
many random episodes: random masked actions, masked-out actions, malformed ones and the oracle's (to reach
answers, later turns and success), several seeds, both candidate orders, the train split, sampled tasks,
hard tasks run long enough to fill the value table, and the augmented env (``rods/ToolChain-Aug-Features-v0``)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

import numpy as np
import pytest

from rods_gym import load_split
from rods_gym.features_env import FeaturesEnv, make_augmented_features_env
from rods_gym.renderers.features import N_CANDIDATES, N_SLOTS, FeaturesRenderer

import features_reference

ORDERS = ("ranked", "shuffled")
SEEDS = (0, 1, 2)


def _twins(make: Callable[[], Any], order: str, turn_cues: bool = False) -> tuple[Any, Any]:
    """Two envs built alike, the second with the reference renderer."""
    new, ref = make(), make()
    assert isinstance(new.unwrapped.renderer, FeaturesRenderer) and new.unwrapped.renderer.turn_cues == turn_cues
    ref.unwrapped.renderer = features_reference.FeaturesRenderer(ref.unwrapped.suite, order, turn_cues)
    return new, ref


def _reference_candidates(env: Any) -> list[Any]:
    cands = list(env.unwrapped.renderer._cands)  # shorter than N_CANDIDATES in ranked order: the rest are empty
    return cands + [features_reference.EMPTY] * (N_CANDIDATES - len(cands))


def _oracle(env: Any) -> Any:
    try:
        return env.unwrapped.oracle_action()
    except (ValueError, LookupError):  # after random actions the oracle's call may not be a candidate (or not exist)
        return None


def _compare(new: Any, ref: Any, seed: int, n_steps: int, seen: Counter) -> None:
    rng = np.random.default_rng(seed)
    (obs, info), (obs_ref, info_ref) = new.reset(seed=seed), ref.reset(seed=seed)
    for step in range(n_steps):
        where = f"seed {seed}, step {step}, task {info['task_id']}"
        assert obs.dtype == obs_ref.dtype == np.float32 and np.array_equal(obs, obs_ref), where
        assert info == info_ref, where
        mask, mask_ref = new.unwrapped.action_masks(), ref.unwrapped.action_masks()
        assert mask.dtype == bool and np.array_equal(mask, mask_ref), where
        assert new.unwrapped.renderer.candidates() == _reference_candidates(ref), where
        u = rng.random()
        action: Any = None
        if u < 0.3:
            action = _oracle(new)
            assert action == _oracle(ref), where
        elif u < 0.36 and not mask.all():
            action = int(rng.choice(np.flatnonzero(~mask)))
        elif u < 0.38:
            action = rng.choice([-1, N_CANDIDATES, 2.5, "3", None])
        if action is None:
            action = int(rng.choice(np.flatnonzero(mask)))
        obs, reward, terminated, truncated, info = new.step(action)
        obs_ref, reward_ref, terminated_ref, truncated_ref, info_ref = ref.step(action)
        assert (reward, terminated, truncated) == (reward_ref, terminated_ref, truncated_ref), where
        seen[info["effect"]] += 1
        seen["error " + info["error"]] += 1
        seen["success"] += info["success"]
        seen["full table"] += len(new.unwrapped.renderer.slots) == N_SLOTS
        if terminated or truncated:
            assert np.array_equal(obs, obs_ref) and info == info_ref, where
            (obs, info), (obs_ref, info_ref) = new.reset(), ref.reset()
            seen["episodes"] += 1


@pytest.mark.parametrize("turn_cues", [False, True], ids=["v0", "v1-turn-cues"])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("source", ["train", "sampled", "hard_long", "augmented"])
def test_same_as_reference(order: str, source: str, turn_cues: bool) -> None:
    train = load_split("train")
    kw = {"candidate_order": order, "turn_cues": turn_cues}
    makers: dict[str, Callable[[], Any]] = {
        "train": lambda: FeaturesEnv(task_set=train, **kw),
        "sampled": lambda: FeaturesEnv(**kw),
        "hard_long": lambda: FeaturesEnv(difficulty="hard", max_steps=150, **kw),
        "augmented": lambda: make_augmented_features_env(task_set=train, **kw),
    }
    seen: Counter = Counter()
    for seed in SEEDS:
        new, ref = _twins(makers[source], order, turn_cues)
        _compare(new, ref, seed, 300, seen)
    # the walk reached what the view has to get right (each count an event the comparison went through)
    assert seen["episodes"] >= 20 and seen["success"] >= 5
    assert seen["progress"] >= 50 and seen["error malformed"] >= (5 if turn_cues else 10) and seen["error invalid_arguments"] >= 10
    if source == "hard_long":
        assert seen["full table"] >= 50  # values evicted from a full table
    if source in ("train", "augmented"):
        assert seen["turn"] >= 3 and seen["unlocked"] >= 3 and seen["revealed"] >= 3
