"""Batched multi-turn rollouts: stored ids, masks, exact sampling log-probs, both text views."""

from __future__ import annotations

import warnings

import pytest
import torch

from rods_gym.trainer.config import PolicyConfig
from rods_gym.trainer.generation import generate_actions
from rods_gym.trainer.grpo import make_batch, token_logprobs
from rods_gym.trainer.policy import build_tiny_policy
from dataclasses import replace

from rods_gym.trainer.rollout import (Branch, RolloutEngine, RolloutSettings, branch_after_first_rejection,
                                      oracle_actions)
from rods_gym.trainer.sft import make_demonstrations
from rods_gym.trainer.transcript import ChatCodec, TemplateError

from conftest import build_tiny_lfm2_policy

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py

TINY = PolicyConfig(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2, max_positions=1024)
TINY_CHAT = PolicyConfig(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, max_positions=4096)


@pytest.fixture(scope="module")
def compact_policy():
    return build_tiny_policy(TINY, "compact")


def _recomputed(policy, trajs, temperature):
    batch = make_batch([t.transcript.ids for t in trajs], [t.transcript.action_mask for t in trajs],
                       [t.transcript.logprobs for t in trajs], [0.0] * len(trajs), policy.pad_id)
    with torch.no_grad():
        lp, _ = token_logprobs(policy.model, batch.input_ids, batch.attention_mask, temperature)
    return lp, batch


@pytest.mark.parametrize("slot_ids, architecture", [("ordered", "llama"), ("typed", "llama"), ("ordered", "lfm2")])
def test_recomputed_logprobs_equal_sampling_logprobs(compact_policy, easy_tasks, slot_ids: str, architecture: str) -> None:
    """Also for a model with recurrent state (LFM2's convolutions), which the decoder never pads inside a row."""
    settings = RolloutSettings(max_action_tokens=6, max_turns=3, temperature=0.7)
    if architecture == "lfm2":
        policy = build_tiny_lfm2_policy(TINY, "compact", slot_ids)
    else:
        policy = compact_policy if slot_ids == "ordered" else build_tiny_policy(TINY, "compact", slot_ids=slot_ids)
    kwargs = {} if slot_ids == "ordered" else {"slot_ids": slot_ids}
    engine = RolloutEngine(policy, "rods/ToolChain-Compact-v0", settings, kwargs)
    trajs, stats = engine.run(easy_tasks[:4], 3, generator=torch.Generator().manual_seed(0))
    assert len(trajs) == 12 and [t.task_index for t in trajs] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    if slot_ids == "typed":  # the first prompt shows typed ids, each as a type token and a rank token
        words = policy.tokenizer.convert_ids_to_tokens(trajs[0].transcript.ids)
        assert any(w.startswith("$") and nxt.startswith("##.") for w, nxt in zip(words, words[1:]))
    lp, batch = _recomputed(policy, trajs, 0.7)
    m = batch.action_mask.bool()
    assert int(m.sum()) == stats.gen_tokens > 0
    assert (lp - batch.old_logp)[m].abs().max().item() < 1e-4  # fp32, CPU
    assert torch.all(batch.old_logp[m] <= 0) and torch.all(batch.old_logp[~m] == 0)


def test_masks_separate_generated_ids_from_environment_ids(compact_policy, easy_tasks) -> None:
    settings = RolloutSettings(max_action_tokens=5, max_turns=3)
    engine = RolloutEngine(compact_policy, "rods/ToolChain-Compact-v0", settings)
    trajs, _ = engine.run(easy_tasks[:3], 2, generator=torch.Generator().manual_seed(1))
    tok = compact_policy.tokenizer
    act, obs = tok.convert_tokens_to_ids("<act>"), tok.convert_tokens_to_ids("<obs>")
    for tr in trajs:
        ids, mask = tr.transcript.ids, tr.transcript.action_mask
        assert len(ids) == len(mask) == len(tr.transcript.logprobs)
        # the first prompt is the tokenized first observation, all context
        assert ids[0] == tok.bos_token_id and ids[1] == obs and mask[0] == 0
        # every action segment directly follows an <act> context token, and there is one per turn
        starts = [i for i in range(1, len(ids)) if mask[i] == 1 and mask[i - 1] == 0]
        assert len(starts) == tr.turns
        assert all(ids[i - 1] == act for i in starts)
        # after an action the environment's reply is context starting with <obs>; an action cut at
        # the length limit is first closed with an <eos> that is context, not generated
        ends = [i for i in range(1, len(ids)) if mask[i] == 0 and mask[i - 1] == 1]
        for i in ends:
            closed = ids[i - 1] == tok.eos_token_id
            assert ids[i] == obs if closed else ids[i:i + 2] == [tok.eos_token_id, obs]


