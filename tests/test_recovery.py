"""Recovery demonstrations: slips (one argument from a wrong slot), their rejection as context, then the oracle."""

from __future__ import annotations

import numpy as np
import pytest

import rods_gym
from rods_gym import TaskSampler, default_suite

from rods_gym.episode import ToolCall
from rods_gym.trainer.config import PolicyConfig, load_config
from rods_gym.trainer.policy import build_tiny_policy
from rods_gym.trainer.recovery import NEIGHBOURHOOD, slipped_call
from rods_gym.trainer import sft
from rods_gym.trainer.sft import make_demonstrations

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py

TINY = PolicyConfig(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=2, max_positions=512)
ENV = "rods/ToolChain-Compact-v0"


def test_a_slip_changes_one_slotted_argument_to_a_nearby_slot() -> None:
    values = ["a@x.org", "CON-1", "b@x.org", 7, "open", "CON-2", "c@x.org"]
    call = ToolCall("find", {"email": "b@x.org", "status": "open", "note": "not shown"})
    seen = set()
    for s in range(200):
        slip = slipped_call(call, values, np.random.default_rng(s))
        assert slip is not None and slip.name == "find"
        changed = [p for p in call.arguments if slip.arguments[p] != call.arguments[p]]
        assert len(changed) == 1 and changed[0] in ("email", "status")  # "note" has no slot
        p = changed[0]
        right, wrong = values.index(call.arguments[p]), values.index(slip.arguments[p])
        assert wrong != right and abs(wrong - right) <= NEIGHBOURHOOD
        seen.add((p, wrong))
    assert len(seen) == 8  # both arguments, all four neighbours of each
    assert slipped_call(call, values, np.random.default_rng(3)) == slipped_call(call, values, np.random.default_rng(3))


def test_no_slip_without_another_value() -> None:
    rng = np.random.default_rng(0)
    assert slipped_call(ToolCall("t", {"x": "unseen"}), ["a", "b"], rng) is None
    assert slipped_call(ToolCall("t", {"x": "a"}), ["a"], rng) is None
    assert slipped_call(ToolCall("t", {}), ["a", "b"], rng) is None


def _segments(ids: list[int], mask: list[int], want: int) -> list[list[int]]:
    out, cur = [], []
    for i, m in zip(ids, mask):
        if m == want:
            cur.append(i)
        elif cur:
            out.append(cur)
            cur = []
    return out + ([cur] if cur else [])


@pytest.fixture(scope="module")
def medium_tasks() -> list:
    # 12 medium tasks whose slips include valid calls the environment accepts: without the take-back
    # (replaying the episode) one of these demonstrations imitates other actions than the oracle's
    return TaskSampler(default_suite(), rods_gym.DIFFICULTIES["medium"], seed=11).sample_many(12)


def test_recovery_demonstrations_imitate_the_oracle_after_rejected_slips(medium_tasks, monkeypatch) -> None:
    policy = build_tiny_policy(TINY, "compact")
    tok = policy.tokenizer
    plain = make_demonstrations(policy, medium_tasks, ENV)
    slips = []
    monkeypatch.setattr(sft, "slipped_call", lambda *a: slips.append(slipped_call(*a)) or slips[-1])
    slipped = make_demonstrations(policy, medium_tasks, ENV, recovery=1.0, seed=4)
    monkeypatch.undo()
    shown = 0
    for a, b in zip(plain, slipped):
        assert b.success  # every demonstration still ends where the oracle's does
        # the imitated actions are exactly the oracle's, in order: slips are never in the loss
        assert _segments(a.transcript.ids, a.transcript.action_mask, 1) == \
            _segments(b.transcript.ids, b.transcript.action_mask, 1)
        context = tok.decode(b.transcript.ids)
        shown += context.count("<obs> error ")
        assert context.count("<obs> error ") == context.count("<act> call") - tok.decode(a.transcript.ids).count("<act> call")
    assert shown >= 10  # most oracle calls of these tasks can slip, and most slips are rejected
    # and at least one slip was a valid call the environment accepted: taken back by replaying the episode,
    # so the demonstration above still imitated exactly the oracle's actions and succeeded
    assert sum(s is not None for s in slips) > shown
    again = make_demonstrations(policy, medium_tasks, ENV, recovery=1.0, seed=4)
    assert [d.transcript.ids for d in again] == [d.transcript.ids for d in slipped]
    other = make_demonstrations(policy, medium_tasks, ENV, recovery=1.0, seed=5)
    assert [d.transcript.ids for d in other] != [d.transcript.ids for d in slipped]


