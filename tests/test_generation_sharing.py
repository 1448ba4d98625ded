"""Speed paths that must not change results: a prompt shared by several rows is prefilled once,
a group's first conversation is rendered once, logits are computed only where log-probs are used."""

from __future__ import annotations

import pytest
import torch

from rods_gym.trainer.config import PolicyConfig
from rods_gym.trainer.generation import DecodeSession, generate_actions
from rods_gym.trainer.grpo import LossSettings, grpo_loss, make_batch, token_logprobs
from rods_gym.trainer.policy import build_tiny_policy
from rods_gym.trainer.rollout import RolloutEngine, RolloutSettings, conversation_start

from conftest import build_tiny_lfm2_policy

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py

TINY = PolicyConfig(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2, max_positions=1024)


@pytest.fixture(scope="module")
def policy():
    return build_tiny_policy(TINY, "compact")


def test_a_shared_prompt_is_prefilled_once_and_rows_stay_independent(policy) -> None:
    a, b, c = [1, 4, 9, 10, 11, 5], [1, 4, 12, 5], [1, 4, 20, 21, 22, 23, 24, 25, 5]
    prompts = [a, b, a, c, b, a]  # duplicates, not adjacent
    calls: list[int] = []
    hook = policy.model.register_forward_pre_hook(lambda m, args, kw: calls.append(kw["input_ids"].shape[0]),
                                                  with_kwargs=True)
    try:
        session = DecodeSession(policy.model, policy.pad_id, len(prompts))
        session.extend(prompts)
    finally:
        hook.remove()
    assert calls == [3]  # one prefill row per distinct prompt
    assert session.rows == 6 and session.mask.shape[0] == 6 and session.next_pos.tolist() == [6, 4, 6, 9, 4, 6]
    assert session.cache.layers[0].keys.shape[0] == 6
    # every row then generates (over two turns) exactly what it generates alone
    kw = dict(stop_ids=policy.stop_ids, max_new_tokens=5, greedy=True)
    first = session.sample(**kw)
    session.extend([[5, 30 + i] for i in range(len(prompts))])  # rows diverge after the shared prompt
    second = session.sample(**kw)
    for i, p in enumerate(prompts):
        alone = DecodeSession(policy.model, policy.pad_id, 1)
        alone.extend([p])
        g1 = alone.sample(**kw)[0]
        alone.extend([[5, 30 + i]])
        g2 = alone.sample(**kw)[0]
        assert (g1.ids, g2.ids) == (first[i].ids, second[i].ids)
        assert max(abs(x - y) for x, y in zip(g1.logprobs + g2.logprobs, first[i].logprobs + second[i].logprobs)) < 1e-5


def test_sampling_with_shared_prompts_matches_distinct_copies(policy) -> None:
    """Sampling consumes the generator the same way whether or not rows share a prompt."""
    prompt = [1, 4, 9, 10, 11, 5]
    kw = dict(stop_ids=policy.stop_ids, pad_id=policy.pad_id, max_new_tokens=6, temperature=0.8)
    shared = generate_actions(policy.model, [prompt] * 4, generator=torch.Generator().manual_seed(7), **kw)
    assert len({tuple(g.ids) for g in shared}) > 1  # the copies sample different actions
    for i, g in enumerate(shared):  # each row's action and log-probs, recomputed from scratch
        ids = prompt + g.ids
        lp, _ = token_logprobs(policy.model, torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long), 0.8)
        assert max(abs(x - y) for x, y in zip(lp[0, len(prompt) - 1:].tolist(), g.logprobs)) < 1e-4, i


def test_group_copies_of_the_first_prompt_are_independent(policy, easy_tasks) -> None:
    engine = RolloutEngine(policy, "rods/ToolChain-Compact-v0", RolloutSettings(max_action_tokens=3, max_turns=2))
    trajs, _ = engine.run(easy_tasks[:2], 3, generator=torch.Generator().manual_seed(5))
    for k, tr in enumerate(trajs):
        env = engine.envs[k]
        obs, _ = env.reset(seed=k, options={"task": tr.task})
        start = engine.codec.start(*conversation_start(env, obs))
        assert tr.transcript.ids[: len(start.ids)] == start.ids
    assert len({id(tr.transcript.ids) for tr in trajs}) == len(trajs)  # no list shared between episodes
    assert len({tuple(tr.transcript.ids) for tr in trajs[:3]}) > 1  # the copies went on differently