def test_episodes_finish_at_different_turns(compact_policy, easy_tasks) -> None:
    # an untrained policy never solves a task: each episode runs to its env's step limit
    # (8 + 3 * calls + 2 * turns), which differs between 1-call and 2-call tasks
    one = next(t for t in easy_tasks if len(t.calls) == 1)
    two = next(t for t in easy_tasks if len(t.calls) == 2)
    engine = RolloutEngine(compact_policy, "rods/ToolChain-Compact-v0",
                           RolloutSettings(max_action_tokens=2, max_turns=40, max_context=1024))
    trajs, _ = engine.run([one, two], 2, generator=torch.Generator().manual_seed(2))
    assert [t.turns for t in trajs] == [13, 13, 16, 16]
    assert all(t.done and t.truncated and not t.success for t in trajs)
    # the context bound stops episodes early, counted as truncated
    short = RolloutEngine(compact_policy, "rods/ToolChain-Compact-v0",
                          RolloutSettings(max_action_tokens=2, max_turns=40, max_context=60))
    trajs, _ = short.run([one, two], 1, generator=torch.Generator().manual_seed(2))
    assert all(t.truncated and t.turns < 13 and len(t.transcript) <= 60 for t in trajs)
    # a per-task action budget: the oracle's action count plus a slack
    budget = RolloutEngine(compact_policy, "rods/ToolChain-Compact-v0",
                           RolloutSettings(max_action_tokens=2, max_turns=40, turn_slack=1))
    trajs, _ = budget.run([one, two], 1, generator=torch.Generator().manual_seed(2))
    assert [t.turns for t in trajs] == [oracle_actions(one) + 1, oracle_actions(two) + 1] == [3, 4]
    assert all(t.truncated for t in trajs)


def test_branch_episodes_replay_a_prefix_as_context_and_continue_from_it(compact_policy, easy_tasks) -> None:
    # an untrained policy's actions are mostly rejected: every episode has a first rejection to branch at
    engine = RolloutEngine(compact_policy, "rods/ToolChain-Compact-v0", RolloutSettings(max_action_tokens=4, max_turns=6))
    trajs, _ = engine.run(easy_tasks[:4], 1, generator=torch.Generator().manual_seed(3))
    assert all(len(t.rejected) == t.turns and t.errors == sum(t.rejected) for t in trajs)
    pairs = [(t, branch_after_first_rejection(t, engine.action_budget(t.task))) for t in trajs]
    pairs = [(t, b) for t, b in pairs if b is not None]
    assert pairs, "expected rejected actions from an untrained policy"
    tr, branch = pairs[0]
    k = tr.rejected.index(True)
    assert len(branch.actions) == k + 1 and list(branch.ids) == tr.transcript.ids[: tr.action_spans[k + 1][0]]
    assert [list(a) for a in branch.actions] == [tr.transcript.ids[a:b] for a, b in tr.action_spans[: k + 1]]
    conts, _ = engine.run([branch.task], 3, branches=[branch], env_options=[branch.env_options],
                          generator=torch.Generator().manual_seed(4))
    for c in conts:
        n = len(branch.ids)
        assert c.prefix is branch and c.transcript.ids[:n] == list(branch.ids)
        assert not any(c.transcript.action_mask[:n]) and c.turns >= 1  # the prefix is context, never trained
        assert c.turns <= engine.action_budget(c.task) - len(branch.actions)  # the budget counts the replayed actions
        assert all(a >= n for a, _ in c.action_spans)
    # branch episodes are not branched again, and an episode without a rejection has no branch point
    assert all(branch_after_first_rejection(c, 99) is None for c in conts)
    clean = replace(tr, rejected=[False] * tr.turns)
    assert branch_after_first_rejection(clean, 99) is None
    # a prefix that does not replay to the recorded tokens, or that ends the episode, is refused
    tampered = Branch(branch.task, branch.env_options, branch.actions, branch.ids[:-1])
    with pytest.raises(ValueError, match="other tokens"):
        engine.run([branch.task], 1, branches=[tampered], generator=torch.Generator().manual_seed(4))
    one_turn = next(t for t in easy_tasks if len(t.turns) == 1)
    reply = Branch(one_turn, {}, (tuple(engine.codec.action_ids("reply")),), ())  # a reply ends a one-turn task
    with pytest.raises(ValueError, match="ends the episode"):
        engine.run([one_turn], 1, branches=[reply])


