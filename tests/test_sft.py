"""SFT warm start: demonstrations, a loss on agent tokens only, and that it learns."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rods_gym.trainer.config import PolicyConfig, SFTConfig
from rods_gym.trainer.evaluation import evaluate
from rods_gym.trainer.policy import build_tiny_policy
from rods_gym.trainer.rollout import RolloutSettings
from rods_gym.trainer.sft import length_grouped_batches, make_demonstrations, pad_right, sft_loss, train_sft

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py


TINY = PolicyConfig(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=2, max_positions=512)


@pytest.mark.parametrize("slot_ids", ["ordered", "typed"])
def test_demonstration_actions_are_the_oracle_actions(easy_tasks, slot_ids: str) -> None:
    import gymnasium as gym

    policy = build_tiny_policy(TINY, "compact", slot_ids=slot_ids)
    kwargs = {} if slot_ids == "ordered" else {"slot_ids": slot_ids}
    demos = make_demonstrations(policy, easy_tasks[:5], "rods/ToolChain-Compact-v0", kwargs)
    env = gym.make("rods/ToolChain-Compact-v0", **kwargs)
    tok = policy.tokenizer
    for demo in demos:
        env.reset(options={"task": demo.task})
        expected = []
        for _ in range(20):
            a = env.unwrapped.oracle_action()
            expected.append(a)
            *_, term, trunc, _ = env.step(a)
            if term or trunc:
                break
        ids, mask = demo.transcript.ids, demo.transcript.action_mask
        segments, cur = [], []
        for i, m in zip(ids, mask):
            if m:
                cur.append(i)
            elif cur:
                segments.append(cur)
                cur = []
        segments += [cur] if cur else []
        assert [tok.decode(s[:-1]) for s in segments] == expected
        assert demo.success


def test_sft_loss_counts_agent_tokens_only() -> None:
    policy = build_tiny_policy(TINY, "compact")
    ids, attn, amask = pad_right([[1, 4, 10, 11, 12, 3], [1, 4, 20, 3]], [[0, 0, 0, 1, 1, 1], [0, 0, 1, 1]],
                                 policy.pad_id)
    loss = sft_loss(policy.model, ids, attn, amask)
    with torch.no_grad():
        logits = policy.model(input_ids=ids, attention_mask=attn).logits
    nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
    nll = nll.view(2, -1)
    by_hand = (nll[0, 2:5].sum() + nll[1, 1:3].sum()) / 5  # targets at positions 3,4,5 and 2,3
    assert loss.item() == pytest.approx(by_hand.item(), rel=1e-5)
    # changing environment tokens' targets does not matter; changing an agent token does
    ids2 = ids.clone()
    ids2[0, 1] = 30  # a context token (still an input, but never a target under the mask)
    assert sft_loss(policy.model, ids2, attn, amask).item() != pytest.approx(loss.item())  # it conditions the rest
    amask2 = amask.clone()
    amask2[0, 1] = 0
    assert sft_loss(policy.model, ids, attn, amask2).item() == pytest.approx(loss.item())


def test_length_grouped_batches_cover_each_index_once() -> None:
    lengths = list(np.random.default_rng(0).integers(10, 400, size=103))
    batches = length_grouped_batches(lengths, 8, np.random.default_rng(1))
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(103))
    spread = np.mean([max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches])
    assert spread < 0.5 * (max(lengths) - min(lengths))  # batches hold similar lengths


def test_sft_learns_the_demonstrations(easy_tasks) -> None:
    tasks = [t for t in easy_tasks if len(t.calls) == 1][:8]
    policy = build_tiny_policy(TINY, "compact")
    demos = make_demonstrations(policy, tasks, "rods/ToolChain-Compact-v0")
    settings = RolloutSettings(max_action_tokens=10, max_turns=4)
    before = evaluate(policy, tasks, "rods/ToolChain-Compact-v0", settings=settings)
    losses = train_sft(policy, demos, SFTConfig(steps=80, batch_size=8, lr=3e-3, warmup_steps=5), seed=0)
    after = evaluate(policy, tasks, "rods/ToolChain-Compact-v0", settings=settings)
    assert losses[-1] < 0.2 * losses[0]
    assert before["success"] == 0.0 and after["success"] >= 0.75
    assert all(p.grad is None for p in policy.model.parameters())  # no gradients left behind


def test_a_killed_warm_start_resumes_from_its_checkpoint_to_the_same_weights(easy_tasks, tmp_path) -> None:
    from rods_gym.trainer.sft import load_sft_checkpoint

    tasks = easy_tasks[:12]
    cfg = SFTConfig(steps=7, batch_size=4, lr=3e-3, warmup_steps=2, checkpoint_every=3)
    full = build_tiny_policy(TINY, "compact")
    demos = make_demonstrations(full, tasks, "rods/ToolChain-Compact-v0")
    full_losses = train_sft(full, demos, cfg, seed=1, checkpoint_dir=tmp_path / "full")
    assert load_sft_checkpoint(tmp_path / "full")["step"] == 6  # the last one before the end

    class Killed(Exception):
        pass

    def die_in_step_5(step: int, loss: float) -> None:
        if step == 4:
            raise Killed

    killed = build_tiny_policy(TINY, "compact")
    with pytest.raises(Killed):
        train_sft(killed, demos, cfg, seed=1, checkpoint_dir=tmp_path / "run", on_step=die_in_step_5)
    assert load_sft_checkpoint(tmp_path / "run")["step"] == 3
    resumed = build_tiny_policy(TINY, "compact")  # a fresh process: initial weights, the checkpoint on disk
    steps_seen: list[int] = []
    losses = train_sft(resumed, demos, cfg, seed=1, checkpoint_dir=tmp_path / "run",
                       on_step=lambda step, loss: steps_seen.append(step))
    assert steps_seen == [3, 4, 5, 6] and losses == pytest.approx(full_losses, abs=1e-6)
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    # the comparison can fail: another seed draws other batches
    other = build_tiny_policy(TINY, "compact")
    train_sft(other, demos, cfg, seed=2)
    assert any(not torch.allclose(a, b) for a, b in zip(full.model.parameters(), other.model.parameters()))
    # a checkpoint of another warm start is refused, naming what differs
    with pytest.raises(ValueError, match="belongs to another warm start \\(sft.steps: 7 there, 9 now\\)"):
        train_sft(build_tiny_policy(TINY, "compact"), demos, replace(cfg, steps=9), seed=1,
                  checkpoint_dir=tmp_path / "run")
    with pytest.raises(ValueError, match="sft.batch_size: 4 there, 8 now; sft.lr: 0.003 there, 0.001 now"):
        train_sft(build_tiny_policy(TINY, "compact"), demos, replace(cfg, batch_size=8, lr=1e-3), seed=1,
                  checkpoint_dir=tmp_path / "run")
    with pytest.raises(ValueError, match="demonstrations: 12 there, 11 now"):
        train_sft(build_tiny_policy(TINY, "compact"), demos[:11], cfg, seed=1, checkpoint_dir=tmp_path / "run")
    with pytest.raises(ValueError, match="seed: 1 there, 2 now"):
        train_sft(build_tiny_policy(TINY, "compact"), demos, cfg, seed=2, checkpoint_dir=tmp_path / "run")
    # settings that leave the weights alone may change
    train_sft(build_tiny_policy(TINY, "compact"), demos, replace(cfg, threads=2, checkpoint_every=5), seed=1,
              checkpoint_dir=tmp_path / "run")


def test_summaries_report_success_per_depth_and_per_turn_type() -> None:
    """``per_stratum`` groups episodes by the stratum their task was drawn in; tasks without one are left out."""
    from rods_gym import load_split
    from rods_gym.trainer.evaluation import summarize
    from rods_gym.trainer.rollout import Trajectory
    from rods_gym.trainer.transcript import Transcript

    tasks = load_split("test")
    tool = [t for t in tasks if t.meta["stratum"] == "missing_tool"][:2]
    plain = [t for t in tasks if t.meta["stratum"] == "plain"][:3]
    bare = plain[0].with_meta(stratum=None)
    trajs = [Trajectory(task=t, task_index=i, transcript=Transcript(), success=ok, progress=pr)
             for i, (t, ok, pr) in enumerate([(tool[0], True, 1.0), (tool[1], False, 0.5), (plain[0], False, 0.0),
                                               (plain[1], True, 1.0), (plain[2], True, 1.0), (bare, True, 1.0)])]
    trajs[0].rewards, trajs[0].rejected = [0.5, 0.0, 0.5], [False, True, False]  # 1 of 3 actions rejected
    trajs[1].rewards, trajs[1].rejected = [0.5], [False]
    s = summarize(trajs)
    assert s["tool_error_rate"] == pytest.approx(1 / 4)  # named as in training's metrics.jsonl
    assert s["per_stratum"] == {"missing_tool": {"n": 2, "success": 0.5, "progress": 0.75},
                                "plain": {"n": 3, "success": pytest.approx(2 / 3), "progress": pytest.approx(2 / 3)}}
    assert sum(v["n"] for v in s["per_depth"].values()) == 6 and s["success"] == pytest.approx(4 / 6)


def test_demonstrations_longer_than_the_rollout_context_are_left_out(task_file) -> None:
    """The warm start imitates only what fits in ``rollout.max_context`` (a model with learned positions
    cannot take more), with a warning that counts them; when none fits it is an error naming the setting."""
    from rods_gym.trainer.config import load_config
    from rods_gym.trainer.sft import demonstrations
    from rods_gym.trainer.tasks import load_tasks

    base = ["sft.data=seeds", "sft.demos=12", f"data.train_split={task_file}"]
    cfg = load_config(None, base)
    policy = build_tiny_policy(TINY, "compact")
    seeds = load_tasks(cfg.data.train_split, cfg.data)
    lengths = sorted(len(d.transcript.ids) for d in demonstrations(cfg, policy, seeds))
    assert lengths[0] < lengths[-1]
    limit = lengths[len(lengths) // 2]
    with pytest.warns(UserWarning, match=rf"{sum(n > limit for n in lengths)} of 12 oracle demonstrations are "
                                         rf"longer than rollout.max_context={limit} tokens \(the longest: {lengths[-1]}\)"):
        kept = demonstrations(load_config(None, base + [f"rollout.max_context={limit}"]), policy, seeds)
    assert sorted(len(d.transcript.ids) for d in kept) == [n for n in lengths if n <= limit]
    with pytest.raises(ValueError, match="the warm start has nothing to imitate"):
        demonstrations(load_config(None, base + [f"rollout.max_context={lengths[0] - 1}"]), policy, seeds)
