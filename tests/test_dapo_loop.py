"""DAPO-style dynamic sampling inside the GRPO loop: refill rounds are rolled out and counted,
the update uses only the groups the source selects, and a killed run resumes to the same result."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pytest
import torch
from accelerate import Accelerator

from rods_gym.trainer import loop as loop_module
from rods_gym.trainer.config import TrainConfig, load_config
from rods_gym.curricula import DynamicSampling, DynamicSamplingSource
from rods_gym.trainer.metrics import read_jsonl
from rods_gym.trainer.policy import load_policy
from rods_gym.trainer.rollout import RolloutEngine
from rods_gym.curricula import GroupResult

from conftest import TIMING_METRICS, benchmarks_package, cpu_only_env, warm_tiny_policy
from conftest import easy_seed_tasks as seed_tasks

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py

N, G, STEPS = 2, 3, 3


@pytest.fixture(scope="module")
def warm_policy(tmp_path_factory) -> Path:
    """A tiny policy after a short SFT warm start: some groups have spread, many are silent."""
    return warm_tiny_policy(tmp_path_factory.mktemp("warm") / "policy", sft_steps=60)


def dapo_config(task_file: Path, run_dir: Path, **extra: str) -> TrainConfig:
    overrides = [f"run_dir={run_dir}", f"steps={STEPS}", "time_limit_min=0", "checkpoint_every=1",
                 "tensorboard=false", "progress_bar=false", "policy.hidden_size=64", "policy.intermediate_size=128",
                 "policy.num_layers=2", "policy.num_heads=2", f"data.train_split={task_file}", f"rollout.group_size={G}", f"rollout.tasks_per_step={N}", "rollout.max_action_tokens=8",
                 "rollout.max_turns=4", "grpo.lr=1e-3", "grpo.micro_batch_size=4", "grpo.epochs=2",
                 "grpo.minibatches=2", "grpo.beta=0.05"]
    overrides += [f"{k}={v}" for k, v in extra.items()]
    return load_config(None, overrides)


def dapo_source(cfg: TrainConfig) -> DynamicSamplingSource:
    return DynamicSamplingSource(seed_tasks(), seed=cfg.seed, max_refill_rounds=2, min_informative_rate=0.5)


def _train(cfg: TrainConfig, start: Path, source: Any, resume: bool = False):
    policy = load_policy(start)
    result = loop_module.grpo_train(cfg, policy, seed_tasks(), run_dir=cfg.run_dir, accelerator=Accelerator(cpu=True),
                                    resume=resume, source=source)
    return policy, result


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """Counts the training episodes the engine generates and captures every update batch."""
    seen: dict[str, list] = {"episodes": [], "batches": []}
    run, make_batch = RolloutEngine.run, loop_module.make_batch

    def counting_run(self, tasks, repeats=1, **kw):
        trajs, stats = run(self, tasks, repeats, **kw)
        if not kw.get("greedy", False):
            seen["episodes"].append(len(trajs))
        return trajs, stats

    def capturing_make_batch(ids, masks, logprobs, advantages, pad_id):
        seen["batches"].append({"rows": len(ids), "advantages": list(advantages),
                                "generated": [int(sum(m)) for m in masks]})
        return make_batch(ids, masks, logprobs, advantages, pad_id)

    monkeypatch.setattr(RolloutEngine, "run", counting_run)
    monkeypatch.setattr(loop_module, "make_batch", capturing_make_batch)
    return seen


@pytest.fixture(scope="module")
def runner_module() -> Any:
    with benchmarks_package():
        from benchmarks import recording

        yield recording


def test_refill_rounds_are_rolled_out_and_counted(task_file: Path, warm_policy: Path, tmp_path: Path,
                                                  recorder: dict[str, list], runner_module: Any) -> None:
    cfg = dapo_config(task_file, tmp_path / "run")
    inner = dapo_source(cfg)
    source = runner_module.RecordingSource(inner, [t.id for t in seed_tasks()])
    assert isinstance(source, DynamicSampling) and source.max_refill_rounds == 2
    _, result = _train(cfg, warm_policy, source)
    assert result.steps_done == STEPS
    history = result.history
    generated = sum(recorder["episodes"])
    # every generated episode is either the step's batch (n * G) or a refill the source counted
    assert inner.extra_rollouts > 0
    assert generated == STEPS * N * G + inner.extra_rollouts
    assert sum(h["rollouts"] for h in history) == generated == source.rollouts
    assert [h["episodes"] for h in history] == [N * G] * STEPS
    assert history[-1]["extra_rollouts"] == inner.extra_rollouts
    assert sum(h["refill_rounds"] for h in history) > 0
    assert all(h["refill_rounds"] <= 2 for h in history)
    # the groups kept are the first n informative ones the step produced (refills included)
    for step, h in enumerate(history):
        groups = [gr for gr in source.groups if gr["step"] == step]
        assert h["groups"] == len(groups) and h["rollouts"] == G * len(groups)
        assert h["groups_kept"] == min(N, sum(not gr["silent"] for gr in groups))
    # the update batches hold exactly the kept groups, each with spread (no silent group trained on)
    kept = [h["groups_kept"] for h in history if h["groups_kept"] > 0]
    assert len(recorder["batches"]) == len(kept) and sum(kept) > 0
    for batch, n_kept in zip(recorder["batches"], kept):
        real = batch["rows"] - sum(1 for n in batch["generated"] if n == 0)
        assert real == n_kept * G
        adv = np.array(batch["advantages"][:real]).reshape(n_kept, G)
        assert (adv.std(axis=1) > 0).all()


class SelectsNothing(DynamicSamplingSource):
    """DAPO's refills, but no group is ever trained on."""

    def select(self, groups: Sequence[GroupResult]) -> list[GroupResult]:
        super().select(groups)
        return []


