"""fp32 master weights: a bf16 policy's updates accumulate instead of being rounded away; an fp16
policy's loss is scaled so that its gradients neither underflow nor, when they overflow, corrupt the
weights; and a killed bf16 or fp16 run resumes to the weights an uninterrupted one reaches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator

from conftest import easy_seed_tasks, warm_tiny_policy
from rods_gym.trainer.checkpoint import latest_checkpoint
from rods_gym.trainer.config import PolicyConfig, SFTConfig, load_config
from rods_gym.trainer.loop import grpo_train
from rods_gym.trainer import master_weights
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


def test_fp16_gradients_that_would_underflow_are_scaled_and_still_train() -> None:
    # d(loss)/dw = 1e-8: below fp16's smallest subnormal (6e-8), so an unscaled fp16 backward gives 0
    def one_step(scale_loss: bool) -> tuple[torch.nn.Parameter, MasterWeights]:
        w = torch.nn.Parameter(torch.ones(4, dtype=torch.float16))
        masters = MasterWeights([w], scale_loss=scale_loss)
        # eps far below the gradient, so that AdamW's first step is lr * sign(gradient)
        optimizer = torch.optim.AdamW(masters.tensors, lr=1e-3, weight_decay=0.0, eps=1e-15)
        loss = (w.float() * 1e-8).sum()
        masters.scale(loss).backward()
        masters.step(optimizer, max_norm=1.0)
        return w, masters

    stuck, unscaled = one_step(scale_loss=False)
    assert unscaled.scaler is None and torch.equal(stuck.detach(), torch.ones(4, dtype=torch.float16))
    moved, masters = one_step(scale_loss=True)
    assert masters.loss_scale == master_weights.INITIAL_LOSS_SCALE and masters.skipped == 0
    assert masters.tensors[0] == pytest.approx([1 - 1e-3] * 4, abs=1e-5)  # AdamW's first step: lr * sign
    assert torch.equal(moved.detach(), masters.tensors[0].to(torch.float16))


def test_an_fp16_step_whose_gradients_overflow_is_skipped_and_the_scale_halved() -> None:
    w = torch.nn.Parameter(torch.ones(3, dtype=torch.float16))
    masters = MasterWeights([w])  # fp16 parameters: scaled by default
    optimizer = torch.optim.AdamW(masters.tensors, lr=1e-2, weight_decay=0.0)
    # 2**16 * 1.5 overflows fp16 (largest finite 65504)
    masters.scale((w.float() * 1.5).sum()).backward()
    norm = masters.step(optimizer, max_norm=1.0)
    assert not torch.isfinite(torch.tensor(norm)) and masters.skipped == 1
    assert masters.loss_scale == master_weights.INITIAL_LOSS_SCALE / 2
    assert torch.equal(w.detach(), torch.ones(3, dtype=torch.float16)) and w.grad is None
    assert torch.equal(masters.tensors[0], torch.ones(3)) and not optimizer.state  # nothing stepped
    masters.scale((w.float() * 1.5).sum()).backward()  # 2**15 * 1.5 fits: this one goes through
    norm = masters.step(optimizer, max_norm=1.0)
    assert norm == pytest.approx(1.5 * 3 ** 0.5) and masters.skipped == 1  # the unscaled gradients' norm
    assert torch.all(masters.tensors[0] < 1.0)
    restored = MasterWeights([torch.nn.Parameter(torch.ones(3, dtype=torch.float16))])
    restored.load_scaler_state_dict(masters.scaler_state_dict())
    assert restored.loss_scale == masters.loss_scale and restored.skipped == 1
    assert MasterWeights([torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16))]).scaler is None  # bf16: never


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_low_precision_warm_start_moves_its_weights_and_resumes_exactly(
        dtype: torch.dtype, easy_tasks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # fp16: a first loss scale the gradients overflow at, so that the run skips steps and lowers its scale,
    # which the resumed run must then continue from (its scaler state is checkpointed)
    monkeypatch.setattr(master_weights, "INITIAL_LOSS_SCALE", 2.0 ** 20)
    steps_seen: list[MasterWeights] = []
    real_step = MasterWeights.step

    def spy(self: MasterWeights, *args, **kwargs):
        steps_seen.append(self)
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(MasterWeights, "step", spy)
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
    if dtype == torch.float16:  # the scale fell from 2**20 on overflows, and every later step went through
        assert 1 <= steps_seen[-1].skipped < 6 and steps_seen[-1].loss_scale < 2.0 ** 20
        saved = torch.load(tmp_path / "full" / "sft_state.pt", weights_only=False)["loss_scaler"]
        assert saved["scale"] < 2.0 ** 20 and saved["skipped"] >= 1
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
        assert a.dtype == dtype and torch.equal(a, b)  # the fp32 copies (and fp16's loss scale) were checkpointed too


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_low_precision_grpo_run_checkpoints_its_master_weights_and_resumes_exactly(
        dtype: str, task_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(master_weights, "INITIAL_LOSS_SCALE", 2.0 ** 20)  # fp16: overflows first (see above)
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
    if dtype == "float16":  # the loss scale and the skipped updates are logged and checkpointed
        assert state["loss_scaler"]["scale"] < 2.0 ** 20 and state["loss_scaler"]["skipped"] >= 1
        records = [json.loads(line) for line in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
        steps = [r for r in records if "loss_scale" in r]
        assert len(steps) == 3 and steps[-1]["skipped_updates"] == state["loss_scaler"]["skipped"]
    else:
        assert state["loss_scaler"] is None
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
