"""Bad input (README, "A short tour"): every class of agent input a real API would reject comes back as an
error observation naming the problem, with the error class in ``info["error"]``; ``step``
never raises, and a rejected call never changes the world. Property-based tests (hypothesis)
throw random strings and arrays at all three views."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rods_gym import SamplerConfig, Suite, TaskSampler, TaskSpec, ToolChainEnv
from rods_gym.episode import ToolCall
from rods_gym.renderers.chat import parse_tool_json, too_deep
from rods_gym.renderers.compact import vocabulary
from rods_gym.task import Call, Dep, Turn

from conftest import entity_records, run_oracle, world_snapshot

ACCOUNTS, TRANSACTIONS = "banking.account", "banking.transaction"


@pytest.fixture(scope="module")
def transfer_task(suite: Suite) -> TaskSpec:
    """find an account by number -> transfer 100 from it to another account (mutates the world)."""
    accounts = sorted((r for r in suite.world(0).tables[ACCOUNTS].values() if r["balance"] > 1000),
                      key=lambda r: r["account_id"])
    src, dst = accounts[0], accounts[1]
    return TaskSpec(
        "bad-input-transfer", 0,
        calls=(Call("c0", "find_account_by_number", {"account_number": src["account_number"]}),
               Call("c1", "transfer_funds", {"from_account_id": src["account_id"],
                                             "to_account_id": dst["account_id"], "amount": 100.0})),
        deps=(Dep("c0", "c1", "from_account_id", "account_id"),),
        turns=(Turn(f"Please transfer 100 from account number {src['account_number']} to {dst['account_id']}."),),
        distractors=("get_holder",),
    )


@pytest.fixture(scope="module")
def locked_task(suite: Suite) -> TaskSpec:
    cfg = SamplerConfig(depth=(1, 2), missing_tool=1.0, missing_param=1.0, distractors=(1, 1), answer=0.0)
    task = TaskSampler(suite, cfg, seed=4).sample(0)
    assert task.turns[0].locked and task.turns[0].withheld
    return task


def _env(mode: str, task: TaskSpec) -> ToolChainEnv:
    env = ToolChainEnv(mode=mode, task_set=[task], max_steps=500)
    env.reset(options={"task": task})
    return env


def _first_call(env: ToolChainEnv) -> None:
    """Make the oracle's first tool call, so the episode has state to protect."""
    _, _, _, _, info = env.step(env.oracle_action())
    assert info["error"] == "none"


def _rejected(env: ToolChainEnv, action: Any, error: str, *phrases: str, params: tuple[str, ...] = ()) -> str:
    """Step a bad action; check the error class, the message, the space and the world (and, in the
    compact view, the parameters the error names)."""
    state = env.episode.state
    before = world_snapshot(state)
    accounts, txns = entity_records(state, ACCOUNTS), entity_records(state, TRANSACTIONS)
    progress = env.episode.progress
    obs, reward, term, trunc, info = env.step(action)
    assert info["error"] == error, (info["error"], obs)
    assert obs in env.observation_space
    assert reward == 0.0 and info["progress"] == progress
    assert world_snapshot(env.episode.state) == before
    assert entity_records(env.episode.state, ACCOUNTS) == accounts
    assert entity_records(env.episode.state, TRANSACTIONS) == txns
    message = env.renderer.text() if env.mode != "chat" else obs
    if env.mode == "chat":
        assert obs.startswith("tool (") and f"Error [{error}]" in obs
    elif env.mode == "compact":
        assert obs == " ".join(["error", error, *params])
    for phrase in phrases:
        assert phrase in message, (phrase, message)
    return message


