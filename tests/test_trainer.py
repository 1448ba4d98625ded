"""The training loop: config files and overrides, task sources, metrics, checkpoints, exact resume, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator

from rods_gym import TaskSampler, DIFFICULTIES, default_suite
from rods_gym.trainer.checkpoint import latest_checkpoint
from rods_gym.trainer.config import TrainConfig, load_config, parse_overrides
from rods_gym.trainer.loop import grpo_train, summed_over_processes
from rods_gym.trainer.metrics import read_jsonl
from rods_gym.trainer.pipeline import prepare_inputs
from rods_gym.trainer.policy import load_policy
from rods_gym.trainer.sources import available_sources, make_source
from rods_gym.trainer.task_source import FixedSeeds, TaskSource
from rods_gym.trainer.threads import torch_threads

from conftest import TIMING_METRICS, SFTCrash, crash_warm_start_after, warm_tiny_policy
from conftest import easy_seed_tasks as seed_tasks

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # see conftest.py


ISSUE_METRICS = ("reward_mean", "reward_std", "zero_std_frac", "success", "progress", "kl", "clip_frac", "entropy",
                 "turns", "tool_error_rate", "tokens_per_s", "rollout_tokens_per_s", "update_tokens_per_s",
                 "time_gen", "time_env", "time_update")


@pytest.fixture(scope="module")
def warm_policy(tmp_path_factory) -> Path:
    """A tiny policy after a short SFT warm start (partial success, so GRPO groups have spread)."""
    return warm_tiny_policy(tmp_path_factory.mktemp("warm") / "policy", sft_steps=80)


def tiny_config(task_file: Path, run_dir: Path, **extra: str) -> TrainConfig:
    overrides = [f"run_dir={run_dir}", "steps=4", "time_limit_min=0", "checkpoint_every=1", "tensorboard=false",
                 "progress_bar=false", "policy.hidden_size=32", "policy.intermediate_size=64", "policy.num_layers=1",
                 "policy.num_heads=2", f"data.train_split={task_file}", "rollout.group_size=3",
                 "rollout.tasks_per_step=2", "rollout.max_action_tokens=8", "rollout.max_turns=4",
                 "grpo.lr=1e-3", "grpo.micro_batch_size=4", "grpo.epochs=2", "grpo.minibatches=2", "grpo.beta=0.05"]
    overrides += [f"{k}={v}" for k, v in extra.items()]
    return load_config(None, overrides)


# -- config ---------------------------------------------------------------------------------
def test_shipped_configs_load_and_overrides_apply() -> None:
    cfg = load_config("default", ["grpo.lr=1e-4", "rollout.group_size=4", "eval.splits=[dev,test]", "steps=7"])
    assert cfg.grpo.lr == 1e-4 and cfg.rollout.group_size == 4 and cfg.eval.splits == ("dev", "test")
    assert cfg.steps == 7 and cfg.policy.model == "tiny" and cfg.data.env_id.endswith("Compact-v0")
    chat = load_config("chat_tiny")
    assert "Chat" in chat.data.env_id and chat.policy.max_positions >= 4096
    assert load_config("qwen_chat").policy.model.startswith("Qwen/")
    seeds, default = load_config("seeds"), load_config("default")  # the data-limited job: default's, but its warm start
    # (on the perfect teacher's demonstrations)
    assert (seeds.sft.data, seeds.sft.demos, seeds.sft.steps, seeds.run_dir) == ("seeds", 400, 300, "runs/seeds")
    assert (seeds.grpo, seeds.rollout, seeds.policy, seeds.data) == (default.grpo, default.rollout, default.policy,
                                                                     default.data)
    typed, oracle = load_config("typed"), load_config("oracle")  # the perfect teacher's job on typed slot ids,
    # with room for their two tokens each
    assert (typed.data.slot_ids, typed.rollout.max_action_tokens, typed.run_dir) == ("typed", 24, "runs/typed")
    assert (typed.grpo, typed.sft, typed.policy) == (oracle.grpo, oracle.sft, oracle.policy)
    assert seeds.sft.skip_last_call == oracle.sft.skip_last_call == 0.0 < default.sft.skip_last_call
    assert parse_overrides(["a.b=3", "c=x"]) == {"a": {"b": 3}, "c": "x"}


def test_torch_threads_sets_the_count_for_a_block_and_restores_it() -> None:
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    with torch_threads(target):
        assert torch.get_num_threads() == target
    assert torch.get_num_threads() == before
    with torch_threads(0):  # 0: leave the count as it is
        assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError, match="inside"):
        with torch_threads(target):
            raise RuntimeError("inside")
    assert torch.get_num_threads() == before  # restored after an error too
    assert load_config("default").eval.threads == 2 and TrainConfig().eval.threads == 0


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="grpo.*lrr"):
        load_config(None, ["grpo.lrr=1"])
    with pytest.raises(ValueError, match="grpo.aggregation"):
        load_config(None, ["grpo.aggregation=mean"])
    with pytest.raises(ValueError, match="rollout.group_size: expected int"):
        load_config(None, ["rollout.group_size=many"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("sft:\n  steps: 3\n  nonsense: 1\n")
    with pytest.raises(ValueError, match=r"sft.*nonsense.*\(in the config file .*bad.yaml or its base\)"):
        load_config(bad)
    with pytest.raises(ValueError, match=r"sft.*nonsense.*\(in the config file .*bad.yaml or its base\)"):
        load_config(bad, ["steps=3"])  # the file's mistake, with overrides beside it
    good = tmp_path / "good.yaml"
    good.write_text("sft:\n  steps: 3\n")
    with pytest.raises(ValueError, match="grpo.*lrr") as info:
        load_config(good, ["grpo.lrr=1"])  # the override's mistake: the file is not blamed
    assert "config file" not in str(info.value)
    with pytest.raises(FileNotFoundError, match="shipped config"):
        load_config("no-such-config")
    with pytest.raises(ValueError, match="sft.threads"):
        load_config(None, ["sft.threads=-1"])


# -- sources ---------------------------------------------------------------------------------
def test_source_registry(task_file: Path, tmp_path: Path) -> None:
    sources = available_sources()
    assert "fixed" in sources
    cfg = tiny_config(task_file, tmp_path)
    seeds = TaskSampler(default_suite(), DIFFICULTIES["easy"], seed=5).sample_many(5)
    src = make_source("fixed", cfg, seeds, rng_seed=3)
    assert isinstance(src, FixedSeeds) and len(src.next_batch(0, 7)) == 7
    with pytest.raises(ValueError, match="unknown task source 'nope'.*fixed"):
        make_source("nope", cfg, seeds, 0)


def test_a_source_of_your_own_is_checked_before_any_rollout(task_file: Path, warm_policy: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """grpo_train(source=...) names what a custom source lacks before the first rollout, and refuses a batch of
    the wrong size at the step that gives it; a complete source of a few lines trains."""
    import rods_gym.trainer.loop as loop

    seeds = seed_tasks()

    class Minimal:  # no telemetry, state_dict or load_state_dict
        name = "minimal"

        def next_batch(self, step: int, n_tasks: int) -> list:
            return seeds[:n_tasks]

        def observe(self, step: int, groups) -> None:
            pass

    def no_rollouts(*args, **kwargs):
        raise AssertionError("a rollout ran before the source was checked")

    cfg = tiny_config(task_file, tmp_path / "a", steps="1")
    with monkeypatch.context() as m:
        m.setattr(loop, "rollout_round", no_rollouts)
        with pytest.raises(TypeError, match=r"task source 'minimal' \(Minimal\) lacks \['telemetry', 'state_dict', "
                                            r"'load_state_dict'\] of the TaskSource interface"):
            grpo_train(cfg, load_policy(warm_policy), seeds, run_dir=cfg.run_dir, accelerator=Accelerator(cpu=True),
                       source=Minimal())

    class Complete(Minimal):
        name = "complete"

        def __init__(self, give: int | None = None) -> None:
            self.give, self.seen = give, 0

        def next_batch(self, step: int, n_tasks: int) -> list:
            return seeds[:self.give or n_tasks]

        def observe(self, step: int, groups) -> None:
            self.seen += len(groups)

        def telemetry(self) -> dict:
            return {"seen": float(self.seen)}

        def state_dict(self) -> dict:
            return {"seen": self.seen}

        def load_state_dict(self, state: dict) -> None:
            self.seen = state["seen"]

    assert isinstance(Complete(), TaskSource)
    with pytest.raises(ValueError, match=r"task source 'complete' gave 1 tasks for step 1; next_batch must return "
                                         r"rollout.tasks_per_step=2"):
        grpo_train(cfg, load_policy(warm_policy), seeds, run_dir=tmp_path / "b", accelerator=Accelerator(cpu=True),
                   source=Complete(give=1))
    source = Complete()
    result = grpo_train(cfg, load_policy(warm_policy), seeds, run_dir=tmp_path / "c", accelerator=Accelerator(cpu=True),
                        source=source)
    assert source.seen == 2 and result.history[-1]["source/seen"] == 2.0


def test_the_batch_scale_divides_by_the_std_of_every_return_of_the_step(task_file: Path, warm_policy: Path,
                                                                        tmp_path: Path, monkeypatch) -> None:
    import rods_gym.trainer.loop as loop

    calls: list = []
    real = loop.group_advantages

    def spy(returns, scale, eps, baseline=None, batch_std=None):
        calls.append((returns.clone(), scale, batch_std))
        return real(returns, scale, eps, baseline, batch_std)

    monkeypatch.setattr(loop, "group_advantages", spy)
    _run(tiny_config(task_file, tmp_path / "b", steps="2", **{"grpo.scale_rewards": "batch"}), warm_policy)
    assert len(calls) == 2  # one per step (one process: every group of the step is its own)
    for returns, scale, batch_std in calls:
        assert scale == "batch" and returns.shape == (2, 3)
        assert batch_std == pytest.approx(float(returns.flatten().std()), abs=1e-6)


def test_config_overrides_as_a_mapping_may_be_dotted_or_nested() -> None:
    cfg = load_config("default", {"grpo.lr": 1e-4, "rollout": {"group_size": 4}, "data.source_options": {"a.b": 1}})
    assert (cfg.grpo.lr, cfg.rollout.group_size, cfg.data.source_options) == (1e-4, 4, {"a.b": 1})
    assert load_config("default", {"grpo": {"lr": 2e-4}}).grpo.lr == 2e-4
    with pytest.raises(ValueError, match="unknown key"):
        load_config("default", {"grpo.lrr": 1e-4})


# -- the loop, checkpoints and resume --------------------------------------------------------
def _run(cfg: TrainConfig, start: Path, resume: bool = False, demos=None):
    seeds = seed_tasks()
    policy = load_policy(start)
    result = grpo_train(cfg, policy, seeds, run_dir=cfg.run_dir, accelerator=Accelerator(cpu=True), resume=resume,
                        demos=demos)
    return policy, result


def test_loop_logs_every_metric_and_checkpoints_everything(task_file: Path, warm_policy: Path, tmp_path: Path) -> None:
    cfg = tiny_config(task_file, tmp_path / "run", steps="2")
    start = load_policy(warm_policy)
    policy, result = _run(cfg, warm_policy)
    assert result.steps_done == 2
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    for key in ISSUE_METRICS:
        assert all(isinstance(r[key], float) for r in records), key
    assert records[0]["episodes"] == 6 and records[0]["gen_tokens"] > 0
    assert any(r["zero_std_frac"] < 1.0 for r in records)  # some group had spread: a real update
    # two epochs x two minibatches: later updates see a moved policy (ratio != 1, KL to the reference > 0)
    assert records[0]["kl"] > 0.0 and records[0]["kl_old"] > 0.0
    changed = any(not torch.equal(a, b) for a, b in zip(start.model.parameters(), policy.model.parameters()))
    assert changed
    ckpt = latest_checkpoint(tmp_path / "run" / "checkpoints")
    assert ckpt is not None and ckpt.name == "step-000002"
    state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    assert {"optimizer", "scheduler", "source", "history", "global_rng", "step"} <= set(state)
    assert set(state["source"]) == {"rng", "order", "pos"} and state["step"] == 2
    assert (ckpt / "rng-rank0.pt").exists()
    reloaded = load_policy(ckpt / "policy")
    for a, b in zip(reloaded.model.parameters(), policy.model.parameters()):
        assert torch.equal(a, b)


KILLER = textwrap.dedent("""
    import os, signal, sys
    import rods_gym.trainer
    import torch
    torch.set_num_threads(1)
    from accelerate import Accelerator
    from rods_gym import TaskSampler, DIFFICULTIES, default_suite
    from rods_gym.trainer.config import load_config
    from rods_gym.trainer.loop import grpo_train
    from rods_gym.trainer.policy import load_policy
    from rods_gym.trainer.task_source import FixedSeeds

    class DiesMidStep(FixedSeeds):
        # the process is SIGKILLed in the middle of step 3 (after its rollouts, before its update)
        def observe(self, step, groups):
            if step == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            super().observe(step, groups)

    cfg = load_config(sys.argv[1])
    seeds = TaskSampler(default_suite(), DIFFICULTIES["easy"], seed=5).sample_many(12)
    policy = load_policy(sys.argv[2])
    grpo_train(cfg, policy, seeds, run_dir=cfg.run_dir, accelerator=Accelerator(cpu=True),
               source=DiesMidStep(seeds, seed=cfg.seed))
