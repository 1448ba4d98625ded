"""benchmarks/trainer_throughput.py: its arithmetic, and the smoke scale end to end (ours only
when trl is not installed, ours and TRL when it is). Speeds are measured by the benchmark, not
asserted here; these tests check that the figures are computed from real, consistent counts."""

from __future__ import annotations

import math
from typing import Any

import pytest

from conftest import benchmarks_on_path

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py


@pytest.fixture(scope="module")
def tt() -> Any:
    """The benchmark module, imported from benchmarks/ (sys.path restored after the module)."""
    with benchmarks_on_path():
        import trainer_throughput

        yield trainer_throughput


def _step(step_s: float, gen_s: float, gen_tokens: float, update_tokens: float, completions: float = 4.0) -> dict:
    return {"step_s": step_s, "wall_s": step_s + 0.5, "gen_s": gen_s, "env_s": 0.1, "update_s": step_s - gen_s - 0.2,
            "other_s": 0.1, "gen_tokens": gen_tokens, "update_tokens": update_tokens, "completions": completions,
            "reward": 0.5, "turns": 1.0}


def test_summarize_pools_tokens_over_time_and_ratios_divide_them(tt) -> None:
    steps = [_step(2.0, 1.0, 10.0, 30.0), _step(4.0, 3.0, 30.0, 50.0)]
    s = tt.summarize(steps)
    assert s["steps"] == 2
    assert s["rollout_tok_s"] == pytest.approx(40.0 / 4.0)  # pooled, not the mean of per-step rates
    assert s["update_tok_s"] == pytest.approx(80.0 / (0.8 + 0.8))
    assert s["total_tok_s"] == pytest.approx(120.0 / 6.0)
    assert s["total_tok_s_wall"] == pytest.approx(120.0 / 7.0)
    assert s["completion_len"] == pytest.approx(40.0 / 8.0)
    assert s["step_s"] == pytest.approx(3.0)
    half = tt.summarize([_step(4.0, 2.0, 10.0, 30.0), _step(8.0, 6.0, 30.0, 50.0)])
    q = tt.ratios(s, half)
    assert q["total"] == pytest.approx(2.0) and q["rollout"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="no measured steps"):
        tt.summarize([])


def test_wall_intervals_skip_the_warm_up_steps(tt) -> None:
    assert tt.wall_intervals([1.0, 3.0, 6.0, 10.0], warmup=1) == [2.0, 3.0, 4.0]
    assert tt.wall_intervals([1.0, 3.0, 6.0, 10.0], warmup=2) == [3.0, 4.0]


def test_scale_rejects_a_batch_that_is_not_whole_micro_batches(tt) -> None:
    with pytest.raises(ValueError, match="multiple of micro_batch"):
        tt.Scale(prompts=4, tasks_per_step=3, group_size=4, max_tokens=8, micro_batch=8, warmup=1, steps=1,
                 rounds=1, sft_steps=0, multi_steps=0)


def _check_side(s: dict, scale: Any) -> None:
    n_seq = scale.tasks_per_step * scale.group_size
    assert s["steps"] == scale.steps * scale.rounds
    assert s["completions"] == n_seq
    assert 1.0 <= s["completion_len"] <= scale.max_tokens
    assert s["gen_tokens"] == pytest.approx(s["completion_len"] * n_seq)
    # trained tokens are the prompts (>= 13 tokens each here) plus the completions
    assert s["update_tokens"] >= s["gen_tokens"] + 13 * n_seq
    assert all(s[k] >= 0.0 for k in ("gen_s", "env_s", "update_s")) and s["gen_s"] > 0 and s["update_s"] > 0
    assert s["gen_s"] + s["env_s"] + s["update_s"] + s["other_s"] == pytest.approx(s["step_s"])
    for k in ("rollout_tok_s", "update_tok_s", "total_tok_s", "total_tok_s_wall"):
        assert math.isfinite(s[k]) and s[k] > 0, k
    assert 0.0 <= s["reward"] <= 1.0


@pytest.mark.slow
def test_smoke_scale_measures_both_trainers_on_the_same_workload(tt) -> None:
    have_trl = tt.trl_version() is not None
    rep = tt.run_benchmark("smoke")  # compares with TRL exactly when it is importable
    scale = tt.SCALES["smoke"]
    _check_side(rep.ours, scale)
    m = rep.multi
    assert m is not None and m["gen_tokens"] > 0 and m["rollout_tok_s"] > 0 and m["update_tok_s"] > 0
    assert 1.0 <= m["turns"] <= 3.0  # rollout.max_turns=3 in the smoke overrides
    text = tt.markdown(rep, ["--scale", "smoke"], "token")
    assert "--scale smoke" in text and "| rollout tokens/s" in text
    if not have_trl:
        assert rep.trl is None and rep.ratios is None and "TRL is not installed" in text
        return
    _check_side(rep.trl, scale)
    assert [who for who, _ in rep.per_round] == ["ours", "trl"]
    for k, v in rep.ratios.items():
        assert math.isfinite(v) and v > 0, k
    assert rep.ratios["total"] == pytest.approx(rep.ours["total_tok_s"] / rep.trl["total_tok_s"])
    # one round: its ours/TRL ratio is that of the round's two runs (pooled = per-run with one run each)
    assert rep.round_ratios() == [pytest.approx(rep.per_round[0][1] / rep.per_round[1][1])]
    assert rep.round_ratios()[0] == pytest.approx(rep.ratios["total"])
    assert f"**ours/TRL total throughput: {rep.ratios['total']:.2f}x**" in text


def test_warm_start_and_prompt_check_use_the_configs_environment(tt, monkeypatch: pytest.MonkeyPatch) -> None:
    """Non-default env settings of the config (shuffled slot ids, a step limit) reach the benchmark's environments."""
    from rods_gym.trainer.config import env_kwargs, load_config
    from rods_gym.trainer.tasks import load_tasks

    cfg = load_config("default", ["data.slot_ids=shuffled", "data.env_max_steps=12", "policy.num_layers=1"])
    seen: list[Any] = []

    def record(policy: Any, tasks: Any, env_id: str, env_kwargs: Any = None, **_: Any) -> list:
        seen.append(dict(env_kwargs or {}))
        return []

    monkeypatch.setattr(tt, "make_demonstrations", record)
    monkeypatch.setattr(tt, "train_sft", lambda *a, **k: [])
    seeds = load_tasks(cfg.data.train_split, cfg.data)[:3]
    policy = tt.warm_policy(cfg, seeds, sft_steps=1)
    assert seen == [{"slot_ids": "shuffled", "max_steps": 12}]
    made: list[Any] = []
    real_make = tt.gym.make
    monkeypatch.setattr(tt.gym, "make", lambda env_id, **kw: made.append(kw) or real_make(env_id, **kw))
    tt.check_same_prompts(policy, cfg.data.env_id, seeds, env_kwargs(cfg))
    assert made == [{"slot_ids": "shuffled", "max_steps": 12}]
