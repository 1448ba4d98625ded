"""rods/BFCL-MultiTurn-v0 (rods_gym.bfcl): env API, ground-truth replay, empty/wrong agents, and agreement of
our success flag with BFCL's own multi-turn checker on perturbed transcripts."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (pip install --no-deps bfcl-eval==2026.3.23: README, BFCL); "
                                        "the BFCL environment tests need its data and backends")

import gymnasium as gym  # noqa: E402
from gymnasium.utils.env_checker import check_env  # noqa: E402

import rods_gym  # noqa: E402,F401
from rods_gym.bfcl import CATEGORIES  # noqa: E402
from rods_gym.bfcl.data import Call, load_tasks, tasks_by_id  # noqa: E402
from rods_gym.bfcl.env import BFCLMultiTurnEnv  # noqa: E402
from rods_gym.bfcl.scoring import check_transcript  # noqa: E402
from rods_gym.bfcl.split import contamination, index_overlap, split_tasks  # noqa: E402

ENV_ID = "rods/BFCL-MultiTurn-v0"


def tool_call(call: Call) -> str:
    return "<tool_call>" + json.dumps(call.to_dict()) + "</tool_call>"


def play(env: BFCLMultiTurnEnv, task_id: str, transcript) -> tuple[float, dict]:
    """Play a transcript (calls per turn) through the env: each turn's calls, then a reply."""
    env.reset(options={"task": task_id})
    total, info = 0.0, {}
    for turn in transcript:
        for call in turn:
            _, r, term, trunc, info = env.step(tool_call(call))
            total += r
            assert not term
            if trunc:
                return total, info
        _, r, term, trunc, info = env.step("Done.")
        total += r
    assert term
    return total, info


def test_data_counts_and_registration() -> None:
    tasks = load_tasks()
    assert len(tasks) == 800
    assert {c: sum(t.category == c for t in tasks) for c in CATEGORIES} == {c: 200 for c in CATEGORIES}
    env = gym.make(ENV_ID, category="base", split="train")
    obs, info = env.reset(seed=0)
    assert obs in env.observation_space and info["category"] == "base"
    assert info["task_id"] in {t.id for t in split_tasks("train", "base")}
    tools = env.unwrapped.tools
    assert tools and all(t["type"] == "function" and t["function"]["parameters"]["type"] == "object" for t in tools)
    env.close()


def test_check_env() -> None:
    for category in ("base", "long_context"):
        check_env(gym.make(ENV_ID, category=category, split="test").unwrapped, skip_render_check=True)


def test_ground_truth_replay_scores_one_on_all_800() -> None:
    env = BFCLMultiTurnEnv()
    for task in load_tasks():
        env.reset(options={"task": task.id})
        total, done = 0.0, False
        while not done:
            _, r, term, trunc, info = env.step(env.oracle_action())
            total += r
            done = term or trunc
            assert info["error"] == "none", (task.id, info)
        assert term and not trunc and info["success"] is True, task.id
        assert total == pytest.approx(1.0) and info["progress"] == pytest.approx(1.0), task.id


def test_empty_and_wrong_agents_score_zero() -> None:
    env = BFCLMultiTurnEnv()
    rng = np.random.default_rng(0)
    for task in load_tasks():
        total, info = play(env, task.id, [[] for _ in task.questions])  # replies only
        assert total == 0.0 and info["progress"] == 0.0 and not info["success"], task.id
        # wrong: a documented function with no arguments (an error result), then a reply, every turn
        env.reset(options={"task": task.id})
        total = 0.0
        for _ in task.questions:
            name = env.unwrapped.tools[int(rng.integers(len(env.unwrapped.tools)))]["function"]["name"]
            _, r, *_ = env.step(f'<tool_call>{{"name": "{name}", "arguments": {{"no_such_arg": 1}}}}</tool_call>')
            _, r2, term, _, info = env.step("I could not do that.")
            total += r + r2
        assert term and total == 0.0 and not info["success"], task.id


def test_turn_limit_truncates_and_fails() -> None:
    env = BFCLMultiTurnEnv(max_actions_per_turn=3)
    env.reset(options={"task": "multi_turn_base_0"})
    for _ in range(3):
        *_, trunc, info = env.step("{not json")
        assert not trunc and info["error"] == "malformed"
    *_, trunc, info = env.step("{not json")
    assert trunc and not info["success"] and info["error"] == "turn_limit"
    with pytest.raises(RuntimeError):
        env.step("Done.")


def test_missing_function_revealed_on_its_turn() -> None:
    task = tasks_by_id()["multi_turn_miss_func_0"]
    (turn, names), = task.missed_function.items()
    env = BFCLMultiTurnEnv()
    env.reset(options={"task": task.id})
    assert not set(names) & {t["function"]["name"] for t in env.unwrapped.tools}
    for t in range(turn):
        for call in task.ground_truth[t]:
            env.step(tool_call(call))
        obs, *_ = env.step("Done.")
    assert "updated some more functions" in obs
    assert set(names) <= {t["function"]["name"] for t in env.unwrapped.tools}


def test_bad_arguments_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="category"):
        BFCLMultiTurnEnv(category="nope")
    with pytest.raises(ValueError, match="split"):
        BFCLMultiTurnEnv(split="dev")
    env = BFCLMultiTurnEnv()
    with pytest.raises(KeyError, match="no BFCL"):
        env.reset(options={"task": "multi_turn_base_9999"})
    with pytest.raises(ValueError, match="reset options"):
        env.reset(options={"split": "test"})


