"""benchmarks/sft_throughput.py: the smoke scale end to end. Speeds are the benchmark's to
measure, not asserted here; this checks the blocks time the same real batches in both modes."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import benchmarks_on_path

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py


@pytest.fixture(scope="module")
def st() -> Any:
    with benchmarks_on_path():
        import sft_throughput

        yield sft_throughput


def test_smoke_times_both_modes_on_the_same_padded_batches(st: Any) -> None:
    rep = st.run("smoke", threads=1)
    steps = st.SCALES["smoke"]["steps"]
    assert rep["steps"] == steps and set(rep["seconds"]) == {"off", "bf16"}
    assert all(len(v) == 1 and v[0] > 0 for v in rep["seconds"].values())
    assert rep["speedup_per_round"] == [rep["seconds"]["off"][0] / rep["seconds"]["bf16"][0]]
    # real demonstration batches: the config's batch size, padded, mostly more than a few tokens each
    assert rep["padded_tokens_per_block"] >= steps * rep["batch_size"] * 20
    text = st.markdown(rep, ["--scale", "smoke"])
    assert "| bf16 |" in text and "| off |" in text and "speed-up per round" in text


def test_batches_follow_the_length_grouped_draw(st: Any) -> None:
    import numpy as np

    from rods_gym.trainer.sft import Demo, length_grouped_batches
    from rods_gym.trainer.transcript import Transcript

    lengths = [5 + i for i in range(10)]
    demos = [Demo(None, Transcript(list(range(n)), [1] * n, [0.0] * n), True) for n in lengths]  # type: ignore[arg-type]
    got = st.batches_of(demos, 4, 3, pad_id=0, seed=3)
    order = length_grouped_batches(lengths, 4, np.random.default_rng(3))
    expected = [order.pop() for _ in range(3)]
    assert [int(b[1].sum()) for b in got] == [sum(lengths[i] for i in idx) for idx in expected]


def test_demonstrations_use_the_configs_environment(st: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config with non-default env settings (shuffled slot ids, a step limit) is benchmarked in that environment."""
    cfg = tmp_path / "shuffled.yaml"
    cfg.write_text("base: default\nname: shuffled\ndata:\n  slot_ids: shuffled\n  env_max_steps: 12\n")
    seen: list[Any] = []

    class Stop(Exception):
        pass

    def record(policy: Any, tasks: Any, env_id: str, env_kwargs: Any = None, **_: Any) -> Any:
        seen.append(dict(env_kwargs or {}))
        raise Stop

    monkeypatch.setattr(st, "make_demonstrations", record)
    with pytest.raises(Stop):
        st.run("smoke", config=str(cfg), threads=1)
    assert seen == [{"slot_ids": "shuffled", "max_steps": 12}]
