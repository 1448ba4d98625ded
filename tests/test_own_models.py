"""A user's own Hugging Face models (``--model DIR``): tiny Qwen2 and GPT-2 models with random weights, built
here from configs with the embedded byte-level tokenizer (nothing is downloaded). What such a model or its chat
template gets wrong is said in one line before any work, and a run on one resumes without its directory."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import jinja2
import pytest
import torch
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

from rods_gym.trainer.config import PolicyConfig, load_config
from rods_gym.trainer.policy import build_tiny_policy, check_tokenizer_size, load_policy, save_policy, wrap
from rods_gym.trainer.tokenization import build_chat_tokenizer
from rods_gym.trainer.transcript import ChatCodec

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py

# a chat template that lists no tools: the policy would never see them
NO_TOOLS = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# Gemma/Mistral style: user and assistant only, strictly alternating
ALTERNATING = ("{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
               "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
               "{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
               "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# tools listed; a tool message is refused (it has no tool role)
NO_TOOL_ROLE = ("{% if tools %}<|im_start|>system\n{% for t in tools %}{{ t['function']['name'] }}\n{% endfor %}"
                "<|im_end|>\n{% endif %}{% for m in messages %}{% if m['role'] == 'tool' %}"
                "{{ raise_exception('Only user, system and assistant roles are supported!') }}{% endif %}"
                "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# tools listed; the latest message is rendered differently once another follows (not prefix-stable)
UNSTABLE = ("{% if tools %}<|im_start|>system\n{% for t in tools %}{{ t['function']['name'] }}\n{% endfor %}"
            "<|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
            "{% if loop.last %} (latest){% endif %}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# GPT-2 style: plain text, no special token closes a turn
PLAIN = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
         "{% if add_generation_prompt %}assistant: {% endif %}")


def qwen_model(vocab: int, positions: int = 4096) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=positions,
                                        tie_word_embeddings=True))


def save_model(path: Path, template: str | None = None, gpt2_positions: int = 0) -> Path:
    """A tiny random model with the byte-level tokenizer (its ChatML template, or ``template``) in ``path``:
    a Qwen2, or with ``gpt2_positions`` a GPT-2 of that many (absolute) positions."""
    tok = build_chat_tokenizer()
    if template is not None:
        tok.chat_template = template
    if gpt2_positions:
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2,
                                           n_positions=gpt2_positions, bos_token_id=tok.bos_token_id,
                                           eos_token_id=tok.eos_token_id))
    else:
        model = qwen_model(len(tok))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def chat_config(model: str | Path, run_dir: Path, *more: str):
    return load_config("chat_tiny", [f"policy.model={model}", f"run_dir={run_dir}", "eval.tasks=2", *more])


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``rods ARGV``: its exit code, stdout and stderr."""
    from rods_gym.cli import main

    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_max_context_beyond_the_models_positions_is_refused_before_any_work(tmp_path: Path, capsys) -> None:
    """GPT-2's absolute positions end at n_positions: an episode past them used to fail mid-run with
    ``IndexError: index out of range in self``. Now one line names both numbers and the override."""
    from rods_gym.trainer.preflight import check_model_positions

    model = save_model(tmp_path / "gpt2", gpt2_positions=256)
    run = tmp_path / "run"
    code, _, err = cli(capsys, "train", "--config", "chat_tiny", "--model", str(model), "--run-dir", str(run))
    assert code == 2 and "rollout.max_context=4096 exceeds the 256 positions" in err, err
    assert "n_positions" in err and "set rollout.max_context=256" in err and not run.exists()
    # the embedded model: its max_positions (1024) holds the default max_context (1024); fewer are refused
    check_model_positions(load_config("default"), build_tiny_policy(PolicyConfig(num_layers=1), "compact"))
    short = load_config("default", ["policy.max_positions=512"])
    with pytest.raises(ValueError, match=r"max_context=1024 exceeds the 512 positions .*policy.max_positions"):
        check_model_positions(short, build_tiny_policy(short.policy, "compact"))


def test_a_chat_template_that_ignores_the_tools_is_refused(tmp_path: Path) -> None:
    from rods_gym.trainer.pipeline import prepare_inputs
    from rods_gym.trainer.preflight import check_chat_template

    cfg = chat_config(save_model(tmp_path / "m", NO_TOOLS), tmp_path / "run")
    with pytest.raises(ValueError, match=r"ignores the tools: the first prompt of task '.*' does not name \w+"):
        prepare_inputs(cfg, check_source=False)
    with pytest.raises(SystemExit):  # rods evaluate too, before any episode
        from rods_gym.cli import main
        main(["evaluate", "--config", "chat_tiny", "--model", str(cfg.policy.model), "--tasks", "2"])
    # the embedded chat model and a Qwen2 with the tool-listing template pass
    tiny = load_config("chat_tiny")
    seeds = prepare_inputs(chat_config(save_model(tmp_path / "ok"), tmp_path / "run"), check_source=False).seeds
    check_chat_template(tiny, build_tiny_policy(tiny.policy, "chat"), seeds[0])


