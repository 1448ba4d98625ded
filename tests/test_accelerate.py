"""Two CPU processes (gloo) through ``accelerate launch``: averaged gradients and identical weights."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import TIMING_METRICS, cpu_only_env

from rods_gym import DIFFICULTIES, TaskSampler, default_suite, write_jsonl
from rods_gym.cli import main
from rods_gym.trainer import pipeline
from rods_gym.trainer.config import PolicyConfig, SFTConfig, load_config, parse_overrides
from rods_gym.trainer.policy import build_tiny_policy, load_policy, save_policy
from rods_gym.trainer.sft import length_grouped_batches, make_demonstrations, pad_right, sft_loss, train_sft

WORKER = textwrap.dedent("""
    import sys
    from pathlib import Path
    import rods_gym.trainer
    import torch
    torch.set_num_threads(1)
    from accelerate import Accelerator
    from rods_gym import read_jsonl
    from rods_gym.trainer.config import load_config
    from rods_gym.trainer.loop import grpo_train
    from rods_gym.trainer.policy import load_policy
    from rods_gym.trainer.sft import make_demonstrations, pad_right, sft_loss

    out, task_file, warm, held_out_file = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    acc = Accelerator(cpu=True)
    rank, world = acc.process_index, acc.num_processes
    seeds = read_jsonl(task_file)

    # 1. gradients: each rank has its own data; the synced gradient must be the mean of the local ones
    policy = load_policy(warm)
    model = acc.prepare(policy.model)
    demos = make_demonstrations(policy, seeds[2 * rank: 2 * rank + 2], "rods/ToolChain-Compact-v0")
    ids, attn, amask = pad_right([d.transcript.ids for d in demos], [d.transcript.action_mask for d in demos],
                                 policy.pad_id)
    with acc.no_sync(model):
        acc.backward(sft_loss(model, ids, attn, amask))
    local = torch.cat([p.grad.flatten() for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    acc.backward(sft_loss(model, ids, attn, amask))
    synced = torch.cat([p.grad.flatten() for p in model.parameters()])
    every_local = acc.gather(local[None])  # [world, n]

    # 2. two GRPO steps of the real loop, each rank rolling out its share of the tasks (on tasks the warm start
    #    has not seen, so that its groups' returns differ)
    def run_config(name, *more):
        # two GRPO steps of 4 tasks x 3 rollouts into out/NAME, with more overrides
        return load_config(None, [f"run_dir={out / name}", "steps=2", "time_limit_min=0", "checkpoint_every=0",
                                  "tensorboard=false", "progress_bar=false", "rollout.group_size=3",
                                  "rollout.tasks_per_step=4", "rollout.max_action_tokens=8", "rollout.max_turns=4",
                                  "grpo.micro_batch_size=4", *more])

    cfg = run_config("run", "grpo.lr=1e-3", "grpo.minibatches=2")
    trained = load_policy(warm)
    result = grpo_train(cfg, trained, read_jsonl(held_out_file), run_dir=cfg.run_dir, accelerator=acc)

    # 4. the warm start over both processes: each takes its share of every batch; the reported loss is global
    from rods_gym.trainer.config import SFTConfig
    from rods_gym.trainer.sft import train_sft
    sft_demos = make_demonstrations(load_policy(warm), seeds[:8], "rods/ToolChain-Compact-v0")
    sft_policy = load_policy(warm)
    sft_losses = train_sft(sft_policy, sft_demos, SFTConfig(steps=6, batch_size=4, lr=1e-3, warmup_steps=2), seed=3,
                           accelerator=acc)
    torch.save({"sft_losses": sft_losses,
                "sft_weights": torch.cat([p.detach().flatten() for p in sft_policy.model.parameters()])},
               out / f"sft{rank}.pt")
    # 5. GRPO through LoRA adapters with a KL term (the reference: the adapters switched off)
    lora_cfg = run_config("lora", "grpo.lr=1e-2", "grpo.beta=0.05", "lora.rank=4")
    lora_policy = load_policy(warm)
    lora_result = grpo_train(lora_cfg, lora_policy, seeds, run_dir=lora_cfg.run_dir, accelerator=acc)
    torch.save({"adapters": {n: p.detach() for n, p in lora_policy.model.named_parameters() if ".lora_" in n},
                "base": {n: p.detach() for n, p in lora_policy.model.named_parameters() if ".lora_" not in n},
                "kl": [h["kl"] for h in lora_result.history]}, out / f"lora{rank}.pt")
    torch.save({"rank": rank, "world": world, "backend": acc.state.backend, "local": local, "synced": synced, "every_local": every_local,
                "weights": torch.cat([p.detach().flatten() for p in trained.model.parameters()]),
                "history": result.history}, out / f"rank{rank}.pt")
""")


def _warm_policy(path: Path, tasks) -> Path:
    policy = build_tiny_policy(PolicyConfig(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=2,
                                            max_positions=512), "compact")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        demos = make_demonstrations(policy, tasks, "rods/ToolChain-Compact-v0")
        train_sft(policy, demos, SFTConfig(steps=80, batch_size=6, lr=5e-3, warmup_steps=3), seed=0)
    finally:
        torch.set_num_threads(before)
    return save_policy(policy, path)


@pytest.mark.slow
def test_two_cpu_processes_average_gradients_and_stay_identical(tmp_path: Path) -> None:
    launcher = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")
    assert launcher is not None, "the accelerate launcher is part of the train extra"
    tasks = TaskSampler(default_suite(), DIFFICULTIES["easy"], seed=5).sample_many(12)
    write_jsonl(tasks, tmp_path / "seeds.jsonl")
    write_jsonl(TaskSampler(default_suite(), DIFFICULTIES["easy"], seed=6).sample_many(8), tmp_path / "held_out.jsonl")
    warm = _warm_policy(tmp_path / "warm", tasks)
    (tmp_path / "worker.py").write_text(WORKER)
    env = cpu_only_env(PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    # accelerate's torchrun path (--multi_gpu) starts the 2 processes; with no GPU, Accelerator(cpu=True)
    # runs them as MULTI_CPU over gloo (accelerate's --cpu flag alone starts a single process)
    proc = subprocess.run([launcher, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29533",
                           str(tmp_path / "worker.py"), str(tmp_path), str(tmp_path / "seeds.jsonl"), str(warm),
                           str(tmp_path / "held_out.jsonl")],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    assert r0["world"] == r1["world"] == 2 and r0["backend"] == "gloo"
    # gradients: the ranks saw different data, and DDP's gradient is the mean of the local ones
    assert not torch.allclose(r0["local"], r1["local"])
    mean = (r0["local"] + r1["local"]) / 2
    assert torch.allclose(r0["synced"], mean, atol=1e-6) and torch.allclose(r1["synced"], mean, atol=1e-6)
    assert torch.equal(r0["every_local"][1], r1["local"])
    # training: both ranks end with the same weights, which moved from the start
    assert torch.equal(r0["weights"], r1["weights"])
    # the step records are summed over both ranks: every rank logs the same figures (but its own timings)
    untimed = [[{k: v for k, v in h.items() if k not in TIMING_METRICS} for h in r["history"]] for r in (r0, r1)]
    assert [h["episodes"] for h in r0["history"]] == [12, 12] and untimed[0] == untimed[1]
    start = torch.cat([p.detach().flatten() for p in load_policy(warm).model.parameters()])
    assert not torch.allclose(r0["weights"], start)
    # the warm start's reported loss is the global one: at its first step (before any update) it equals the
    # one-process loss of the same whole batch, on every rank
    w0, w1 = (torch.load(tmp_path / f"sft{r}.pt", weights_only=False) for r in (0, 1))
    s0, s1 = w0["sft_losses"], w1["sft_losses"]
    assert s0 == pytest.approx(s1, rel=1e-6)
    # and the whole warm start is the one-process one: the same batches, gradients and learning-rate schedule
    # (a scheduler prepared by accelerate stepped once per process, so its cosine ended halfway)
    assert torch.equal(w0["sft_weights"], w1["sft_weights"])
    alone = load_policy(warm)
    alone_losses = train_sft(alone, make_demonstrations(alone, tasks[:8], "rods/ToolChain-Compact-v0"),
                             SFTConfig(steps=6, batch_size=4, lr=1e-3, warmup_steps=2), seed=3)
    assert s0 == pytest.approx(alone_losses, rel=1e-4)
    assert torch.allclose(w0["sft_weights"], torch.cat([p.detach().flatten() for p in alone.model.parameters()]),
                          atol=1e-5)
    demos = make_demonstrations(load_policy(warm), tasks[:8], "rods/ToolChain-Compact-v0")
    whole = [demos[i] for i in length_grouped_batches([len(d.transcript) for d in demos], 4,
                                                      np.random.default_rng(3)).pop()]
    ids, attn, amask = pad_right([d.transcript.ids for d in whole], [d.transcript.action_mask for d in whole],
                                 load_policy(warm).pad_id)
    with torch.no_grad():
        expected = float(sft_loss(load_policy(warm).model.train(), ids, attn, amask))
    assert s0[0] == pytest.approx(expected, rel=1e-4)
    # LoRA: both ranks hold the same adapters, which moved; the base weights are the warm start's on both
    l0, l1 = (torch.load(tmp_path / f"lora{r}.pt", weights_only=False) for r in (0, 1))
    assert l0["adapters"].keys() == l1["adapters"].keys() and l0["adapters"]
    assert all(torch.equal(l0["adapters"][n], l1["adapters"][n]) for n in l0["adapters"])
    assert any(n.endswith("lora_B.default.weight") and t.abs().max() > 0 for n, t in l0["adapters"].items())
    warm_weights = torch.cat([p.detach().flatten() for p in load_policy(warm).model.parameters()])
    assert torch.equal(torch.cat([t.flatten() for t in l0["base"].values()]), warm_weights)
    assert l0["kl"] == l1["kl"] and l0["kl"][1] > 0
    # the metrics cover the episodes of both ranks (4 tasks x 3 rollouts)
    assert [h["episodes"] for h in r0["history"]] == [12, 12]
    # and every process logged the same (gathered) training statistics
    for a, b in zip(r0["history"], r1["history"]):
        assert {k: a[k] for k in ("reward_mean", "success", "zero_std_frac", "loss", "kl_old")} == \
               {k: b[k] for k in ("reward_mean", "success", "zero_std_frac", "loss", "kl_old")}


def test_a_lone_process_where_several_were_asked_is_warned_about(monkeypatch) -> None:
    """``accelerate launch --num_processes 2`` without ``--multi_gpu`` on a CPU machine starts one process."""
    from rods_gym.trainer import preflight

    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "launch", "--num_processes", "2",
                                 "-m", "rods_gym.cli", "train"])
    try:
        import time

        cmdline = Path(f"/proc/{launcher.pid}/cmdline")
        for _ in range(500):  # the child's command line appears once it has exec'd (bounded wait)
            if b"--num_processes" in cmdline.read_bytes():
                break
            time.sleep(0.01)
        monkeypatch.setattr(preflight.os, "getppid", lambda: launcher.pid)
        monkeypatch.delenv("WORLD_SIZE", raising=False)
        monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
        assert preflight.check_lone_launch() is None  # not launched by accelerate: nothing to say
        monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
        with pytest.warns(UserWarning, match="asked for --num_processes 2 but started this one process alone"):
            assert preflight.check_lone_launch().endswith("; add --multi_gpu")
        monkeypatch.setenv("WORLD_SIZE", "2")  # a real two-process launch
        assert preflight.check_lone_launch() is None
    finally:
        launcher.kill()
        launcher.wait()


def test_a_gpu_run_turns_on_deterministic_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs with one seed on an H200 differed (warm starts at 0.292 and 0.268 test success) until the
    pipeline's accelerator turned deterministic kernels on; there, two quick runs gave equal weights. Here, with
    the GPU and the accelerator stood in for, what it switches on, what it leaves alone, and on the CPU nothing."""
    calls: list[bool] = []
    monkeypatch.setattr(pipeline.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(pipeline, "Accelerator", lambda cpu: ("accelerator", cpu))
    monkeypatch.setattr(pipeline.torch, "use_deterministic_algorithms", calls.append)
    monkeypatch.setattr(pipeline.torch.backends.cudnn, "benchmark", True)
    monkeypatch.setattr(pipeline.torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", "x")  # recorded as it was (absent or not), restored after the test
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    assert pipeline.make_accelerator(deterministic=False) == ("accelerator", False)
    assert calls == [] and "CUBLAS_WORKSPACE_CONFIG" not in os.environ and torch.backends.cudnn.benchmark
    assert pipeline.make_accelerator() == ("accelerator", False)
    assert calls == [True] and os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert not torch.backends.cudnn.benchmark
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")  # a setting of the user's own stays
    pipeline.make_accelerator()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")  # CUDA already used in this process: the setting comes late
    monkeypatch.setattr(pipeline.torch.cuda, "is_initialized", lambda: True)
    with pytest.warns(UserWarning, match="CUDA started in this process before CUBLAS_WORKSPACE_CONFIG was set"):
        pipeline.make_accelerator()
    monkeypatch.setattr(pipeline.torch.cuda, "is_available", lambda: False)
    calls.clear()
    assert pipeline.make_accelerator() == ("accelerator", True) and calls == []


def test_the_deterministic_field_reaches_every_commands_accelerator(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[bool] = []

    class Stop(Exception):
        pass

    def spy(deterministic: bool = True) -> None:
        asked.append(deterministic)
        raise Stop

    monkeypatch.setattr(pipeline, "make_accelerator", spy)
    assert load_config("default").deterministic is True
    small = ["sft.demos=8", "eval.tasks=2", "deterministic=false"]
    with pytest.raises(Stop):
        pipeline.run_training(load_config("default", parse_overrides([f"run_dir={tmp_path / 'a'}", *small])))
    with pytest.raises(Stop):
        main(["sft", "--run-dir", str(tmp_path / "sft"), *small])
    with pytest.raises(Stop):
        main(["evaluate", *small])
    assert asked == [False, False, False]
