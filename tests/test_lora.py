"""LoRA adapters (lora.*) and gradient checkpointing (policy.gradient_checkpointing): only the adapters
train, saved policies are plain merged models any tool reloads, the KL reference is the base with the
adapters off, runs resume to the uninterrupted result, and a warm start through adapters merges."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from accelerate import Accelerator

from conftest import SFTCrash, crash_warm_start_after, easy_seed_tasks, warm_tiny_policy
from rods_gym.trainer.checkpoint import latest_checkpoint
from rods_gym.trainer.config import LoRAConfig, PolicyConfig, TrainConfig, load_config
from rods_gym.trainer.grpo import token_logprobs
from rods_gym.trainer.lora import ADAPTER_DIR, adapters_off, add_adapters, is_adapted, load_adapter
from rods_gym.trainer.loop import grpo_train
from rods_gym.trainer.metrics import read_jsonl
from rods_gym.trainer.policy import build_tiny_policy, enable_gradient_checkpointing, load_policy

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py


@pytest.fixture(scope="module")
def warm_policy(tmp_path_factory) -> Path:
    return warm_tiny_policy(tmp_path_factory.mktemp("warm") / "policy", sft_steps=80)


def lora_config(task_file: Path, run_dir: Path, **extra: str) -> TrainConfig:
    overrides = [f"run_dir={run_dir}", "steps=4", "time_limit_min=0", "checkpoint_every=1", "tensorboard=false",
                 "progress_bar=false", f"data.train_split={task_file}", "rollout.group_size=3",
                 "rollout.tasks_per_step=2", "rollout.max_action_tokens=8", "rollout.max_turns=4",
                 "grpo.lr=1e-2", "grpo.micro_batch_size=4", "grpo.epochs=2", "grpo.minibatches=2", "grpo.beta=0.05",
                 "lora.rank=4", "lora.alpha=8"]
    return load_config(None, overrides + [f"{k}={v}" for k, v in extra.items()])


def _run(cfg: TrainConfig, start: Path, resume: bool = False):
    policy = load_policy(start)
    result = grpo_train(cfg, policy, easy_seed_tasks(), run_dir=cfg.run_dir, accelerator=Accelerator(cpu=True),
                        resume=resume)
    return policy, result


def _adapters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if ".lora_" in n}


def test_only_the_adapters_train_and_checkpoints_reload_as_plain_models(task_file: Path, warm_policy: Path,
                                                                        tmp_path: Path, capsys) -> None:
    start = load_policy(warm_policy)
    policy, result = _run(lora_config(task_file, tmp_path / "run", steps="2"), warm_policy)
    trains = sum(p.numel() for p in policy.model.parameters() if p.requires_grad)
    assert f"lora: rank-4 adapters on all-linear: {trains:,} of " in capsys.readouterr().out
    assert result.steps_done == 2 and is_adapted(policy.model)
    base = policy.model.get_base_model()
    frozen = {n.replace(".base_layer.", "."): p for n, p in base.named_parameters() if ".lora_" not in n}
    for name, p in start.model.named_parameters():  # every base weight is exactly the warm start's
        assert torch.equal(frozen[name], p), name
    adapters = _adapters(policy.model)
    assert adapters and any(n.endswith("lora_B.default.weight") and p.abs().max() > 0 for n, p in adapters.items())
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    # the reference is the warm start (adapters off): after the first update moves the adapters, KL > 0
    assert records[0]["kl"] > 0.0
    ckpt = latest_checkpoint(tmp_path / "run" / "checkpoints")
    state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    assert len(state["optimizer"]["state"]) == len(adapters)  # optimizer state for the adapters only
    assert (ckpt / "policy" / ADAPTER_DIR / "adapter_model.safetensors").exists()
    plain = load_policy(ckpt / "policy")  # a plain save_pretrained model: the adapters merged in
    assert not is_adapted(plain.model)
    ids = torch.tensor([[plain.pad_id, 5, 9, 12, 7, 30, 41]])
    with torch.no_grad():
        a = policy.model(input_ids=ids).logits
        b = plain.model(input_ids=ids).logits
        c = start.model(input_ids=ids).logits
    assert torch.allclose(a, b, atol=1e-5) and not torch.allclose(a, c, atol=1e-3)


def test_the_first_update_starts_at_the_reference(task_file: Path, warm_policy: Path, tmp_path: Path) -> None:
    _run(lora_config(task_file, tmp_path / "run", steps="1", **{"grpo.epochs": "1", "grpo.minibatches": "1"}),
         warm_policy)
    rec = read_jsonl(tmp_path / "run" / "metrics.jsonl")[0]
    # lora_B starts at zero: the adapted policy is the warm start, so ratio 1 and KL 0 to the base
    assert rec["ratio"] == pytest.approx(1.0, abs=1e-5) and rec["kl"] == pytest.approx(0.0, abs=1e-6)
    assert not (tmp_path / "run" / "reference").exists()  # no second copy of the model is saved or loaded


def test_a_lora_run_resumes_to_the_uninterrupted_result(task_file: Path, warm_policy: Path, tmp_path: Path) -> None:
    full, _ = _run(lora_config(task_file, tmp_path / "full"), warm_policy)
    _run(lora_config(task_file, tmp_path / "run", steps="2"), warm_policy)
    resumed, result = _run(lora_config(task_file, tmp_path / "run"), warm_policy, resume=True)
    assert result.steps_done == 4
    a, b = _adapters(full.model), _adapters(resumed.model)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-6), name
    kl = [r["kl"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")]
    assert kl == pytest.approx([r["kl"] for r in read_jsonl(tmp_path / "full" / "metrics.jsonl")], abs=1e-6)
    # resumed with another rank: refused with a message naming the setting, not a shape traceback
    with pytest.raises(ValueError, match="another lora.rank"):
        _run(lora_config(task_file, tmp_path / "run", steps="5", **{"lora.rank": "2"}), warm_policy, resume=True)
    # a checkpoint of a full fine-tuning run has no adapter to resume
    other = load_policy(warm_policy)
    other.model = add_adapters(other.model, LoRAConfig(rank=4))
    with pytest.raises(FileNotFoundError, match="holds no adapter"):
        load_adapter(other.model, warm_policy)


def test_unknown_target_modules_name_the_setting_and_the_layers() -> None:
    policy = build_tiny_policy(PolicyConfig(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2), "compact")
    with pytest.raises(ValueError, match=r"lora.target_modules=\['qkv'\].*q_proj"):
        add_adapters(policy.model, LoRAConfig(rank=2, target_modules=("qkv",)))
    only_q = add_adapters(policy.model, LoRAConfig(rank=2, target_modules=("q_proj",)))
    assert {n.split(".lora_")[0].rsplit(".", 1)[-1] for n, p in only_q.named_parameters() if p.requires_grad} == {"q_proj"}
    assert add_adapters(only_q, LoRAConfig(rank=2)) is only_q  # not wrapped twice


@pytest.mark.parametrize("lora", [False, True])
def test_gradient_checkpointing_gives_the_same_gradients(lora: bool) -> None:
    def grads(checkpointing: bool) -> dict[str, torch.Tensor]:
        policy = build_tiny_policy(PolicyConfig(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2),
                                   "compact")
        model = policy.model
        if checkpointing:
            enable_gradient_checkpointing(model)
        if lora:
            model = add_adapters(model, LoRAConfig(rank=2))
            with torch.no_grad():
                for n, p in model.named_parameters():
                    if "lora_B" in n:
                        p.copy_(torch.linspace(-0.1, 0.1, p.numel()).view_as(p))
        model.train()
        ids = torch.tensor([[5, 9, 12, 7, 30, 41, 8, 3], [5, 11, 19, 4, 22, 6, 2, 2]])
        attn = torch.tensor([[1] * 8, [1] * 6 + [0] * 2])
        lp, _ = token_logprobs(model, ids, attn)
        (lp * attn[:, 1:]).sum().backward()
        assert any(getattr(m, "gradient_checkpointing", False) for m in model.modules()) == checkpointing
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    plain, recomputed = grads(False), grads(True)
    assert plain.keys() == recomputed.keys() and plain
    for name in plain:
        assert torch.allclose(plain[name], recomputed[name], atol=1e-6), name


def test_a_warm_start_through_adapters_merges_and_resumes_after_a_crash(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from rods_gym.trainer.pipeline import run_training

    def config(run: Path) -> TrainConfig:
        return load_config("default", [f"run_dir={run}", "progress_bar=false", "threads=1", "tensorboard=false",
                                       "steps=1", "eval.splits=[dev]", "eval.tasks=2", "eval.samples=0",
                                       "sft.data=seeds", "sft.demos=8", "sft.steps=4", "sft.checkpoint_every=2",
                                       "sft.batch_size=4", "sft.threads=1", "eval.threads=1", "sft.lr=1e-2",
                                       "policy.hidden_size=32", "policy.intermediate_size=64", "policy.num_layers=1",
                                       "policy.num_heads=2", "rollout.tasks_per_step=2", "rollout.group_size=2",
                                       "rollout.max_turns=3", "rollout.max_action_tokens=8",
                                       "lora.rank=2", "lora.sft=true"])

    run_training(config(tmp_path / "clean"))
    initial = build_tiny_policy(config(tmp_path).policy, "compact")
    warm = load_policy(tmp_path / "clean" / "sft_policy")
    assert not is_adapted(warm.model) and not (tmp_path / "clean" / "sft_policy" / ADAPTER_DIR).exists()
    before = dict(initial.model.named_parameters())
    for name, p in warm.model.named_parameters():
        delta = p.detach() - before[name].detach()
        if name.endswith(("q_proj.weight", "down_proj.weight")):  # adapted layers moved by a rank-2 update
            assert delta.abs().max() > 0 and torch.linalg.matrix_rank(delta, atol=1e-6) <= 2, name
        elif "embed_tokens" in name or "norm" in name:  # not adapted: untouched
            assert torch.equal(p, before[name]), name

    restore = crash_warm_start_after(monkeypatch, step=2)  # in the third step, after the step-2 checkpoint
    with pytest.raises(SFTCrash):
        run_training(config(tmp_path / "run"))
    restore()
    summary = run_training(config(tmp_path / "run"), resume=True)
    assert summary["sft"]["resumed_from_step"] == 2
    resumed = load_policy(tmp_path / "run" / "sft_policy")
    for (name, a), b in zip(warm.model.named_parameters(), resumed.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6), name


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
def test_merged_weights_reload_as_the_adapted_model_for_other_architectures(arch: str, tmp_path: Path) -> None:
    """GPT-2's Conv1D layers store their weight transposed (peft's fan_in_fan_out); Qwen2 has biased q/k/v."""
    from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

    from rods_gym.trainer.lora import merged_state_dict

    torch.manual_seed(0)
    if arch == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, bos_token_id=0,
                                           eos_token_id=0))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=2, num_key_value_heads=1, vocab_size=100))
    adapted = add_adapters(model.eval(), LoRAConfig(rank=2))
    assert sum(p.requires_grad for p in adapted.parameters()) > 0
    with torch.no_grad():
        for name, p in adapted.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    adapted.get_base_model().save_pretrained(tmp_path, state_dict=merged_state_dict(adapted)[0])
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.tensor([[1, 5, 9, 33, 2]])
    with torch.no_grad():
        a, b = adapted(input_ids=ids).logits, reloaded(input_ids=ids).logits
        with adapters_off(adapted):
            base = adapted(input_ids=ids).logits
    assert torch.allclose(a, b, atol=1e-5) and not torch.allclose(a, base, atol=1e-3)


def test_saving_asks_no_hub_and_reports_what_a_bf16_merge_loses(tmp_path: Path, monkeypatch) -> None:
    """peft's default save asks the Hugging Face Hub about the base model; a bf16 merge rounds a small update away
    (warned, measured in adapter/merge_rounding.json); fp32 keeps it."""
    import json

    import peft.utils.save_and_load as save_and_load

    from rods_gym.trainer.policy import save_policy

    asked: list = []
    monkeypatch.setattr(save_and_load, "check_file_exists_on_hf_hub", lambda *a, **k: asked.append(a))
    for dtype, lossy in (("float32", False), ("bfloat16", True)):
        policy = build_tiny_policy(PolicyConfig(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                                                dtype=dtype), "compact")
        policy.model.name_or_path = "Qwen/Qwen2.5-0.5B-Instruct"  # as a hub model loaded from the local cache
        policy.model = add_adapters(policy.model, LoRAConfig(rank=2))
        with torch.no_grad():
            for name, p in policy.model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 1e-4)  # a small update, as a few GRPO steps make
        if lossy:
            with pytest.warns(UserWarning, match="bf16/fp16: the merged weights lose part of the adapters' update"):
                save_policy(policy, tmp_path / dtype)
        else:
            save_policy(policy, tmp_path / dtype)
        lost = json.loads((tmp_path / dtype / ADAPTER_DIR / "merge_rounding.json").read_text())["max_relative_error"]
        assert (lost > 0.1) == lossy and (lossy or lost < 1e-3), (dtype, lost)
    assert asked == []


def test_grpo_refuses_a_policy_that_already_has_adapters(task_file: Path, warm_policy: Path, tmp_path: Path) -> None:
    policy = load_policy(warm_policy)
    policy.model = add_adapters(policy.model, LoRAConfig(rank=2))
    with pytest.raises(ValueError, match="already has LoRA adapters and no checkpoint is resumed"):
        grpo_train(lora_config(task_file, tmp_path / "run"), policy, easy_seed_tasks(), run_dir=tmp_path / "run",
                   accelerator=Accelerator(cpu=True))
