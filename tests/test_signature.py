"""Signatures: pinned Weisfeiler-Lehman hashes (a networkx hash change is caught), the exact
isomorphism check behind the hash, and depth/widths on hand-built tasks."""

from __future__ import annotations

import warnings
from dataclasses import replace

import networkx as nx
import numpy as np
import pytest

from rods_gym import Suite, TaskSpec, compute_signature
from rods_gym.signature import WL_ITERATIONS, Signature
from rods_gym.task import Call, Dep, Turn

# Two tasks drawn by the sampler once and frozen here (so a sampler change cannot move the
# pins): a 2-turn task with a 3-call chain, and a 2-turn task with a withheld fact, a
# locked tool, a distractor and an information goal.
FIXED_TASKS = [
    '{"answer":null,"calls":[{"args":{"calendar_id":"CAL-7558"},"id":"c0","tool":"get_calendar","turn":0},'
    '{"args":{"owner_id":"MBR-4196","visibility":"public"},"id":"c1","tool":"search_member_calendars","turn":0},'
    '{"args":{"calendar_id":"CAL-7558","status":"scheduled"},"id":"c2","tool":"count_calendar_events","turn":0},'
    '{"args":{"agent_id":"AGT-4946","priority":"urgent","status":"solved"},"id":"c3","tool":"search_agent_tickets",'
    '"turn":0},{"args":{"filename":"state.mp3"},"id":"c4","tool":"find_file_by_name","turn":1},'
    '{"args":{"file_id":"FIL-3742"},"id":"c5","tool":"get_file","turn":1},{"args":{"folder_id":"FLD-8763"},'
    '"id":"c6","tool":"count_folder_files","turn":1}],"deps":[["c0","c1","owner_id","owner_id"],'
    '["c1","c2","calendar_id","calendar_id"],["c4","c5","file_id","file_id"],["c5","c6","folder_id","folder_id"]],'
    '"distractors":["get_holder","get_supplier","search_flights_by_origin"],"id":"task-7-3","meta":{},'
    '"turns":[{"locked":[],"message":"m0","withheld":[]},{"locked":[],"message":"m1","withheld":[]}],"world_seed":25}',
    '{"answer":["c5","total_fees","531.42"],"calls":[{"args":{"transaction_id":"TXN-6288"},"id":"c0",'
    '"tool":"get_transaction","turn":0},{"args":{"account_id":"ACC-4315"},"id":"c1","tool":"get_account","turn":0},'
    '{"args":{"holder_id":"HLD-3168"},"id":"c2","tool":"get_holder","turn":0},{"args":{"body":"Crime Republican '
    'issue.","subject":"Reverse-engineered solution-oriented matrices","to":"gevans@example.org"},"id":"c3",'
    '"tool":"send_email","turn":0},{"args":{"amount":82.58,"from_account_id":"ACC-1200","to_account_id":"ACC-3620"},'
    '"id":"c4","tool":"transfer_funds","turn":0},{"args":{"patient_id":"PAT-6491","status":"completed"},"id":"c5",'
    '"tool":"total_patient_fees","turn":1}],"deps":[["c0","c1","account_id","from_account_id"],'
    '["c1","c2","holder_id","holder_id"],["c2","c3","to","email"]],"distractors":["get_member"],"id":"task-7-2",'
    '"meta":{},"turns":[{"locked":["get_transaction"],"message":"m0","withheld":[["c3","subject"]]},'
    '{"locked":[],"message":"m1","withheld":[]}],"world_seed":6}',
]
PINNED = [
    ("71319f993930a5f39aafecf9fd3fb5b0", 3, (3, 2, 2), (("plain",), ("plain",))),
    ("98f908f0a3c5ce1f7fcaf56bfe24dfa5", 4, (3, 1, 1, 1), (("missing_param", "missing_tool"), ("answer",))),
]