# -- agreement with BFCL's checker ---------------------------------------------------------

def perturbations(task, rng: np.random.Generator):
    """Transcripts near the ground truth: each changes one thing (some still pass, most fail)."""
    gt = [list(turn) for turn in task.ground_truth]
    turns = [t for t, calls in enumerate(gt) if calls]
    yield "ground_truth", gt
    t = turns[int(rng.integers(len(turns)))]
    k = int(rng.integers(len(gt[t])))
    yield "drop_call", [calls if i != t else calls[:k] + calls[k + 1:] for i, calls in enumerate(gt)]
    yield "drop_turn", [calls if i != t else [] for i, calls in enumerate(gt)]
    yield "duplicate_call", [calls if i != t else calls[:k + 1] + calls[k:] for i, calls in enumerate(gt)]
    yield "reverse_turn", [calls if i != t else calls[::-1] for i, calls in enumerate(gt)]
    call = gt[t][k]
    if call.args:
        name = sorted(call.args)[int(rng.integers(len(call.args)))]
        value = call.args[name]
        new = value + "x" if isinstance(value, str) else value + 1 if isinstance(value, (int, float)) \
            and not isinstance(value, bool) else value
        changed = Call(call.name, {**call.args, name: new})
        yield "change_argument", [calls if i != t else calls[:k] + [changed] + calls[k + 1:] for i, calls in enumerate(gt)]
    if len(turns) > 1:  # a later turn's calls done early
        t2 = turns[-1]
        yield "early_calls", [calls + gt[t2] if i == turns[0] else calls for i, calls in enumerate(gt)]
    empty = [i for i, calls in enumerate(gt) if not calls]
    if empty:  # a call on the turn that should have none (BFCL's checker does not check that turn)
        yield "call_on_empty_turn", [gt[empty[0] + 1][:1] if i == empty[0] else calls for i, calls in enumerate(gt)]


def test_success_agrees_with_bfcl_checker_on_perturbed_transcripts() -> None:
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    rng = np.random.default_rng(41)
    tasks = load_tasks()
    picked = [tasks[int(i)] for i in rng.choice(len(tasks), size=80, replace=False)]
    env = BFCLMultiTurnEnv()
    outcomes, counter = [], itertools.count()
    for task in picked:
        for kind, transcript in perturbations(task, rng):
            _, info = play(env, task.id, transcript)
            ours = bool(info["success"])
            assert ours == check_transcript(task, transcript).success, (task.id, kind)
            decoded = [[[c.to_bfcl()] for c in turn] for turn in env.unwrapped.transcript]
            # a fresh model name each time: BFCL keeps instances in its module's globals by name and test id
            theirs = multi_turn_checker(decoded, task.ground_truth_strings(), task.to_bfcl_entry(),
                                        task.category, f"rods_agree_{next(counter)}")["valid"]
            assert ours == theirs, (task.id, kind, ours, theirs)
            outcomes.append((kind, ours))
    passed = sum(ok for _, ok in outcomes)
    assert len(outcomes) >= 400 and 0.2 * len(outcomes) < passed < 0.8 * len(outcomes)
    assert {k for k, ok in outcomes if ok} > {"ground_truth"} and {k for k, ok in outcomes if not ok}


def test_split_is_400_400_by_category_and_decontaminated() -> None:
    train, test = split_tasks("train"), split_tasks("test")
    assert len(train) == len(test) == 400
    for c in CATEGORIES:
        assert sum(t.category == c for t in train) == sum(t.category == c for t in test) == 100
    assert not index_overlap(train, test)
    assert contamination(test, train) == []
    # the check can fail: base_i and long_context_i share signature and arguments
    all_tasks = tasks_by_id()
    assert contamination([all_tasks["multi_turn_base_0"]], [all_tasks["multi_turn_long_context_0"]])


def test_episodes_do_not_leak_state_into_each_other() -> None:
    """post_tweet keeps its ``mentions`` list and mention() extends it in place; with the task's own list (or
    the shared default) that would change the task and later episodes. Three replays must agree."""
    from rods_gym.bfcl.backend import Backend

    tasks = [t for t in load_tasks() if "TwitterAPI" in t.involved_classes]
    runs = [[[Backend(t).run(list(turn)) for turn in t.ground_truth] for t in tasks] for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    b = Backend(tasks_by_id()["multi_turn_base_90"])
    b.execute("authenticate_twitter", {"username": "wanderlust_emma", "password": "Emma$Travel2023"})
    first = json.loads(b.execute("post_tweet", {"content": "a"}))
    b.execute("mention", {"tweet_id": first["id"], "mentioned_usernames": ["@x"]})
    assert json.loads(b.execute("post_tweet", {"content": "b"}))["mentions"] == []


def test_short_tool_docs_id() -> None:
    full = gym.make(ENV_ID).unwrapped
    short = gym.make("rods/BFCL-MultiTurn-Short-v0").unwrapped
    full.reset(options={"task": "multi_turn_base_0"})
    short.reset(options={"task": "multi_turn_base_0"})
    names = [t["function"]["name"] for t in full.tools]
    assert names == [t["function"]["name"] for t in short.tools]
    assert len(json.dumps(short.tools)) < 0.6 * len(json.dumps(full.tools))
    assert all("This tool belongs" not in t["function"]["description"] for t in short.tools)
    with pytest.raises(ValueError, match="tool_docs"):
        BFCLMultiTurnEnv(tool_docs="tiny")