def test_slips_leave_room_for_the_oracle_under_a_tight_step_limit(medium_tasks) -> None:
    policy = build_tiny_policy(TINY, "compact")
    for limit in (8, 10):
        plain = make_demonstrations(policy, medium_tasks, ENV, {"max_steps": limit})
        slipped = make_demonstrations(policy, medium_tasks, ENV, {"max_steps": limit}, recovery=1.0, seed=4)
        assert [d.success for d in slipped] == [d.success for d in plain]
        assert sum(d.success for d in slipped) >= 10
        assert any(len(b.transcript) > len(a.transcript) for a, b in zip(plain, slipped))  # slips still shown


def test_recovery_needs_a_view_with_slots_and_a_probability() -> None:
    policy = build_tiny_policy(TINY, "compact")
    with pytest.raises(ValueError, match="recovery must be a probability"):
        make_demonstrations(policy, [], ENV, recovery=1.5)
    with pytest.raises(ValueError, match="sft.recovery"):
        load_config(None, ["sft.recovery=-0.1"])
    chat = build_tiny_policy(TINY, "chat")
    with pytest.raises(ValueError, match="compact view"):
        make_demonstrations(chat, [], "rods/ToolChain-Chat-v0", recovery=0.5)


def _withheld_tool_tasks(n: int) -> list:
    """The first ``n`` test tasks with a withheld tool (enabled once the agent says it cannot proceed)."""
    from rods_gym.trainer.tasks import load_tasks

    tasks = [t for t in load_tasks("test", load_config("default").data) if t.meta.get("stratum") == "missing_tool"]
    assert len(tasks) >= n
    return tasks[:n]


def test_the_deferring_oracle_calls_what_it_can_before_saying_a_tool_is_missing() -> None:
    import gymnasium as gym

    from rods_gym.oracle import oracle_action

    env = gym.make(ENV)
    later = 0
    for i, task in enumerate(_withheld_tool_tasks(40)):
        actions = {}
        for defer in (False, True):
            env.reset(seed=i, options={"task": task})
            taken = []
            for _ in range(64):
                text = env.unwrapped.encode(oracle_action(env.unwrapped.episode, defer_unlock=defer))
                taken.append(text)
                _, _, terminated, truncated, info = env.step(text)
                if terminated or truncated:
                    break
            assert info["success"], (task.id, defer, taken)  # both orders solve the task
            actions[defer] = taken
        plain, deferred = actions[False], actions[True]
        assert plain[0].startswith("reply") and len(deferred) == len(plain)  # as short, in another order
        # the same calls (their slot ids follow the order values appeared in, so only the tools are compared)
        assert sorted(a.split()[1] for a in deferred if a.startswith("call")) == \
            sorted(a.split()[1] for a in plain if a.startswith("call"))
        said = deferred.index(next(a for a in deferred if a.startswith("reply")))
        locked = set(task.turns[0].locked)
        # every call before the reply uses an available tool, and the call after it a withheld one
        assert all(a.split()[1] not in locked for a in deferred[:said]) and deferred[said + 1].split()[1] in locked
        later += said > 0
    assert later >= 10  # in many of them some call comes first (in the others the chain starts at the withheld tool)


def test_deferred_demonstrations_are_drawn_per_task_from_the_seed() -> None:
    policy = build_tiny_policy(TINY, "compact")
    tasks = _withheld_tool_tasks(12)
    tok = policy.tokenizer

    def first_actions(demos) -> list[str]:
        return [tok.decode(d.transcript.ids).split("<act>")[1].split()[0] for d in demos]

    plain = make_demonstrations(policy, tasks, ENV)
    assert first_actions(plain) == ["reply"] * len(tasks)
    always = make_demonstrations(policy, tasks, ENV, defer_unlock=1.0)
    assert all(d.success for d in always) and "call" in first_actions(always)
    half = make_demonstrations(policy, tasks, ENV, defer_unlock=0.5, seed=3)
    again = make_demonstrations(policy, tasks, ENV, defer_unlock=0.5, seed=3)
    assert [d.transcript.ids for d in half] == [d.transcript.ids for d in again]
    mixed = [h.transcript.ids == p.transcript.ids for h, p in zip(half, plain)]
    assert any(mixed) and not all(mixed)  # some demonstrations deferred, some not
    with pytest.raises(ValueError, match="defer_unlock must be a probability"):
        make_demonstrations(policy, tasks, ENV, defer_unlock=1.5)
    with pytest.raises(ValueError, match="sft.defer_unlock"):
        load_config(None, ["sft.defer_unlock=2"])


