"""RODS for a stable-baselines3 agent: MaskablePPO on the structured view, its episodes
scheduled by CurriculumEnv and their returns fed back by CurriculumCallback."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest
import torch

pytest.importorskip("sb3_contrib")
from sb3_contrib import MaskablePPO  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.logger import Logger, configure  # noqa: E402

from rods_gym import DIFFICULTIES, Suite, TaskSampler, TaskSpec, ToolChainEnv  # noqa: E402
from rods_gym.resampler import Resampler  # noqa: E402
from rods_gym.curricula import RODSConfig, RODSSource  # noqa: E402
from rods_gym.trainer.sb3 import CurriculumCallback, CurriculumEnv, TaskSchedule  # noqa: E402
from rods_gym.curricula import GroupResult  # noqa: E402


@pytest.fixture
def one_thread():
    """Tiny networks run fastest on one thread (and do not fight other tests for the cores)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


class WatchedRODS(RODSSource):
    """RODS that remembers what it handed out and what it was told."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.handed: dict[int, list[str]] = {}
        self.told: list[tuple[int, list[GroupResult]]] = []

    def next_batch(self, step: int, n_tasks: int) -> list[TaskSpec]:
        tasks = super().next_batch(step, n_tasks)
        self.handed[step] = [t.id for t in tasks]
        return tasks

    def observe(self, step: int, groups: Sequence[GroupResult]) -> None:
        self.told.append((step, list(groups)))
        super().observe(step, groups)


def test_maskable_ppo_on_the_rods_curriculum(suite: Suite, tmp_path: Path, one_thread: None) -> None:
    seeds = TaskSampler(suite, DIFFICULTIES["easy"], seed=3).sample_many(16)
    cfg = RODSConfig(group_size=8, calibration_groups=8, synth_every=2, parents_per_round=2, variants_per_parent=3)
    source = WatchedRODS(seeds, Resampler(suite), cfg, rng_seed=0)
    schedule = TaskSchedule(source, tasks_per_batch=4)
    assert schedule.group_size == 8  # from the config
    env = make_vec_env(lambda: CurriculumEnv(ToolChainEnv(mode="structured", difficulty="easy", suite=suite), schedule),
                       n_envs=2, seed=0)
    model = MaskablePPO("MultiInputPolicy", env, n_steps=256, batch_size=128, n_epochs=2, seed=0, device="cpu",
                        policy_kwargs={"net_arch": [64]})
    model.set_logger(configure(str(tmp_path), ["csv"]))
    before = [p.detach().clone() for p in model.policy.parameters()]
    callback = CurriculumCallback(schedule)
    model.learn(total_timesteps=1024, callback=callback)

    # training ran and changed the policy
    assert model.num_timesteps >= 1024
    assert any(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters()))
    # the curriculum was fed: whole batches, in batch order, G returns per task
    assert len(source.told) >= 4 and callback.observed_batches == len(source.told)
    for step, groups in source.told:
        assert [g.task.id for g in groups] == source.handed[step]
        assert all(len(g.returns) == 8 and len(g.successes) == 8 for g in groups)
        assert all(0.0 <= r <= 1.0 for g in groups for r in g.returns)
    assert callback.episodes >= 8 * 4 * len(source.told)
    # ... and it evolved: kappa calibrated, variants synthesized, staged and judged
    tel = source.telemetry()
    assert tel["kappa_calibrated"] == 1.0 and tel["synth/staged_total"] > 0
    assert tel["tasks_seen"] > len({t for s, _ in source.told[:1] for t in source.handed[s]})
    assert any(not e.is_seed for e in source.pool.entries.values())
    decided = tel["admission/admitted_total"] + tel["admission/dropped_total"] + tel["admission/quarantined_total"]
    assert decided > 0
    # the telemetry reached SB3's logger
    rows = list(csv.DictReader((tmp_path / "progress.csv").open()))
    assert rows and "curriculum/boundary_fraction" in rows[0] and "curriculum/pool/active" in rows[0]
    assert any(r["curriculum/boundary_fraction"] not in ("", None) for r in rows)


def test_curriculum_env_hands_out_groups_and_tags_returns(suite: Suite) -> None:
    seeds = TaskSampler(suite, DIFFICULTIES["easy"], seed=4).sample_many(6)
    source = RODSSource(seeds, None, RODSConfig(synthesize=False), rng_seed=1)
    env = CurriculumEnv(ToolChainEnv(mode="structured", difficulty="easy", suite=suite), source, tasks_per_batch=2,
                        group_size=3)
    seen = []
    for _ in range(6):
        env.reset(seed=0)
        base = env.unwrapped
        info = {}
        for _ in range(100):  # the oracle solves every task: return 1.0
            _, _, term, trunc, info = env.step(base.oracle_action())
            if term or trunc:
                break
        ep = info["curriculum"]
        assert ep["return"] == pytest.approx(1.0) and ep["success"] is True and ep["task_id"] == base.task.id
        seen.append((ep["step"], ep["slot"], ep["task_id"]))
    first = [env.schedule.slots.task(slot) for slot in range(2)]  # batch 0, drawn and not yet observed
    assert seen == [(0, slot, first[slot].id) for slot in (0, 0, 0, 1, 1, 1)]
    assert np.asarray(env.action_masks()).dtype == bool
    with pytest.raises(ValueError, match="chooses each episode's task"):
        env.reset(options={"task": seeds[0]})


def test_callback_refuses_unshared_schedules(suite: Suite, one_thread: None) -> None:
    seeds = TaskSampler(suite, DIFFICULTIES["easy"], seed=4).sample_many(4)
    source = RODSSource(seeds, None, RODSConfig(synthesize=False), rng_seed=1)
    env = make_vec_env(lambda: CurriculumEnv(ToolChainEnv(mode="structured", difficulty="easy", suite=suite), source),
                       n_envs=2)  # one private schedule per env: their batches would interleave
    model = MaskablePPO("MultiInputPolicy", env, n_steps=16, batch_size=16, device="cpu")
    model.set_logger(Logger(folder=None, output_formats=[]))  # no SB3-* folder in the temp dir
    with pytest.raises(ValueError, match="share"):
        model.learn(total_timesteps=16, callback=CurriculumCallback())
