"""A user's own Hugging Face models (``--model DIR``): tiny Qwen2 and GPT-2 models with random weights, built
here from configs with the embedded byte-level tokenizer (nothing is downloaded). What such a model or its chat
template gets wrong is said in one line before any work, and a run on one resumes without its directory."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

from rods_gym.trainer.policy import check_tokenizer_size, load_policy, wrap
from rods_gym.trainer.tokenization import build_chat_tokenizer
from rods_gym.trainer.transcript import ChatCodec

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py

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
