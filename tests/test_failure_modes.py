"""benchmarks/failure_modes.py: greedy outcomes, actions after a rejection, recovery from branch points."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import benchmarks_package, easy_seed_tasks, warm_tiny_policy
from rods_gym import write_jsonl

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py


@pytest.fixture(scope="module")
def fm() -> Any:
    with benchmarks_package():
        from benchmarks import failure_modes

        yield failure_modes


def test_the_action_after_a_rejection_is_classified(fm) -> None:
    call = "call get_order order_id $3"
    assert fm.next_kind(call, call) == "same call again"
    assert fm.next_kind(call, "call get_order order_id $4") == "same tool, other arguments"
    assert fm.next_kind(call, "call cancel_order order_id $3") == "another tool"
    assert fm.next_kind(call, "reply $2") == fm.next_kind(call, "reply") == "reply"
    assert fm.next_kind(call, "ask") == "ask"
    assert fm.next_kind(call, "order_id $3 $") == fm.next_kind(call, "") == fm.next_kind(call, "call") == "other (malformed)"
    assert fm.next_kind(call, None) == "nothing (episode over)"


def test_an_episode_ended_with_one_call_unmade_is_told_apart(fm) -> None:
    from rods_gym.trainer.rollout import Trajectory

    plain = next(t for t in easy_seed_tasks() if len(t.calls) >= 2 and t.answer is None)

    def episode(task: Any, met: int, last_reward: float = 0.0, **kw: Any) -> Trajectory:
        n = len(task.calls) + (task.answer is not None)
        return Trajectory(task=task, task_index=0, transcript=None, progress=met / n, done=True,
                          rewards=[0.5, last_reward], rejected=kw.pop("rejected", [False, False]), **kw)

    k = len(plain.calls)
    assert fm.one_call_short(episode(plain, k - 1), "reply")
    assert fm.one_call_short(episode(plain, k - 1, rejected=[True, False]), "reply")  # rejections before it count
    assert not fm.one_call_short(episode(plain, k - 2), "reply")  # two calls unmade
    assert not fm.one_call_short(episode(plain, k - 1), "call get_order order_id $3")  # not ended by a reply
    assert not fm.one_call_short(episode(plain, k - 1, truncated=True), "reply")  # out of turns
    assert not fm.one_call_short(episode(plain, k, success=True), "reply")
    assert not fm.one_call_short(episode(plain, k - 1), None)
    asks = next(t for t in easy_seed_tasks() if t.answer is not None)
    k = len(asks.calls)
    # one call unmade, the answer given (the final reply earned it) or not: both count; every call made and a
    # wrong answer does not
    assert fm.one_call_short(episode(asks, k, last_reward=0.3), "reply $4")
    assert fm.one_call_short(episode(asks, k - 1), "reply")
    assert not fm.one_call_short(episode(asks, k), "reply $2")
    assert not fm.one_call_short(episode(asks, k - 1, last_reward=0.3), "reply $4")  # two calls unmade


def test_reports_add_up_and_recovery_runs_from_every_branch_point(fm, tmp_path: Path, capsys) -> None:
    tasks = easy_seed_tasks()[:6]
    write_jsonl(tasks, tmp_path / "tasks.jsonl")
    weak = warm_tiny_policy(tmp_path / "weak", sft_steps=2)  # rejects many actions
    reports = fm.main([str(weak), "--split", str(tmp_path / "tasks.jsonl"), "--samples", "2",
                       "--out", str(tmp_path / "fm.json")])
    (r,) = reports
    assert r["tasks"] == 6 and sum(r["outcomes"][k] for k in fm.OUTCOMES) == pytest.approx(1.0)
    assert 0.0 <= r["outcomes"][fm.SHORT] <= 1.0 - r["success"]
    assert set(r["after_rejection"]) == set(fm.NEXT) and sum(r["after_rejection"].values()) == r["rejections"]
    assert r["rejections"] > 0 and r["recovery"]["branch_points"] > 0
    rec = r["recovery"]
    assert rec["samples"] == 2 and 0.0 <= rec["success"] <= rec["any_success"] <= 1.0
    assert 0.0 <= rec["returns_differ"] <= 1.0
    assert json.loads((tmp_path / "fm.json").read_text())[0]["rejections"] == r["rejections"]
    assert "branch points whose continuations' returns differ" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        fm.main([str(weak), "--temperature", "0"])
    # --branch first-miss: at most one branch point per failed greedy episode (one with a miss)
    (m,) = fm.main([str(weak), "--split", str(tmp_path / "tasks.jsonl"), "--samples", "2", "--branch", "first-miss"])
    assert m["recovery"]["branch"] == "first-miss" and m["outcomes"] == r["outcomes"]
    assert 0 < m["recovery"]["branch_points"] <= round(6 * (1.0 - m["success"]))
    assert 0.0 <= m["recovery"]["first_action_progress"] <= m["recovery"]["any_first_action_progress"] <= 1.0
    assert "before the first miss (rejected or no effect)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        fm.main([str(weak), "--branch", "middle"])