def _agent_actions(policy, demo) -> list[str]:
    """The actions a demonstration imitates, as the compact view's text (the marked runs of its ids)."""
    tr = demo.transcript
    return [policy.tokenizer.decode(run).strip() for run in _segments(tr.ids, tr.action_mask, 1)]


def test_a_teacher_that_skips_the_last_call_says_it_is_done_there_instead() -> None:
    """``skip_last_call``: where the oracle would make the last call a task's last turn needs, with another of
    that turn's calls made, the demonstration says it is done (imitated) and ends unsolved; other tasks keep
    the oracle's demonstration."""
    from rods_gym.trainer.tasks import load_tasks

    policy = build_tiny_policy(TINY, "compact")
    tasks = list(load_tasks("test", load_config("default").data))[::10][:40]
    plain = make_demonstrations(policy, tasks, ENV)
    skipped = make_demonstrations(policy, tasks, ENV, skip_last_call=1.0)
    n_skipped = 0
    for task, p, s in zip(tasks, plain, skipped):
        last = len(task.turns) - 1
        a, b = _agent_actions(policy, p), _agent_actions(policy, s)
        assert p.success
        if sum(c.turn == last for c in task.calls) < 2:
            assert s.success and b == a, task.id  # nothing to skip: the oracle's demonstration
            continue
        n_skipped += 1
        assert not s.success, task.id
        # a reply where the oracle makes a call, after the same actions
        assert b[-1].startswith("reply") and a[len(b) - 1].startswith("call ") and b[:-1] == a[: len(b) - 1], (task.id, a, b)
        # that call was the last the task needs: after it the oracle at most replies (an answer, or done)
        assert len(a) - len(b) <= 1 and all(x.startswith("reply") for x in a[len(b):]), (task.id, a, b)
        assert s.skipped_last_call and not p.skipped_last_call
    assert 10 <= n_skipped < len(tasks)
    half = make_demonstrations(policy, tasks, ENV, skip_last_call=0.5, seed=4)
    again = make_demonstrations(policy, tasks, ENV, skip_last_call=0.5, seed=4)
    other = make_demonstrations(policy, tasks, ENV, skip_last_call=0.5, seed=5)
    assert [d.transcript.ids for d in half] == [d.transcript.ids for d in again]
    assert [d.skipped_last_call for d in half] != [d.skipped_last_call for d in other]  # the seed draws them
    n_half = sum(d.skipped_last_call for d in half)
    assert n_half == sum(not d.success for d in half) and 0 < n_half < n_skipped  # drawn per demonstration
    # with recovery slips too: the same skips, each still where the oracle makes the last call
    both = make_demonstrations(policy, tasks, ENV, skip_last_call=0.5, recovery=0.5, seed=4)
    assert [d.skipped_last_call for d in both] == [d.skipped_last_call for d in half]
    assert all(d.success != d.skipped_last_call for d in both)
    with pytest.raises(ValueError, match="skip_last_call must be a probability"):
        make_demonstrations(policy, tasks, ENV, skip_last_call=-0.1)
    with pytest.raises(ValueError, match="sft.skip_last_call"):
        load_config(None, ["sft.skip_last_call=1.5"])


def test_the_skipping_teacher_says_the_oracles_own_done() -> None:
    """In the chat view, where a reply's text is kept, the reply that replaces the last call is the oracle's."""
    from rods_gym.oracle import DONE
    from rods_gym.trainer.tasks import load_tasks

    policy = build_tiny_policy(TINY, "chat")
    tasks = [t for t in load_tasks("test", load_config("default").data)
             if t.meta.get("stratum") == "plain" and len(t.calls) >= 2][:3]
    for demo in make_demonstrations(policy, tasks, "rods/ToolChain-Chat-v0", skip_last_call=1.0):
        assert not demo.success and DONE in _agent_actions(policy, demo)[-1]
