"""GRPO loss pieces on tiny tensors, against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from rods_gym.trainer.grpo import (Batch, LossSettings, aggregate, clipped_surrogate, group_advantages, grpo_loss,
                                   k3_kl, make_batch, sequence_log_ratio, token_logprobs)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py


def test_group_advantages_std_normalized() -> None:
    returns = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5]])
    adv = group_advantages(returns, "group", eps=0.0 + 1e-4)
    # group 0: mean 0.5, sample std sqrt(4 * 0.25 / 3) = 0.57735
    expected = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    assert torch.allclose(adv[0], torch.tensor([expected, -expected, -expected, expected]), atol=1e-6)
    assert torch.equal(adv[1], torch.zeros(4))  # a silent group carries no signal


def test_group_advantages_dr_grpo_has_no_std() -> None:
    returns = torch.tensor([[1.0, 0.0, 0.5, 0.5]])
    adv = group_advantages(returns, "none")
    assert torch.allclose(adv, torch.tensor([[0.5, -0.5, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="scale"):
        group_advantages(returns, "median")


def test_group_advantages_scaled_by_the_batch_std_by_hand() -> None:
    returns = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.0]])
    # TRL's scale_rewards="batch": centred within each group, divided by the std of all eight returns
    std = float(returns.flatten().std())  # sample std of (1, 0, 0, 1, .5, .5, .5, 0), mean 0.4375: sqrt(1.21875 / 7)
    assert std == pytest.approx(math.sqrt(1.21875 / 7))
    adv = group_advantages(returns, "batch", eps=1e-4, batch_std=std)
    s = std + 1e-4
    assert torch.allclose(adv, torch.tensor([[0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s],
                                             [0.125 / s, 0.125 / s, 0.125 / s, -0.375 / s]]), atol=1e-6)
    # unlike the group scale, a group with a small spread keeps small advantages
    assert adv[1].abs().max() < group_advantages(returns, "group")[1].abs().max()
    with pytest.raises(ValueError, match="batch_std is the scale of scale='batch'"):
        group_advantages(returns, "batch")
    with pytest.raises(ValueError, match="batch_std is the scale of scale='batch'"):
        group_advantages(returns, "group", batch_std=std)


def test_group_advantages_against_a_greedy_baseline_by_hand() -> None:
    returns = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.5, 0.5, 0.5, 0.5]])
    greedy = torch.tensor([1.0, 0.0, 0.5])
    # ReMax: no sample beats a greedy success, so none is pushed up; Dr.GRPO-style without a std
    assert torch.allclose(group_advantages(returns, "none", baseline=greedy),
                          torch.tensor([[0.0, -1.0, -1.0, 0.0], [1.0] * 4, [0.0] * 4]))
    adv = group_advantages(returns, "group", eps=1e-4, baseline=greedy)
    # group 0: std of (1, 0, 0, 1, 1) = sqrt(0.3); group 1: of (1, 1, 1, 1, 0) = sqrt(0.2), so every sample,
    # all better than greedy, gets 1 / sqrt(0.2) = sqrt(5) = sqrt(G + 1), not 1 / eps
    s0, s1 = math.sqrt(0.3) + 1e-4, math.sqrt(0.2) + 1e-4
    assert torch.allclose(adv, torch.tensor([[0.0, -1 / s0, -1 / s0, 0.0], [1 / s1] * 4, [0.0] * 4]), atol=1e-6)
    assert torch.equal(adv[2], torch.zeros(4))  # samples that all equal the greedy episode: no signal
    with pytest.raises(ValueError, match=r"baseline must be \[n_groups\] = \[3\]"):
        group_advantages(returns, "group", baseline=torch.zeros(2))


def test_clipped_surrogate_by_hand() -> None:
    old = torch.zeros(4)
    logp = torch.log(torch.tensor([1.5, 1.5, 0.5, 0.5]))
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0])
    loss, low, high = clipped_surrogate(logp, old, adv, eps_low=0.2, eps_high=0.28)
    # r=1.5,A=+1: min(1.5, 1.28) = 1.28 -> -1.28 ; r=1.5,A=-1: min(-1.5, -1.28) = -1.5 -> 1.5
    # r=0.5,A=-1: min(-0.5, -0.8) = -0.8 -> 0.8  ; r=0.5,A=+1: min(0.5, 0.8) = 0.5 -> -0.5
    assert torch.allclose(loss, torch.tensor([-1.28, 1.5, 0.8, -0.5]), atol=1e-6)
    assert high.tolist() == [True, False, False, False]
    assert low.tolist() == [False, False, True, False]


def test_clip_stops_the_gradient_outside_the_trust_region() -> None:
    logp = torch.log(torch.tensor([1.5, 1.1])).requires_grad_(True)
    loss, _, _ = clipped_surrogate(logp, torch.zeros(2), torch.ones(2), 0.2, 0.28)
    loss.sum().backward()
    # clipped token: no gradient; inside: d(-r)/dlogp = -r = -1.1
    assert torch.allclose(logp.grad, torch.tensor([0.0, -1.1]), atol=1e-6)


def test_k3_by_hand() -> None:
    logp, ref = torch.log(torch.tensor([0.5, 0.3])), torch.log(torch.tensor([0.25, 0.3]))
    kl = k3_kl(logp, ref)
    d = math.log(0.5)
    assert kl[0].item() == pytest.approx(math.exp(d) - d - 1, abs=1e-6)  # 0.19315
    assert kl[1].item() == pytest.approx(0.0, abs=1e-7)


def test_aggregations_by_hand() -> None:
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert aggregate(per_token, mask, "token").item() == pytest.approx(10 / 4)
    assert aggregate(per_token, mask, "sequence").item() == pytest.approx((6 / 3 + 4 / 1) / 2)
    assert aggregate(per_token, mask, "dr_grpo", max_len=5).item() == pytest.approx(10 / (2 * 5))
    # explicit normalizers (micro-batches of a larger batch)
    assert aggregate(per_token, mask, "token", n_tokens=8).item() == pytest.approx(10 / 8)
    assert aggregate(per_token, mask, "sequence", n_seqs=4).item() == pytest.approx(6 / 4)
    with pytest.raises(ValueError):
        aggregate(per_token, mask, "dr_grpo")


class TinyLM(torch.nn.Module):
    """A bigram model: logits depend on the current token only (enough to test the loss plumbing)."""

    def __init__(self, vocab: int = 7, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.table = torch.nn.Parameter(torch.randn(vocab, vocab, generator=g))

    def forward(self, input_ids, attention_mask=None, position_ids=None):  # noqa: ANN001
        return type("Out", (), {"logits": self.table[input_ids]})()


def _batch(model: TinyLM, adv: list[float]) -> Batch:
    ids = [[1, 2, 3, 4], [1, 5, 6], [2, 2, 3, 1, 0]]
    masks = [[0, 1, 1, 0], [0, 0, 1], [0, 1, 1, 1, 1]]
    b = make_batch(ids, masks, [[0.0] * len(x) for x in ids], adv, pad_id=0)
    with torch.no_grad():
        lp, _ = token_logprobs(model, b.input_ids, b.attention_mask)
    b.old_logp = lp * b.action_mask  # on-policy: old log-probs = current ones
    return b


def test_on_policy_loss_is_minus_mean_advantage_and_gradient_is_policy_gradient() -> None:
    model = TinyLM()
    adv = [1.0, -0.5, 0.25]
    b = _batch(model, adv)
    loss, stats = grpo_loss(model, b, LossSettings(aggregation="token"))
    n = b.action_mask.sum()
    per_seq_tokens = b.action_mask.sum(1)
    expected = -(torch.tensor(adv) * per_seq_tokens).sum() / n
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
    assert stats["ratio"] / stats["tokens"] == pytest.approx(1.0, abs=1e-6)
    loss.backward()
    got = model.table.grad.clone()
    model.table.grad = None
    lp, _ = token_logprobs(model, b.input_ids, b.attention_mask)
    pg = -(lp * b.action_mask * torch.tensor(adv)[:, None]).sum() / n
    pg.backward()
    assert torch.allclose(got, model.table.grad, atol=1e-6)


def test_micro_batches_add_up_to_the_full_batch() -> None:
    for how, importance in (("token", "token"), ("sequence", "token"), ("dr_grpo", "token"), ("sequence", "sequence")):
        model = TinyLM(seed=1)
        b = _batch(model, [0.7, -1.2, 0.4])
        with torch.no_grad():  # off-policy so the clip matters (a constant shift would leave the softmax as it was)
            model.table.add_(0.3 * torch.randn(model.table.shape, generator=torch.Generator().manual_seed(5)))
        settings = LossSettings(aggregation=how, max_len=6, eps_low=0.01, eps_high=0.01, importance=importance)
        full, stats = grpo_loss(model, b, settings)
        assert 0 < stats["clip_low"] + stats["clip_high"] < stats["tokens"], how  # some tokens clipped, not all
        full.backward()
        g_full = model.table.grad.clone()
        model.table.grad = None
        n_tok, n_seq = float(b.action_mask.sum()), float(len(b))
        parts = 0.0
        for idx in ([0, 2], [1]):
            part, _ = grpo_loss(model, b.select(idx), settings, n_tokens=n_tok, n_seqs=n_seq)
            part.backward()
            parts += part.item()
        assert parts == pytest.approx(full.item(), abs=1e-6), (how, importance)
        assert torch.allclose(model.table.grad, g_full, atol=1e-6), (how, importance)


def test_gspo_sequence_log_ratio_by_hand() -> None:
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]], requires_grad=True)
    old = torch.tensor([[-1.2, -1.6, -9.0], [-0.5, -0.8, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])  # the last column is padding / context
    lr = sequence_log_ratio(logp, old, mask)
    # row 0: mean(0.2, -0.4) = -0.1 on every token; row 1: its one generated token's 0.3
    assert torch.allclose(lr.detach(), torch.tensor([[-0.1] * 3, [0.3] * 3]), atol=1e-6)
    (lr * torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])).sum().backward()
    assert torch.equal(logp.grad, torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))  # each token's own log-prob


def test_gspo_clips_whole_rollouts_and_equals_grpo_on_policy() -> None:
    adv = [1.0, -0.5, 0.25]

    def grads(b: Batch, model: TinyLM, settings: LossSettings) -> tuple[float, torch.Tensor, dict]:
        model.table.grad = None
        loss, stats = grpo_loss(model, b, settings)
        loss.backward()
        return loss.item(), model.table.grad.clone(), stats

    model = TinyLM(seed=3)
    b = _batch(model, adv)
    for how in ("token", "sequence"):  # on-policy every ratio is 1: the same loss and gradient
        tok = grads(b, model, LossSettings(aggregation=how))
        seq = grads(b, model, LossSettings(aggregation=how, importance="sequence"))
        assert seq[0] == pytest.approx(tok[0], abs=1e-6) and torch.allclose(seq[1], tok[1], atol=1e-6), how
    # rollout 0 (A = 1, two generated tokens) off-policy by +0.6 and -0.2: its sequence ratio exp(0.2) = 1.22
    # is inside the clip range, so GSPO keeps both tokens' gradient (scaled by 1.22), while the token ratios
    # 1.82 (clipped, A > 0) and 0.82 (kept) drop one
    assert int(b.action_mask[0].sum()) == 2
    shift = torch.zeros_like(b.old_logp)
    shift[0, b.action_mask[0].bool()] = torch.tensor([0.6, -0.2])
    b.old_logp = b.old_logp - shift
    _, g_seq, st_seq = grads(b, model, LossSettings(aggregation="token", importance="sequence"))
    _, g_tok, st_tok = grads(b, model, LossSettings(aggregation="token"))
    assert st_tok["clip_high"] == 1 and st_seq["clip_high"] == 0 and not torch.allclose(g_seq, g_tok, atol=1e-4)
    assert st_seq["ratio"] == pytest.approx(2 * math.exp(0.2) + (st_seq["tokens"] - 2), abs=1e-5)

    def by_hand(rows: list[int]) -> torch.Tensor:  # -(1/n) sum over tokens of s_i A_i grad logp_t, rollouts ``rows``
        model.table.grad = None
        lp, _ = token_logprobs(model, b.input_ids, b.attention_mask)
        m = b.action_mask
        ratio = torch.exp(((lp - b.old_logp) * m).sum(1) / m.sum(1)).detach()
        keep = torch.zeros(len(adv))
        keep[rows] = 1.0
        (-(keep[:, None] * ratio[:, None] * lp * m * torch.tensor(adv)[:, None]).sum() / m.sum()).backward()
        return model.table.grad.clone()

    assert torch.allclose(g_seq, by_hand([0, 1, 2]), atol=1e-6)
    # past eps_high = 0.1 the whole of rollout 0 is clipped: both its tokens counted, neither has a gradient
    _, g_clip, st = grads(b, model, LossSettings(aggregation="token", importance="sequence", eps_high=0.1))
    assert st["clip_high"] == 2 and torch.allclose(g_clip, by_hand([1, 2]), atol=1e-6)
    with pytest.raises(ValueError, match="importance level 'tokens'"):
        grpo_loss(model, b, LossSettings(importance="tokens"))


def test_kl_term_adds_beta_times_mean_k3() -> None:
    model = TinyLM(seed=2)
    b = _batch(model, [1.0, 0.0, -1.0])
    ref = TinyLM(seed=3)
    with torch.no_grad():
        ref_lp, _ = token_logprobs(ref, b.input_ids, b.attention_mask)
        lp, _ = token_logprobs(model, b.input_ids, b.attention_mask)
    b.ref_logp = ref_lp
    base, _ = grpo_loss(model, b, LossSettings(beta=0.0))
    with_kl, stats = grpo_loss(model, b, LossSettings(beta=0.1))
    m = b.action_mask
    mean_k3 = (k3_kl(lp, ref_lp) * m).sum() / m.sum()
    assert with_kl.item() == pytest.approx(base.item() + 0.1 * mean_k3.item(), abs=1e-6)
    assert stats["kl"] / stats["tokens"] == pytest.approx(mean_k3.item(), abs=1e-6)
    b.ref_logp = None
    with pytest.raises(ValueError, match="reference"):
        grpo_loss(model, b, LossSettings(beta=0.1))


def test_action_advantages_standardize_each_actions_reward_within_its_group() -> None:
    from rods_gym.trainer.grpo import action_advantages

    groups = [[[0.5, 0.0], [0.5, 0.5]], [[0.0], [0.0, 0.0]]]
    out = action_advantages(groups, eps=0.0)
    # group 0: rewards 0.5, 0, 0.5, 0.5 -> mean 0.375, sample std 0.25
    assert out[0] == [[pytest.approx(0.5), pytest.approx(-1.5)], [pytest.approx(0.5), pytest.approx(0.5)]]
    assert out[1] == [[0.0], [0.0, 0.0]]  # every action earned the same: no signal


def test_returns_to_go_discount_later_rewards() -> None:
    from rods_gym.trainer.grpo import returns_to_go

    assert returns_to_go([0.5, 0.0, 0.5], 0.5) == [pytest.approx(0.625), pytest.approx(0.25), pytest.approx(0.5)]
    assert returns_to_go([], 0.9) == []


def test_state_advantages_compare_only_actions_taken_from_the_same_state() -> None:
    """GiGPO step groups by hand: rollouts 0-2 share the first state; rollouts 1 and 2 also share the
    second ('b'), rollout 0's second state is its own, and rollout 3 started elsewhere."""
    from rods_gym.trainer.grpo import state_advantages

    group = [(["s0", "a"], [0.5, 0.5]), (["s0", "b"], [0.5, 0.0]), (["s0", "b"], [0.5, 0.5]), (["s1"], [0.0])]
    # gamma 1: returns-to-go s0: 1.0, 0.5, 1.0 (mean 5/6); b: 0.0, 0.5 (mean 0.25)
    plain = state_advantages([group], gamma=1.0, scale="none")[0]
    assert plain == [[pytest.approx(1 / 6), 0.0], [pytest.approx(-1 / 3), pytest.approx(-0.25)],
                     [pytest.approx(1 / 6), pytest.approx(0.25)], [0.0]]
    scaled = state_advantages([group], gamma=1.0, scale="group", eps=0.0)[0]
    std_s0 = float(torch.tensor([1.0, 0.5, 1.0]).std())
    assert scaled[0][0] == pytest.approx((1.0 - 5 / 6) / std_s0)
    assert scaled[1][1] == pytest.approx(-0.25 / float(torch.tensor([0.0, 0.5]).std()))
    # a step group whose returns agree carries no signal; mismatched lengths are an error
    same = state_advantages([[(["x"], [1.0]), (["x"], [1.0])]], gamma=0.9)[0]
    assert same == [[0.0], [0.0]]
    with pytest.raises(ValueError, match="2 states for 1 rewards"):
        state_advantages([[(["x", "y"], [1.0])]])