def test_pinned_hashes_of_fixed_tasks(suite: Suite) -> None:
    for text, (wl, depth, widths, turn_types) in zip(FIXED_TASKS, PINNED):
        sig = compute_signature(TaskSpec.from_json(text), suite)
        assert (sig.wl_hash, sig.depth, sig.widths, sig.turn_types) == (wl, depth, widths, turn_types)


def test_pinned_networkx_wl_hash() -> None:
    """The raw networkx hash on a fixed labelled graph: fails when networkx changes its WL hashing."""
    g = nx.DiGraph()
    g.add_node("a", label="lookup:person@0")
    g.add_node("b", label="read:person@0+answer")
    g.add_node("c", label="update:record@0")
    g.add_edge("a", "b", label="id")
    g.add_edge("a", "c", label="id|contact")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        h = nx.weisfeiler_lehman_graph_hash(g, node_attr="label", edge_attr="label", iterations=WL_ITERATIONS)
    assert h == "3c9495e0ca5364c854d635ad44f0f4b0"


def _permuted(task: TaskSpec, order: list[int]) -> TaskSpec:
    """The same task with calls listed in another order and renamed ids (x0, x1...)."""
    calls = [task.calls[i] for i in order]
    new_id = {c.id: f"x{k}" for k, c in enumerate(calls)}
    return replace(
        task, id=task.id + "-perm",
        calls=tuple(replace(c, id=new_id[c.id]) for c in calls),
        deps=tuple(Dep(new_id[d.src], new_id[d.dst], d.param, d.field) for d in reversed(task.deps)),
        turns=tuple(replace(t, withheld=tuple((new_id[c], p) for c, p in t.withheld)) for t in task.turns),
        answer=None if task.answer is None else replace(task.answer, call=new_id[task.answer.call]),
    )


@pytest.mark.parametrize("text", FIXED_TASKS)
def test_relabelled_copy_is_the_same_structure(suite: Suite, text: str) -> None:
    task = TaskSpec.from_json(text)
    sig = compute_signature(task, suite)
    rng = np.random.default_rng(0)
    for order in [list(reversed(range(len(task.calls))))] + [list(rng.permutation(len(task.calls))) for _ in range(3)]:
        other = compute_signature(_permuted(task, order), suite)
        assert other.wl_hash == sig.wl_hash and other.key == sig.key
        assert other.same(sig) and other == sig and hash(other) == hash(sig)


def test_different_structures_are_not_the_same(suite: Suite) -> None:
    task = TaskSpec.from_json(FIXED_TASKS[1])
    sig = compute_signature(task, suite)
    # drop one dependency: a different DAG
    fewer = compute_signature(replace(task, deps=task.deps[:-1]), suite)
    assert not fewer.same(sig) and fewer.wl_hash != sig.wl_hash
    # same shape, but the withheld fact moves to another call: node labels differ
    moved = replace(task, turns=(replace(task.turns[0], withheld=(("c4", "amount"),)),) + task.turns[1:])
    assert not compute_signature(moved, suite).same(sig)
    # a different skill at one node (transfer_funds -> a read of a person)
    calls = tuple(replace(c, tool="get_patient", args={"patient_id": "PAT-1"}) if c.id == "c4" else c
                  for c in task.calls)
    assert not compute_signature(replace(task, calls=calls), suite).same(sig)


def test_isomorphism_check_settles_hash_collisions(suite: Suite) -> None:
    """Two signatures in the same bucket (forced equal hashes) differ when their DAGs are not
    isomorphic: ``same`` does not trust the hash alone."""
    a = compute_signature(_chain(["find_customer_by_email", "get_customer"], ["customer_id"]), suite)
    g = a.graph.copy()
    u, v, k = next(iter(g.edges(keys=True)))
    g.edges[u, v, k]["label"] = "contact"  # same shape, another edge label
    b = Signature(a.wl_hash, a.depth, a.widths, a.n_calls, a.n_turns, a.turn_types, a.n_distractors, g)
    assert a.key == b.key
    assert not a.same(b) and a != b
    c = Signature(a.wl_hash, a.depth, a.widths, a.n_calls, a.n_turns, a.turn_types, a.n_distractors, a.graph.copy())
    assert a.same(c)