def test_logits_only_where_needed_equal_the_full_computation(policy, easy_tasks) -> None:
    engine = RolloutEngine(policy, "rods/ToolChain-Compact-v0", RolloutSettings(max_action_tokens=4, max_turns=2))
    trajs, _ = engine.run(easy_tasks[:3], 2, generator=torch.Generator().manual_seed(4))
    batch = make_batch([t.transcript.ids for t in trajs], [t.transcript.action_mask for t in trajs],
                       [t.transcript.logprobs for t in trajs], [1.0, -1.0, 0.5, -0.5, 0.0, 0.3], policy.pad_id)
    m = batch.action_mask.bool()
    full, full_ent = token_logprobs(policy.model, batch.input_ids, batch.attention_mask, 0.9, with_entropy=True)
    part, part_ent = token_logprobs(policy.model, batch.input_ids, batch.attention_mask, 0.9, with_entropy=True,
                                    needed=batch.action_mask)
    assert torch.allclose(part[m], full[m], atol=1e-5) and torch.allclose(part_ent[m], full_ent[m], atol=1e-5)
    from rods_gym.trainer.grpo import _keeps_masked_logits

    if _keeps_masked_logits(policy.model):  # this transformers slices logits by a mask (older ones compute all)
        assert torch.all(part[~m] == 0) and torch.all(part_ent[~m] == 0)
        assert torch.all(full[~m] != 0)  # the full computation does fill them: the two paths really differ
    # the loss and its gradient are those of the full computation
    settings = LossSettings(temperature=0.9)
    model = policy.model
    loss, stats = grpo_loss(model, batch, settings)
    loss.backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    lp, ent = token_logprobs(model, batch.input_ids, batch.attention_mask, 0.9, with_entropy=True)
    ratio = torch.exp(lp - batch.old_logp)
    adv = batch.advantages[:, None]
    per_token = -torch.minimum(ratio * adv, torch.clamp(ratio, 0.8, 1.28) * adv)
    expected = (per_token * batch.action_mask).sum() / batch.action_mask.sum()
    expected.backward()
    full_grad = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
    assert stats["entropy"] == pytest.approx(float(ent.detach()[m].sum()), rel=1e-5)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(got, full_grad))


def test_a_model_with_recurrent_state_decodes_each_row_as_it_would_alone() -> None:
    """LFM2's short convolutions keep a state per row that padding inside a row would shift and whose
    cache rows cannot be selected: the session finds that out (a Llama's cache holds keys and values
    only) and encodes each row's whole history per turn, so rows of different lengths, with finished
    rows fed padding while others sample, still generate exactly what they generate alone."""
    lfm2 = build_tiny_lfm2_policy(PolicyConfig(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2,
                                               max_positions=1024), "compact")
    llama = build_tiny_policy(TINY, "compact")
    prompts = [[1, 4, 9, 10, 11, 5], [1, 4, 12, 5], [1, 4, 9, 10, 11, 5], [1, 4, 20, 21, 22, 23, 24, 25, 5]]
    kw = dict(stop_ids=tuple(range(6, 300, 3)), max_new_tokens=5, temperature=1.0)  # rows stop at different lengths
    plain = DecodeSession(llama.model, llama.pad_id, len(prompts))
    plain.extend(prompts)
    session = DecodeSession(lfm2.model, lfm2.pad_id, len(prompts))
    session.extend(prompts)  # rows 0 and 2 share their prompt
    assert session.recurrent and plain.recurrent is False
    first = session.sample(generator=torch.Generator().manual_seed(3), **kw)
    session.keep([0, 1, 3])  # row 2's episode is over
    session.extend([[5, 30 + i] for i in range(3)])
    second = session.sample(generator=torch.Generator().manual_seed(4), **kw)
    assert len({len(g.ids) for g in first}) > 1  # some rows finished while others were fed padding
    for row, i in enumerate([0, 1, 3]):  # each kept row's ids and log-probs, recomputed from its whole history
        ids = prompts[i] + first[i].ids + [5, 30 + row] + second[row].ids
        lp, _ = token_logprobs(lfm2.model, torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long), 1.0)
        at = [len(prompts[i]) - 1 + t for t in range(len(first[i].ids))]
        start = len(prompts[i]) + len(first[i].ids) + 2 - 1
        at += [start + t for t in range(len(second[row].ids))]
        assert max(abs(lp[0, t].item() - x) for t, x in zip(at, first[i].logprobs + second[row].logprobs)) < 1e-4, i