def _call(name: str, args: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


def _good_args(task: TaskSpec, env: ToolChainEnv) -> dict[str, Any]:
    return {**task.calls[1].args, "from_account_id": env.episode.satisfied["c0"]["account_id"]}


# -- chat: one test per class of bad input ----------------------------------------------

@pytest.mark.parametrize("action, phrase", [
    ("<tool_call>transfer everything now</tool_call>", "not valid JSON"),
    ("<tool_call>{'name': 'transfer_funds'}</tool_call>", "not valid JSON"),
    ('{"name": "transfer_funds" "arguments": {}}', "not valid JSON"),
    ('<tool_call>["transfer_funds", {}]</tool_call>', "one tool call per message"),
    ("<tool_call>42</tool_call>", "must be a JSON object"),
    ('<tool_call>{"arguments": {}}</tool_call>', 'needs a "name" string'),
    ('<tool_call>{"name": "transfer_funds", "arguments": {}, "extra": 1}</tool_call>', "unexpected keys"),
    ('<tool_call>{"name": "transfer_funds", "arguments": "{not json"}</tool_call>', "string that is not valid JSON"),
    ("<tool_call>{}</tool_call><tool_call>{}</tool_call>", "exactly one tool call"),
    ('[{"name": "transfer_funds", "arguments": {}}]', "one tool call per message, not a list"),  # parallel calls, bare
    ('[{"name": "a"}, {"name": "b"}]', "one tool call per message, not a list"),
    ("", "empty"),
    ("   \n\t ", "empty"),
])
def test_malformed(transfer_task, action, phrase) -> None:
    env = _env("chat", transfer_task)
    _rejected(env, action, "malformed", phrase)


@pytest.mark.parametrize("cut", [15, 20, 40, 60, -3, -1])
def test_truncated_json(transfer_task, cut) -> None:
    env = _env("chat", transfer_task)
    _first_call(env)
    full = _call("transfer_funds", _good_args(transfer_task, env))
    _rejected(env, full[:cut], "malformed")  # cut inside the JSON or before </tool_call>
    body = json.dumps({"name": "transfer_funds", "arguments": _good_args(transfer_task, env)})
    _rejected(env, "<tool_call>" + body[:cut] + "</tool_call>", "malformed", "not valid JSON")
    _rejected(env, body[:cut] if body[:cut].startswith("{") else "{" + body[:cut], "malformed")


def test_unknown_tool(transfer_task) -> None:
    env = _env("chat", transfer_task)
    _rejected(env, _call("wire_money", {"amount": 5}), "unknown_tool", "no tool named 'wire_money'",
              "available: find_account_by_number, transfer_funds, get_holder")
    _rejected(env, _call("x" * 3000, {}), "unknown_tool", "no tool named 'xxxx")  # the name is shortened


def test_missing_extra_and_wrongly_typed_arguments(transfer_task) -> None:
    env = _env("chat", transfer_task)
    _first_call(env)
    good = _good_args(transfer_task, env)
    missing = {k: v for k, v in good.items() if k != "amount"}
    _rejected(env, _call("transfer_funds", missing), "invalid_arguments", "missing required argument(s) ['amount']")
    _rejected(env, _call("transfer_funds", {**good, "memo": "hi"}), "invalid_arguments", "no parameter 'memo'")
    _rejected(env, _call("transfer_funds", {**good, "amount": "100"}), "invalid_arguments",
              "'amount' must be number, got str")
    _rejected(env, _call("transfer_funds", {**good, "amount": True}), "invalid_arguments", "'amount' must be number")
    _rejected(env, _call("transfer_funds", {**good, "from_account_id": 3142}), "invalid_arguments",
              "'from_account_id' must be string, got int")
    _rejected(env, _call("transfer_funds", {**good, "to_account_id": [good["to_account_id"]]}), "invalid_arguments",
              "must be string, got list")
    _rejected(env, _call("transfer_funds", {**good, "amount": -5}), "invalid_arguments", "'amount' must be >= 0")
    _rejected(env, _call("transfer_funds", {**good, "amount": 2e6}), "invalid_arguments", "'amount' must be <= 1e+06")
    _rejected(env, _call("transfer_funds", {**good, "from_account_id": "account 1"}), "invalid_arguments",
              "'from_account_id' has the wrong format")
    _rejected(env, _call("transfer_funds", [good]), "invalid_arguments", "must be a JSON object, got list")
    _rejected(env, _call("transfer_funds", None), "invalid_arguments", "must be a JSON object, got NoneType")
    # accepted by the schema but refused by the simulated bank: still nothing changes
    _rejected(env, _call("transfer_funds", {**good, "amount": 999_999.0}), "execution_error", "insufficient_funds")
    _rejected(env, _call("transfer_funds", {**good, "to_account_id": "ACC-0000"}), "execution_error", "not_found")
    _rejected(env, _call("transfer_funds", {**good, "to_account_id": good["from_account_id"]}), "execution_error",
              "must be different")
    # the right call still works afterwards, and it does change the world
    before = world_snapshot(env.episode.state)
    _, reward, term, _, info = env.step(_call("transfer_funds", good))
    assert info["error"] == "none" and term and info["success"] and reward == pytest.approx(0.5)
    assert world_snapshot(env.episode.state) != before


def test_huge_strings(transfer_task) -> None:
    env = _env("chat", transfer_task)
    _rejected(env, "x" * 1_000_000, "too_long", "1000000 characters")
    _rejected(env, _call("transfer_funds", {"from_account_id": "A" * 5000}), "too_long")
    _first_call(env)
    good = _good_args(transfer_task, env)
    _rejected(env, _call("transfer_funds", {**good, "to_account_id": "ACC-" + "9" * 3000}), "execution_error",
              "not_found")  # within the size limits and the pattern, but no such account
    _rejected(env, _call("transfer_funds", {**good, "to_account_id": "B" * 3000}), "invalid_arguments",
              "wrong format 'BBBB")  # echoes are shortened


@pytest.mark.parametrize("text", [
    "transfer_funds\u200b",          # zero-width space
    "transfer_fun\u0434s",           # Cyrillic de
    "\u202etransfer_funds",          # right-to-left override
    "\U0001f4b8",                    # emoji
    "tr\x00ansfer",                  # NUL
])
def test_odd_unicode(transfer_task, text) -> None:
    env = _env("chat", transfer_task)
    message = _rejected(env, _call(text, {}), "unknown_tool", "no tool named")
    assert message.isascii()  # observations stay printable ASCII (the Text space's charset)
    _first_call(env)
    good = _good_args(transfer_task, env)
    _rejected(env, _call("transfer_funds", {**good, "to_account_id": text}), "invalid_arguments", "wrong format")
    lone = '<tool_call>{"name": "transfer_funds", "arguments": {"to_account_id": "\\ud800\\udfff\\ud800"}}</tool_call>'
    _rejected(env, lone, "invalid_arguments")


def test_deeply_nested_garbage(transfer_task) -> None:
    env = _env("chat", transfer_task)
    _rejected(env, "[" * 100_000, "too_long")
    _rejected(env, "{" * 100_000, "too_long")
    _rejected(env, "<tool_call>" + "[" * 3000 + "</tool_call>", "malformed", "nested too deeply")
    _rejected(env, '<tool_call>{"name": "transfer_funds", "arguments": ' + "[" * 1500 + "]" * 1500 + "}</tool_call>",
              "malformed", "nested too deeply")
    # the depth limit is the suite's own, the same on every Python (3.12's parser accepts 3,000 levels, 3.11's not)
    deep_string = json.dumps("[" * 600 + "]" * 600)
    _rejected(env, '<tool_call>{"name": "transfer_funds", "arguments": ' + deep_string + "}</tool_call>",
              "malformed", "nested over 500 levels")
    assert not too_deep('{"a": "' + "[" * 2000 + '"}') and too_deep("[" * 501) and not too_deep("[" * 500)
    assert too_deep('["\\"", ' + "[" * 501)  # an escaped quote ends no string
    assert too_deep('["\\\\", ' + "[" * 501)  # the string is over after an escaped backslash
    nested = '{"a": ' * 450 + "1" + "}" * 450
    _rejected(env, '<tool_call>{"name": "transfer_funds", "arguments": {"amount": ' + nested + "}}</tool_call>",
              "invalid_arguments")
    _rejected(env, '{"name": "transfer_funds", "arguments": ' + "[" * 450 + "]" * 450 + "}", "invalid_arguments",
              "must be a JSON object")
    _rejected(env, '{"name": "transfer_funds", "arguments": ' + "[" * 600 + "]" * 600 + "}", "malformed",
              "nested too deeply (over 500 levels)")

    def deep_caller(frames: int) -> Any:  # the limit holds under a deep stack too (3.11's parser would not)
        return deep_caller(frames - 1) if frames else parse_tool_json('{"name": "f", "arguments": ' + nested + "}")

    assert isinstance(deep_caller(300), ToolCall)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity(transfer_task, constant) -> None:
    env = _env("chat", transfer_task)
    _first_call(env)
    good = _good_args(transfer_task, env)
    text = json.dumps({"name": "transfer_funds", "arguments": {**good, "amount": 1.5}}).replace("1.5", constant)
    _rejected(env, "<tool_call>" + text + "</tool_call>", "malformed", f"{constant} is not valid JSON")
    _rejected(env, "<tool_call>" + text.replace(constant, "1e999") + "</tool_call>", "invalid_arguments",
              "'amount' must be number")  # 1e999 parses to inf
    _rejected(env, "<tool_call>" + text.replace(constant, "1" + "0" * 400) + "</tool_call>", "invalid_arguments",
              "'amount' must be <= 1e+06")  # a 401-digit integer


def test_locked_tool_then_unlocked(locked_task) -> None:
    env = _env("chat", locked_task)
    tool = locked_task.turns[0].locked[0]
    call = next(c for c in locked_task.calls if c.tool == tool)
    _rejected(env, _call(tool, dict(call.args)), "locked_tool", f"{tool} is not enabled yet")
    assert tool not in [t for t in env.episode.available_tools()]
    # the scripted user enables it when the agent says it cannot go on
    _, _, _, _, info = env.step("I need the tool to be enabled.")
    assert info["error"] == "none" and tool in env.episode.available_tools() and not env.episode.done
    ret, info, term, _ = run_oracle(env)
    assert term and info["success"]


def test_a_locked_or_absent_tool_is_reported_before_its_arguments(locked_task, transfer_task, suite) -> None:
    """A call of a tool that cannot be called now is rejected as such even when its arguments are bad too
    (an empty value slot, a repeated argument): availability is checked first, as for a well-formed call."""
    tool = locked_task.turns[0].locked[0]
    param = suite.tools[tool].param_names[0]
    env = _env("compact", locked_task)
    _rejected(env, f"call {tool} {param} $63", "locked_tool", f"{tool} is not enabled yet")
    _rejected(env, f"call {tool} {param} $0 {param} $0", "locked_tool")
    env.step("reply")  # the scripted user enables the tool; now the empty slot is the problem
    assert tool in env.episode.available_tools()
    _rejected(env, f"call {tool} {param} $63", "invalid_arguments", "slot $63 is empty", params=(param,))
    env = _env("structured", locked_task)
    action = np.zeros(len(env.action_space.nvec), np.int64)
    action[1], action[2] = suite.tool_index[tool], env.action_space.nvec[2] - 1  # the last slot: empty
    _rejected(env, action, "locked_tool", f"{tool} is not enabled yet")
    env = _env("compact", transfer_task)
    _rejected(env, "call get_customer customer_id $63", "unavailable_tool", "not available in this conversation")


def test_tool_not_offered(transfer_task, suite) -> None:
    env = _env("chat", transfer_task)
    _rejected(env, _call("get_customer", {"customer_id": "CUS-1000"}), "unavailable_tool",
              "get_customer is not available in this conversation")
    # the same in the other views: compact names it, structured masks it but decodes it anyway
    env = _env("compact", transfer_task)
    _rejected(env, "call get_customer customer_id $0", "unavailable_tool")
    env = _env("structured", transfer_task)
    action = np.zeros(len(env.action_space.nvec), np.int64)
    action[1] = suite.tool_index["get_customer"]
    assert not env.action_masks()[3 + action[1]]
    _rejected(env, action, "unavailable_tool", "get_customer is not available")


@pytest.mark.parametrize("mode", ["chat", "compact", "structured"])
def test_acting_after_the_episode_ended(transfer_task, mode) -> None:
    env = _env(mode, transfer_task)
    ret, info, term, _ = run_oracle(env)
    assert term and ret == pytest.approx(1.0)
    snap = world_snapshot(env.episode.state)
    for action in (env.encode(__import__("rods_gym").Reply("hello")), "garbage", None):
        obs, reward, term, trunc, info = env.step(action)
        assert info["error"] == "episode_over" and term and not trunc and reward == 0.0
        assert obs in env.observation_space and info["progress"] == 1.0
        assert world_snapshot(env.episode.state) == snap


@pytest.mark.parametrize("mode", ["chat", "compact"])
@pytest.mark.parametrize("action", [None, 42, 3.5, b"call get_holder", ["ask"], {"name": "get_holder"},
                                    np.array([1, 2, 3]), object()])
def test_non_string_actions(transfer_task, mode, action) -> None:
    env = _env(mode, transfer_task)
    _rejected(env, action, "malformed", "must be a string")


def test_compact_bad_input(transfer_task) -> None:
    env = _env("compact", transfer_task)
    _rejected(env, "call", "malformed", "call needs a tool name")
    _rejected(env, "fly away", "malformed", "start with call, ask or reply")
    _rejected(env, "call find_account_by_number account_number", "malformed", "pairs")
    _rejected(env, "call find_account_by_number account_number 1314", "malformed", "slot tokens like $3",
              params=("account_number",))
    _rejected(env, "call find_account_by_number account_number $63", "invalid_arguments", "slot $63 is empty",
              params=("account_number",))
    _rejected(env, "call find_account_by_number account_number $" + "9" * 40, "invalid_arguments", "is empty",
              params=("account_number",))
    for digits in ("\u00b2", "\u0663"):  # str.isdigit() holds for a superscript two and an Arabic-Indic three
        _rejected(env, f"call find_account_by_number account_number ${digits}", "malformed", "slot tokens like $3",
                  params=("account_number",))
    _rejected(env, "call find_account_by_number account_number $0 account_number $0", "invalid_arguments", "twice",
              params=("account_number",))
    _rejected(env, "call find_account_by_number no_such_param $63", "invalid_arguments", "slot $63 is empty")
    _rejected(env, "call nope x $0", "unknown_tool")
    _rejected(env, "ask me", "malformed", "ask takes no arguments")
    _rejected(env, "reply $0 $1", "malformed", "at most one slot")
    _rejected(env, "call find_account_by_number\u200b account_number $0", "unknown_tool")  # zero-width space
    _rejected(env, "x" * 5000, "too_long", "5000 characters")
    _rejected(env, "call transfer_funds from_account_id $0 to_account_id $1 amount $0", "invalid_arguments",
              params=("from_account_id", "to_account_id", "amount"))


def test_compact_shuffled_ids_name_their_values(transfer_task) -> None:
    """With shuffled slot ids an id means the value shown with it; an id no value was shown with is an
    empty slot, rejected without touching the world."""
    env = ToolChainEnv(mode="compact", task_set=[transfer_task], slot_ids="shuffled")
    obs, _ = env.reset(seed=3, options={"task": transfer_task})
    shown = [w for w in obs.split() if w.startswith("$")]
    assert shown and shown != ["$0"]  # seed 3's permutation does not start at 0
    unused = next(f"${k}" for k in range(64) if f"${k}" not in shown)
    before = world_snapshot(env.episode.state)
    _rejected(env, f"call find_account_by_number account_number {unused}", "invalid_arguments", "is empty",
              params=("account_number",))
    assert world_snapshot(env.episode.state) == before
    first = env.oracle_action()
    assert first == f"call find_account_by_number account_number {shown[0]}"
    _, r, _, _, info = env.step(first)
    assert info["error"] == "none" and r > 0


def test_compact_typed_ids_name_their_values(transfer_task) -> None:
    """With typed slot ids a name means the value shown with it; a well-formed name no value holds is
    an empty slot, anything else (a numbered id, an unknown type, no rank) is malformed, and none of
    them touches the world."""
    env = ToolChainEnv(mode="compact", task_set=[transfer_task], slot_ids="typed")
    obs, _ = env.reset(seed=3, options={"task": transfer_task})
    before = world_snapshot(env.episode.state)
    _rejected(env, "call find_account_by_number account_number $account_number.5", "invalid_arguments", "is empty",
              params=("account_number",))
    for bad in ("$0", "$account_number", "$account_number.x", "$no_such_type.0", "account_number.0", "$.0"):
        _rejected(env, f"call find_account_by_number account_number {bad}", "malformed", params=("account_number",))
    assert world_snapshot(env.episode.state) == before
    first = env.oracle_action()
    assert first == "call find_account_by_number account_number $account_number.0"
    _, r, _, _, info = env.step(first)
    assert info["error"] == "none" and r > 0


def test_errors_name_the_parameters_they_concern(transfer_task) -> None:
    """A rejected call's error event lists the parameters it concerns, in the tool's order; the compact
    view shows them after the class (``error invalid_arguments amount``), so the agent knows what to fix."""
    env = _env("compact", transfer_task)
    _first_call(env)
    good = _good_args(transfer_task, env)
    cases = [
        ({k: v for k, v in good.items() if k != "amount"}, "invalid_arguments", ["amount"]),
        ({**good, "from_account_id": "account 1", "amount": "9"}, "invalid_arguments", ["from_account_id", "amount"]),
        ({**good, "memo": "hi"}, "invalid_arguments", []),  # an unknown key names no parameter
        ({**good, "amount": 999_999.0}, "execution_error", ["amount"]),
        ({**good, "to_account_id": "ACC-0000"}, "execution_error", ["to_account_id"]),
        ({**good, "to_account_id": good["from_account_id"]}, "execution_error", ["from_account_id", "to_account_id"]),
    ]
    for args, error, params in cases:
        before = world_snapshot(env.episode.state)
        outcome = env.episode.step(ToolCall("transfer_funds", args))
        assert (outcome.error, outcome.events[-1]["params"]) == (error, params), (args, outcome.events)
        assert env.renderer.observe(env.episode, outcome) == " ".join(["error", error, *params])
        assert world_snapshot(env.episode.state) == before


def _structured_bad_actions(n: int) -> list[tuple[str, Any]]:
    return [
        ("short", [0, 1]), ("long", [0] * (n + 1)), ("2-d", np.zeros((2, n), np.int64)), ("empty", []),
        ("negative", [-1] + [0] * (n - 1)), ("kind out of range", [3] + [0] * (n - 1)),
        ("tool out of range", [0, 10_000] + [0] * (n - 2)), ("slot out of range", [0, 0, 10_000] + [0] * (n - 3)),
        ("fractional", np.full(n, 0.5)), ("nan", np.full(n, np.nan)), ("inf", np.full(n, np.inf)),
        ("huge", [2**70] * n), ("uint64 wrap", np.full(n, 2**64 - 1, np.uint64)), ("strings", ["0"] * n),
        ("none", None), ("dict", {"kind": 0}), ("text", "call get_holder"), ("bools", [True] * n),
        ("objects", np.array([object()] * n, dtype=object)), ("complex", np.full(n, 1j)),
    ]


def test_structured_bad_input(transfer_task) -> None:
    env = _env("structured", transfer_task)
    _first_call(env)
    n = len(env.action_space.nvec)
    for name, action in _structured_bad_actions(n):
        _rejected(env, action, "malformed", "integers within")
    empty_slot = [0, env.suite.tool_index["transfer_funds"], 47, 0, 0] + [0] * (n - 5)
    _rejected(env, empty_slot, "invalid_arguments", "is empty")
    _rejected(env, [2, 0, 47] + [0] * (n - 3), "invalid_arguments", "is empty")  # a reply with an empty slot


@pytest.mark.parametrize("mode", ["chat", "compact", "structured"])
def test_bad_input_does_not_block_the_oracle(transfer_task, mode) -> None:
    """After a burst of bad input, the episode still reaches full progress."""
    env = ToolChainEnv(mode=mode, task_set=[transfer_task], max_steps=100)
    env.reset(options={"task": transfer_task})
    _first_call(env)
    junk = {"chat": ["{", "<tool_call>[]</tool_call>", None], "compact": ["call", "$0", 7],
            "structured": [[0], None, [-1] * 20]}[mode]
    for action in junk:
        assert env.step(action)[4]["error"] != "none"
    ret, info, term, _ = run_oracle(env)
    assert term and info["success"] and ret == pytest.approx(0.5)  # the first call already paid 0.5


# -- property-based tests -----------------------------------------------------------------

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    derandomize=True)