@pytest.mark.parametrize("template, says", [
    (ALTERNATING, "cannot render the chat view's first prompt .*: TemplateError: Conversation roles must alternate"),
    (NO_TOOL_ROLE, "cannot render a probe conversation .*tool result.*: TemplateError: Only user, system and"),
    (UNSTABLE, "is not prefix-stable.*found rendering a probe conversation"),
])
def test_a_template_that_cannot_render_the_chat_view_is_one_line_before_any_work(
        template: str, says: str, tmp_path: Path, capsys) -> None:
    """A template that refuses a role raised jinja2's TemplateError as a traceback (rods caught only
    ValueError, OSError and YAML errors), and one that is not prefix-stable was found mid-run."""
    model, run = save_model(tmp_path / "m", template), tmp_path / "run"
    code, _, err = cli(capsys, "train", "--config", "chat_tiny", "--model", str(model), "--run-dir", str(run),
                       "eval.tasks=2")
    assert code == 2 and "Traceback" not in err and not run.exists(), err
    error = [line for line in err.splitlines() if line.startswith("rods train: error: ")]
    assert len(error) == 1 and re.search(says, error[0]), err
    # rods evaluate runs the same probe before any episode (it used to fail mid-evaluation, or not at all)
    code, out, err = cli(capsys, "evaluate", "--config", "chat_tiny", "--model", str(model), "--tasks", "2")
    error = [line for line in err.splitlines() if line.startswith("rods evaluate: error: ")]
    assert code == 2 and "Traceback" not in err and not out and len(error) == 1 and re.search(says, error[0]), err


def test_a_jinja_error_anywhere_in_the_setup_is_one_line(capsys) -> None:
    from rods_gym.trainer.commands import _or_exit

    def fails() -> None:
        raise jinja2.TemplateError("Conversation roles must alternate")

    with pytest.raises(SystemExit) as exit_info:
        _or_exit("evaluate", fails)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "rods evaluate: error: Conversation roles must alternate\n"