def test_weigh_negatives_scales_only_negative_advantages() -> None:
    from rods_gym.trainer.grpo import weigh_negatives

    adv = torch.tensor([[1.0, -2.0, 0.0, -0.5]])
    assert weigh_negatives(adv, 0.25).tolist() == [[1.0, -0.5, 0.0, -0.125]]
    assert weigh_negatives(adv, 1.0).tolist() == adv.tolist()
    assert weigh_negatives(adv, 0.0).tolist() == [[1.0, 0.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="negative advantage weight"):
        weigh_negatives(adv, 1.5)


def test_per_token_advantages_equal_to_the_sequence_value_give_the_same_loss() -> None:
    """A [B, T] advantage tensor equal to each sequence's value everywhere reproduces the [B] loss; a
    different value on one action's tokens changes only that action's terms."""
    model = TinyLM()
    adv = [1.0, -0.5, 0.25]
    b = _batch(model, adv)
    ids = [[1, 2, 3, 4], [1, 5, 6], [2, 2, 3, 1, 0]]
    per_token = make_batch(ids, [[0, 1, 1, 0], [0, 0, 1], [0, 1, 1, 1, 1]], [[0.0] * len(x) for x in ids],
                           [[a] * len(x) for a, x in zip(adv, ids)], pad_id=0)
    per_token.old_logp = b.old_logp
    assert per_token.advantages.shape == b.action_mask.shape
    settings = LossSettings(aggregation="token")
    assert grpo_loss(model, per_token, settings)[0].item() == pytest.approx(grpo_loss(model, b, settings)[0].item())
    sub = per_token.select([0, 2])
    assert sub.advantages.shape == sub.action_mask.shape
    bumped = make_batch(ids, [[0, 1, 1, 0], [0, 0, 1], [0, 1, 1, 1, 1]], [[0.0] * len(x) for x in ids],
                        [[1.0, 1.0, 3.0, 1.0], [-0.5] * 3, [0.25] * 5], pad_id=0)
    bumped.old_logp = b.old_logp
    n = float(b.action_mask.sum())
    # on-policy the loss is -sum(A * mask) / n: token 2 of sequence 0 (a target position) gains 2.0
    delta = grpo_loss(model, bumped, settings)[0].item() - grpo_loss(model, b, settings)[0].item()
    assert delta == pytest.approx(-2.0 / n, abs=1e-6)
    with pytest.raises(ValueError, match="token advantages"):
        make_batch(ids, [[0, 1, 1, 0], [0, 0, 1], [0, 1, 1, 1, 1]], [[0.0] * len(x) for x in ids],
                   [[1.0], [0.0] * 3, [0.0] * 5], pad_id=0)
