"""The batched features view (rods_gym.features_vector.FeaturesVectorEnv) and its SB3 adapter
(rods_gym.trainer.sb3_vector.FeaturesVecEnv): equal to N single envs (Gymnasium's own SyncVectorEnv in same-step
autoreset, and a hand-written loop), with a curriculum schedule equal to N CurriculumEnv sharing one, its
autoreset, its checks, registration, and MaskablePPO learning through the adapter."""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import rods_gym  # noqa: F401  (registers the ids)
from rods_gym import load_split
from rods_gym.curricula import CurriculumEnv, TaskSchedule, make_source
from rods_gym.features_env import FeaturesEnv, make_augmented_features_env
from rods_gym.features_vector import FeaturesVectorEnv
from rods_gym.renderers.features import N_CANDIDATES

N = 4


@pytest.fixture(scope="module")
def train() -> list:
    return load_split("train")


def assert_same(a: Any, b: Any, where: str) -> None:
    """Equal infos: the same keys, arrays of the same dtype and values (object arrays elementwise)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (where, sorted(a), sorted(b))
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, (where, a, b)
        if a.dtype == object:
            for x, y in zip(a, b):
                assert_same(x, y, where)
        else:
            assert np.array_equal(a, b), (where, a, b)
    else:
        assert a == b, (where, a, b)


def random_actions(rng: np.random.Generator, masks: np.ndarray) -> np.ndarray:
    return np.array([rng.choice(np.flatnonzero(m)) for m in masks])


def sync_masks(sync: SyncVectorEnv) -> np.ndarray:
    return np.stack([env.get_wrapper_attr("action_masks")() for env in sync.envs])


def run_pair(vec: FeaturesVectorEnv, sync: SyncVectorEnv, seed: int, steps: int) -> int:
    """Step both with the same random masked actions; every output equal. Returns the episodes ended."""
    rng = np.random.default_rng(seed)
    (obs, info), (obs_s, info_s) = vec.reset(seed=seed), sync.reset(seed=seed)
    assert obs.dtype == obs_s.dtype == np.float32 and np.array_equal(obs, obs_s)
    assert_same(info, info_s, "reset")
    ended = 0
    for t in range(steps):
        masks = vec.action_masks()
        assert masks.shape == (vec.num_envs, N_CANDIDATES) and np.array_equal(masks, sync_masks(sync)), t
        actions = random_actions(rng, masks)
        out, out_s = vec.step(actions), sync.step(actions)
        assert np.array_equal(out[0], out_s[0]), t
        for x, y in zip(out[1:4], out_s[1:4]):
            assert x.dtype == y.dtype and np.array_equal(x, y), t
        assert_same(out[4], out_s[4], f"step {t}")
        ended += int((out[2] | out[3]).sum())
    return ended


@pytest.mark.parametrize("kind", ["train", "sampled", "augmented"])
def test_same_as_sync_vector_env(kind: str, train: list) -> None:
    """The same seeds give Gymnasium's SyncVectorEnv (same-step autoreset) of single envs, output for output."""
    single: Callable[[], gym.Env] = {
        "train": lambda: FeaturesEnv(task_set=train),
        "sampled": lambda: FeaturesEnv(difficulty="hard"),
        "augmented": lambda: make_augmented_features_env(task_set=train),
    }[kind]
    kwargs: dict[str, Any] = {"train": {"task_set": train}, "sampled": {"difficulty": "hard"},
                              "augmented": {"task_set": train, "augment": True}}[kind]
    vec = FeaturesVectorEnv(N, **kwargs)
    sync = SyncVectorEnv([single for _ in range(N)], autoreset_mode=AutoresetMode.SAME_STEP)
    assert vec.single_observation_space == sync.single_observation_space
    assert vec.action_space == sync.action_space and vec.observation_space == sync.observation_space
    assert run_pair(vec, sync, seed=3, steps=150) >= 40