def test_batched_generation_equals_one_at_a_time(compact_policy) -> None:
    prompts = [[1, 4, 9, 10, 11, 5], [1, 4, 12, 5], [1, 4, 20, 21, 22, 23, 24, 25, 5]]
    kw = dict(stop_ids=compact_policy.stop_ids, pad_id=compact_policy.pad_id, max_new_tokens=6)
    batched = generate_actions(compact_policy.model, prompts, greedy=True, **kw)
    for p, b in zip(prompts, batched):
        alone = generate_actions(compact_policy.model, [p], greedy=True, **kw)[0]
        assert alone.ids == b.ids
        assert max(abs(x - y) for x, y in zip(alone.logprobs, b.logprobs)) < 1e-4
    with pytest.raises(ValueError, match="Generator"):
        generate_actions(compact_policy.model, prompts, **kw)

def test_demonstrations_tokenize_like_rollouts(compact_policy, easy_tasks) -> None:
    demos = make_demonstrations(compact_policy, easy_tasks[:6], "rods/ToolChain-Compact-v0")
    assert all(d.success for d in demos)
    tok = compact_policy.tokenizer
    for d in demos:
        ids, mask = d.transcript.ids, d.transcript.action_mask
        # agent tokens are the actions and their <eos>; re-rendering the whole conversation with
        # the template yields the very same ids (the word-level template is prefix-stable)
        actions = []
        cur: list[int] = []
        for i, m in zip(ids, mask):
            if m:
                cur.append(i)
            elif cur:
                actions.append(cur)
                cur = []
        if cur:
            actions.append(cur)
        assert all(a[-1] == tok.eos_token_id for a in actions)
        assert all(tok.decode(a[:-1]).split()[0] in ("call", "ask", "reply") for a in actions)


def test_chat_view_end_to_end_with_the_byte_level_policy(easy_tasks) -> None:
    policy = build_tiny_policy(TINY_CHAT, "chat")
    settings = RolloutSettings(max_action_tokens=12, max_turns=2, max_context=4096, temperature=1.0)
    engine = RolloutEngine(policy, "rods/ToolChain-Easy-Chat-v0", settings)
    assert engine.mode == "chat"
    trajs, stats = engine.run(easy_tasks[:2], 2, generator=torch.Generator().manual_seed(3))
    lp, batch = _recomputed(policy, trajs, 1.0)
    m = batch.action_mask.bool()
    assert (lp - batch.old_logp)[m].abs().max().item() < 1e-4
    text = policy.tokenizer.decode(trajs[0].transcript.ids)
    assert "# Tools" in text and text.count("<|im_start|>assistant\n") == trajs[0].turns
    # oracle demonstrations through the chat template: <tool_call> JSON the env parses and executes,
    # tool results appended as tool messages, the final reply
    demos = make_demonstrations(policy, easy_tasks[:3], "rods/ToolChain-Easy-Chat-v0")
    assert all(d.success for d in demos)
    demo = next(d for d in demos if len(d.task.calls) + (d.task.answer is not None) > 1)  # a tool result comes back
    demo_text = policy.tokenizer.decode(demo.transcript.ids)
    assert "<|im_start|>tool\n" in demo_text and demo_text.endswith("<|im_end|>")
    first_action = [i for i, mk in zip(demo.transcript.ids, demo.transcript.action_mask) if mk]
    assert policy.tokenizer.decode(first_action).startswith('<tool_call>{"name": ')


def test_a_template_that_rewrites_history_is_refused(compact_policy) -> None:
    codec = ChatCodec(compact_policy)
    tr = codec.start([{"role": "user", "content": "ok"}], None)
    tr.text = "something else"  # as if the template had rendered earlier turns differently
    msgs = [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "ask"},
            {"role": "user", "content": "user nothing"}]
    with pytest.raises(TemplateError, match="prefix-stable"):
        codec.continue_after_action(tr, msgs, 1, None, stopped=True)