""")


def test_single_update_starts_on_policy_at_the_reference(task_file: Path, warm_policy: Path, tmp_path: Path) -> None:
    cfg = tiny_config(task_file, tmp_path / "run", steps="1", **{"grpo.epochs": "1", "grpo.minibatches": "1"})
    _run(cfg, warm_policy)
    rec = read_jsonl(tmp_path / "run" / "metrics.jsonl")[0]
    # one update on fresh rollouts: the ratio is 1 and the policy equals the frozen reference
    assert rec["ratio"] == pytest.approx(1.0, abs=1e-5) and rec["clip_frac"] == 0.0
    assert rec["kl"] == pytest.approx(0.0, abs=1e-6) and rec["kl_old"] == pytest.approx(0.0, abs=1e-6)


def test_killed_run_resumes_to_the_same_result(task_file: Path, warm_policy: Path, tmp_path: Path) -> None:
    # uninterrupted: 4 steps
    full_cfg = tiny_config(task_file, tmp_path / "full")
    full_policy, _ = _run(full_cfg, warm_policy)
    # killed during step 3 (SIGKILL, in another process), then resumed here from the step-2 checkpoint
    cfg = tiny_config(task_file, tmp_path / "killed")
    from rods_gym.trainer.config import save_config

    save_config(cfg, tmp_path / "killed.yaml")
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "killed.yaml"), str(warm_policy)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert latest_checkpoint(tmp_path / "killed" / "checkpoints").name == "step-000002"
    assert [r["step"] for r in read_jsonl(tmp_path / "killed" / "metrics.jsonl")] == [1, 2]
    resumed_policy, result = _run(cfg, warm_policy, resume=True)
    assert result.steps_done == 4
    for a, b in zip(full_policy.model.parameters(), resumed_policy.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    full = read_jsonl(tmp_path / "full" / "metrics.jsonl")
    resumed = read_jsonl(tmp_path / "killed" / "metrics.jsonl")
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]
    for a, b in zip(full, resumed):
        for k in a:
            if k not in TIMING_METRICS:
                assert a[k] == pytest.approx(b[k], abs=1e-6), k
    # a different seed gives a different run (the comparison above can fail)
    other_policy, _ = _run(tiny_config(task_file, tmp_path / "other", seed="1"), warm_policy)
    assert any(not torch.allclose(a, b) for a, b in zip(full_policy.model.parameters(), other_policy.model.parameters()))


def test_cli_registers_train_sft_evaluate() -> None:
    from rods_gym.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["train", "--set", "grpo.lr=1e-4", "steps=3"])
    assert args.func.__name__ == "run_train"
    from rods_gym.trainer.commands import load_from_args

    cfg = load_from_args(args)
    assert cfg.grpo.lr == 1e-4 and cfg.steps == 3
    assert parser.parse_args(["sft"]).func.__name__ == "run_sft"
    assert parser.parse_args(["evaluate", "--splits", "dev"]).func.__name__ == "run_evaluate"


def test_pipeline_runs_the_chat_view_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """``rods train --config chat_tiny``: byte-level tiny Llama, chat template with tools, SFT, GRPO (with the
    PPO-ptx term), greedy and sampled eval, plot; the warm start runs on ``sft.threads`` torch threads and the
    run's thread count comes back after it."""
    from rods_gym.trainer import pipeline
    from rods_gym.trainer.pipeline import run_training

    sft_threads: list[int] = []
    real_train_sft = pipeline.train_sft

    def spy(*args, **kwargs):
        sft_threads.append(torch.get_num_threads())
        return real_train_sft(*args, **kwargs)

    monkeypatch.setattr(pipeline, "train_sft", spy)
    before = torch.get_num_threads()
    cfg = load_config("chat_tiny", [f"run_dir={tmp_path / 'chat'}", "tensorboard=false", "progress_bar=false",
                                    "eval.splits=[dev]", "eval.tasks=2", "sft.demos=4", "rollout.max_action_tokens=24",
                                    "threads=1", "sft.threads=2", "eval.samples=2", "grpo.sft_weight=0.5"])
    try:
        summary = run_training(cfg)
        assert sft_threads == [2] and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert summary["grpo_steps"] == 2 and summary["episodes"] == summary["rollouts"] == 8
    assert set(summary["before"]) == set(summary["after"]) == {"dev"}
    for when in ("before", "after"):  # eval.samples: 2 sampled episodes per task beside the greedy one
        assert summary[when]["dev"]["episodes"] == 2
        assert summary[when]["dev"]["sampled"]["samples"] == 2 and summary[when]["dev"]["sampled"]["episodes"] == 4
    assert (tmp_path / "chat" / "training_curve.png").stat().st_size > 1000
    assert (tmp_path / "chat" / "sft_policy" / "chat_template.jinja").exists()
    records = read_jsonl(tmp_path / "chat" / "metrics.jsonl")
    train = [r for r in records if "split" not in r]
    assert [r["step"] for r in train] == [1, 2] and all(r["gen_tokens"] > 0 for r in train)
    assert all(r["sft_loss"] > 0 for r in train)  # grpo.sft_weight: the pipeline hands the demonstrations on
    # the evaluations before and after GRPO are eval lines too (step 0 and the last step)
    evals = [(r["step"], r["split"], r["phase"]) for r in records if "split" in r]
    assert evals == [(0, "dev", "before"), (2, "dev", "after")]
    assert records[0]["phase"] == "before" and records[-1]["phase"] == "after"  # the file is in step order
    after_line = [r for r in records if r.get("phase") == "after"][0]
    assert after_line["success"] == summary["after"]["dev"]["success"]
    assert after_line["sampled_progress"] == summary["after"]["dev"]["sampled"]["progress"]
    saved = json.loads((tmp_path / "chat" / "summary.json").read_text())
    assert saved["policy"] == "tiny-chat" and saved["env_id"] == "rods/ToolChain-Chat-v0"
    # resumed with a time limit already spent: no step runs, and the job says why it stopped short
    capsys.readouterr()
    cut = run_training(load_config(cfg.run_dir + "/config.yaml", ["steps=5", "time_limit_min=1e-9", "threads=1"]),
                       resume=True)
    assert cut["grpo_steps"] == 2 and cut["stopped_by_time"]
    assert "GRPO stopped at step 2 of 5: time_limit_min=1e-09" in capsys.readouterr().out
    # resumed with more evaluation tasks: the evaluation before GRPO is run again, so both ends compare alike
    again = run_training(load_config(cfg.run_dir + "/config.yaml", ["eval.tasks=3", "steps=3", "threads=1",
                                                                 "time_limit_min=0"]),
                         resume=True)
    assert again["before"]["dev"]["episodes"] == again["after"]["dev"]["episodes"] == 3 and again["grpo_steps"] == 3