def test_the_update_uses_only_selected_groups(task_file: Path, warm_policy: Path, tmp_path: Path,
                                              recorder: dict[str, list]) -> None:
    cfg = dapo_config(task_file, tmp_path / "none", steps="2")
    start = load_policy(warm_policy)
    policy, result = _train(cfg, warm_policy, SelectsNothing(seed_tasks(), seed=cfg.seed, max_refill_rounds=2,
                                                             min_informative_rate=0.5))
    assert result.steps_done == 2 and recorder["batches"] == []  # no update batch was ever built
    for a, b in zip(start.model.parameters(), policy.model.parameters()):
        assert torch.equal(a, b)
    records = read_jsonl(tmp_path / "none" / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2] and all(r["groups_kept"] == 0 for r in records)
    assert all(r["loss"] == 0.0 and r["grad_norm"] == 0.0 for r in records)
    assert (tmp_path / "none" / "checkpoints" / "step-000002").is_dir()
    # informative groups existed, so the same run with DAPO's own selection does move the weights
    assert any(r["zero_std_frac"] < 1.0 for r in records)
    trained, _ = _train(dapo_config(task_file, tmp_path / "dapo", steps="2"), warm_policy, dapo_source(cfg))
    assert any(not torch.equal(a, b) for a, b in zip(start.model.parameters(), trained.model.parameters()))


class Killed(Exception):
    pass


class DiesMidRefill(DynamicSamplingSource):
    """Stands in for a killed process: fails in the middle of step 3's refill rounds."""

    def refill(self, step: int) -> list:
        if step == 2:
            raise Killed("killed mid-refill")
        return super().refill(step)


def test_dapo_run_resumes_to_the_same_result(task_file: Path, warm_policy: Path, tmp_path: Path) -> None:
    full_cfg = dapo_config(task_file, tmp_path / "full", steps="4")
    full_policy, full = _train(full_cfg, warm_policy, dapo_source(full_cfg))
    assert sum(h["refill_rounds"] for h in full.history[2:]) > 0  # the resumed part does refill
    cfg = dapo_config(task_file, tmp_path / "killed", steps="4")
    with pytest.raises(Killed):
        _train(cfg, warm_policy, DiesMidRefill(seed_tasks(), seed=cfg.seed, max_refill_rounds=2,
                                               min_informative_rate=0.5))
    assert [r["step"] for r in read_jsonl(tmp_path / "killed" / "metrics.jsonl")] == [1, 2]
    source = dapo_source(cfg)
    resumed_policy, result = _train(cfg, warm_policy, source, resume=True)
    assert result.steps_done == 4 and source.extra_rollouts == full.history[-1]["extra_rollouts"]
    for a, b in zip(full_policy.model.parameters(), resumed_policy.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    resumed = read_jsonl(tmp_path / "killed" / "metrics.jsonl")
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]
    for a, b in zip(read_jsonl(tmp_path / "full" / "metrics.jsonl"), resumed):
        for k in a:
            if k not in TIMING_METRICS:
                assert a[k] == pytest.approx(b[k], abs=1e-6), k