def test_same_skills_on_other_tools_share_a_signature(suite: Suite) -> None:
    """Structure, not tool names: lookup-by-email -> read of a person, in two domains."""
    assert suite.skills["find_customer_by_email"] == suite.skills["find_patient_by_email"]
    assert suite.skills["get_customer"] == suite.skills["get_patient"]
    a = compute_signature(_chain(["find_customer_by_email", "get_customer"], ["customer_id"]), suite)
    b = compute_signature(_chain(["find_patient_by_email", "get_patient"], ["patient_id"]), suite)
    assert a.same(b) and a.wl_hash == b.wl_hash


def _chain(tools: list[str], params: list[str], turn: int = 0) -> TaskSpec:
    calls = tuple(Call(f"c{i}", t, {}, turn) for i, t in enumerate(tools))
    deps = tuple(Dep(f"c{i}", f"c{i + 1}", p, p) for i, p in enumerate(params))
    return TaskSpec("chain", 0, calls, deps, (Turn("m"),))


def _task(calls: list[tuple[str, str]], deps: list[tuple[str, str, str]], turns: int = 1) -> TaskSpec:
    return TaskSpec("hand", 0, tuple(Call(cid, tool, {}, 0) for cid, tool in calls),
                    tuple(Dep(s, d, p, p) for s, d, p in deps), tuple(Turn(f"m{i}") for i in range(turns)))


@pytest.mark.parametrize("calls, deps, depth, widths", [
    # one call
    ([("a", "get_holder")], [], 1, (1,)),
    # two independent calls
    ([("a", "get_holder"), ("b", "get_order")], [], 1, (2,)),
    # a chain of three: email -> holder id -> accounts -> (account id) card search
    ([("a", "find_holder_by_email"), ("b", "search_holder_accounts"), ("c", "search_account_cards")],
     [("a", "b", "holder_id"), ("b", "c", "account_id")], 3, (1, 1, 1)),
    # fan-in: two producers feed one transfer
    ([("a", "get_account"), ("b", "get_transaction"), ("c", "transfer_funds")],
     [("a", "c", "from_account_id"), ("b", "c", "to_account_id")], 2, (2, 1)),
    # diamond: one holder, two account searches, one transfer fed by both
    ([("a", "find_holder_by_email"), ("b", "search_holder_accounts"), ("c", "search_holder_accounts"),
      ("d", "transfer_funds")],
     [("a", "b", "holder_id"), ("a", "c", "holder_id"), ("b", "d", "from_account_id"), ("c", "d", "to_account_id")],
     3, (1, 2, 1)),
    # a long arm and a short one: levels are longest paths from a source
    ([("a", "find_holder_by_email"), ("b", "search_holder_accounts"), ("c", "get_account"), ("d", "transfer_funds")],
     [("a", "b", "holder_id"), ("b", "d", "from_account_id"), ("c", "d", "to_account_id")], 3, (2, 1, 1)),
])
def test_depth_and_widths(suite: Suite, calls, deps, depth, widths) -> None:
    sig = compute_signature(_task(calls, deps), suite)
    assert (sig.depth, sig.widths, sig.n_calls) == (depth, widths, len(calls))
    assert sum(sig.widths) == len(calls)
    # parallel edges (two params fed by the same call) are one dependency level, and hashing works
    assert isinstance(sig.wl_hash, str) and len(sig.wl_hash) == 32


def test_signature_of_sampled_tasks_matches_meta(task_pool, suite: Suite) -> None:
    for tasks in task_pool.values():
        for t in tasks[:100]:
            sig = compute_signature(t, suite)
            assert sig.depth == t.meta["knobs"]["depth"]
            assert sig.n_calls == len(t.calls) == sum(sig.widths)
            assert sig.n_turns == len(t.turns)
            assert sig.summary()["wl_hash"] == sig.wl_hash