def test_warm_start_data_seeds_or_fresh_sampled_tasks() -> None:
    """``sft.data``: the first seeds, or fresh tasks drawn like them that are none of the seeds."""
    from rods_gym import load_split
    from rods_gym.trainer.sft import demonstration_tasks

    seeds = load_split("train")
    assert demonstration_tasks(load_config(None, ["sft.demos=5"]), seeds, "compact") == seeds[:5]
    fresh = demonstration_tasks(load_config(None, ["sft.data=sampled", "sft.demos=20"]), seeds, "compact")
    assert len(fresh) == 20 and not {t.to_json() for t in fresh} & {t.to_json() for t in seeds}
    assert {t.calls[0].tool for t in fresh} - {t.calls[0].tool for t in seeds[:20]}  # new tools, not the seeds'
    with pytest.raises(ValueError, match="sft.data"):
        load_config(None, ["sft.data=everything"])


def test_warm_start_max_depth_keeps_only_short_call_chains() -> None:
    """``sft.max_depth``: demonstrations of tasks no deeper than it, from either data source; 0 keeps all."""
    from rods_gym import default_suite, load_split
    from rods_gym.signature import compute_signature
    from rods_gym.trainer.sft import demonstration_tasks

    suite = default_suite()
    seeds = load_split("train")
    every = demonstration_tasks(load_config(None, ["sft.demos=400"]), seeds, "compact")
    depths = [compute_signature(t, suite).depth for t in every]
    assert max(depths) == 5 and sum(d <= 2 for d in depths) < len(depths)
    short = demonstration_tasks(load_config(None, ["sft.demos=400", "sft.max_depth=2"]), seeds, "compact")
    assert short == [t for t, d in zip(every, depths) if d <= 2] and short
    fresh = demonstration_tasks(load_config(None, ["sft.data=sampled", "sft.demos=20", "sft.max_depth=1"]), seeds,
                                "compact")
    assert fresh and all(compute_signature(t, suite).depth == 1 for t in fresh)
    with pytest.raises(ValueError, match="sft.max_depth must be >= 0"):
        load_config(None, ["sft.max_depth=-1"])


def test_before_after_table_pairs_depths_read_back_from_json() -> None:
    """A resumed run reads ``eval_before.json`` (string depth keys); each depth still gets one row."""
    from rods_gym.trainer.pipeline import _success_table

    after = {"test": {"success": 0.5, "progress": 0.6, "per_depth": {1: {"success": 0.75}, 2: {"success": 0.25}},
                      "per_stratum": {"plain": {"success": 0.5}, "missing_tool": {"success": 0.125}}}}
    before = json.loads(json.dumps({"test": {"success": 0.25, "progress": 0.5,
                                             "per_depth": {1: {"success": 0.5}, 2: {"success": 0.0}},
                                             "per_stratum": {"plain": {"success": 0.25}}}}))
    rows = _success_table(before, after).splitlines()
    assert [r.split()[1:] for r in rows if "depth" in r] == [["depth", "1", "0.500", "0.750"],
                                                             ["depth", "2", "0.000", "0.250"]]
    # per turn type, after the depths; a stratum one side lacks shows nan there
    assert [r.split()[1:] for r in rows[5:]] == [["missing_tool", "nan", "0.125"], ["plain", "0.250", "0.500"]]
    del before["test"]["per_stratum"]  # an eval_before.json written before strata were reported
    assert [r.split()[1] for r in _success_table(before, after).splitlines()[5:]] == ["missing_tool", "plain"]


def test_turn_slack_budgets_training_episodes_only() -> None:
    from rods_gym.trainer.loop import eval_settings, rollout_settings

    cfg = load_config(None, ["rollout.turn_slack=3", "rollout.max_turns=9"])
    assert rollout_settings(cfg).turn_slack == 3
    assert eval_settings(cfg).turn_slack is None and eval_settings(cfg).max_turns == 9


def test_error_penalty_shapes_training_envs_only() -> None:
    """``rollout.error_penalty``: a rejected action costs reward in training envs; evaluation envs score progress."""
    import gymnasium as gym

    from rods_gym import load_split
    from rods_gym.trainer.loop import env_kwargs, source_env_kwargs
    from rods_gym.trainer.task_source import FixedSeeds

    cfg = load_config(None, ["rollout.error_penalty=0.05"])
    source = FixedSeeds(load_split("train")[:2])
    rewards = {}
    for name, kwargs in (("train", source_env_kwargs(source, cfg)), ("eval", env_kwargs(cfg))):
        env = gym.make(cfg.data.env_id, **kwargs)
        env.reset(seed=0)
        rewards[name] = env.step("call no_such_tool")[1]
    assert rewards == {"train": -0.05, "eval": 0.0}
    assert "reward" not in source_env_kwargs(source, load_config(None, []))
    with pytest.raises(ValueError, match="error_penalty"):
        load_config(None, ["rollout.error_penalty=-1"])


def test_error_classes_choose_which_rejections_pay() -> None:
    """``rollout.error_classes``: only the named classes pay ``error_penalty``; a typo or no penalty is an error."""
    import gymnasium as gym

    from rods_gym import load_split
    from rods_gym.trainer.loop import source_env_kwargs
    from rods_gym.trainer.task_source import FixedSeeds

    source = FixedSeeds(load_split("train")[:2])
    rewards = {}
    for classes in ("[unknown_tool]", "[locked_tool]"):
        cfg = load_config(None, ["rollout.error_penalty=0.05", f"rollout.error_classes={classes}"])
        env = gym.make(cfg.data.env_id, **source_env_kwargs(source, cfg))
        env.reset(seed=0)
        _, reward, terminated, _, info = env.step("call no_such_tool")
        rewards[classes] = (reward, terminated, info["error"])
    assert rewards == {"[unknown_tool]": (-0.05, False, "unknown_tool"), "[locked_tool]": (0.0, False, "unknown_tool")}
    with pytest.raises(ValueError, match="unknown error class 'lockd_tool'"):
        load_config(None, ["rollout.error_penalty=0.05", "rollout.error_classes=[lockd_tool]"])
    with pytest.raises(ValueError, match="error_penalty is 0"):
        load_config(None, ["rollout.error_classes=[locked_tool]"])


def test_success_bonus_shapes_training_envs_only() -> None:
    """``rollout.success_bonus``: the action that completes a task earns the bonus in training envs only."""
    import gymnasium as gym

    from rods_gym import load_split, solve
    from rods_gym.trainer.loop import env_kwargs, source_env_kwargs
    from rods_gym.trainer.task_source import FixedSeeds

    cfg = load_config(None, ["rollout.success_bonus=0.5"])
    task = load_split("train")[0]
    source = FixedSeeds([task])
    returns = {}
    for name, kwargs in (("train", source_env_kwargs(source, cfg)), ("eval", env_kwargs(cfg))):
        env = gym.make(cfg.data.env_id, **kwargs)
        env.reset(seed=0, options={"task": task})
        total, info = solve(env)
        returns[name] = (round(total, 9), info["success"])
    assert returns == {"train": (1.5, True), "eval": (1.0, True)}
    assert "reward" not in source_env_kwargs(source, load_config(None, []))
    with pytest.raises(ValueError, match="success_bonus"):
        load_config(None, ["rollout.success_bonus=-0.1"])


def test_action_level_term_trains_on_per_action_rewards(task_file: Path, warm_policy: Path, tmp_path: Path) -> None:
    """``grpo.action_weight``: the same rollouts (same seed) give a different update than plain GRPO, and
    every action's tokens carry the episode advantage plus the weighted action term."""
    from rods_gym.trainer.loop import token_advantages
    from rods_gym.trainer.rollout import Trajectory
    from rods_gym.trainer.transcript import Transcript

    plain, _ = _run(tiny_config(task_file, tmp_path / "plain", steps="1"), warm_policy)
    shaped, _ = _run(tiny_config(task_file, tmp_path / "shaped", steps="1", **{"grpo.action_weight": "1.0"}), warm_policy)
    rec_plain = read_jsonl(tmp_path / "plain" / "metrics.jsonl")[0]
    rec_shaped = read_jsonl(tmp_path / "shaped" / "metrics.jsonl")[0]
    assert rec_plain["gen_tokens"] == rec_shaped["gen_tokens"]  # same rollouts
    assert any(not torch.equal(a, b) for a, b in zip(plain.model.parameters(), shaped.model.parameters()))
    tr = Trajectory(task=seed_tasks()[0], task_index=0, transcript=Transcript([5, 6, 7, 8, 9, 10], [0, 1, 1, 0, 1, 0],
                                                                                 [0.0] * 6),
                    rewards=[0.5, 0.0], action_spans=[(1, 3), (4, 5)])
    assert token_advantages(tr, 0.25, [1.0, -1.0], 0.5) == [0.0, 0.75, 0.75, 0.0, -0.25, 0.0]


