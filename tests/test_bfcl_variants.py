"""The two rules of BFCL tier-0 variants (issue 50): the parent's ground truth fails every kept variant, and every
swapped value is of the kind its parameter takes (rods_gym.bfcl.resample, rods_gym.bfcl.valuekinds,
rods_gym.bfcl.audit); and the long-context backend no longer shares state between instances."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (pip install --no-deps bfcl-eval==2026.3.23: README, BFCL); "
                                        "the BFCL variant tests need its data and backends")

from rods_gym.bfcl.audit import audit_variant, main as audit_main, untyped_swaps  # noqa: E402
from rods_gym.bfcl.backend import Backend  # noqa: E402
from rods_gym.bfcl.data import FUNC_DOC_FILES, func_docs, tasks_by_id  # noqa: E402
from rods_gym.bfcl.resample import (BFCLResampler, apply, changes, parent_fails, variant_to_dict,  # noqa: E402
                                    verify)
from rods_gym.bfcl.scoring import check_transcript  # noqa: E402
from rods_gym.bfcl.split import split_tasks  # noqa: E402
from rods_gym.bfcl.valuekinds import FIXED, KINDS, conforms, doc_enum, param_kind  # noqa: E402


COMMENT = "Safe travels and enjoy every moment!"  # multi_turn_base_174's comment(comment_content=...)


@pytest.fixture(scope="module")
def resampler() -> BFCLResampler:
    return BFCLResampler(avoid=split_tasks("test"))


@pytest.fixture(scope="module")
def kept(resampler: BFCLResampler) -> list:
    """(parent, variant) pairs of every 8th train task and two with file-system names, 3 variants each at most."""
    rng = np.random.default_rng(0)
    parents = split_tasks("train")[::8] + [tasks_by_id()["multi_turn_base_24"], tasks_by_id()["multi_turn_base_6"]]
    return [(p, v) for p in parents for v in resampler.resample(p, 3, rng)]


def test_parent_fails_rule_rejects_a_change_the_backend_ignores_and_keeps_a_real_one() -> None:
    task = tasks_by_id()["multi_turn_base_174"]  # purchase_insurance(insurance_type='travel', ...)
    ignored = apply(task, {"travel": "comprehensive"}, "planted.v0")
    assert ignored.ground_truth != task.ground_truth
    assert verify(task, ignored)  # it replays to a pass: the old resampler kept such variants
    assert check_transcript(ignored, task.ground_truth).success  # ... and so does the parent's ground truth
    assert not parent_fails(task, ignored, {"travel": "comprehensive"})
    for change in ({COMMENT: "Adventure awaits!"}, {"EUR": "GBP"}):  # a stored comment; a returned exchange rate
        real = apply(task, change, "planted.v1")
        assert verify(task, real) and parent_fails(task, real, change)
        assert not check_transcript(real, task.ground_truth).success
    # both swapped: the parent fails it, but the ignored value still does not matter, so the rule rejects it
    both = {COMMENT: "Adventure awaits!", "travel": "comprehensive"}
    assert verify(task, apply(task, both, "planted.v2"))
    assert not check_transcript(apply(task, both, "planted.v2"), task.ground_truth).success
    assert not parent_fails(task, apply(task, both, "planted.v2"), both)
    # the audit of a variants file reports the planted one
    audit = audit_variant(apply(task, {"travel": "comprehensive"}, f"{task.id}.v0"),
                          BFCLResampler(avoid=split_tasks("test")).pools)
    assert audit.replays and audit.parent_passes and audit.value_ignored and audit.untyped


def test_every_kept_variant_passes_and_its_parent_fails_it(kept: list) -> None:
    assert len(kept) >= 40 and len({p.id for p, _ in kept}) >= 15
    for parent, variant in kept:
        assert check_transcript(variant, variant.ground_truth).success, variant.id
        assert not check_transcript(variant, parent.ground_truth).success, variant.id
        mapping = changes(parent, variant)
        assert mapping and parent_fails(parent, variant, mapping), variant.id


def test_kind_table_covers_bfcl_functions_and_reads_their_docs() -> None:
    params = {f"{d['name']}.{p}" for cls in FUNC_DOC_FILES for d in func_docs(cls)
              for p in d["parameters"].get("properties", {})}
    listed = [name for names in KINDS.values() for name in names]
    assert len(listed) == len(set(listed)) and set(listed) <= params  # no typo, no parameter twice
    assert param_kind("cd", "folder") == "fs_name" and param_kind("get_stock_info", "symbol") == "ticker"
    assert param_kind("purchase_insurance", "insurance_type") == FIXED
    assert param_kind("book_flight", "access_token") == FIXED
    assert param_kind("place_order", "amount") == "number" and param_kind("cancel_order", "order_id") == "order_id"
    assert param_kind("book_flight", "travel_class") == "enum"  # borrowed from get_flight_cost's documented options
    assert set(doc_enum("book_flight", "travel_class")) == {"economy", "business", "first"}
    assert doc_enum("startEngine", "ignitionMode") == ("START", "STOP")
    assert doc_enum("create_ticket", "priority") == (1, 2, 3, 4, 5)
    assert doc_enum("place_order", "order_type") == ("Buy", "Sell")
    kinds = {param_kind(*p.split(".")) for p in params}
    assert {"enum", "number", FIXED, "fs_name", "ticker", "airport"} <= kinds


def _state_before(parent, function: str, param: str, value):
    """A backend replaying the parent's ground truth up to the first call ``function(param=value)``."""
    backend = Backend(parent)
    for turn in parent.ground_truth:
        for call in turn:
            if call.name == function and call.args.get(param) == value:
                return backend
            backend.execute(call.name, call.args)
    raise AssertionError(f"{parent.id} has no call {function}({param}={value!r})")