def test_a_run_resumes_from_elsewhere_and_without_its_model_directory(tmp_path: Path, capsys,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``--model`` given as a relative path is saved absolute; once the model's directory is gone, the resumed
    run builds its policy from its own latest saved one (the weights it trained), with a note."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    elsewhere.mkdir()
    save_model(work / "models" / "qwen")
    monkeypatch.chdir(work)
    small = ["steps=1", "checkpoint_every=1", "eval.tasks=1", "eval.samples=0", "sft.demos=2", "sft.steps=1",
             "rollout.max_turns=1", "rollout.max_action_tokens=8", "tensorboard=false", "progress_bar=false"]
    code, _, err = cli(capsys, "train", "--config", "chat_tiny", "--model", "models/qwen", "--run-dir", "run", *small)
    assert code == 0, err
    run = work / "run"
    assert load_config(run / "config.yaml").policy.model == str(work / "models" / "qwen")
    monkeypatch.chdir(elsewhere)
    code, out, err = cli(capsys, "train", "--run-dir", str(run), "--resume", "steps=2")  # the directory is still there
    assert code == 0 and "cannot be loaded" not in out, err
    shutil.rmtree(work / "models")
    code, out, err = cli(capsys, "train", "--run-dir", str(run), "--resume", "steps=3")
    assert code == 0, err
    assert f"the policy is built from the run's own {run / 'checkpoints' / 'step-000003'}" not in out
    assert f"the policy is built from the run's own {run / 'checkpoints' / 'step-000002' / 'policy'}" in out, out
    assert "GRPO continues from checkpoint step-000002" in out
    assert json.loads((run / "summary.json").read_text())["grpo_steps"] == 3


def test_a_resume_falls_back_to_the_runs_policy_only_where_the_base_weights_are_not_needed(tmp_path: Path) -> None:
    from rods_gym.trainer.checkpoint import STATE_FILE
    from rods_gym.trainer.pipeline import make_run_policy

    run, gone = tmp_path / "run", str(tmp_path / "gone")
    policy = build_tiny_policy(PolicyConfig(hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2), "chat")
    ckpt = run / "checkpoints" / "step-000004"
    save_policy(policy, ckpt / "policy")
    (ckpt / STATE_FILE).write_bytes(b"")
    cfg = chat_config(gone, run)
    with pytest.raises(FileNotFoundError, match=r"gone.*no such directory.*own .*step-000004/policy cannot stand in "
                                                r"for it: the warm start \(no sft_policy/ yet\) is trained"):
        make_run_policy(cfg, "chat", {}, resume=True)
    with pytest.raises(FileNotFoundError, match="with sft.enabled=false the evaluation before GRPO runs on the base"):
        make_run_policy(chat_config(gone, run, "sft.enabled=false"), "chat", {}, resume=True)
    save_policy(policy, run / "sft_policy")
    with pytest.raises(FileNotFoundError, match=r"gone.*no such directory \(a local policy[^;]*$"):  # a new run
        make_run_policy(cfg, "chat", {})
    again = make_run_policy(cfg, "chat", {}, resume=True)  # the checkpoint's, the latest
    assert again.name == gone and again.eos_id == policy.eos_id
    shutil.rmtree(run)
    with pytest.raises(FileNotFoundError, match="gone.*no such directory"):  # nothing saved: the load error itself
        make_run_policy(cfg, "chat", {}, resume=True)


def test_a_model_directory_missing_files_says_which(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An existing directory was reported as 'not a local directory and not in the Hugging Face cache', and one
    without tokenizer files loaded an empty tokenizer that was then reported as having no chat template."""
    tok = build_chat_tokenizer()
    model = qwen_model(len(tok))
    (tmp_path / "m" / "no_tokenizer").mkdir(parents=True)
    model.save_pretrained(tmp_path / "m" / "no_tokenizer")
    (tmp_path / "m" / "no_weights").mkdir()
    model.config.save_pretrained(tmp_path / "m" / "no_weights")
    tok.save_pretrained(tmp_path / "m" / "no_weights")
    (tmp_path / "m" / "config_only").mkdir()
    model.config.save_pretrained(tmp_path / "m" / "config_only")
    monkeypatch.chdir(tmp_path)
    for name, says in [("m/no_tokenizer", "has config.json but no tokenizer files"),  # relative, one slash: still local
                       ("m/no_weights", "has config.json but no model weights \\(model.safetensors"),
                       ("m/config_only", "no model weights .* and no tokenizer files")]:
        with pytest.raises(FileNotFoundError, match=says) as info:
            load_policy(name)
        assert "Hugging Face cache" not in str(info.value)
    # the empty tokenizer AutoTokenizer makes of a directory without tokenizer files (from a cache, say)
    empty = AutoTokenizer.from_pretrained(tmp_path / "m" / "config_only")
    with pytest.raises(ValueError, match=f"tokenizer has {len(empty)} tokens for a model with a vocabulary of "
                                         f"{len(tok)}: the tokenizer files .* are missing"):
        check_tokenizer_size(empty, model, "m")
    check_tokenizer_size(tok, model, "m")
    # a directory that holds a model loads; where transformers still fails, its reason is said, not "not in the cache"
    save_model(tmp_path / "good")
    assert load_policy(tmp_path / "good").eos_id == tok.eos_token_id
    from rods_gym.trainer import policy as policy_module

    def unreadable(*args, **kwargs):
        raise OSError("Error no file named model.safetensors found in directory good.")

    monkeypatch.setattr(policy_module.AutoModelForCausalLM, "from_pretrained", unreadable)
    with pytest.raises(FileNotFoundError, match="^cannot load policy '.*good': Error no file named model.safetensors"):
        load_policy(tmp_path / "good")


@pytest.mark.parametrize("stopped", [True, False])
def test_a_template_without_an_end_of_turn_token_keeps_its_text_after_the_action(stopped: bool) -> None:
    """GPT-2 style templates write ``"assistant: {content}\\n"``: the ``\\n`` after the action was dropped, so
    the ids were not the rendered conversation. They are now, plus the stop token the policy ends its action with."""
    tok = build_chat_tokenizer()
    tok.chat_template = PLAIN
    policy = wrap(qwen_model(len(tok)), tok, "plain")
    codec = ChatCodec(policy)
    messages = [{"role": "user", "content": "hi"}]
    tr = codec.start(messages, None)
    tr.add_action(codec.encode("call x") + ([policy.eos_id] if stopped else []))
    messages = messages + [{"role": "assistant", "content": "call x"}, {"role": "user", "content": "ok"}]
    codec.continue_after_action(tr, messages, 1, None, stopped=stopped)
    rendered = tok.decode(tr.ids, skip_special_tokens=False)
    assert rendered == "user: hi\nassistant: call x<|im_end|>\nuser: ok\nassistant: "
    assert tr.text == "user: hi\nassistant: call x\nuser: ok\nassistant: "