@pytest.fixture(scope="module")
def prop_tasks(suite: Suite, transfer_task: TaskSpec, locked_task: TaskSpec) -> list[TaskSpec]:
    medium = TaskSampler(suite, SamplerConfig(depth=(1, 3), user_turns=(1, 2), missing_param=0.3, missing_tool=0.3,
                                              distractors=(1, 2)), seed=21).sample_many(6)
    return [transfer_task, locked_task, *medium]


@pytest.fixture(scope="module")
def prop_envs(prop_tasks) -> dict[str, ToolChainEnv]:
    return {mode: ToolChainEnv(mode=mode, task_set=prop_tasks, max_steps=40) for mode in ("chat", "compact", "structured")}


def _property_step(env: ToolChainEnv, task: TaskSpec, prefix: int, action: Any) -> None:
    env.reset(options={"task": task})
    for _ in range(prefix):  # reach a state somewhere inside the episode
        if env.episode.done:
            break
        env.step(env.oracle_action())
    state = env.episode.state
    before, accounts = world_snapshot(state), entity_records(state, ACCOUNTS)
    progress = env.episode.progress
    obs, reward, term, trunc, info = env.step(action)  # must not raise
    assert obs in env.observation_space
    assert info["error"] in ("none", "malformed", "too_long", "unknown_tool", "unavailable_tool", "locked_tool",
                             "invalid_arguments", "execution_error", "episode_over")
    assert info["progress"] >= progress
    assert reward == pytest.approx(info["progress"] - progress)
    if info["error"] != "none":  # rejected: the world is exactly as it was
        assert world_snapshot(env.episode.state) == before
        assert entity_records(env.episode.state, ACCOUNTS) == accounts
        assert info["progress"] == progress


