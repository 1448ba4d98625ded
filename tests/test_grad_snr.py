"""benchmarks/grad_snr.py: the signal/noise estimator recovers a known ratio, and a batch gradient is the
GRPO loss's. The measured ratio of a real policy is the benchmark's (RESULTS.md), not asserted here."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from conftest import benchmarks_on_path

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py


@pytest.fixture(scope="module")
def gs() -> Any:
    with benchmarks_on_path():
        import grad_snr

        yield grad_snr


def test_the_estimator_recovers_a_known_signal_to_noise_ratio(gs: Any) -> None:
    gen = torch.Generator().manual_seed(0)
    dim, k = 20_000, 64
    mu = torch.full((dim,), 0.1)  # |mu|^2 = 200
    noise = torch.randn(k, dim, generator=gen)  # E|e|^2 = 20,000
    est = gs.snr_estimate(mu + noise)
    assert est["signal2"] == pytest.approx(200.0, rel=0.1)
    assert est["noise2"] == pytest.approx(20_000.0, rel=0.02)
    assert est["snr_per_batch"] == pytest.approx(0.01, rel=0.1)
    pure = gs.snr_estimate(torch.randn(k, dim, generator=gen))
    assert abs(pure["snr_per_batch"]) < 0.003  # no signal: about 0


def test_one_gradient_is_refused(gs: Any) -> None:
    with pytest.raises(ValueError, match="at least 2"):
        gs.snr_estimate(torch.zeros(1, 5))


def test_measure_runs_end_to_end_on_a_tiny_policy(gs: Any, tmp_path: Any) -> None:
    from rods_gym.trainer.config import load_config
    from rods_gym.trainer.policy import make_policy, save_policy

    cfg = load_config("default", ["policy.hidden_size=32", "policy.intermediate_size=64", "policy.num_layers=1",
                                  "policy.num_heads=2"])
    save_policy(make_policy(cfg.policy, "compact"), tmp_path / "p")
    rep = gs.measure(str(tmp_path / "p"), batches=2, overrides=["rollout.tasks_per_step=2", "rollout.group_size=2",
                                                                 "rollout.max_turns=2"])
    assert rep["batches"] == 2 and rep["episodes_per_batch"] == 4
    assert rep["noise2"] >= 0.0 and 0.0 <= rep["reward_mean"] <= 1.0


def test_settings_the_measurement_does_not_build_are_refused(gs: Any, tmp_path: Any) -> None:
    for override in ("grpo.beta=0.1", "grpo.miss_credit=nonpositive", "rollout.branch_size=4"):
        with pytest.raises(ValueError, match="plain episode-advantage loss"):
            gs.measure(str(tmp_path / "no-policy"), batches=2, overrides=[override])