def test_truncated_rollouts_can_leave_the_loss(task_file: Path, warm_policy: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``grpo.mask_truncated`` (DAPO's overlong filtering): episodes the turn limit cut off train no token and
    leave the sequence count; the others train as before, and the groups' advantages are unchanged."""
    from rods_gym.trainer import loop as loop_module

    batches: dict[str, list] = {}
    real_loss = loop_module.grpo_loss

    def spy(model, batch, settings, *, n_tokens=None, n_seqs=None):
        batches.setdefault(name, []).append((batch.action_mask.sum(1).tolist(), batch.advantages.tolist(), n_seqs))
        return real_loss(model, batch, settings, n_tokens=n_tokens, n_seqs=n_seqs)

    monkeypatch.setattr(loop_module, "grpo_loss", spy)
    runs, records = {}, {}
    for name, extra in (("plain", {}), ("masked", {"grpo.mask_truncated": "true"})):
        runs[name], _ = _run(tiny_config(task_file, tmp_path / name, steps="1", **{
            "rollout.max_turns": "4", "grpo.epochs": "1", "grpo.minibatches": "1", "grpo.aggregation": "sequence",
            "grpo.micro_batch_size": "64", **extra}), warm_policy)
        records[name] = read_jsonl(tmp_path / name / "metrics.jsonl")[0]
    assert records["plain"]["gen_tokens"] == records["masked"]["gen_tokens"]  # the same rollouts
    assert 0.0 < records["plain"]["truncated"] < 1.0  # some, not all, cut off by max_turns=4
    (plain_tokens, plain_adv, plain_seqs), = batches["plain"]
    (masked_tokens, masked_adv, masked_seqs), = batches["masked"]
    assert masked_adv == plain_adv  # advantages from every rollout's return, truncated or not
    n_truncated = round(records["plain"]["truncated"] * records["plain"]["rollouts"])
    assert sum(t == 0 for t in masked_tokens) == n_truncated + sum(t == 0 for t in plain_tokens)
    assert all(m in (0, p) for m, p in zip(masked_tokens, plain_tokens))
    assert masked_seqs == plain_seqs - n_truncated
    assert any(not torch.equal(a, b) for a, b in zip(runs["plain"].model.parameters(), runs["masked"].model.parameters()))


def test_missed_actions_never_get_a_positive_advantage() -> None:
    """``grpo.miss_credit: nonpositive``: the tokens of a rejected action, or of one accepted without
    effect, keep a negative advantage and lose a positive one; other actions keep theirs. Without the
    env's effects, an action that earned nothing is the miss."""
    from rods_gym.trainer.loop import no_credit_for_misses
    from rods_gym.trainer.rollout import Trajectory, misses
    from rods_gym.trainer.transcript import Transcript

    tr = Trajectory(task=seed_tasks()[0], task_index=0,
                    transcript=Transcript([5, 6, 7, 8, 9, 10, 11], [0, 1, 1, 0, 1, 0, 1], [0.0] * 7),
                    rewards=[0.0, 0.0, 0.5], action_spans=[(1, 3), (4, 5), (6, 7)],
                    effects=["rejected", "revealed", "progress"])
    assert misses(tr) == [True, False, False]
    assert no_credit_for_misses(tr, [0.8] * 7) == [0.8, 0.0, 0.0, 0.8, 0.8, 0.8, 0.8]
    assert no_credit_for_misses(tr, [-0.3] * 7) == [-0.3] * 7
    tr.effects = ["progress", "none", "progress"]  # accepted without effect: a miss too
    assert no_credit_for_misses(tr, [0.5, 1.0, -1.0, 0.5, 2.0, 0.5, 0.5]) == [0.5, 1.0, -1.0, 0.5, 0.0, 0.5, 0.5]
    tr.effects = []  # no effects recorded: the actions that earned nothing
    assert misses(tr) == [True, True, False]
    with pytest.raises(ValueError, match="miss_credit"):
        load_config(None, ["grpo.miss_credit=zero"])


def test_advantage_and_loss_options_change_the_update(task_file: Path, warm_policy: Path,
                                                                         tmp_path: Path) -> None:
    """``grpo.action_grouping: state`` (GiGPO), ``grpo.negative_weight``, ``grpo.gamma`` and
    ``grpo.sft_weight`` (PPO-ptx) train on the same rollouts as plain GRPO but update differently;
    ``action_states`` keys two actions alike only for one history."""
    from rods_gym.trainer.grpo import discounted_return
    from rods_gym.trainer.loop import action_states
    from rods_gym.trainer.rollout import Trajectory
    from rods_gym.trainer.transcript import Transcript

    plain, _ = _run(tiny_config(task_file, tmp_path / "plain", steps="1"), warm_policy)
    variants = {"state": {"grpo.action_weight": "1.0", "grpo.action_grouping": "state"},
                "positive": {"grpo.negative_weight": "0.0"}, "discounted": {"grpo.gamma": "0.5"},
                "step_only": {"grpo.action_weight": "1.0", "grpo.action_grouping": "state", "grpo.episode_weight": "0.0"},
                "miss_credit": {"grpo.miss_credit": "nonpositive"},
                "batch_scale": {"grpo.scale_rewards": "batch"},  # TRL's "batch": the step's std, not each group's
                # GSPO's sequence ratio: equal to the token ratios on-policy, so it differs from the second
                # optimizer step on (tiny_config: 2 epochs x 2 minibatches)
                "gspo": {"grpo.importance_sampling_level": "sequence"}}
    updated = {}
    for name, overrides in variants.items():
        other, _ = _run(tiny_config(task_file, tmp_path / name, steps="1", **overrides), warm_policy)
        rec = [read_jsonl(tmp_path / n / "metrics.jsonl")[0] for n in ("plain", name)]
        assert rec[0]["gen_tokens"] == rec[1]["gen_tokens"], name  # same rollouts
        assert any(not torch.equal(a, b) for a, b in zip(plain.model.parameters(), other.model.parameters())), name
        updated[name] = other
    # without the episode term (grpo.episode_weight: 0) GiGPO's step term alone trains: another update
    assert any(not torch.equal(a, b) for a, b in zip(updated["state"].model.parameters(),
                                                     updated["step_only"].model.parameters()))

    # PPO-ptx: the imitation term joins every optimizer step (logged as sft_loss) and changes the update
    from rods_gym.trainer.sft import make_demonstrations

    demos = make_demonstrations(load_policy(warm_policy), seed_tasks()[:4], "rods/ToolChain-Compact-v0")
    ptx_cfg = tiny_config(task_file, tmp_path / "ptx", steps="1", **{"grpo.sft_weight": "1.0", "grpo.sft_batch": "2"})
    ptx, _ = _run(ptx_cfg, warm_policy, demos=demos)
    rec = [read_jsonl(tmp_path / n / "metrics.jsonl")[0] for n in ("plain", "ptx")]
    assert rec[0]["gen_tokens"] == rec[1]["gen_tokens"] and rec[0]["sft_loss"] == 0.0 < rec[1]["sft_loss"]
    assert any(not torch.equal(a, b) for a, b in zip(plain.model.parameters(), ptx.model.parameters()))
    # without demonstrations handed in, the loop builds the warm start's own (sft.data: the first seeds here)
    built, _ = _run(tiny_config(task_file, tmp_path / "built", steps="1", **{"grpo.sft_weight": "1.0",
                                                                         "grpo.sft_batch": "2", "sft.demos": "4"}),
                    warm_policy)
    assert read_jsonl(tmp_path / "built" / "metrics.jsonl")[0]["sft_loss"] > 0
    with pytest.raises(ValueError, match="sft_weight"):
        load_config(None, ["grpo.sft_weight=1", "sft.enabled=false"])
    with pytest.raises(ValueError, match=r"grpo.scale_rewards=batch .* not defined with rollout.branch_size > 0, "
                                         r"grpo.baseline=greedy"):
        load_config(None, ["grpo.scale_rewards=batch", "rollout.branch_size=2", "grpo.baseline=greedy"])

    def traj(ids: list[int], spans: list[tuple[int, int]]) -> Trajectory:
        transcript = Transcript(ids, [0] * len(ids), [0.0] * len(ids))
        return Trajectory(task=seed_tasks()[0], task_index=0, transcript=transcript, rewards=[0.0] * len(spans),
                          action_spans=spans)

    discounted = traj([5, 6, 7, 8, 9, 10], [(1, 2), (3, 4), (4, 5)])
    discounted.rewards = [0.5, 0.0, 0.5]
    assert discounted_return(discounted.rewards, 0.5) == pytest.approx(0.5 + 0.25 * 0.5)
    assert discounted_return(discounted.rewards, 1.0) == discounted.ret == 1.0
    for bad in ("grpo.gamma=0", "grpo.gamma=1.5", "grpo.negative_weight=-0.1", "grpo.action_grouping=states",
                "grpo.episode_weight=0", "grpo.episode_weight=-1", "grpo.action_weight=-0.5"):
        with pytest.raises(ValueError, match=bad.split("=")[0]):
            load_config(None, [bad])

    a = action_states(traj([5, 6, 7, 8, 9], [(1, 2), (3, 4)]))
    b = action_states(traj([5, 6, 7, 4, 9], [(1, 2), (3, 4)]))
    c = action_states(traj([5, 1, 7, 8, 9], [(1, 2), (3, 4)]))
    assert a[0] == b[0] == c[0]  # the same first history
    assert a[1] == b[1] and a[1] != c[1]  # the second differs once an earlier token does


def test_curve_points_carry_greedy_and_sampled_series():
    """The training-curve figure shows what GRPO optimizes (sampled figures) beside greedy success;
    a split evaluated without samples gets the greedy series only."""
    from rods_gym.trainer.pipeline import curve_points

    before = {"test": {"success": 0.29, "progress": 0.57, "sampled": {"samples": 2, "success": 0.24, "progress": 0.52}},
              "dev": {"success": 0.30, "progress": 0.60}}
    after = {"test": {"success": 0.28, "progress": 0.56, "sampled": {"samples": 2, "success": 0.26, "progress": 0.54}},
             "dev": {"success": 0.31, "progress": 0.61}}
    points = curve_points(before, after, [{"step": 30, "test": {"success": 0.27}}], 60, 0.7)
    assert points == {
        "test success (greedy)": [(0, 0.29), (30, 0.27), (60, 0.28)],
        "test success (sampled x2, T=0.7)": [(0, 0.24), (60, 0.26)],
        "test progress (sampled x2, T=0.7)": [(0, 0.52), (60, 0.54)],
        "dev success (greedy)": [(0, 0.30), (60, 0.31)],
    }
    # a periodic evaluation with samples (eval.samples > 0) adds its sampled figures to those series
    periodic = [{"step": 30, "test": {"success": 0.27, "sampled_success": 0.25, "sampled_progress": 0.53}}]
    points = curve_points(before, after, periodic, 60, 0.7)
    assert points["test success (sampled x2, T=0.7)"] == [(0, 0.24), (30, 0.25), (60, 0.26)]
    assert points["test progress (sampled x2, T=0.7)"] == [(0, 0.52), (30, 0.53), (60, 0.54)]


def test_periodic_evaluation_logs_its_sampled_figures(task_file: Path, warm_policy: Path, tmp_path: Path) -> None:
    cfg = tiny_config(task_file, tmp_path / "run", steps="2", **{"eval.every": "1", "eval.samples": "2",
                                                                  "grpo.beta": "0"})
    seeds = seed_tasks()
    policy = load_policy(warm_policy)
    result = grpo_train(cfg, policy, seeds, run_dir=cfg.run_dir, accelerator=Accelerator(cpu=True),
                        eval_sets={"dev": seeds[:3]})
    lines = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r.get("split") == "dev"]
    assert [r["step"] for r in lines] == [1, 2] and len(result.evals) == 2
    for r in lines:
        assert r["episodes"] == 3 and r["sampled_episodes"] == 6 and r["sampled_samples"] == 2
        assert 0.0 <= r["sampled_success"] <= 1.0 and 0.0 <= r["sampled_progress"] <= 1.0
        assert "per_depth" not in r and "sampled" not in r
    # the job evaluates its final policy itself: without evaluate_last the last step's periodic evaluation is skipped
    cfg = tiny_config(task_file, tmp_path / "job", steps="2", **{"eval.every": "1", "grpo.beta": "0"})
    result = grpo_train(cfg, load_policy(warm_policy), seeds, run_dir=cfg.run_dir, accelerator=Accelerator(cpu=True),
                        eval_sets={"dev": seeds[:3]}, evaluate_last=False)
    assert [e["step"] for e in result.evals] == [1]


def test_kl_run_resumes_from_checkpoints_copied_without_its_reference(task_file: Path, warm_policy: Path,
                                                                     tmp_path: Path) -> None:
    """grpo.beta > 0: the reference is the policy GRPO starts from; checkpoints copied into another
    directory (without reference/) resume to the uninterrupted run's weights."""
    import shutil

    full, _ = _run(tiny_config(task_file, tmp_path / "full"), warm_policy)
    _run(tiny_config(task_file, tmp_path / "half", steps="2"), warm_policy)
    assert (tmp_path / "half" / "reference" / "config.json").exists()
    shutil.copytree(tmp_path / "half" / "checkpoints", tmp_path / "copy" / "checkpoints")
    resumed, result = _run(tiny_config(task_file, tmp_path / "copy"), warm_policy, resume=True)
    assert result.steps_done == 4 and not (tmp_path / "copy" / "reference").exists()
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    assert [r["step"] for r in read_jsonl(tmp_path / "copy" / "metrics.jsonl")] == [1, 2, 3, 4]
    kl = [r["kl"] for r in read_jsonl(tmp_path / "copy" / "metrics.jsonl")]
    assert kl == pytest.approx([r["kl"] for r in read_jsonl(tmp_path / "full" / "metrics.jsonl")], abs=1e-6)


def test_the_reference_moves_toward_the_policy_and_resumes_moved(task_file: Path, warm_policy: Path,
                                                                 tmp_path: Path) -> None:
    """grpo.ref_sync_steps (TRL's sync_ref_model): after each step here the reference becomes the mean of
    itself and the policy; the checkpoint keeps it, so a resumed run computes the uninterrupted one's KL."""
    from rods_gym.trainer.checkpoint import load_trainer_state

    sync = {"grpo.beta": "0.5", "grpo.ref_sync_steps": "1", "grpo.ref_sync_alpha": "0.5"}
    full, _ = _run(tiny_config(task_file, tmp_path / "full", steps="2", **sync), warm_policy)
    ckpts = tmp_path / "full" / "checkpoints"
    ref = load_policy(tmp_path / "full" / "reference").model.state_dict()  # where GRPO started
    for step in ("step-000001", "step-000002"):
        policy = load_policy(ckpts / step / "policy").model.state_dict()
        moved = load_trainer_state(ckpts / step)["reference"]
        assert moved.keys() == policy.keys()
        for name, value in moved.items():
            assert torch.allclose(value, 0.5 * policy[name] + 0.5 * ref[name], atol=1e-7), (step, name)
        ref = moved
    with pytest.warns(UserWarning, match="ref_sync_steps=1 is more than steps=0: the reference never moves"):
        _run(tiny_config(task_file, tmp_path / "none", steps="0", **sync), warm_policy)
    _run(tiny_config(task_file, tmp_path / "half", steps="1", **sync), warm_policy)
    resumed, _ = _run(tiny_config(task_file, tmp_path / "half", steps="2", **sync), warm_policy, resume=True)
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    assert [r["ref_synced"] for r in read_jsonl(tmp_path / "full" / "metrics.jsonl")] == [1.0, 1.0]
    kl = {run: [r["kl"] for r in read_jsonl(tmp_path / run / "metrics.jsonl")] for run in ("full", "half")}
    assert kl["half"] == pytest.approx(kl["full"], abs=1e-7)
    _run(tiny_config(task_file, tmp_path / "fixed", steps="2", **{"grpo.beta": "0.5"}), warm_policy)
    fixed = [r["kl"] for r in read_jsonl(tmp_path / "fixed" / "metrics.jsonl")]
    assert fixed[0] == pytest.approx(kl["full"][0], abs=1e-7) and kl["full"][1] < fixed[1]  # the moved one is closer
    # resumed with the sync turned off, the moved reference stays what the run uses and what it saves
    moved = load_trainer_state(tmp_path / "half" / "checkpoints" / "step-000002")["reference"]
    _run(tiny_config(task_file, tmp_path / "half", steps="3", **{"grpo.beta": "0.5"}), warm_policy, resume=True)
    kept = load_trainer_state(tmp_path / "half" / "checkpoints" / "step-000003")["reference"]
    assert all(torch.equal(kept[name], value) for name, value in moved.items())
    assert [r.get("ref_synced") for r in read_jsonl(tmp_path / "half" / "metrics.jsonl")] == [1.0, 1.0, None]


def test_mixing_into_the_reference_by_hand() -> None:
    from rods_gym.trainer.loop import mix_into_reference

    ref, cur = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor([[1.0, 2.0]])), ref.bias.fill_(0.0)
        cur.weight.copy_(torch.tensor([[3.0, -2.0]])), cur.bias.fill_(1.0)
    mix_into_reference(ref, cur, 0.25)
    assert ref.weight.tolist() == [[1.5, 1.0]] and ref.bias.tolist() == [0.25]
    assert cur.weight.tolist() == [[3.0, -2.0]]  # the policy is untouched
    with pytest.raises(ValueError, match="different parameters"):
        mix_into_reference(ref, torch.nn.Linear(2, 1, bias=False), 0.5)
    with pytest.raises(ValueError, match=r"different parameters \(\['weight'\]\)"):
        mix_into_reference(ref, torch.nn.Linear(3, 1), 0.5)
    with pytest.raises(ValueError, match="base under its LoRA adapters, which cannot move"):
        mix_into_reference(ref, ref, 0.5)


