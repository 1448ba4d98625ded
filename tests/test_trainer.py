"""The training loop: config files and overrides, task sources, metrics, checkpoints, exact resume, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
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
from rods_gym.curricula import FixedSeeds, TaskSource
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


def record_progress_bars(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every tqdm bar the trainer's phases create from now on (warm start, GRPO, evaluations), kept for checks."""
    from tqdm.auto import tqdm

    from rods_gym.trainer import evaluation, loop, sft

    bars: list = []

    class Recorded(tqdm):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.shown = not self.disable  # close() disables a bar: whether it was shown is kept here
            bars.append(self)

    for module in (evaluation, loop, sft):
        monkeypatch.setattr(module, "tqdm", Recorded)
    return bars


# -- config ---------------------------------------------------------------------------------
def test_train_help_lists_every_shipped_config(capsys) -> None:
    """``rods train --help`` names the shipped configs as the folder holds them (it once listed 5 of 7)."""
    import re

    from rods_gym.cli import main
    from rods_gym.trainer.config import CONFIG_DIR

    for command in ("train", "sft", "evaluate"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
        listed = re.search(r"shipped config name \(([^)]*)\)", text)
        assert listed is not None, text
        assert listed.group(1).split(", ") == sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
        assert {"bfcl_chat", "oracle", "default"} <= set(listed.group(1).split(", "))


def test_the_checks_before_any_work_live_in_one_module() -> None:
    """trainer/preflight.py holds the eight checks a run makes before its warm start (issue 47 item 3); the old
    import path, the pipeline, names the same functions."""
    from rods_gym.trainer import pipeline, preflight

    checks = ["check_lone_launch", "check_policy_for_run", "check_env_difficulty", "check_model_positions",
              "check_action_tokens", "check_view_vocabulary", "check_chat_template", "check_prompts_fit"]
    for name in checks:
        assert getattr(preflight, name).__module__ == "rods_gym.trainer.preflight"
        assert getattr(pipeline, name) is getattr(preflight, name)
    assert not [n for n in vars(pipeline) if n.startswith("check_") and n not in checks and
                getattr(pipeline, n).__module__ == "rods_gym.trainer.pipeline"]


def test_the_grpo_budget_is_a_number_of_steps_in_every_shipped_config() -> None:
    """A wall-clock cap would make a run's result depend on the machine's speed: it stays an option, off by default
    and in every shipped config; the main job's budget is its 60 steps."""
    from rods_gym.trainer.config import CONFIG_DIR

    assert TrainConfig().time_limit_min == 0
    shipped = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    assert len(shipped) >= 7 and {"default", "bfcl_chat", "oracle"} <= set(shipped)
    for name in shipped:
        assert load_config(name).time_limit_min == 0, name
    assert load_config("default").steps == 60
    assert load_config("default", ["time_limit_min=8"]).time_limit_min == 8.0  # still available as an option


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
    with pytest.raises(ValueError, match="data.source='nope': choose one of .*fixed"):
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


def test_config_overrides_as_a_mapping_may_be_dotted_or_nested() -> None:
    cfg = load_config("default", {"grpo.lr": 1e-4, "rollout": {"group_size": 4}, "data.source_options": {"a.b": 1}})
    assert (cfg.grpo.lr, cfg.rollout.group_size, cfg.data.source_options) == (1e-4, 4, {"a.b": 1})
    assert load_config("default", {"grpo": {"lr": 2e-4}}).grpo.lr == 2e-4
    with pytest.raises(ValueError, match="unknown key"):
        load_config("default", {"grpo.lrr": 1e-4})


# -- the loop, checkpoints and resume --------------------------------------------------------
def _run(cfg: TrainConfig, start: Path, resume: bool = False):
    seeds = seed_tasks()
    policy = load_policy(start)
    result = grpo_train(cfg, policy, seeds, run_dir=cfg.run_dir, accelerator=Accelerator(cpu=True), resume=resume)
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
    assert set(state["source"]) == {"name", "rng", "order", "pos", "drawn"} and state["step"] == 2
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
    from rods_gym.curricula import FixedSeeds

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
    bars = record_progress_bars(monkeypatch)
    before = torch.get_num_threads()
    cfg = load_config("chat_tiny", [f"run_dir={tmp_path / 'chat'}", "tensorboard=false", "progress_bar=true",
                                    "eval.splits=[dev]", "eval.tasks=2", "sft.demos=4", "rollout.max_action_tokens=24",
                                    "threads=1", "sft.threads=2", "eval.samples=2"])
    try:
        summary = run_training(cfg)
        assert sft_threads == [2] and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    # every phase that takes a while shows a progress bar, the evaluations before and after GRPO included
    shown = {bar.desc: (bar.n, bar.total) for bar in bars if bar.shown}
    assert set(shown) == {"demonstrations", "sft", "evaluation before GRPO", "grpo", "evaluation after GRPO"}
    assert shown["evaluation before GRPO"] == shown["evaluation after GRPO"] == (6, 6)  # 2 tasks x (1 greedy + 2)
    assert shown["grpo"] == (2, 2)
    out = capsys.readouterr().out
    assert out.startswith(f"run chat_tiny in {tmp_path / 'chat'}/: ")  # the first line names the run directory
    assert out.rstrip().splitlines()[-1].startswith("GRPO ")  # the verdict line ends the job
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


def test_before_after_table_is_in_words_and_pairs_depths_read_back_from_json() -> None:
    """The job's final table: plain-word rows (greedy / sampled said in each), turn types named as reports name
    them, in their order; a resumed run reads ``eval_before.json`` (string depth keys) and each depth still gets one
    row; a stratum one side lacks shows nan there."""
    from rods_gym.task import STRATUM_NAMES
    from rods_gym.trainer.pipeline import results_table

    after = {"test": {"success": 0.5, "progress": 0.6, "per_depth": {1: {"success": 0.75}, 2: {"success": 0.25}},
                      "per_stratum": {"plain": {"success": 0.5}, "missing_tool": {"success": 0.125},
                                      "answer": {"success": 0.375}},
                      "sampled": {"samples": 2, "success": 0.4, "progress": 0.55}}}
    before = json.loads(json.dumps({"test": {"success": 0.25, "progress": 0.5,
                                             "per_depth": {1: {"success": 0.5}, 2: {"success": 0.0}},
                                             "per_stratum": {"plain": {"success": 0.25}, "answer": {"success": 0.25}},
                                             "sampled": {"samples": 2, "success": 0.2, "progress": 0.45}}}))
    table = results_table(before, after, temperature=0.7)
    rows = {" ".join(line.split()[1:-2]): line.split()[-2:] for line in table.splitlines() if line.startswith("test ")}
    assert rows["success (greedy)"] == ["0.250", "0.500"] and rows["progress (greedy)"] == ["0.500", "0.600"]
    assert rows["success at depth 1 (greedy)"] == ["0.500", "0.750"]
    assert rows["success at depth 2 (greedy)"] == ["0.000", "0.250"]
    assert rows["success, information goal (greedy)"] == ["0.250", "0.375"]  # answer, in words
    assert rows["success, withheld tool (greedy)"] == ["nan", "0.125"]
    assert rows["success (sampled, 2 per task at T=0.7)"] == ["0.200", "0.400"]
    assert rows["progress (sampled, 2 per task at T=0.7)"] == ["0.450", "0.550"]
    header = next(line for line in table.splitlines() if line.startswith("split"))
    assert header.split()[-4:] == ["before", "GRPO", "after", "GRPO"]
    assert "success: share of tasks solved; progress: share of a task's required calls made" in table
    # no code names left: turn types in words, in the order reports list them
    assert not any(word in table for word in ("answer", "missing_tool", "multi_turn", "succ T", "prog T"))
    turn_rows = [name for name in rows if name.startswith("success, ")]
    assert turn_rows == ["success, plain (greedy)", "success, information goal (greedy)", "success, withheld tool (greedy)"]
    assert list(STRATUM_NAMES)[:2] == ["plain", "answer"]
    del before["test"]["per_stratum"]  # an eval_before.json written before strata were reported
    assert "success, plain (greedy)" in results_table(before, after, temperature=0.7)


def test_job_ends_with_paired_intervals_a_verdict_and_its_artifacts(tmp_path: Path) -> None:
    """The job's last lines: after - before paired by task with a 95% interval, one verdict line per split (improved /
    lowered / not measurably changed, by the interval's sign), and the files it wrote with how to use each."""
    from rods_gym.trainer.evaluation import paired_difference
    from rods_gym.trainer.pipeline import artifacts_block, verdict_lines

    def evaluation(successes: list[float]) -> dict:
        return {"success": float(np.mean(successes)), "progress": 0.5,
                "per_task": {f"t{i}": [s, 0.5] for i, s in enumerate(successes)}}

    before = {"test": evaluation([0.0] * 100)}
    better = {"test": evaluation([1.0] * 30 + [0.0] * 70)}
    ci = paired_difference(before["test"], better["test"])
    assert ci is not None and ci["diff"] == pytest.approx(0.3) and 0.2 < ci["lo"] < 0.3 < ci["hi"] < 0.4
    assert ci == paired_difference(before["test"], better["test"])  # a seeded bootstrap: the same interval again
    lines = verdict_lines(before, better)
    assert lines[-1] == (f"GRPO improved held-out success by +0.300 [{ci['lo']:+.3f}, {ci['hi']:+.3f}] "
                         "(test, greedy, 100 tasks)")
    assert "after - before, paired by task (95% bootstrap interval over the tasks):" in lines
    same = {"test": evaluation([1.0] + [0.0] * 99)}
    assert verdict_lines(before, same)[-1].startswith("GRPO did not change held-out success measurably: +0.010 [")
    assert verdict_lines(better, before)[-1].startswith("GRPO lowered held-out success by -0.300 [")
    old = {"test": {"success": 0.0, "progress": 0.0}}  # an eval_before.json from before per-task figures
    assert paired_difference(old["test"], better["test"]) is None
    assert "no per-task figures to pair" in "\n".join(verdict_lines(old, better))

    run = tmp_path / "run"
    for d in ("sft_policy", "checkpoints/step-000060/policy"):
        (run / d).mkdir(parents=True)
    (run / "sft_policy" / "config.json").write_text("{}")
    (run / "checkpoints" / "step-000060" / "trainer_state.pt").write_text("")
    block = artifacts_block(load_config("default", [f"run_dir={run}"]), run)
    assert block.splitlines()[1] == f"what the run wrote ({run}/):"
    for name, use in (("sft_policy/", f"rods evaluate --policy {run / 'sft_policy'}"),
                      ("checkpoints/step-000060/policy/",
                       f"rods evaluate --policy {run / 'checkpoints' / 'step-000060' / 'policy'}"),
                      ("tensorboard/", f"tensorboard --logdir {run / 'tensorboard'}"),
                      ("summary.json", ""), ("metrics.jsonl", ""), ("training_curve.png", "")):
        line = next(line for line in block.splitlines() if line.strip().startswith(name))
        assert line.endswith(use)


def test_turn_slack_budgets_training_episodes_only() -> None:
    from rods_gym.trainer.loop import eval_settings, rollout_settings

    cfg = load_config(None, ["rollout.turn_slack=3", "rollout.max_turns=9"])
    assert rollout_settings(cfg).turn_slack == 3
    assert eval_settings(cfg).turn_slack is None and eval_settings(cfg).max_turns == 9


def test_advantage_and_loss_options_change_the_update(task_file: Path, warm_policy: Path,
                                                    tmp_path: Path) -> None:
    """Dr.GRPO's unscaled advantages, sequence aggregation and a KL term train on the same rollouts as plain GRPO
    but update differently."""
    plain, _ = _run(tiny_config(task_file, tmp_path / "plain", steps="1"), warm_policy)
    variants = {"dr_grpo": {"grpo.scale_rewards": "none", "grpo.aggregation": "dr_grpo"},
                "sequence": {"grpo.aggregation": "sequence"}, "kl": {"grpo.beta": "0.5"}}
    for name, overrides in variants.items():
        other, _ = _run(tiny_config(task_file, tmp_path / name, steps="1", **overrides), warm_policy)
        rec = [read_jsonl(tmp_path / n / "metrics.jsonl")[0] for n in ("plain", name)]
        assert rec[0]["gen_tokens"] == rec[1]["gen_tokens"], name  # same rollouts
        assert any(not torch.equal(a, b) for a, b in zip(plain.model.parameters(), other.model.parameters())), name
    for bad in ("grpo.scale_rewards=batch", "grpo.aggregation=mean", "grpo.beta=-1"):
        with pytest.raises(ValueError, match=bad.split("=")[0]):
            load_config(None, [bad])


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
