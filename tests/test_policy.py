"""The embedded policies: tokenizers built from the suite, chat templates, save/reload."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rods_gym.renderers.compact import vocabulary
from rods_gym.trainer.config import PolicyConfig
from rods_gym.trainer.policy import build_tiny_policy, load_policy, save_policy
from rods_gym.trainer.tokenization import build_chat_tokenizer, build_compact_tokenizer

from conftest import build_tiny_lfm2_policy

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py

TINY = PolicyConfig(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, max_positions=512)


def test_compact_tokenizer_covers_the_vocabulary_one_token_per_word(suite) -> None:
    tok = build_compact_tokenizer(suite)
    words = vocabulary(suite)
    ids = tok(" ".join(words), add_special_tokens=False)["input_ids"]
    assert len(ids) == len(words)
    assert tok.unk_token_id not in ids
    assert len(set(ids)) == len(words)
    assert tok.decode(ids) == " ".join(words)


def test_typed_compact_tokenizer_spells_a_typed_id_in_two_tokens(suite) -> None:
    """``slot_ids="typed"``: a typed id is its type and its rank; the numbered ids are gone from that
    tokenizer, and the default (ordered) tokenizer is unchanged by the option."""
    from rods_gym.renderers.compact import typed_slot_parts
    tok = build_compact_tokenizer(suite, slot_ids="typed")
    ordered = build_compact_tokenizer(suite)
    types, ranks = typed_slot_parts(suite)
    assert len(tok) == len(ordered) - 64 + len(types) + len(ranks)
    assert tok.convert_ids_to_tokens(tok("to $email.0 $account_id.12", add_special_tokens=False)["input_ids"]) == \
        ["to", "$email", "##.0", "$account_id", "##.12"]
    assert "$3" not in tok.get_vocab() and "$email" not in ordered.get_vocab()


def test_compact_chat_template_renders_observations_and_actions(suite) -> None:
    tok = build_compact_tokenizer(suite)
    msgs = [{"role": "user", "content": "tools get_user ( user_id ) | user get_user user_id $0"},
            {"role": "assistant", "content": "call get_user user_id $0"},
            {"role": "user", "content": "ok name $1"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text.split() == ("<bos> <obs> tools get_user ( user_id ) | user get_user user_id $0 <act> call get_user "
                            "user_id $0 <eos> <obs> ok name $1 <act>").split()
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids[0] == tok.bos_token_id and ids[-1] == tok.convert_tokens_to_ids("<act>")
    assert tok.convert_tokens_to_ids("<eos>") == tok.eos_token_id


@pytest.mark.parametrize("slot_ids", ["ordered", "typed"])
def test_every_compact_observation_and_oracle_action_is_in_vocabulary(suite, easy_tasks, slot_ids: str) -> None:
    """... and decodes back to the same words (a typed id's two tokens join into one)."""
    tok = build_compact_tokenizer(suite, slot_ids=slot_ids)
    env = gym.make("rods/ToolChain-Compact-v0", slot_ids=slot_ids)
    for task in easy_tasks[:15]:
        obs, _ = env.reset(options={"task": task})
        texts = [obs]
        for _ in range(20):
            action = env.unwrapped.oracle_action()
            obs, _, term, trunc, _ = env.step(action)
            texts += [action, obs]
            if term or trunc:
                break
        for text in texts:
            ids = tok(text, add_special_tokens=False)["input_ids"]
            assert tok.unk_token_id not in ids and tok.decode(ids).split() == text.split(), text


def test_byte_level_chat_tokenizer_round_trips_text_and_renders_tools() -> None:
    tok = build_chat_tokenizer()
    text = 'Hi! <tool_call>{"name": "get_user", "arguments": {"user_id": "USR-0042"}}</tool_call>\n\tdone é'
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    tools = [{"type": "function", "function": {"name": "get_user", "description": "Get a user.",
                                               "parameters": {"type": "object", "properties": {"user_id": {}}}}}]
    msgs = [{"role": "system", "content": "SYS"}, {"role": "user", "content": "hello"}]
    rendered = tok.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True)
    assert rendered.startswith("<|bos|><|im_start|>system\nSYS\n# Tools\n- get_user(user_id): Get a user.\n<|im_end|>")
    assert rendered.endswith("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n")
    assert tok.convert_ids_to_tokens(tok(rendered, add_special_tokens=False)["input_ids"][-11]) == "<|im_start|>"  # then "assistant\n"