def test_a_checkpoint_resumes_only_with_the_processes_that_wrote_it(task_file: Path, warm_policy: Path,
                                                                    tmp_path: Path) -> None:
    from rods_gym.trainer.checkpoint import check_world_size

    _run(tiny_config(task_file, tmp_path / "run", steps="1", **{"grpo.beta": "0"}), warm_policy)
    ckpt = latest_checkpoint(tmp_path / "run" / "checkpoints")
    check_world_size(ckpt, 1)
    with pytest.raises(ValueError, match="written by 1 process.*resume it with 1 .*this run has 2"):
        check_world_size(ckpt, 2)
    # a 2-process run killed while writing step 2 left step-000002.tmp with two RNG files; this one-process run
    # writes step 2 over it, and its checkpoint holds its own process's RNG file only
    stale = ckpt.with_name("step-000002.tmp")
    stale.mkdir()
    torch.save({}, stale / "rng-rank0.pt")
    torch.save({}, stale / "rng-rank1.pt")
    _run(tiny_config(task_file, tmp_path / "run", steps="2", **{"grpo.beta": "0"}), warm_policy, resume=True)
    ckpt = latest_checkpoint(tmp_path / "run" / "checkpoints")
    assert ckpt.name == "step-000002" and sorted(p.name for p in ckpt.glob("rng-rank*")) == ["rng-rank0.pt"]
    check_world_size(ckpt, 1)
    torch.save({}, ckpt / "rng-rank1.pt")  # as a 2-process run leaves it
    with pytest.raises(ValueError, match="written by 2 process.*this run has 1"):
        _run(tiny_config(task_file, tmp_path / "run", steps="3", **{"grpo.beta": "0"}), warm_policy, resume=True)