def test_typed_rule_never_assigns_a_value_of_another_kind(kept: list, resampler: BFCLResampler) -> None:
    seen: set[str] = set()
    for parent, variant in kept:
        typed = resampler.slots(parent)
        for old, new in changes(parent, variant).items():
            slot = typed[old]
            assert conforms(slot, new), (variant.id, slot, new)
            seen.add(slot.kind)
            # checked again on the backend itself, where the call runs
            state = _state_before(parent, slot.function, slot.param, old).instances
            if slot.kind in ("file", "dir"):
                item = state["GorillaFileSystem"]._current_dir.contents.get(new)
                assert item is not None and hasattr(item, "contents") == (slot.kind == "dir"), (variant.id, new)
            elif slot.kind in ("new_file", "new_dir"):
                assert new not in state["GorillaFileSystem"]._current_dir.contents, (variant.id, new)
            elif slot.kind == "ticker":
                assert new in state["TradingBot"].stocks, (variant.id, new)
            elif slot.kind == "airport":
                assert new in state["TravelAPI"].list_all_airports(), (variant.id, new)
            elif slot.kind == "message_user_id":
                assert new in state["MessageAPI"].user_map.values(), (variant.id, new)
            elif slot.kind == "enum":
                assert new in doc_enum(slot.function, slot.param), (variant.id, new)
            elif slot.kind == "number":
                assert type(new) is type(old) and 0.5 * old - 1 <= new <= 1.5 * old + 1, (variant.id, new)
            assert param_kind(slot.function, slot.param) != FIXED
    assert {"file", "dir", "ticker", "enum", "number"} <= seen, seen  # the check ran on several kinds


def test_typed_rule_flags_the_old_implausible_swaps(resampler: BFCLResampler) -> None:
    pools = resampler.pools
    task = tasks_by_id()["multi_turn_base_6"]  # cd(folder='communal') ...
    assert untyped_swaps(task, apply(task, {"communal": "aX9#mK2$pL5"}, "x"), pools)  # no such folder
    assert untyped_swaps(task, apply(task, {"communal": "shared"}, "x"), pools) == ()  # a folder of the directory
    stock = tasks_by_id()["multi_turn_base_101"]  # get_stock_info(symbol='XTC')
    assert untyped_swaps(stock, apply(stock, {"XTC": "Emma"}, "x"), pools)
    assert untyped_swaps(stock, apply(stock, {"XTC": "NVDA"}, "x"), pools) == ()
    folders = resampler.slots(task)["communal"]
    assert folders.kind == "dir" and "aX9#mK2$pL5" not in folders.options


def test_audit_command_counts_both_rules(tmp_path, capsys) -> None:
    task = tasks_by_id()["multi_turn_base_174"]
    rows = [variant_to_dict(apply(task, {"travel": "comprehensive"}, f"{task.id}.v0"), task.id),
            variant_to_dict(apply(task, {"EUR": "GBP"}, f"{task.id}.v1"), task.id)]
    path = tmp_path / "v.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert audit_main([str(path)]) == 0
    counts = json.loads(capsys.readouterr().out.splitlines()[0])
    assert counts["variants"] == 2 and counts["parent_passes"] == 1 and counts["untyped"] == 1
    assert counts["both_rules_pass"] == 1
    assert audit_main([str(tmp_path / "missing.jsonl")]) == 2


def test_long_context_backends_do_not_share_cards() -> None:
    task = tasks_by_id()["multi_turn_long_context_160"]
    a, b = Backend(task), Backend(task)
    card = "1234567812345678"  # added by BFCL's long-context extension, not by the task's config
    before = b.instances["TravelAPI"].credit_card_list[card]["balance"]
    a.instances["TravelAPI"].credit_card_list[card]["balance"] -= 100.0
    assert b.instances["TravelAPI"].credit_card_list[card]["balance"] == before
    assert Backend(task).instances["TravelAPI"].credit_card_list[card]["balance"] == before