@pytest.mark.parametrize("mode, architecture", [("compact", "llama"), ("chat", "llama"), ("compact", "lfm2")])
def test_tiny_policy_saves_and_reloads_with_any_tool(mode: str, architecture: str, tmp_path: Path) -> None:
    cfg = replace(TINY, num_layers=2)  # LFM2: a convolution, then attention
    policy = build_tiny_lfm2_policy(cfg, mode) if architecture == "lfm2" else build_tiny_policy(cfg, mode)
    assert type(policy.model).__name__ == {"llama": "LlamaForCausalLM", "lfm2": "Lfm2ForCausalLM"}[architecture]
    again = build_tiny_lfm2_policy(cfg, mode) if architecture == "lfm2" else build_tiny_policy(cfg, mode)
    for a, b in zip(policy.model.parameters(), again.model.parameters()):
        assert torch.equal(a, b)  # seeded init
    path = save_policy(policy, tmp_path / "policy")
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    assert tok.chat_template == policy.tokenizer.chat_template
    assert tok.eos_token_id == policy.eos_id and tok.pad_token_id == policy.pad_id
    ids = torch.tensor([[tok.bos_token_id, 7, 9, 11]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, policy.model(ids).logits, atol=1e-6)
    reloaded = load_policy(path)
    assert reloaded.stop_ids[0] == policy.eos_id


def test_policy_init_does_not_touch_the_global_rng() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_policy(TINY, "compact")
    assert torch.equal(torch.rand(3), expected)


def test_missing_policy_names_the_path_and_the_offline_hint(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope'.*no such directory"):  # a local path: it does not exist
        load_policy(tmp_path / "nope")
    (tmp_path / "run" / "sft_policy").mkdir(parents=True)  # a run directory, not a policy: said so, with the way out
    with pytest.raises(FileNotFoundError, match="not a save_pretrained directory.*run directory: use .*sft_policy"):
        load_policy(tmp_path / "run")
    with pytest.raises(FileNotFoundError, match="not a save_pretrained directory \\(no config.json\\)$"):
        load_policy(tmp_path / "run" / "sft_policy")  # empty
    (tmp_path / "run" / "sft_policy" / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="config.json'.*a file; give the directory that holds it"):
        load_policy(tmp_path / "run" / "sft_policy" / "config.json")
    with pytest.raises(FileNotFoundError, match="rods-gym-tests/no-such-model.*local_files_only"):  # a hub name, offline
        load_policy("rods-gym-tests/no-such-model")
    with pytest.raises(ValueError, match="structured"):
        build_tiny_policy(TINY, "structured")


def test_actions_end_with_the_templates_end_of_turn_token_when_eos_differs(easy_tasks) -> None:
    """A base model's eos (Qwen2.5 base: ``<|endoftext|>``) need not be the token its template closes a turn
    with (``<|im_end|>``): demonstrations must end actions with the template's token, so that the token
    stream is exactly the rendered conversation."""
    from rods_gym.trainer.policy import end_of_turn_id, wrap
    from rods_gym.trainer.sft import make_demonstrations

    base = build_tiny_policy(TINY, "chat")
    tokenizer = base.tokenizer
    tokenizer.add_special_tokens({"eos_token": "<|endoftext|>"})
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.eos_token_id != im_end
    assert end_of_turn_id(tokenizer) == im_end
    base.model.generation_config.eos_token_id = tokenizer.eos_token_id
    policy = wrap(base.model, tokenizer, "eos-differs")
    assert policy.eos_id == im_end and set(policy.stop_ids) == {im_end, tokenizer.eos_token_id}
    demos = make_demonstrations(policy, easy_tasks[:3], "rods/ToolChain-Easy-Chat-v0")
    for demo in demos:
        ids, mask = demo.transcript.ids, demo.transcript.action_mask
        text = tokenizer.decode(ids, skip_special_tokens=False)
        assert "<|endoftext|>" not in text
        # every action's last trained token is the template's end-of-turn token
        ends = [i for i in range(len(ids)) if mask[i] and (i + 1 == len(ids) or not mask[i + 1])]
        assert ends and all(ids[i] == im_end for i in ends)
        # the ids spell the rendered conversation (up to the last action's generation prompt), then that action
        assert text.startswith(demo.transcript.text) and text.endswith("<|im_end|>")


def test_compact_and_chat_policies_end_actions_with_their_eos() -> None:
    from rods_gym.trainer.policy import end_of_turn_id
    for mode in ("compact", "chat"):
        policy = build_tiny_policy(TINY, mode)
        assert end_of_turn_id(policy.tokenizer) == policy.tokenizer.eos_token_id == policy.eos_id


def test_an_action_stopped_by_another_stop_id_still_closes_its_turn() -> None:
    """A base model may stop on its eos (``<|endoftext|>``) rather than the template's ``<|im_end|>``: the
    generated ids are kept, and the template's end of turn follows as context, as the rendered text has it."""
    from rods_gym.trainer.policy import wrap
    from rods_gym.trainer.transcript import ChatCodec

    base = build_tiny_policy(TINY, "chat")
    base.tokenizer.add_special_tokens({"eos_token": "<|endoftext|>"})
    policy = wrap(base.model, base.tokenizer, "eos-differs")
    codec = ChatCodec(policy)
    messages = [{"role": "user", "content": "hi"}]
    tr = codec.start(messages, None)
    for stop in ("<|endoftext|>", "<|im_end|>"):
        ids = codec.encode("call x") + [base.tokenizer.convert_tokens_to_ids(stop)]
        assert codec.closes_turn(ids) == (stop == "<|im_end|>")
        before = len(tr)
        tr.add_action(ids)
        messages = messages + [{"role": "assistant", "content": "call x"}, {"role": "user", "content": "ok"}]
        codec.continue_after_action(tr, messages, 1, None, codec.closes_turn(ids))
        added = base.tokenizer.decode(tr.ids[before:], skip_special_tokens=False)
        assert added == f"call x{stop}" + ("<|im_end|>" if stop != "<|im_end|>" else "") + \
            "\n<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n"


def test_the_end_of_turn_probe_retries_with_a_system_turn_and_gives_up_cleanly() -> None:
    from rods_gym.trainer.policy import end_of_turn_id

    tokenizer = build_tiny_policy(TINY, "chat").tokenizer
    needs_system = ("{% if messages[0]['role'] != 'system' %}{{ raise_exception('system first') }}{% endif %}"
                    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}")
    tokenizer.chat_template = needs_system
    assert end_of_turn_id(tokenizer) == tokenizer.convert_tokens_to_ids("<|im_end|>")
    tokenizer.chat_template = "{{ raise_exception('never') }}"
    assert end_of_turn_id(tokenizer) is None  # the caller keeps the tokenizer's eos
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"  # no special token after a turn
    assert end_of_turn_id(tokenizer) is None


def test_save_policy_shows_no_progress_bar_and_restores_the_setting(tmp_path, capsys) -> None:
    """A run saves the policy at every checkpoint; transformers' 'Writing model shards' bar would print each time."""
    from transformers.utils import logging as hf_logging

    from rods_gym.trainer.config import PolicyConfig
    from rods_gym.trainer.policy import build_tiny_policy, save_policy

    policy = build_tiny_policy(PolicyConfig(hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2,
                                            max_positions=64), "compact")
    hf_logging.enable_progress_bar()
    save_policy(policy, tmp_path / "p")
    assert "Writing model shards" not in capsys.readouterr().err
    assert hf_logging.is_progress_bar_enabled() and (tmp_path / "p" / "config.json").exists()


def test_a_policy_evaluated_in_another_view_is_refused(tmp_path: Path, capsys) -> None:
    """The embedded model records its view in config.json; evaluating a chat policy on the compact view is one
    line naming both views (it used to run with a misleading action-budget warning)."""
    from rods_gym.cli import main
    from rods_gym.trainer.policy import check_policy_view

    chat = load_policy(save_policy(build_tiny_policy(TINY, "chat"), tmp_path / "chat_policy"))
    assert chat.model.config.rods_gym_view == "chat"
    check_policy_view(chat, "chat", "rods/ToolChain-Chat-v0")
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--policy", str(tmp_path / "chat_policy"), "--tasks", "2"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "was built for the chat view" in err and "compact view" in err
    assert "max_action_tokens" not in err
