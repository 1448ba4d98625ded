"""fp32 master weights: a bf16 policy's updates accumulate instead of being rounded away, an fp16 policy is
refused (it would need loss scaling), and a killed bf16 run resumes to the weights an uninterrupted one reaches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from accelerate import Accelerator

from conftest import easy_seed_tasks, warm_tiny_policy
from rods_gym.trainer.checkpoint import latest_checkpoint
from rods_gym.trainer.config import PolicyConfig, SFTConfig, load_config
from rods_gym.trainer.loop import grpo_train
from rods_gym.trainer.master_weights import MasterWeights
from rods_gym.trainer.policy import build_tiny_policy, load_policy
from rods_gym.trainer.sft import make_demonstrations, train_sft

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py

TINY = PolicyConfig(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=2, max_positions=512)


def _adamw_steps(param: torch.nn.Parameter, steps: int, masters: MasterWeights | None) -> None:
    optimizer = torch.optim.AdamW(masters.tensors if masters else [param], lr=1e-4, weight_decay=0.0)
    for _ in range(steps):
        param.grad = torch.ones_like(param)
        if masters:
            masters.step(optimizer)
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def test_bf16_updates_accumulate_in_the_fp32_copy() -> None:
    # AdamW moves each weight by about lr = 1e-4 a step; bf16 spacing at 1.0 is 2**-7 (about 8e-3)
    plain = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    _adamw_steps(plain, 50, None)
    assert torch.equal(plain.detach(), torch.ones(4, dtype=torch.bfloat16))  # every step rounded away: stuck
    mixed = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    masters = MasterWeights([mixed])
    _adamw_steps(mixed, 50, masters)
    assert masters.active and masters.tensors[0].dtype == torch.float32
    assert masters.tensors[0] == pytest.approx([1 - 50e-4] * 4, abs=1e-4)
    assert torch.equal(mixed.detach(), masters.tensors[0].to(torch.bfloat16))  # the parameter holds it, rounded
    assert mixed.grad is None  # the step took its gradient, as zero_grad would have


def test_fp32_parameters_are_stepped_in_place() -> None:
    param = torch.nn.Parameter(torch.ones(3))
    masters = MasterWeights([param])
    assert masters.tensors[0] is param and not masters.active and masters.state_dict() is None
    _adamw_steps(param, 3, masters)
    assert torch.all(param.detach() < 1.0)
    masters.load_state_dict(None)
    with pytest.raises(ValueError, match="1 fp32 master weights, this policy has 0"):
        masters.load_state_dict([torch.zeros(3)])


def test_fp16_parameters_are_refused_with_the_fix_named() -> None:
    with pytest.raises(ValueError, match="bfloat16 or float32"):
        MasterWeights([torch.nn.Parameter(torch.ones(3, dtype=torch.float16))])


def test_a_bf16_warm_start_moves_its_weights_and_resumes_exactly(easy_tasks, tmp_path: Path) -> None:
    dtype = torch.bfloat16
    tasks = easy_tasks[:12]
    cfg = SFTConfig(steps=6, batch_size=4, lr=2e-5, warmup_steps=0, checkpoint_every=3)

    def bf16_policy():
        policy = build_tiny_policy(TINY, "compact")
        policy.model.to(dtype)
        return policy

    start = [p.detach().clone() for p in bf16_policy().model.parameters()]
    full = bf16_policy()
    demos = make_demonstrations(full, tasks, "rods/ToolChain-Compact-v0")
    train_sft(full, demos, cfg, seed=1, checkpoint_dir=tmp_path / "full")
    moved = sum(int((a != b).sum()) for a, b in zip(start, full.model.parameters()))
    total = sum(a.numel() for a in start)
    # 6 steps of about 2e-5 each: below half the bf16 spacing of most weights, so stepping bf16 weights
    # directly would leave nearly all of them where they were
    assert moved / total > 0.5, moved / total

    class Killed(Exception):
        pass

    def die_in_step_5(step: int, loss: float) -> None:
        if step == 4:
            raise Killed

    with pytest.raises(Killed):
        train_sft(bf16_policy(), demos, cfg, seed=1, checkpoint_dir=tmp_path / "run", on_step=die_in_step_5)
    resumed = bf16_policy()
    train_sft(resumed, demos, cfg, seed=1, checkpoint_dir=tmp_path / "run")
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        assert a.dtype == dtype and torch.equal(a, b)  # the fp32 copies were checkpointed too


def test_a_bf16_grpo_run_checkpoints_its_master_weights_and_resumes_exactly(task_file: Path, tmp_path: Path,
                                                                           capsys) -> None:
    dtype = "bfloat16"
    warm = warm_tiny_policy(tmp_path / "warm", sft_steps=60)

    def run(run_dir: Path, steps: int, resume: bool = False):
        cfg = load_config(None, [
            f"run_dir={run_dir}", f"steps={steps}", "time_limit_min=0", "checkpoint_every=1", "tensorboard=false",
            "progress_bar=false", f"policy.dtype={dtype}", f"data.train_split={task_file}", "rollout.group_size=4",
            "rollout.tasks_per_step=2", "rollout.max_action_tokens=8", "rollout.max_turns=4", "grpo.lr=1e-5",
            "grpo.micro_batch_size=8", "rollout.temperature=1.0"])
        policy = load_policy(warm, dtype=dtype)
        grpo_train(cfg, policy, easy_seed_tasks(), run_dir=run_dir, accelerator=Accelerator(cpu=True), resume=resume)
        return policy

    full = run(tmp_path / "full", 3)
    state = torch.load(latest_checkpoint(tmp_path / "full" / "checkpoints") / "trainer_state.pt", weights_only=False)
    n_params = sum(1 for _ in full.model.parameters())
    assert len(state["master_weights"]) == n_params and state["master_weights"][0].dtype == torch.float32
    start = load_policy(warm, dtype=dtype)
    assert any(not torch.equal(a, b) for a, b in zip(start.model.parameters(), full.model.parameters()))
    run(tmp_path / "cut", 2)
    resumed = run(tmp_path / "cut", 3, resume=True)
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
    capsys.readouterr()
    again = run(tmp_path / "cut", 3, resume=True)  # a finished run: nothing trains, and the resume says so
    assert "resume: GRPO is already done (checkpoint step-000003, step 3 of 3)" in capsys.readouterr().out
    for a, b in zip(full.model.parameters(), again.model.parameters()):
        assert torch.equal(a, b)