def _tool_names(suite: Suite) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(sorted(suite.tools)), st.text(max_size=12))


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-10**30, max_value=10**30),
              st.integers(min_value=-10**500, max_value=10**500),
              st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20),
              st.sampled_from(["ACC-1000", "2026-01-01", "a@b.co", "open", "HLD-1234", "+1-555-123-4567"])),
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=5), kids, max_size=3)),
    max_leaves=8)
edge_values = st.sampled_from([10**400, -10**400, 2**63, 1e308, -1e308, 0, -0.0, 1e6, 1e6 + 0.01, 1e-9, "", " ", "\n",
                               "ACC-1000\n", "\u202e", "a" * 600, True, False, None, [], {}])
huge_numbers = st.one_of(st.integers(min_value=10**300, max_value=10**500), st.integers(max_value=-10**300),
                        st.floats(min_value=1e300, allow_infinity=False))
arg_values = st.one_of(json_values, edge_values, huge_numbers)


@st.composite
def tool_calls(draw: st.DrawFn, suite: Suite, task: TaskSpec) -> tuple[str, Any]:
    """A (name, arguments) pair: mostly one of the task's real calls, then mutated."""
    if draw(st.integers(0, 3)):
        call = draw(st.sampled_from(task.calls))
        name, args = call.tool, dict(call.args)
    else:
        name = draw(_tool_names(suite))
        args = {}
    params = sorted(suite.tools[name].param_names) if name in suite.tools else []
    keys = st.one_of(st.sampled_from(params), st.sampled_from(params), st.text(max_size=6)) if params \
        else st.text(max_size=6)
    for _ in range(draw(st.integers(1, 2))):  # set, replace or delete arguments
        key = draw(keys)
        if draw(st.integers(0, 3)) == 0:
            args.pop(key, None)
        else:
            args[key] = draw(arg_values)
    return name, args