def test_schedule_same_as_curriculum_envs(train: list) -> None:
    """With a schedule, the tasks, outputs and ended episodes' curriculum records are those of N CurriculumEnv
    sharing one schedule; reporting them back makes both sources observe the same batches."""
    def schedule() -> TaskSchedule:
        return TaskSchedule(make_source("fixed", train, seed=5, group_size=2), tasks_per_batch=3, group_size=2)

    ours, theirs = schedule(), schedule()
    vec = FeaturesVectorEnv(N, schedule=ours)
    sync = SyncVectorEnv([lambda: CurriculumEnv(FeaturesEnv(), theirs) for _ in range(N)],
                         autoreset_mode=AutoresetMode.SAME_STEP)
    rng = np.random.default_rng(0)
    vec.reset(seed=0), sync.reset(seed=0)
    records = 0
    for t in range(200):
        actions = random_actions(rng, vec.action_masks())
        out, out_s = vec.step(actions), sync.step(actions)
        assert np.array_equal(out[0], out_s[0]) and np.array_equal(out[1], out_s[1]), t
        assert_same(out[4], out_s[4], f"step {t}")
        if "final_info" in out[4]:
            final = out[4]["final_info"]
            for i in np.flatnonzero(final["_curriculum"]):
                record = vec.final_infos[i]["curriculum"]  # type: ignore[index]
                assert record["task_id"] == final["task_id"][i] and record["return"] == pytest.approx(
                    final["progress"][i])  # the return of an episode is its final progress
                ours.report_info(record)
                theirs.report_info(record)
                records += 1
    assert records >= 40 and ours.slots.observed_batches == theirs.slots.observed_batches >= 5


def test_same_as_single_envs_by_hand(train: list) -> None:
    """N FeaturesEnv stepped in a loop (reset where an episode ends): the same observations, progress and success."""
    vec = FeaturesVectorEnv(N, task_set=train)
    singles = [FeaturesEnv(task_set=train) for _ in range(N)]
    obs, _ = vec.reset(seed=11)
    for i, env in enumerate(singles):
        assert np.array_equal(obs[i], env.reset(seed=11 + i)[0])
    rng = np.random.default_rng(1)
    for _ in range(100):
        actions = random_actions(rng, vec.action_masks())
        obs, rewards, terminated, truncated, info = vec.step(actions)
        for i, env in enumerate(singles):
            o, r, te, tr, inf = env.step(actions[i])
            assert (r, te, tr) == (rewards[i], terminated[i], truncated[i])
            if te or tr:
                assert np.array_equal(o, info["final_obs"][i])
                assert (inf["progress"], inf["success"]) == (info["final_info"]["progress"][i],
                                                             info["final_info"]["success"][i])
                o, inf = env.reset()
            assert np.array_equal(o, obs[i]) and inf["progress"] == info["progress"][i]
            assert np.array_equal(env.action_masks(), vec.action_masks()[i])


def test_same_step_autoreset(train: list) -> None:
    """An ended episode's reward and flags come with the next episode's first observation and mask; its last
    observation and info are in final_obs / final_info, the others' are not."""
    vec = FeaturesVectorEnv(2, task_set=train[:1], max_steps=2)  # one task; an episode lasts at most 2 steps
    first, info = vec.reset(seed=0)
    first_masks = vec.action_masks()
    ask = [int(np.flatnonzero([type(c).__name__ == "Ask" for c in env.renderer.candidates()])[0]) for env in vec.envs]
    obs, rewards, terminated, truncated, info = vec.step(np.array(ask))
    assert not (terminated | truncated).any() and "final_obs" not in info
    obs, rewards, terminated, truncated, info = vec.step(np.array(ask))
    assert truncated.all() and not terminated.any() and (rewards == 0).all()
    assert np.array_equal(obs, first) and np.array_equal(vec.action_masks(), first_masks)
    assert info["_final_obs"].all() and info["final_obs"][0].shape == first[0].shape
    assert not np.array_equal(info["final_obs"][0], first[0])  # the last observation counts two steps
    assert info["final_info"]["step"].tolist() == [2, 2] and info["step"].tolist() == [0, 0]
    assert vec.final_infos[0]["step"] == 2  # type: ignore[index]


