"""RODS tier-0 resampling of BFCL tasks (rods_gym.bfcl.resample), the task model and `rods synth --bfcl`."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (pip install --no-deps bfcl-eval==2026.3.23: README, BFCL); "
                                        "the BFCL resampling tests need its data and backends")

from rods_gym.bfcl.data import tasks_by_id  # noqa: E402
from rods_gym.bfcl.env import BFCLMultiTurnEnv  # noqa: E402
from rods_gym.bfcl.resample import BFCLResampler, read_variants, spans, span_pattern  # noqa: E402
from rods_gym.bfcl.scoring import check_transcript  # noqa: E402
from rods_gym.bfcl.split import content_key, contamination, split_tasks  # noqa: E402
from rods_gym.bfcl.taskmodel import api_graph, bfcl_signature, to_taskspec  # noqa: E402
from rods_gym.cli import main  # noqa: E402


def test_variants_keep_signature_change_arguments_and_replay_to_one() -> None:
    train = split_tasks("train")
    resampler = BFCLResampler(avoid=split_tasks("test"))
    rng = np.random.default_rng(0)
    env = BFCLMultiTurnEnv()
    made = 0
    for parent in train[::20]:
        for v in resampler.resample(parent, 2, rng):
            made += 1
            assert v.id.startswith(parent.id + ".v") and v.index == parent.index
            assert bfcl_signature(v) == bfcl_signature(parent)
            assert [[c.name for c in t] for t in v.ground_truth] == [[c.name for c in t] for t in parent.ground_truth]
            assert v.ground_truth != parent.ground_truth and v.questions != parent.questions
            assert content_key(v) != content_key(parent)
            env.reset(options={"task": v})
            done = False
            while not done:
                _, _, term, trunc, info = env.step(env.oracle_action())
                done = term or trunc
            assert info["success"] and info["progress"] == pytest.approx(1.0)
            # the parent-fails rule: the parent's ground truth does not solve the variant
            assert not check_transcript(v, parent.ground_truth).success
    assert made >= 10


def test_span_template_replaces_whole_tokens_only() -> None:
    assert span_pattern(["test"]).sub("X", "latest test backup_tests 'test'") == "latest X backup_tests 'X'"
    task = tasks_by_id()["multi_turn_base_0"]
    assert spans(task)  # stated values of the ground truth


def test_task_model_and_api_graph() -> None:
    task = tasks_by_id()["multi_turn_base_0"]
    spec = to_taskspec(task)
    assert len(spec.calls) == sum(len(t) for t in task.ground_truth)
    assert {c.turn for c in spec.calls} == {t for t, calls in enumerate(task.ground_truth) if calls}
    sig = bfcl_signature(task)
    assert sig.n_calls == len(spec.calls) and sig.depth >= 2 and sig.n_turns == task.n_turns
    # data flow exists somewhere: an id returned by one call feeds a later call
    data = sum(1 for t in tasks_by_id().values() if any(d.field != "order" for d in to_taskspec(t).deps))
    assert data > 100
    g = api_graph()
    assert g.number_of_nodes() > 100 and g.number_of_edges() > 20
    assert all(d["param"] for _, _, d in g.edges(data=True))


def test_rods_synth_bfcl_writes_verified_decontaminated_variants(tmp_path) -> None:
    out = tmp_path / "v.jsonl"
    code = main(["synth", "--bfcl", "--seeds", "base", "--n", "20", "--seed", "1", "--out", str(out)])
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 20 and all(r["parent"].startswith("multi_turn_base_") for r in rows)
    variants = read_variants(out)
    assert all(check_transcript(v, v.ground_truth).success for v in variants)
    assert contamination(split_tasks("test"), [v for v in variants if v.index not in
                                               {t.index for t in split_tasks("test")}]) == []
    again = tmp_path / "w.jsonl"
    assert main(["synth", "--bfcl", "--seeds", "base", "--n", "20", "--seed", "1", "--out", str(again)]) == 0
    assert again.read_text() == out.read_text()  # deterministic