@st.composite
def chat_actions(draw: st.DrawFn, suite: Suite, task: TaskSpec) -> Any:
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return draw(st.text(max_size=200))
    if kind == 5:
        return draw(st.one_of(st.none(), st.integers(), st.binary(max_size=10), st.lists(st.text(max_size=3))))
    name, args = draw(tool_calls(suite, task))
    args = args if draw(st.integers(0, 9)) else draw(json_values)  # sometimes not an object at all
    text = json.dumps({"name": name, "arguments": args})
    if kind == 2:  # truncate anywhere
        text = text[: draw(st.integers(0, len(text)))]
    wrap = draw(st.sampled_from(["<tool_call>{}</tool_call>", "{}", "```json\n{}\n```", "<tool_call>{}"]))
    return wrap.replace("{}", text, 1) if kind != 4 else text + draw(st.text(max_size=10))


@given(data=st.data())
@SETTINGS
def test_property_chat_random_actions(prop_envs, prop_tasks, suite, data) -> None:
    task = data.draw(st.sampled_from(prop_tasks[:1] * 3 + prop_tasks))  # the transfer task more often
    prefix = data.draw(st.integers(0, 4))
    _property_step(prop_envs["chat"], task, prefix, data.draw(chat_actions(suite, task)))


@given(data=st.data())
@SETTINGS
def test_property_compact_random_actions(prop_envs, prop_tasks, suite, data) -> None:
    task = data.draw(st.sampled_from(prop_tasks))
    prefix = data.draw(st.integers(0, 4))
    tokens = st.one_of(st.sampled_from(vocabulary(suite)), st.sampled_from(["call", "ask", "reply", "$0", "$1", "$2"]),
                       st.text(max_size=6), st.from_regex(r"\$[0-9]{1,25}", fullmatch=True))
    words = data.draw(st.lists(tokens, max_size=10))
    sep = data.draw(st.sampled_from([" ", "  ", "\t", "\n"]))
    action = data.draw(st.one_of(st.just(sep.join(words)), st.none(), st.integers()))
    _property_step(prop_envs["compact"], task, prefix, action)