WORKER = textwrap.dedent("""
    import sys
    from pathlib import Path
    import rods_gym.trainer
    import torch
    torch.set_num_threads(1)
    from accelerate import Accelerator
    from rods_gym import read_jsonl
    from rods_gym.trainer.config import load_config
    from rods_gym.curricula import DynamicSamplingSource
    from rods_gym.trainer.loop import grpo_train
    from rods_gym.trainer.policy import load_policy
    from rods_gym.trainer.rollout import RolloutEngine

    out, task_file, warm = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    acc = Accelerator(cpu=True)
    seeds = read_jsonl(task_file)
    generated = []
    run = RolloutEngine.run

    def counting_run(self, tasks, repeats=1, **kw):
        trajs, stats = run(self, tasks, repeats, **kw)
        generated.append(len(trajs))
        return trajs, stats

    RolloutEngine.run = counting_run
    cfg = load_config(None, [f"run_dir={out / 'run'}", "steps=%(steps)d", "time_limit_min=0", "checkpoint_every=0",
                             "tensorboard=false", "progress_bar=false", "rollout.group_size=%(G)d",
                             "rollout.tasks_per_step=%(N)d", "rollout.max_action_tokens=8", "rollout.max_turns=4",
                             "grpo.lr=1e-3", "grpo.micro_batch_size=4", "grpo.minibatches=2", "seed=4"])
    # one refill round: some step stays short of informative groups (the null-row path below; with these
    # tasks and this warm start, seed 4's third step keeps one group)
    source = DynamicSamplingSource(seeds, seed=cfg.seed, max_refill_rounds=1, min_informative_rate=0.5)
    policy = load_policy(warm)
    result = grpo_train(cfg, policy, seeds, run_dir=cfg.run_dir, accelerator=acc, source=source)
    torch.save({"world": acc.num_processes, "generated": sum(generated), "extra": source.extra_rollouts,
                "weights": torch.cat([p.detach().flatten() for p in policy.model.parameters()]),
                "history": result.history}, out / f"rank{acc.process_index}.pt")
""" % {"steps": STEPS, "G": G, "N": N})


@pytest.mark.slow
def test_two_processes_agree_on_the_dapo_selection(task_file: Path, warm_policy: Path, tmp_path: Path) -> None:
    launcher = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")
    assert launcher is not None, "the accelerate launcher is part of the train extra"
    (tmp_path / "worker.py").write_text(WORKER)
    env = cpu_only_env(PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    proc = subprocess.run([launcher, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29547",
                           str(tmp_path / "worker.py"), str(tmp_path), str(task_file), str(warm_policy)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    assert r0["world"] == r1["world"] == 2
    # both processes made the same selection and the same updates
    assert torch.equal(r0["weights"], r1["weights"])
    start = torch.cat([p.detach().flatten() for p in load_policy(warm_policy).model.parameters()])
    assert not torch.allclose(r0["weights"], start)
    for a, b in zip(r0["history"], r1["history"]):
        assert {k: v for k, v in a.items() if k not in TIMING_METRICS} == {k: v for k, v in b.items() if k not in TIMING_METRICS}
    # the rollouts of both processes add up to the step batches plus the counted refills
    assert r0["extra"] == r1["extra"] > 0
    assert r0["generated"] + r1["generated"] == STEPS * N * G + r0["extra"]
    assert sum(h["rollouts"] for h in r0["history"]) == r0["generated"] + r1["generated"]
    # a step that kept one group trained on one process's rollouts only: the other ran null rows
    assert any(h["groups_kept"] == 1 for h in r0["history"])


def test_a_budget_caps_the_refills_of_a_recorded_dapo_source(task_file: Path, warm_policy: Path, tmp_path: Path,
                                                              runner_module: Any) -> None:
    """data_efficiency.py's equal rollout budget holds for DAPO too: with ``budget`` set, a refill round gets
    only the tasks that still fit, so refills never take the arm past it (run_arm stops stepping there; a
    step's own batch is what every arm may overshoot by)."""
    unbudgeted = runner_module.RecordingSource(dapo_source(dapo_config(task_file, tmp_path / "x")),
                                               [t.id for t in seed_tasks()])
    _train(dapo_config(task_file, tmp_path / "free"), warm_policy, unbudgeted)
    assert unbudgeted.rollouts > STEPS * N * G + G  # without a budget, refills add more than one group
    for room, name in ((0, "none"), (G, "one")):  # room after the first step's batch: no refill, one refill group
        cfg = dapo_config(task_file, tmp_path / name)
        source = runner_module.RecordingSource(dapo_source(cfg), [t.id for t in seed_tasks()])
        source.budget, source.group_size = N * G + room, G
        _, result = _train(cfg, warm_policy, source)
        assert result.steps_done == STEPS and sum(h["rollouts"] for h in result.history) == source.rollouts
        assert 0 <= source.rollouts - STEPS * N * G <= room  # refills stayed within the room
