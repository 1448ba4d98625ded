"""A user's own Hugging Face models (``--model DIR``): tiny Qwen2 and GPT-2 models with random weights, built
here from configs with the embedded byte-level tokenizer (nothing is downloaded). What such a model or its chat
template gets wrong is said in one line before any work, and a run on one resumes without its directory."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rods_gym.trainer.policy import wrap
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