def test_figures_line_names_greedy_and_sampled_figures():
    from rods_gym.trainer.evaluation import figures_line

    greedy = {"success": 0.29, "progress": 0.5734}
    assert figures_line(greedy) == "success 0.290 progress 0.573"
    assert figures_line({**greedy, "sampled": {"samples": 2, "success": 0.2375, "progress": 0.52}}) == (
        "success 0.290 progress 0.573; sampled x2: success 0.237 progress 0.520")


def test_a_resumed_log_replaces_what_the_interrupted_run_logged_past_its_checkpoint(tmp_path: Path) -> None:
    """TensorBoard: the resumed run's writer purges steps >= purge_step, so replayed steps are not doubled."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rods_gym.trainer.metrics import MetricsLogger

    first = MetricsLogger(tmp_path / "m.jsonl", tmp_path / "tb")
    for s in (1, 2, 3):  # killed after logging step 3; its checkpoint is at step 2
        first.log({"step": s, "x": float(s)}, s)
    first.close()
    resumed = MetricsLogger(tmp_path / "m.jsonl", tmp_path / "tb", purge_step=3)
    for s in (3, 4):
        resumed.log({"step": s, "x": 10.0 + s}, s)
    resumed.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/x")] == [(1, 1.0), (2, 2.0), (3, 13.0), (4, 14.0)]


def test_a_job_killed_in_its_warm_start_resumes_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rods train --resume after a crash in the warm start: the SFT continues from its last checkpoint to
    the warm start an uninterrupted job makes, and its loss log has every step once."""
    from rods_gym.trainer.pipeline import run_training

    def config(run: Path, *more: str) -> TrainConfig:
        return load_config("default", [f"run_dir={run}", "progress_bar=false", "threads=1",
                                       "steps=1", "eval.splits=[dev]", "eval.tasks=2", "eval.samples=0",
                                       "sft.data=seeds", "sft.demos=8", "sft.steps=4", "sft.checkpoint_every=2",
                                       "sft.batch_size=4", "sft.threads=1", "eval.threads=1",
                                       "policy.hidden_size=32", "policy.intermediate_size=64", "policy.num_layers=1",
                                       "policy.num_heads=2", "rollout.tasks_per_step=2", "rollout.group_size=2",
                                       "rollout.max_turns=3", "rollout.max_action_tokens=8", *more])

    run_training(config(tmp_path / "clean"))
    restore = crash_warm_start_after(monkeypatch, step=2)  # in the third step, after the step-2 checkpoint
    with pytest.raises(SFTCrash):
        run_training(config(tmp_path / "run"))
    assert (tmp_path / "run" / "sft_checkpoint").exists() and not (tmp_path / "run" / "sft_policy").exists()
    restore()
    # TensorBoard reads a directory's event files in name order: creation second, then a per-process counter
    # compared as text; a real resume is seconds later, this one must wait so its purge is read after the crash
    time.sleep(1.1)
    summary = run_training(config(tmp_path / "run"), resume=True)
    assert summary["sft"]["resumed_from_step"] == 2 and summary["grpo_steps"] == 1
    assert not (tmp_path / "run" / "sft_checkpoint").exists()  # the finished warm start supersedes it
    log = read_jsonl(tmp_path / "run" / "sft_metrics.jsonl")
    clean_log = read_jsonl(tmp_path / "clean" / "sft_metrics.jsonl")
    assert [r["step"] for r in log] == [r["step"] for r in clean_log] == [1, 2, 3, 4]
    assert [r["loss"] for r in log] == pytest.approx([r["loss"] for r in clean_log], abs=1e-6)
    clean, resumed = load_policy(tmp_path / "clean" / "sft_policy"), load_policy(tmp_path / "run" / "sft_policy")
    for a, b in zip(clean.model.parameters(), resumed.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    # TensorBoard: step 3, logged by the crashed warm start past its checkpoint, is purged; resuming GRPO later
    # (its own purge) leaves the warm start's curve whole and the evaluation before GRPO once at step 0
    time.sleep(1.1)
    run_training(config(tmp_path / "run", "steps=2"), resume=True)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def scalars(path: Path, tag: str) -> list[tuple[int, float]]:
        events = EventAccumulator(str(path))
        events.Reload()
        return [(e.step, e.value) for e in events.Scalars(tag)]

    sft_curve = scalars(tmp_path / "run" / "tensorboard" / "sft", "sft/loss")
    assert [s for s, _ in sft_curve] == [1, 2, 3, 4]
    assert [v for _, v in sft_curve] == pytest.approx([r["loss"] for r in clean_log], abs=1e-6)
    # the before point, and the after point of this finish only (not the step-1 finish this run extended)
    assert [s for s, _ in scalars(tmp_path / "run" / "tensorboard" / "before_after", "eval_dev/success")] == [0, 2]
    assert [s for s, _ in scalars(tmp_path / "run" / "tensorboard", "train/reward_mean")] == [1, 2]


def test_greedy_branches_retry_the_first_miss(task_file: Path, warm_policy: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``rollout.branch_size``: per task a greedy episode; where it fails, a group sampled from the state
    before its first action that earned nothing (prefix replayed as context), trained as its own group."""
    from rods_gym.trainer.loop import (branch_counts, branch_returns, rollout_round, rollout_settings, source_env_id,
                                       source_env_kwargs)
    from rods_gym.trainer.rollout import RolloutEngine, Trajectory, branch_before_first_miss, first_miss
    from rods_gym.trainer.transcript import Transcript

    task = seed_tasks()[0]
    ids = [5, 6, 7, 8, 9, 10, 11]
    tr = Trajectory(task=task, task_index=0, transcript=Transcript(ids, [0, 1, 1, 0, 1, 0, 1], [0.0] * 7),
                    rewards=[0.5, 0.0, 0.25], action_spans=[(1, 3), (4, 5), (6, 7)], env_options={"x": 1})
    b = branch_before_first_miss(tr)
    assert b is not None and b.actions == ((6, 7),) and b.ids == (5, 6, 7, 8) and b.env_options == {"x": 1}
    tr.rewards = [0.0, 0.5, 0.25]  # the first action missed: the branch is the task's start
    b = branch_before_first_miss(tr)
    assert b is not None and b.actions == () and b.ids == (5,)
    tr.rewards = [0.5, -0.1, 0.0]  # a rejected call under rollout.error_penalty is a miss too
    assert branch_before_first_miss(tr).ids == (5, 6, 7, 8)
    tr.rewards = [0.5, 0.25, 0.25]  # failed without a miss (out of turns): nothing to retry
    assert branch_before_first_miss(tr) is None
    tr.rewards, tr.success = [0.5, 0.0, 0.5], True
    assert branch_before_first_miss(tr) is None
    # with the env's effects recorded, an ask that reveals facts or a reply that opens the next turn is no miss
    tr.rewards, tr.success, tr.reset_seed = [0.0, 0.5, 0.0], False, 7
    tr.effects = ["revealed", "progress", "none"]
    assert first_miss(tr) == 2 and branch_before_first_miss(tr).ids == (5, 6, 7, 8, 9, 10)
    assert branch_before_first_miss(tr).seed == 7  # its episodes reset like the one it came from
    tr.effects = ["turn", "rejected", "progress"]
    assert first_miss(tr) == 1
    tr.effects = ["turn", "progress", "unlocked"]
    assert first_miss(tr) is None and branch_before_first_miss(tr) is None
    for bad in ("rollout.branch_size=1", "rollout.branch_size=-2"):
        with pytest.raises(ValueError, match="rollout.branch_size"):
            load_config(None, [bad])
    cfg = tiny_config(task_file, tmp_path / "dapo", steps="1", **{"rollout.branch_size": "3", "data.source": "dapo"})
    with pytest.raises(ValueError, match="rollout.branch_size=3 with the dynamic-sampling source"):
        prepare_inputs(cfg)  # refused when the run's inputs are read, before its warm start: nothing written
    assert not Path(cfg.run_dir).exists()
    with pytest.raises(ValueError, match="rollout.branch_size=3 with the dynamic-sampling source"):
        grpo_train(cfg, load_policy(warm_policy), seed_tasks(), run_dir=cfg.run_dir, accelerator=Accelerator(cpu=True))

    # one round: the greedy episodes' failures get branch groups of branch_size episodes that start at the miss
    cfg = tiny_config(task_file, tmp_path / "round", **{"rollout.branch_size": "4", "rollout.tasks_per_step": "6"})
    policy = load_policy(warm_policy)
    source = FixedSeeds(seed_tasks(), seed=0)
    engine = RolloutEngine(policy, source_env_id(source, cfg), rollout_settings(cfg), source_env_kwargs(source, cfg))
    held_out = TaskSampler(default_suite(), DIFFICULTIES["easy"], seed=6).sample_many(6)
    tasks = seed_tasks()[:2] + held_out[3:6]  # the warm start solves the first, misses the others (one after a call)
    rnd = rollout_round(engine, source, tasks, 3, Accelerator(cpu=True), generator=torch.Generator().manual_seed(0),
                        model=policy.model, seed=0, branch_size=4)
    greedy, _ = engine.run(tasks, 1, greedy=True, seed=50_000)
    assert all(t.effects and len(t.effects) == t.turns for t in greedy)  # the env's info["effect"], per action
    assert rnd.greedy_success == [t.success for t in greedy] and any(rnd.greedy_success) and not all(rnd.greedy_success)
    assert sorted(rnd.branches) == [i for i, t in enumerate(greedy) if branch_before_first_miss(t) is not None]
    assert any(branch_before_first_miss(greedy[i]).actions for i in rnd.branches)  # one starts after a call
    for i, grp in rnd.branches.items():
        point = branch_before_first_miss(greedy[i])
        assert len(grp) == 4 and all(t.task == tasks[i] and t.prefix == point for t in grp)
        for t in grp:
            assert tuple(t.transcript.ids[: len(point.ids)]) == point.ids
            assert sum(t.transcript.action_mask[: len(point.ids)]) == 0  # the replayed prefix is context
            assert len(t.rewards) == len(t.action_spans) >= 1 and t.action_spans[0][0] >= len(point.ids)
    assert branch_returns(list(rnd.branches.values()), 1.0).shape == (len(rnd.branches), 4)
    assert rnd.greedy_returns == {i: t.ret for i, t in enumerate(greedy)}
    # grpo.baseline greedy alone: the same greedy episodes, no branches
    alone = rollout_round(engine, source, tasks, 3, Accelerator(cpu=True), generator=torch.Generator().manual_seed(0),
                          model=policy.model, seed=0, greedy=True)
    assert alone.greedy_returns == rnd.greedy_returns and alone.branches == {}
    counts = branch_counts([rnd], 1.0)
    assert counts["greedy_episodes"] == 5 and counts["branch_groups"] == len(rnd.branches)
    assert counts["branch_episodes"] == 4 * len(rnd.branches)
    assert counts["branch_zero_std"] == sum(len({t.ret for t in grp}) == 1 for grp in rnd.branches.values())

    # the loop: branch metrics logged, the update differs from plain GRPO on the same start rollouts, and a
    # second run with the same seed repeats it exactly
    # (on held-out tasks where some branch group's returns differ in step 1: a real signal, not only more tokens)
    loop_tasks = TaskSampler(default_suite(), DIFFICULTIES["easy"], seed=7).sample_many(6)

    def run(name: str, train_tasks=loop_tasks, **extra: str):
        cfg = tiny_config(task_file, tmp_path / name, steps="1", **extra)
        policy = load_policy(warm_policy)
        grpo_train(cfg, policy, train_tasks, run_dir=cfg.run_dir, accelerator=Accelerator(cpu=True))
        return policy

    plain = run("plain")
    runs = [run(f"branch{k}", **{"rollout.branch_size": "4"}) for k in range(2)]
    rec = [read_jsonl(tmp_path / n / "metrics.jsonl")[0] for n in ("plain", "branch0", "branch1")]
    assert rec[1]["episodes"] == rec[0]["episodes"] == 6 and rec[1]["greedy_episodes"] == 2
    assert rec[1]["branch_episodes"] == 4 * rec[1]["branch_groups"] >= 4
    assert 0.0 <= rec[1]["train_greedy_success"] <= 1.0 and 0.0 <= rec[1]["branch_success"] <= 1.0
    assert 0.0 <= rec[1]["branch_zero_std_frac"] < 1.0
    assert rec[1]["gen_tokens"] > rec[0]["gen_tokens"]  # greedy and branch episodes are generated too
    # a run stopped after step 1 and resumed from its checkpoint ends where an uninterrupted one does
    # (the branch generator is derived from the step, so it needs no saved state)
    def run_to(name: str, steps: int, resume: bool = False, **extra: str):
        cfg = tiny_config(task_file, tmp_path / name, steps=str(steps), **{"rollout.branch_size": "4"}, **extra)
        policy = load_policy(warm_policy)
        grpo_train(cfg, policy, loop_tasks, run_dir=cfg.run_dir, accelerator=Accelerator(cpu=True), resume=resume)
        return policy

    whole = run_to("whole", 2)
    run_to("halves", 1)
    resumed = run_to("halves", 2, resume=True)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(whole.model.parameters(), resumed.model.parameters()))
    halves = read_jsonl(tmp_path / "halves" / "metrics.jsonl")
    assert [r["branch_groups"] for r in halves] == [r["branch_groups"] for r in read_jsonl(tmp_path / "whole" / "metrics.jsonl")]
    # GiGPO's state-grouped action term on top: branch groups join it (another update than branches alone)
    gigpo = run("gigpo", **{"rollout.branch_size": "4", "grpo.action_weight": "1.0", "grpo.action_grouping": "state"})
    assert any(not torch.equal(a, b) for a, b in zip(runs[0].model.parameters(), gigpo.model.parameters()))

    # grpo.baseline greedy (ReMax): a greedy episode per task beside the group, its return the groups' baseline
    from rods_gym.trainer import loop as loop_module

    seen: list = []
    real_advantages = loop_module.group_advantages

    def spy(returns, scale, eps, baseline=None, batch_std=None):
        seen.append((returns, baseline))
        return real_advantages(returns, scale, eps, baseline, batch_std)

    monkeypatch.setattr(loop_module, "group_advantages", spy)
    # (on the seeds, which the warm start solves greedily and not always at T=1.5: groups with spread in step 1)
    remax = run("remax", seed_tasks(), **{"grpo.baseline": "greedy", "rollout.temperature": "1.5"})
    monkeypatch.setattr(loop_module, "group_advantages", real_advantages)
    group_mean = run("group_mean", seed_tasks(), **{"rollout.temperature": "1.5"})
    rec_remax, rec_mean = (read_jsonl(tmp_path / n / "metrics.jsonl")[0] for n in ("remax", "group_mean"))
    assert rec_remax["greedy_episodes"] == 2 and "branch_groups" not in rec_remax and "greedy_episodes" not in rec_mean
    assert rec_remax["episodes"] == rec_mean["episodes"] and rec_remax["gen_tokens"] > rec_mean["gen_tokens"]
    (returns, baseline), = seen
    assert returns.shape == (2, 3) and baseline is not None and baseline.shape == (2,)
    assert all(0.0 <= b <= 1.0 for b in baseline.tolist()) and float(returns.std()) > 0
    # the start rollouts are plain GRPO's (same sampler draws), so a different update is the baseline's doing
    assert rec_remax["reward_mean"] == rec_mean["reward_mean"]
    assert any(not torch.equal(a, b) for a, b in zip(group_mean.model.parameters(), remax.model.parameters()))

    # the augmented twin rewords each episode from its reset seed: branch episodes reset with their greedy
    # episode's seed, so the replayed prefix matches (with each episode's own seed, replay would refuse it)
    run("augment", **{"rollout.branch_size": "3", "data.source": "augment"})
    aug = read_jsonl(tmp_path / "augment" / "metrics.jsonl")[0]
    assert aug["branch_groups"] >= 1 and aug["branch_episodes"] == 3 * aug["branch_groups"]
    assert "branch_groups" not in rec[0]
    assert any(not torch.equal(a, b) for a, b in zip(plain.model.parameters(), runs[0].model.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(runs[0].model.parameters(), runs[1].model.parameters()))
    assert {k: v for k, v in rec[1].items() if k not in TIMING_METRICS} == \
        {k: v for k, v in rec[2].items() if k not in TIMING_METRICS}


def test_greedy_continuation_branches_measure_the_greedy_policy(task_file: Path, warm_policy: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``rollout.branch_continuation: greedy``: a branch episode samples only the action at the branch
    point and decodes greedily after it, only that action trains, and the group starts with the fully
    greedy episode from the branch point; ``rollout.branch_successes`` also branches greedy successes;
    ``grpo.train_start_groups=false`` trains the branch groups alone."""
    from rods_gym.trainer.loop import rollout_round, rollout_settings, source_env_id, source_env_kwargs
    from dataclasses import replace

    from rods_gym.trainer.rollout import RolloutEngine, branch_before_first_miss

    with pytest.raises(ValueError, match="rollout.branch_continuation"):
        load_config(None, ["rollout.branch_continuation=beam"])
    with pytest.raises(ValueError, match="train_start_groups=false.*branch_size is 0"):
        load_config(None, ["grpo.train_start_groups=false"])
    for shape in ("rollout.branch_continuation=greedy", "rollout.branch_successes=true"):
        with pytest.raises(ValueError, match="shape branch groups, but rollout.branch_size is 0"):
            load_config(None, [shape])

    cfg = tiny_config(task_file, tmp_path / "round", **{"rollout.temperature": "1.5"})
    policy = load_policy(warm_policy)
    source = FixedSeeds(seed_tasks(), seed=0)
    engine = RolloutEngine(policy, source_env_id(source, cfg), rollout_settings(cfg), source_env_kwargs(source, cfg))
    held_out = TaskSampler(default_suite(), DIFFICULTIES["easy"], seed=6).sample_many(6)
    tasks = seed_tasks()[:2] + held_out[3:6]  # the warm start solves the first, misses the others (one after a call)

    def one_round(**kw):
        return rollout_round(engine, source, tasks, 3, Accelerator(cpu=True), generator=torch.Generator().manual_seed(0),
                             model=policy.model, seed=0, branch_size=4, branch_continuation="greedy", **kw)

    rnd = one_round()
    greedy, _ = engine.run(tasks, 1, greedy=True, seed=50_000)
    assert sorted(rnd.branches) == [i for i, t in enumerate(greedy) if branch_before_first_miss(t) is not None]
    assert rnd.branches
    for i, grp in rnd.branches.items():
        point = branch_before_first_miss(greedy[i])
        k = len(point.actions)
        assert len(grp) == 5 and all(t.prefix == point and t.trained_actions == 1 for t in grp)
        # the first is the greedy decision itself: it goes on exactly as the greedy episode did
        assert grp[0].rewards == greedy[i].rewards[k:] and grp[0].transcript.ids == greedy[i].transcript.ids
        for t in grp:
            mask = t.transcript.action_mask[:t.trained_end()]  # only the action at the branch point trains
            start, end = t.action_spans[0]
            assert sum(mask) == end - start == sum(t.transcript.action_mask[start:end]) and mask[start:end] == [1] * (end - start)
            assert sum(t.transcript.action_mask) >= sum(mask)
        # after the branch action every episode decodes greedily: each later id is the argmax of the logits
        # before it (up to float near-ties between incremental decoding and one full forward)
        for t in grp:
            with torch.no_grad():
                logits = policy.model(torch.tensor([t.transcript.ids])).logits[0]
            for a, b in t.action_spans[1:]:
                for p in range(a, b):
                    top = logits[p - 1].max()
                    assert t.transcript.ids[p] == int(logits[p - 1].argmax()) or top - logits[p - 1, t.transcript.ids[p]] < 1e-4
    # at T=1.5 some sampled branch action differs from the greedy one and leads elsewhere
    assert any(t.transcript.ids != grp[0].transcript.ids for grp in rnd.branches.values() for t in grp[1:])
    assert sum(len(t.action_spans) > 1 for grp in rnd.branches.values() for t in grp[1:]) >= 3  # tails were checked

    # rollout.branch_successes: every greedy episode that succeeded is branched too, before one of its actions
    both = one_round(branch_successes=True)
    wins = [i for i, t in enumerate(greedy) if t.success]
    assert wins and sorted(both.branches) == sorted(set(rnd.branches) | set(wins))
    for i in wins:
        grp = both.branches[i]
        assert len(grp) == 5 and grp[0].success and len(grp[0].prefix.actions) < greedy[i].turns

    # rollout.branch_oracle: the group's second episode takes the oracle's action at the branch point (never a
    # miss there), with the policy's own log-probs of its ids, and goes on greedily
    from rods_gym.trainer.rollout import MISSES

    guided = one_round(branch_oracle=True)
    assert sorted(guided.branches) == sorted(rnd.branches)
    for i, grp in guided.branches.items():
        assert len(grp) == 6 and grp[0].transcript.ids == rnd.branches[i][0].transcript.ids
        oracle = grp[1]
        start, end = oracle.action_spans[0]
        assert oracle.trained_actions == 1 and oracle.effects[0] not in MISSES
        assert all(lp <= 0.0 for lp in oracle.transcript.logprobs[start:end]) and oracle.transcript.ids[end - 1] == policy.eos_id
    assert any(g[1].transcript.ids != g[0].transcript.ids for g in guided.branches.values())  # it differs from greedy
    # an oracle action the token limit would cut is refused, not forced in part
    short = RolloutEngine(policy, source_env_id(source, cfg), replace(rollout_settings(cfg), max_action_tokens=2),
                          source_env_kwargs(source, cfg))
    with pytest.raises(ValueError, match="over rollout.max_action_tokens=2; raise it"):
        short.run(tasks[:1], 1, greedy=True, then_greedy=True, oracle_first=True)
    with pytest.raises(ValueError, match="branch_oracle=true needs branch groups with greedy continuations"):
        load_config(None, ["rollout.branch_oracle=true", "rollout.branch_size=4"])

    # the loop: with train_start_groups=false only the branch groups' first actions train (fewer update tokens,
    # another update), and the run is deterministic
    loop_tasks = TaskSampler(default_suite(), DIFFICULTIES["easy"], seed=7).sample_many(6)

    from rods_gym.trainer import loop as loop_module

    masks: list = []
    real_make_batch = loop_module.make_batch

    def recorder(ids, action_masks, *args, **kw):
        masks.append([list(m) for m in action_masks])
        return real_make_batch(ids, action_masks, *args, **kw)

    def run(name: str, **extra: str):
        cfg = tiny_config(task_file, tmp_path / name, steps="1", **{"rollout.branch_size": "4",
                                                                    "rollout.branch_continuation": "greedy", **extra})
        policy = load_policy(warm_policy)
        grpo_train(cfg, policy, loop_tasks, run_dir=cfg.run_dir, accelerator=Accelerator(cpu=True))
        return policy, read_jsonl(tmp_path / name / "metrics.jsonl")[0]

    with_start, rec_start = run("start")
    monkeypatch.setattr(loop_module, "make_batch", recorder)
    alone, rec_alone = run("alone", **{"grpo.train_start_groups": "false"})
    monkeypatch.setattr(loop_module, "make_batch", real_make_batch)
    again, _ = run("again", **{"grpo.train_start_groups": "false"})
    # each branch row trains one action and ends with it: one run of ones, the row's last ids (null rows: none)
    rows = [m for m in masks[0] if any(m)]
    assert len(rows) == rec_alone["branch_episodes"]
    for m in rows:
        first = m.index(1)
        assert m[first:] == [1] * (len(m) - first) and sum(m[:first]) == 0
    assert rec_alone["branch_groups"] == rec_start["branch_groups"] >= 1
    assert rec_alone["branch_episodes"] == 5 * rec_alone["branch_groups"]
    assert 0 < rec_alone["trained_tokens"] < rec_start["trained_tokens"]
    assert any(not torch.equal(a, b) for a, b in zip(with_start.model.parameters(), alone.model.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(alone.model.parameters(), again.model.parameters()))


def test_rods_sft_reports_the_jobs_evaluation_and_train_resume_reuses_it(tmp_path: Path, capsys,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """rods sft evaluates its policy as the job does before GRPO (greedy plus eval.samples sampled
    episodes) and saves it as eval_before.json; rods train --resume reports that instead of replaying it,
    and plays the warm start again once eval.* names other samples."""
    from rods_gym.cli import main
    from rods_gym.trainer import pipeline

    run = tmp_path / "run"
    tiny = [f"run_dir={run}", "progress_bar=false", "threads=1", "steps=1", "eval.splits=[dev]", "eval.tasks=3",
            "eval.samples=2", "sft.data=seeds", "sft.demos=8", "sft.steps=2", "sft.batch_size=4", "sft.threads=1",
            "eval.threads=1", "policy.hidden_size=32", "policy.intermediate_size=64", "policy.num_layers=1",
            "policy.num_heads=2", "rollout.tasks_per_step=2", "rollout.group_size=2", "rollout.max_turns=3",
            "rollout.max_action_tokens=8", "sft.skip_last_call=1.0"]
    assert main(["sft", "--run-dir", str(run), *tiny]) == 0
    out = capsys.readouterr().out
    # sft.json counts the teacher's slips: every seed whose last turn needs two or more calls
    from rods_gym.trainer.tasks import load_tasks

    seeds = list(load_tasks("train", load_config(None).data))[:8]
    short = sum(sum(c.turn == len(t.turns) - 1 for c in t.calls) >= 2 for t in seeds)
    assert 0 < short < 8 and json.loads((run / "sft.json").read_text())["skipped_last_call"] == short
    assert f"sft: 8 demonstrations (seeds), {short} of them ending where the teacher skips the last call" in out, out
    saved = json.loads((run / "eval_before.json").read_text())
    dev = saved["dev"]
    assert dev["episodes"] == 3 and dev["sampled"]["samples"] == 2 and dev["sampled"]["episodes"] == 6
    assert f"held-out dev: success {dev['success']:.3f} progress {dev['progress']:.3f}; sampled x2:" in out, out

    calls = []
    real = pipeline.evaluate_sets
    monkeypatch.setattr(pipeline, "evaluate_sets", lambda *a, **k: calls.append(a[5:]) or real(*a, **k))
    assert main(["train", "--run-dir", str(run), "--resume"]) == 0
    assert len(calls) == 1  # only the evaluation after GRPO
    assert json.loads((run / "eval_before.json").read_text()) == saved
    assert read_jsonl(run / "metrics.jsonl")[0]["success"] == pytest.approx(dev["success"])
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = EventAccumulator(str(run / "tensorboard" / "before_after"))
    board.Reload()  # the before point of the rods sft evaluation is charted too, not only the after point
    assert [(e.step, e.value) for e in board.Scalars("eval_dev/success")][0] == (0, pytest.approx(dev["success"]))
    assert [e.step for e in board.Scalars("eval_dev/success")] == [0, 1]

    calls.clear()
    assert main(["train", "--run-dir", str(run), "--resume", "seed=1", "steps=2"]) == 0
    assert len(calls) == 2  # another seed samples another stream: the warm start is played again
    calls.clear()
    assert main(["train", "--run-dir", str(run), "--resume", "eval.samples=0", "steps=3"]) == 0
    assert len(calls) == 2  # the saved evaluation had other samples: the warm start is played again


def test_cross_process_sums_travel_on_the_accelerators_device() -> None:
    """NCCL reduces CUDA tensors only: the loop's sums (stop-at-time vote, token counts, metrics) must be
    reduced on the accelerator's device. A stand-in accelerator on the ``meta`` device records where they are."""
    class TwoProcesses:
        num_processes, device = 2, torch.device("meta")

        def __init__(self) -> None:
            self.seen: list[torch.device] = []

        def reduce(self, tensor: torch.Tensor, reduction: str) -> torch.Tensor:
            assert reduction == "sum"
            self.seen.append(tensor.device)
            return torch.full(tensor.shape, 3.0)  # the sum, as a backend would return it

    acc = TwoProcesses()
    assert summed_over_processes(acc, [1.0, torch.tensor(2)]) == [3.0, 3.0]
    assert acc.seen == [torch.device("meta")]

    class Alone(TwoProcesses):
        num_processes = 1

    alone = Alone()
    assert summed_over_processes(alone, [True, torch.tensor(2), 0.5]) == [1.0, 2.0, 0.5]
    assert alone.seen == []  # one process: nothing is reduced
