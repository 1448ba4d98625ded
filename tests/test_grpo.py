"""GRPO loss pieces on tiny tensors, against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from rods_gym.trainer.grpo import (Batch, LossSettings, aggregate, clipped_surrogate, group_advantages, grpo_loss,
                                   k3_kl, make_batch, token_logprobs)

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
    for how in ("token", "sequence", "dr_grpo"):
        model = TinyLM(seed=1)
        b = _batch(model, [0.7, -1.2, 0.4])
        with torch.no_grad():  # off-policy so the clip matters (a constant shift would leave the softmax as it was)
            model.table.add_(0.3 * torch.randn(model.table.shape, generator=torch.Generator().manual_seed(5)))
        settings = LossSettings(aggregation=how, max_len=6, eps_low=0.01, eps_high=0.01)
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
        assert parts == pytest.approx(full.item(), abs=1e-6), how
        assert torch.allclose(model.table.grad, g_full, atol=1e-6), how


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


