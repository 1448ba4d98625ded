"""benchmarks/recall_probe.py: the associative-recall task is what it says, and both architectures train on it.
How fast they learn is the benchmark's to measure (RESULTS.md), not asserted here."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from conftest import benchmarks_on_path

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py


@pytest.fixture(scope="module")
def rp() -> Any:
    with benchmarks_on_path():
        import recall_probe

        yield recall_probe


def test_every_target_is_the_value_written_after_its_key(rp: Any) -> None:
    ids, mask = rp.recall_batch(16, pairs=5, queries=4, keys=30, values=8, generator=torch.Generator().manual_seed(3))
    assert ids.shape == mask.shape == (16, 2 * 5 + 1 + 2 * 4)
    for row, m in zip(ids.tolist(), mask.tolist()):
        assert row[10] == 0 and sum(m) == 4  # the separator, then 4 queries
        table = dict(zip(row[0:10:2], row[1:10:2]))
        assert len(table) == 5 and all(1 <= k <= 30 for k in table) and all(31 <= v <= 38 for v in table.values())
        for t, is_target in enumerate(m):
            if is_target:
                assert row[t] == table[row[t - 1]]  # the value paired with the key just queried


def test_both_architectures_train_and_are_scored_on_the_same_held_out_batch(rp: Any) -> None:
    from rods_gym.trainer.config import PolicyConfig

    for arch in rp.ARCHS:
        pol = PolicyConfig(architecture=arch, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2)
        assert type(rp.build_model(pol, 20, 0)).__name__ == {"llama": "LlamaForCausalLM", "lfm2": "Lfm2ForCausalLM"}[arch]
        rows = rp.probe(pol, steps=3, pairs=3, lr=1e-3, eval_every=2)
        assert [r["step"] for r in rows] == [2, 3]
        assert all(0.0 <= r["accuracy"] <= 1.0 and r["loss"] > 0 and r["arch"] == arch for r in rows)
    with pytest.raises(ValueError, match="policy.architecture='rnn': choose llama or lfm2"):
        rp.build_model(PolicyConfig(architecture="rnn"), 10, 0)