@given(data=st.data())
@SETTINGS
def test_property_structured_random_arrays(prop_envs, prop_tasks, data) -> None:
    env = prop_envs["structured"]
    nvec = [int(v) for v in env.action_space.nvec]
    task = data.draw(st.sampled_from(prop_tasks))
    prefix = data.draw(st.integers(0, 4))
    in_range = st.tuples(*[st.integers(0, n - 1) for n in nvec]).map(list)
    small = st.tuples(st.integers(0, 2), st.integers(0, nvec[1] - 1),
                      *[st.integers(0, 4) for _ in nvec[2:]]).map(list)  # mostly filled slots
    junk = st.lists(st.one_of(st.integers(-5, 200), st.integers(-2**70, 2**70)), max_size=len(nvec) + 2)
    floats = st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=len(nvec), max_size=len(nvec))
    raw = data.draw(st.one_of(in_range, small, junk, floats))
    action = np.asarray(raw) if data.draw(st.booleans()) and raw else raw
    _property_step(env, task, prefix, action)


def test_text_in_brackets_is_still_a_reply() -> None:
    from rods_gym.episode import Reply
    from rods_gym.renderers.chat import parse_chat_action

    for text in ("[1, 2]", "[see above] the order is cancelled", "[]", '["a", {"name": "x"}]'):
        assert isinstance(parse_chat_action(text), Reply), text