def test_branches_must_match_their_tasks(compact_policy, easy_tasks) -> None:
    engine = RolloutEngine(compact_policy, "rods/ToolChain-Compact-v0", RolloutSettings(max_action_tokens=4, max_turns=6))
    trajs, _ = engine.run(easy_tasks[:4], 1, generator=torch.Generator().manual_seed(3))
    branch = next(b for b in (branch_after_first_rejection(t, engine.action_budget(t.task)) for t in trajs) if b)
    other = next(t for t in easy_tasks if t != branch.task)
    with pytest.raises(ValueError, match="taken from another task"):
        engine.run([other], 1, branches=[branch])
    with pytest.raises(ValueError, match="2 given for 1 tasks"):
        engine.run([branch.task], 1, branches=[branch, None])
    # without env_options, a branch replays in those of the episode it came from (here none), and None is a plain episode
    conts, _ = engine.run([branch.task, other], 1, branches=[branch, None], generator=torch.Generator().manual_seed(5))
    assert conts[0].prefix is branch and conts[0].env_options == dict(branch.env_options) and conts[1].prefix is None


def test_shuffled_slot_ids_keep_a_groups_prompt_and_replay_branches(compact_policy, easy_tasks) -> None:
    """With ``slot_ids="shuffled"`` the ids follow from the task: the G episodes of a group (each its
    own env seed) share their first observation, and a branch replays in a fresh episode."""
    engine = RolloutEngine(compact_policy, "rods/ToolChain-Compact-v0", RolloutSettings(max_action_tokens=4, max_turns=6),
                           {"slot_ids": "shuffled"})
    trajs, _ = engine.run(easy_tasks[:4], 3, generator=torch.Generator().manual_seed(3))
    for g in range(4):
        group = trajs[3 * g: 3 * g + 3]
        starts = {tuple(t.transcript.ids[: t.action_spans[0][0]]) for t in group}
        assert len(starts) == 1
    assert len({tuple(t.transcript.ids[:40]) for t in trajs[::3]}) > 1  # tasks differ
    branch = next(b for b in (branch_after_first_rejection(t, engine.action_budget(t.task)) for t in trajs) if b)
    conts, _ = engine.run([branch.task], 2, branches=[branch], env_options=[branch.env_options], seed=17,
                          generator=torch.Generator().manual_seed(4))
    assert all(c.transcript.ids[: len(branch.ids)] == list(branch.ids) for c in conts)


def test_prompts_longer_than_the_context_are_refused_or_warned(compact_policy, easy_tasks) -> None:
    from rods_gym.trainer.config import load_config
    from rods_gym.trainer.preflight import check_prompts_fit

    probe = RolloutEngine(compact_policy, "rods/ToolChain-Compact-v0", RolloutSettings(max_action_tokens=4))
    lengths = {t.id: probe.prompt_length(t) for t in easy_tasks[:12]}
    cut = min(lengths.values())
    assert max(lengths.values()) > cut
    # in a run, a batch with prompts too long warns once and those episodes end untouched, counted as truncated
    mixed = RolloutEngine(compact_policy, "rods/ToolChain-Compact-v0",
                          RolloutSettings(max_action_tokens=4, max_turns=1, max_context=cut + 4))
    with pytest.warns(UserWarning, match="episodes .* exceeds rollout.max_context"):
        trajs, _ = mixed.run(easy_tasks[:12], 1, generator=torch.Generator().manual_seed(0))
    assert all((t.turns == 0) == (lengths[t.task.id] > cut) for t in trajs)
    assert all(t.truncated for t in trajs if t.turns == 0)
    longest = max(easy_tasks[:12], key=lambda t: lengths[t.id])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per engine; a batch where nothing fits does not stop the run
        trajs, _ = mixed.run([longest], 2, generator=torch.Generator().manual_seed(0))
    assert all(t.turns == 0 and t.truncated for t in trajs)
    # before a run: a task set none of whose prompts fits is refused, naming the bound; the compact view is not
    # told to use the compact view
    cfg = load_config(None, ["rollout.max_action_tokens=4", f"rollout.max_context={cut + 4}"])
    with pytest.warns(UserWarning, match="^dev tasks: the first prompt of"):
        check_prompts_fit(cfg, compact_policy, {"dev": easy_tasks[:12]})
    tight = load_config(None, ["rollout.max_action_tokens=4", "rollout.max_context=8"])
    with pytest.raises(ValueError, match=r"^dev tasks: .*rollout.max_context=8 .*no action can be generated") as info:
        check_prompts_fit(tight, compact_policy, {"dev": easy_tasks[:12]})
    assert "shorter view" not in str(info.value)