def test_checks(train: list) -> None:
    vec = FeaturesVectorEnv(3, task_set=train)
    with pytest.raises(RuntimeError, match="reset"):
        vec.step(np.zeros(3, int))
    with pytest.raises(RuntimeError, match="reset"):
        vec.action_masks()
    obs, _ = vec.reset(seed=7)
    assert obs in vec.observation_space and vec.action_masks().any(axis=1).all()
    with pytest.raises(ValueError, match="3 actions"):
        vec.step(np.zeros(2, int))
    again = FeaturesVectorEnv(3, task_set=train)
    assert np.array_equal(again.reset(seed=7)[0], obs) and not np.array_equal(again.reset(seed=8)[0], obs)
    rng = np.random.default_rng(0)
    for _ in range(30):  # a masked-valid action is never rejected for its form; any action keeps obs in the space
        o, _, _, _, info = vec.step(random_actions(rng, vec.action_masks()))
        assert o in vec.observation_space and set(info["error"]) <= {"none", "execution_error"}
    o, _, _, _, info = vec.step(np.array([N_CANDIDATES + 5, -1, 0]))
    assert info["error"][0] == info["error"][1] == "malformed"
    with pytest.raises(ValueError, match="num_envs"):
        FeaturesVectorEnv(0)
    with pytest.raises(TypeError, match="next_episode"):
        FeaturesVectorEnv(2, schedule=object())
    scheduled = FeaturesVectorEnv(2, schedule=TaskSchedule(make_source("fixed", train, group_size=2), 2, 2))
    with pytest.raises(ValueError, match="task"):
        scheduled.reset(options={"task": train[0]})
    check_env(FeaturesEnv(task_set=train), skip_render_check=True)  # the sub-env, as a single env
    # the batch returned is new data every call (copy=True), or the vector env's own buffer (copy=False)
    o1, o2 = vec.reset()[0], vec.step(random_actions(rng, vec.action_masks()))[0]
    assert not np.shares_memory(o1, o2) and not np.shares_memory(o2, vec.action_masks())
    shared = FeaturesVectorEnv(2, task_set=train, copy=False)
    assert np.shares_memory(shared.reset(seed=0)[0], shared.step(np.zeros(2, int))[0])
    vec.close()


def test_make_vec() -> None:
    vec = gym.make_vec("rods/ToolChain-Easy-Features-v0", num_envs=3, candidate_order="ranked")
    assert isinstance(vec, FeaturesVectorEnv) and vec.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert vec.envs[0].unwrapped.renderer.candidate_order == "ranked" and vec.reset(seed=0)[0].shape[0] == 3
    aug = gym.make_vec("rods/ToolChain-Aug-Features-v0", num_envs=2)
    assert isinstance(aug, FeaturesVectorEnv) and "augment" in aug.reset(seed=0)[1]
    sync = gym.make_vec("rods/ToolChain-Features-v0", num_envs=2, vectorization_mode="sync")
    assert isinstance(sync, SyncVectorEnv)


def test_maskable_ppo_through_the_adapter(train: list) -> None:
    """MaskablePPO learns a few hundred steps through FeaturesVecEnv with a schedule and the SB3 callback, which
    reports the ended episodes back (the source observes batches)."""
    torch = pytest.importorskip("torch")
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import VecMonitor

    from rods_gym.trainer.sb3 import CurriculumCallback
    from rods_gym.trainer.sb3_vector import FeaturesVecEnv

    torch.set_num_threads(1)
    schedule = TaskSchedule(make_source("fixed", train, seed=0, group_size=2), tasks_per_batch=4, group_size=2)
    env = VecMonitor(FeaturesVecEnv(FeaturesVectorEnv(4, schedule=schedule)))
    model = MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=128, n_epochs=2, seed=0, device="cpu")
    model.set_logger(Logger(folder=None, output_formats=[]))
    callback = CurriculumCallback(schedule)
    model.learn(512, callback=callback)
    assert model.num_timesteps == 512 and callback.episodes >= 40 and callback.observed_batches >= 5
    assert len(model.ep_info_buffer) > 0
    masks = env.env_method("action_masks")
    assert len(masks) == 4 and all(m.dtype == bool and m.any() for m in masks)
    action, _ = model.predict(env.reset(), action_masks=np.stack(masks), deterministic=True)
    assert all(m[a] for m, a in zip(masks, action))


@pytest.mark.slow
def test_vector_throughput_smoke(tmp_path: Any) -> None:
    """benchmarks/vector_throughput.py at its smoke scale: every path timed, the table extrapolated, a profile."""
    import json
    import subprocess
    import sys

    from conftest import BENCHMARKS_DIR

    out = tmp_path / "vt.json"
    run = subprocess.run([sys.executable, str(BENCHMARKS_DIR / "vector_throughput.py"), "--scale", "smoke",
                          "--arms", "fixed", "--json", str(out)], capture_output=True, text=True, timeout=300,
                         env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr[-2000:]
    figures = json.loads(out.read_text())
    arm = figures["arms"]["fixed"]
    assert all(arm[f"{p}_{k}"] > 0 for p in ("before", "dummy", "vector") for k in ("env", "learn"))
    assert set(figures["table_minutes"]) == {"before", "dummy", "vector"} and "tottime" in figures["profile"]
    assert ("PASS headline table" in run.stdout) != ("MISS headline table" in run.stdout)
