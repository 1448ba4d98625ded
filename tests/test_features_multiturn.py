"""Multi-turn tasks in the features view (issue 50 item 2): with turn cues (the ``-v1`` features ids) the reply's
row says when it closes a user turn and the ask and the reply keep their positions in shuffled order; without
them (``-v0``, the view the published headline ran) the view is unchanged."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rods_gym
from rods_gym import load_split, oracle_action
from rods_gym.episode import Ask, Reply
from rods_gym.features_env import FeaturesEnv
from rods_gym.renderers.features import CANDIDATE, GLOBAL, REPLY_ROW

REPLY_POSITION = 1


@pytest.fixture(scope="module")
def multi_turn() -> list:
    return [t for t in load_split("train") if len(t.turns) > 1][:12]


def row_at(obs: np.ndarray, position: int) -> np.ndarray:
    return obs[GLOBAL + position * CANDIDATE:GLOBAL + (position + 1) * CANDIDATE]


@pytest.mark.parametrize("order", ["ranked", "shuffled"])
def test_reply_row_says_when_it_closes_a_turn(order: str, multi_turn: list) -> None:
    """Played by the oracle: at every step columns 17 / 18 / 5 of the reply's row are (not the last turn, no call
    left in the active turns, both), and the oracle's replies that close a turn come exactly where column 5 is on."""
    env = FeaturesEnv(candidate_order=order, turn_cues=True)
    closing = 0
    for task in multi_turn:
        obs, _ = env.reset(options={"task": task})
        assert isinstance(env.renderer.candidates()[0], Ask)
        assert isinstance(env.renderer.candidates()[REPLY_POSITION], Reply)
        while True:
            row = row_at(obs, REPLY_POSITION)
            ep = env.episode
            next_turn, calls_done = ep.turn < len(task.turns) - 1, not ep.todo()
            assert (row[17], row[18], row[5]) == (next_turn, calls_done, next_turn and calls_done)
            action = oracle_action(ep)
            if isinstance(action, Reply) and next_turn:
                assert row[5] == 1.0
                closing += 1
            obs, _, terminated, truncated, _ = env.step(env.encode(action))
            if terminated or truncated:
                break
    assert closing == sum(len(t.turns) - 1 for t in multi_turn)


def test_without_cues_the_view_is_v0(multi_turn: list) -> None:
    """Without turn cues the reply's row never changes and ask / reply move with the task's permutation."""
    env = FeaturesEnv(turn_cues=False)
    positions = set()
    for task in multi_turn:
        obs, _ = env.reset(options={"task": task})
        reply = next(i for i, c in enumerate(env.renderer.candidates()) if c == Reply("done"))
        positions.add(reply)
        while True:
            assert np.array_equal(row_at(obs, reply), np.asarray(REPLY_ROW, np.float32))
            obs, _, terminated, truncated, _ = env.step(env.encode(oracle_action(env.episode)))
            if terminated or truncated:
                break
    assert len(positions) > 3  # the reply sits at a different position in different tasks


def test_v1_ids_turn_the_cues_on() -> None:
    assert rods_gym  # registers the ids
    for version, cues in (("v0", False), ("v1", True)):
        for env_id in (f"rods/ToolChain-Features-{version}", f"rods/ToolChain-Easy-Features-{version}",
                       f"rods/ToolChain-Aug-Features-{version}"):
            env = gym.make(env_id)
            assert env.unwrapped.renderer.turn_cues is cues, env_id
            env.close()
        vec = gym.make_vec(f"rods/ToolChain-Easy-Features-{version}", num_envs=2)
        vec.reset(seed=0)
        assert all(e.renderer.turn_cues is cues for e in vec.envs), version
        vec.close()
    with pytest.raises(ValueError, match="turn_cues"):
        FeaturesEnv(turn_cues="yes")


def _runs(v0_mt: float, v1_mt: float, v1_plain: float) -> dict:
    """A turn_cues.py record over 2 seeds x 40 tasks (20 multi-turn, 20 plain) with the given success rates."""
    types = ["multi-turn"] * 20 + ["plain"] * 20

    def row(mt: float, plain: float) -> list[float]:
        return [1.0] * round(20 * mt) + [0.0] * (20 - round(20 * mt)) + [1.0] * round(20 * plain) + [0.0] * (
            20 - round(20 * plain))

    probe = {"tasks": 20, "reach_turn_end": 1.0, "action_at_turn_end": {"reply": 1.0}, "p_reply_at_turn_end": 0.9,
             "advanced": 1.0, "ends": {"success": 1.0}, "success": 1.0, "success_reply_forced": 1.0,
             "p_reply_single_turn_midway": 0.0}
    runs = {}
    for s in (1, 2):
        runs[f"v0/{s}"] = {"success": row(v0_mt, 0.8), "probe": probe}
        runs[f"v1/{s}"] = {"success": row(v1_mt, v1_plain), "probe": probe}
    return {"seeds": [1, 2], "held_out": "test", "budget": 1000, "tasks": [str(i) for i in range(40)],
            "turn_types": types, "runs": runs}


def test_turn_cues_report_decides_the_target() -> None:
    """benchmarks/turn_cues.py: PASS needs multi-turn >= 0.3 with the cues and no other turn type lower."""
    from conftest import benchmarks_package

    with benchmarks_package():
        from benchmarks import turn_cues

        text, ok = turn_cues.report(_runs(0.0, 0.6, 0.8))
        assert ok and "PASS" in text and "| multi-turn | 20 | 0.000 | 0.600 |" in text
        assert not turn_cues.report(_runs(0.0, 0.2, 0.8))[1]   # multi-turn below the target
        assert not turn_cues.report(_runs(0.0, 0.6, 0.3))[1]   # plain tasks lost
        with pytest.raises(ValueError, match="--seeds"):
            turn_cues.main(["--seeds", "a,b"])