def test_stray_closing_tag_is_malformed_and_json_scalars_are_replies() -> None:
    from rods_gym.episode import Invalid, Reply
    from rods_gym.renderers.chat import parse_chat_action

    for text in ("</tool_call>", 'get_order {"order_id": "ORD-1"}</tool_call>'):
        parsed = parse_chat_action(text)
        assert isinstance(parsed, Invalid) and parsed.error == "malformed" and "</tool_call>" in parsed.message
    for text in ("null", "42", '"ORD-1"', "true"):  # a bare value is an answer to the user, not a call
        assert isinstance(parse_chat_action(text), Reply), text


def test_non_ascii_is_escaped_not_lost() -> None:
    from rods_gym.renderers.chat import MAX_OBS_CHARS, sanitize

    assert sanitize("no contact with email 'jos\u00e9@\u4f8b.com'") == "no contact with email 'jos\\xe9@\\u4f8b.com'"
    long = sanitize("\u4f8b" * MAX_OBS_CHARS)
    assert len(long) <= MAX_OBS_CHARS and long.endswith("...[truncated]") and long.isascii()


def test_config_and_task_errors_name_the_field() -> None:
    from rods_gym import TaskSpec
    from rods_gym.augment import AugmentConfig

    with pytest.raises(ValueError, match="AugmentConfig.seed must be a non-negative int, got -1"):
        AugmentConfig(seed=-1)
    with pytest.raises(ValueError, match="malformed task 't-1': world_seed must be an integer, got 'abc'"):
        TaskSpec.from_dict({"id": "t-1", "world_seed": "abc", "calls": [], "turns": []})
    with pytest.raises(ValueError, match="malformed task 't-2': missing key 'calls'"):
        TaskSpec.from_dict({"id": "t-2", "world_seed": 3, "turns": []})
