"""What a user's configuration mistakes cost: early one-line errors, configs built on the shipped ones,
resuming with the run's own saved config, and a run directory that still holds an earlier run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gymnasium as gym
import pytest
import torch
import yaml

import rods_gym  # noqa: F401  (registers the environments)
from rods_gym.cli import build_parser, main, parse_args
from rods_gym.trainer.checkpoint import refuse_stale_checkpoints
from rods_gym.trainer.commands import load_from_args
from rods_gym.trainer.config import load_config, save_config
from rods_gym.trainer.pipeline import run_training
from rods_gym.trainer.policy import load_policy
from rods_gym.trainer.sft import env_mode


def _args(*argv: str):
    return parse_args(build_parser(), list(argv))  # as the CLI parses: overrides may stand after options


def test_a_config_file_can_build_on_a_shipped_one(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text("base: default\nname: mine\nsteps: 5\ngrpo:\n  lr: 1.0e-4\n")
    cfg = load_config(tmp_path / "mine.yaml")
    default = load_config("default")
    assert (cfg.steps, cfg.grpo.lr, cfg.name, cfg.run_dir) == (5, 1e-4, "mine", "runs/mine")  # not runs/default
    # everything it does not set is the main job's, nested sections merged key by key
    assert cfg.grpo.eps_high == default.grpo.eps_high and cfg.data.source == default.data.source == "rods"
    assert cfg.policy.num_layers == default.policy.num_layers == 4
    # a base relative to the file, two levels deep
    (tmp_path / "more.yaml").write_text("base: mine.yaml\nsteps: 7\n")
    assert load_config(tmp_path / "more.yaml").grpo.lr == 1e-4 and load_config(tmp_path / "more.yaml").steps == 7
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ValueError, match="loops"):
        load_config(tmp_path / "a.yaml")
    (tmp_path / "odd.yaml").write_text("base: [default]\n")
    with pytest.raises(ValueError, match="base must be a config name"):
        load_config(tmp_path / "odd.yaml")
    (tmp_path / "lost.yaml").write_text("base: nowhere.yaml\n")
    with pytest.raises(FileNotFoundError, match="neither a file next to it .*nor a shipped config"):
        load_config(tmp_path / "lost.yaml")


def test_mistakes_are_caught_when_the_config_loads() -> None:
    from rods_gym.trainer.sources import make_source

    with pytest.raises(ValueError, match="data.source='rodz': choose one of .*'rods'"):  # where the source is built
        make_source("rodz", load_config(None, ["data.source=rodz"]), [], 0)
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        load_config(None, ["rollout.group_size=1"])
    with pytest.raises(ValueError, match="eval.threads"):
        load_config(None, ["eval.threads=-1"])
    for override, words in (("log_every=0", "log_every must be >= 1"),
                            ("sft.steps=0", "sft.steps must be >= 1 while sft.enabled"),
                            ("grpo.max_grad_norm=-1", "grpo.max_grad_norm must be > 0"),
                            ("sft.max_grad_norm=0", "sft.max_grad_norm must be > 0"),
                            ("grpo.beta=-1", "grpo.beta must be >= 0"),
                            ("grpo.warmup_steps=-3", "grpo.warmup_steps must be >= 0"),
                            ("grpo.lr=-1e-4", "grpo.lr must be >= 0"),
                            ("rollout.turn_slack=-5", "rollout.turn_slack must be >= 0 or null"),
                            ("policy.num_layers=0", "policy.num_layers must be >= 1, got 0"),
                            ("time_limit_min=-1", "time_limit_min must be >= 0, got -1.0"),
                            ("steps=-5", "steps must be >= 0, got -5"),
                            ("grpo.lr=nan", "grpo.lr: expected a finite number, got nan"),
                            ("name=", "config name='': a run's name must be a non-empty word"),
                            ("name=a/b", "config name='a/b'"),
                            ("rollout.temperature=.inf", "rollout.temperature: expected a finite number"),
                            ("sft.lr=-inf", "sft.lr: expected a finite number"),
                            ("sft.demos=0", "sft.demos must be >= 1 while sft.enabled")):
        with pytest.raises(ValueError, match=words):
            load_config(None, [override])
    with pytest.raises(IsADirectoryError, match="is a directory; give a YAML file"):
        load_config(Path(__file__).parent)
    assert load_config(None, ["sft.steps=0", "sft.enabled=false"]).sft.steps == 0  # no warm start: no steps needed


def test_bare_overrides_may_follow_options_and_a_new_name_moves_the_run(capsys) -> None:
    args = parse_args(build_parser(), ["train", "steps=2", "--run-dir", "/tmp/x", "sft.steps=3", "--set", "seed=4",
                                       "eval.tasks=5"])
    cfg = load_from_args(args)
    assert (cfg.steps, cfg.sft.steps, cfg.seed, cfg.eval.tasks, cfg.run_dir) == (2, 3, 4, 5, "/tmp/x")
    with pytest.raises(SystemExit):  # a stray word is still an error, naming it
        parse_args(build_parser(), ["train", "steps=2", "--run-dir", "/tmp/x", "oops"])
    assert "unrecognized arguments: oops" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a command without overrides takes none
        parse_args(build_parser(), ["skills", "a=1"])
    capsys.readouterr()
    # name= on the command line moves the default run directory with it; an explicit run_dir wins
    assert load_config("default", ["name=foo"]).run_dir == "runs/foo"
    assert load_config("default", ["name=foo", "run_dir=/tmp/y"]).run_dir == "/tmp/y"
    assert load_config("seeds", ["name=bar"]).run_dir == "runs/bar"
    assert load_config(None, ["name=baz"]).run_dir == "runs/baz"


def test_the_oracle_config_is_the_main_job_with_a_perfect_teacher() -> None:
    """``--config oracle`` differs from the default only in its name, run dir and teacher; the configs whose
    recorded figures were measured with a perfect teacher (seeds, typed, the benchmarks' scales) keep one."""
    import dataclasses

    default, oracle = load_config("default"), load_config("oracle")
    assert default.sft.skip_last_call == 0.6 and oracle.sft.skip_last_call == 0.0
    same = dataclasses.replace(oracle, name=default.name, run_dir=default.run_dir,
                               sft=dataclasses.replace(oracle.sft, skip_last_call=default.sft.skip_last_call))
    assert same == default
    assert load_config("seeds").sft.skip_last_call == load_config("typed").sft.skip_last_call == 0.0
    bench = Path(__file__).resolve().parents[1] / "benchmarks" / "configs"
    for scale in ("smoke", "cpu"):
        assert yaml.safe_load((bench / f"{scale}.yaml").read_text())["train"]["config"] == "oracle", scale


def test_a_shipped_config_name_is_not_shadowed_by_a_local_file_or_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "seeds").write_text("# my notes\n")  # a file named like a shipped config
    (tmp_path / "typed").mkdir()  # a run folder named like one
    shipped_seeds = load_config("seeds")
    assert shipped_seeds.name == "seeds" and load_config("typed").data.slot_ids == "typed"
    (tmp_path / "seeds").write_text("base: default\nname: mine\nsteps: 3\n")
    mine = load_config("./seeds")  # a path reads the local file
    assert mine.name == "mine" and mine.steps == 3 and load_config("seeds") == shipped_seeds
    (tmp_path / "child.yaml").write_text("base: seeds\nname: child\n")  # base: follows the same rule
    assert load_config("child.yaml").sft.data == shipped_seeds.sft.data and load_config("child.yaml").steps != 3
    (tmp_path / "child2.yaml").write_text("base: ./seeds\nname: child2\n")
    assert load_config("child2.yaml").steps == 3
    (tmp_path / "only_here").write_text("base: default\nname: here\n")
    assert load_config("only_here").name == "here"  # no shipped config of that name: the local file


def test_a_config_file_without_a_base_is_noted(tmp_path: Path, capsys) -> None:
    (tmp_path / "bare.yaml").write_text("steps: 2\n")
    (tmp_path / "based.yaml").write_text("base: default\nsteps: 2\n")
    save_config(load_config("default"), tmp_path / "saved.yaml")  # a run's saved config: every field set
    cfg = load_from_args(_args("train", "--config", str(tmp_path / "bare.yaml")))
    assert cfg.data.source == "fixed"  # the code's default, not the main job's rods
    captured = capsys.readouterr()  # on stderr: rods evaluate --json keeps stdout for its JSON
    assert "has no 'base:', so every field it does not set takes the code's default" in captured.err
    assert captured.out == ""
    for quiet in ("based.yaml", "saved.yaml"):
        load_from_args(_args("train", "--config", str(tmp_path / quiet)))
        assert "has no 'base:'" not in capsys.readouterr().err, quiet
    load_from_args(_args("train", "--config", "seeds"))  # a shipped config
    assert "has no 'base:'" not in capsys.readouterr().err


def test_list_fields_take_one_value_and_overrides_name_their_form() -> None:
    assert load_config("default", ["eval.splits=test"]).eval.splits == ("test",)
    assert load_config("default", ["eval.splits=[test,dev]"]).eval.splits == ("test", "dev")
    with pytest.raises(ValueError, match=r"eval.splits: expected a list, got 'test,dev' \(on the command line: "
                                         r"eval.splits=\[a,b\]\)"):
        load_config("default", ["eval.splits=test,dev"])  # not one split named "test,dev"
    with pytest.raises(ValueError, match=r"grpo.adam_betas: expected a list, got 0.9 \(on the command line"):
        load_config("default", ["grpo.adam_betas=0.9"])  # a fixed-length list still needs its values
    with pytest.raises(ValueError, match=r"override 'grpo' must look like key=value \(e.g. steps=50 or grpo.lr=1e-4\)"):
        load_config("default", ["grpo"])


def test_paths_a_command_cannot_write_are_one_line_errors(tmp_path: Path, capsys) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    for argv, words in ((["train", "--run-dir", str(afile), "steps=1"], f"{afile} is a file, where a directory is needed"),
                        (["synth", "--n", "2", "--out", str(afile / "x.jsonl")], str(afile)),
                        (["tasksets", "build", "--out", str(afile / "ts")], str(afile))):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"rods {argv[0]}: error:" in err and words in err and "Traceback" not in err, err
        assert "RODS_TRACEBACK=1" in err


def test_the_cli_reports_a_config_mistake_in_one_line(capsys) -> None:
    for argv, words in ((["train", "nonsense=1"], "unknown key(s) ['nonsense']"),
                        (["train", "data.source=rodz"], "choose one of"),
                        (["sft", "--config", "no-such-config"], "neither a file nor a shipped config"),
                        (["evaluate", "sft.steps=x"], "sft.steps: expected int"),
                        (["train", "sft.skip_last_call=1.5"], "sft.skip_last_call must be a probability"),
                        (["train", "eval.every=-1"], "eval.every must be >= 0"),
                        (["train", "grpo.adv_eps=-1"], "grpo.adv_eps must be > 0"),
                        (["train", "grpo.adam_betas=[2,3]"], "grpo.adam_betas must lie in [0, 1)"),
                        (["train", "policy.num_heads=3"], "policy.hidden_size=128 must be a multiple of policy.num_heads=3"),
                        (["train", "seed=-1"], "config seed must be >= 0"),
                        (["sft", "sft.data_seed=-1"], "config sft.data_seed must be >= 0"),
                        (["train", "eval.splits=[]"], "eval.splits=[]: name at least one split")):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and f"rods {argv[0]}: error:" in err and words in err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_what_a_run_reads_is_checked_before_any_work_in_one_line(tmp_path: Path, capsys) -> None:
    """Env ids, task sets, models and a source's options fail before the warm start, and the run
    directory stays empty; the evaluate and sft commands check what they read the same way."""
    (tmp_path / "broken.yaml").write_text("steps: [1, 2\n")
    run = tmp_path / "run"
    for argv, words in ((["train", "--env", "rods/NoSuch-v0"], "data.env_id 'rods/NoSuch-v0'"),
                        (["train", "data.source_options={bogus: 1}"], "data.source_options (data.source=rods): unknown option(s) ['bogus']"),
                        (["train", "data.source=augment", "data.source_options={augment: {bogus: 1}}"],
                         "data.source_options (data.source=augment): augment: unknown option(s) ['bogus']; it takes ["),
                        (["train", "data.source=augment", "data.source_options={augment: 3}"],
                         "augment must be a mapping of AugmentConfig fields"),
                        (["train", "data.source=augment", "data.source_options={augment: {error_hints: 5}}"],
                         "AugmentConfig.error_hints must lie in [0, 1], got 5"),
                        (["train", "data.source_options={kappa: notanumber}"], "RODSConfig.kappa must be float"),
                        (["train", "data.source_options={capacity: 100}"], "RODSConfig.capacity=100 leaves no room"),
                        (["train", "data.source=replay_only", "data.source_options={synth_every: 3}"],
                         "the replay_only ablation never synthesizes, so ['synth_every'] would do nothing"),
                        (["train", "eval.splits=[nosuch]"], "task set 'nosuch' is neither a split name"),
                        (["train", "data.train_split=trian"], "task set 'trian'"),
                        (["train", "--model", str(tmp_path / "no-model")], "no such directory"),
                        (["train", "policy.model=nonexist"], "not a local directory and not in the Hugging Face cache"),
                        (["train", "--config", str(tmp_path / "broken.yaml")], "line 2, column 1: not valid YAML"),
                        (["sft", "--env", "gibberish"], "data.env_id 'gibberish'"),
                        (["evaluate", "--splits", "nosuch", "--tasks", "2"], "task set 'nosuch'"),
                        (["evaluate", "--tasks", "0"], "--tasks must be >= 1"),
                        (["evaluate", "--splits", "test,,dev", "--tasks", "2"], "--splits 'test,,dev': an empty name"),
                        (["train", "eval.splits=[.]"], "task set '.' is neither a split name")):
        with pytest.raises(SystemExit) as exit_info:
            main([*argv, "--run-dir", str(run)])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and f"rods {argv[0]}: error:" in err and words in err, (argv, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert not run.exists() or not any(run.iterdir()), (argv, sorted(run.iterdir()))


def test_an_action_budget_shorter_than_the_longest_compact_call_is_warned_about() -> None:
    """Typed slot ids take two tokens each, so the default 16 cannot hold a six-parameter call (21 tokens
    with its stop token). The typed config's 24 and the default view's 16 fit."""
    from rods_gym.trainer.pipeline import prepare_inputs
    from rods_gym.trainer.preflight import check_action_tokens

    for overrides, need in ((["data.slot_ids=typed"], 21),):
        with pytest.warns(UserWarning, match=f"max_action_tokens=16 cuts .* set it to at least {need}"):
            prepare_inputs(load_config("default", overrides), check_source=False)
    for name, overrides in (("default", []), ("typed", []),
                            ("default", ["data.slot_ids=typed", "rollout.max_action_tokens=21"])):
        cfg = load_config(name, overrides)
        assert check_action_tokens(cfg, prepare_inputs(cfg, check_source=False).policy, "compact") is None
    assert check_action_tokens(load_config("default", ["data.slot_ids=typed"]), None, "chat") is None  # compact only


def test_the_cli_prints_a_warning_of_what_it_reads_in_one_line(tmp_path: Path, capsys) -> None:
    main(["evaluate", "data.slot_ids=typed", "policy.num_layers=1", "--splits", "dev", "--tasks", "1",
          "--run-dir", str(tmp_path), "--model", "tiny"])
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warned == ["rods evaluate: warning: rollout.max_action_tokens=16 cuts the compact view's longest call short "
                      "(21 tokens with data.slot_ids=typed); set it to at least 21 unless the run's tasks never call "
                      "a tool with that many parameters"]


def test_a_warning_raised_during_training_is_one_line_too(tmp_path: Path, capsys, monkeypatch) -> None:
    import warnings

    import rods_gym.trainer.pipeline as pipeline

    def training(cfg, resume=False, inputs=None):  # a warning once the work has begun, e.g. from the rollouts
        warnings.warn("the first prompt of 1 of 8 episodes exceeds rollout.max_context", stacklevel=2)
        warnings.warn("some deprecation", DeprecationWarning, stacklevel=2)  # not ours to reword
        return {"done": True}

    monkeypatch.setattr(pipeline, "run_training", training)
    before = warnings.showwarning
    assert main(["train", "--run-dir", str(tmp_path / "run"), "steps=1", "eval.tasks=1"]) == 0
    err = capsys.readouterr().err
    assert "rods train: warning: the first prompt of 1 of 8 episodes exceeds rollout.max_context\n" in err
    assert "UserWarning" not in err and "warnings.warn(" not in err
    assert "rods train: warning: some deprecation" not in err  # other categories keep Python's (or pytest's) form
    assert warnings.showwarning is before  # restored after the command


def _fake_checkpoint(run_dir: Path, step: int) -> None:
    ckpt = run_dir / "checkpoints" / f"step-{step:06d}"
    ckpt.mkdir(parents=True)
    torch.save({"step": step}, ckpt / "trainer_state.pt")


def test_resume_continues_with_the_runs_saved_config(tmp_path: Path, capsys, monkeypatch) -> None:
    run = tmp_path / "run"
    run.mkdir()
    save_config(load_config("default", [f"run_dir={run}", "steps=2", "eval.tasks=8"]), run / "config.yaml")
    cfg = load_from_args(_args("train", "--run-dir", str(run), "--resume"))
    assert (cfg.steps, cfg.eval.tasks) == (2, 8)  # not the default's 60 steps and 400 tasks
    assert capsys.readouterr().out.strip() == f"resume: the run's saved config ({run / 'config.yaml'})"
    cfg = load_from_args(_args("train", "--run-dir", str(run), "--resume", "steps=3"))
    assert (cfg.steps, cfg.eval.tasks) == (3, 8) and "steps: 2 -> 3" in capsys.readouterr().out
    # --config only locates the directory; the saved config wins
    cfg = load_from_args(_args("train", "--run-dir", str(run), "--resume", "--config", "chat_tiny"))
    assert "Compact" in cfg.data.env_id and cfg.steps == 2 and "only located the run directory" in capsys.readouterr().out
    # a run directory copied elsewhere resumes there, not in the directory its saved config names
    moved = tmp_path / "moved"
    shutil.copytree(run, moved)
    assert load_from_args(_args("train", "--run-dir", str(moved), "--resume")).run_dir == str(moved)
    capsys.readouterr()
    # without --run-dir: the config's own directory (runs/<name>), found relative to the working directory
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "default").mkdir(parents=True)
    shutil.copy(run / "config.yaml", tmp_path / "runs" / "default" / "config.yaml")
    cfg = load_from_args(_args("train", "--resume"))
    assert (cfg.run_dir, cfg.steps, cfg.eval.tasks) == ("runs/default", 2, 8)
    # no config saved there, only a copied warm start: the command line's config, and it says so
    (tmp_path / "new" / "sft_policy").mkdir(parents=True)
    fresh = load_from_args(_args("train", "--run-dir", str(tmp_path / "new"), "--resume", "steps=4"))
    assert fresh.steps == 4 and "no saved config.yaml" in capsys.readouterr().out
    # nothing to resume (a mistyped --run-dir): an error, before a new run starts there
    for empty in (tmp_path / "typo", tmp_path / "runs"):
        with pytest.raises(ValueError, match="holds no run to resume"):
            load_from_args(_args("train", "--run-dir", str(empty), "--resume"))
    assert not (tmp_path / "typo").exists()
    # warm-start fields changed on resume once the warm start is done: ignored and said so, so that the config
    # the run saves stays what it ran with
    (run / "sft_policy").mkdir()
    (run / "sft_policy" / "config.json").write_text("{}")
    saved = load_config(run / "config.yaml")
    cfg = load_from_args(_args("train", "--run-dir", str(run), "--resume", "sft.steps=7", "sft.lr=1", "steps=5"))
    assert (cfg.sft.steps, cfg.sft.lr, cfg.steps) == (saved.sft.steps, saved.sft.lr, 5)
    assert "sft.lr, sft.steps are ignored" in capsys.readouterr().out


def test_a_new_run_refuses_an_earlier_runs_checkpoints(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    _fake_checkpoint(run, 60)
    refuse_stale_checkpoints(run, resume=True)  # resuming it is what they are for
    refuse_stale_checkpoints(tmp_path / "elsewhere", resume=False)
    with pytest.raises(ValueError, match="earlier run \\(latest: step-000060\\).*--resume"):
        refuse_stale_checkpoints(run, resume=False)
    # before any work: the job stops before its warm start, the CLI in one line
    with pytest.raises(ValueError, match="earlier run"):
        run_training(load_config("default", [f"run_dir={run}"]))
    assert not (run / "sft_policy").exists()
    with pytest.raises(SystemExit):
        main(["train", "--run-dir", str(run)])
    assert "earlier run" in capsys.readouterr().err


def test_the_launch_is_checked_before_any_work(tmp_path: Path, capsys, monkeypatch) -> None:
    """Under 2 processes (WORLD_SIZE, as accelerate launch sets it) a step's tasks must split evenly, and a
    checkpoint resumes only under as many processes as wrote it; both in one line, before the warm start."""
    run = tmp_path / "run"
    monkeypatch.setenv("WORLD_SIZE", "2")
    for argv, words in ((["train", "rollout.tasks_per_step=3"], "tasks_per_step=3 must be divisible by the number "
                                                               "of processes (2)"),):
        with pytest.raises(SystemExit) as exit_info:
            main([*argv, "--run-dir", str(run)])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and words in err and len(err.strip().splitlines()) == 1, err
        assert not run.exists()
    _fake_checkpoint(run, 4)
    torch.save({}, run / "checkpoints" / "step-000004" / "rng-rank0.pt")  # written by one process
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--run-dir", str(run), "--resume"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "written by 1 process(es); resume it with 1 (this run has 2)" in err, err
    assert not (run / "sft_policy").exists() and not (run / "config.yaml").exists()


def test_resuming_a_warm_start_with_other_settings_fails_before_any_work(tmp_path: Path, capsys) -> None:
    from rods_gym.trainer.sft import SFT_SETTINGS, sft_settings

    run = tmp_path / "run"
    cfg = load_config("default", [f"run_dir={run}", "sft.steps=50"])
    run.mkdir()
    save_config(cfg, run / "config.yaml")
    (run / "sft_checkpoint").mkdir()
    (run / "sft_checkpoint" / SFT_SETTINGS).write_text(json.dumps(sft_settings(cfg.sft, cfg.seed)))
    for command in ("train", "sft"):
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--run-dir", str(run), "--resume", "sft.lr=1e-4"])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and "sft.lr: 0.003 there, 0.0001 now" in err, err
        assert len(err.strip().splitlines()) == 1
    assert not (run / "sft_policy").exists()


def test_sft_refuses_to_replace_the_warm_start_of_a_grpo_run(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    _fake_checkpoint(run, 25)
    with pytest.raises(SystemExit) as exit_info:
        main(["sft", "--run-dir", str(run)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "holds a GRPO run (latest checkpoint: step-000025)" in err, err
    assert not (run / "sft_policy").exists() and not (run / "config.yaml").exists()


def test_a_new_run_refuses_to_throw_away_a_warm_start(tmp_path: Path, capsys) -> None:
    from rods_gym.trainer.config import PolicyConfig
    from rods_gym.trainer.policy import build_tiny_policy, save_policy

    finished, interrupted = tmp_path / "finished", tmp_path / "interrupted"
    tiny = PolicyConfig(hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2, max_positions=256)
    save_policy(build_tiny_policy(tiny, "compact"), finished / "sft_policy")
    (interrupted / "sft_checkpoint").mkdir(parents=True)
    before = {p: sorted(x.name for x in p.rglob("*")) for p in (finished, interrupted)}
    cases = [("train", finished, "holds a finished warm start", "rods train --run-dir {d} --resume runs GRPO from it"),
             ("sft", finished, "holds a finished warm start", "rods sft --run-dir {d} --resume keeps it"),
             ("train", interrupted, "holds an interrupted warm start", "continue it with rods train --run-dir {d} --resume"),
             ("sft", interrupted, "holds an interrupted warm start", "continue it with rods sft --run-dir {d} --resume")]
    for command, run, what, how in cases:
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--run-dir", str(run)])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and what in err and how.format(d=run) in err, err
    assert before == {p: sorted(x.name for x in p.rglob("*")) for p in (finished, interrupted)}  # nothing written
    # --resume is the way on, and is not refused
    from rods_gym.trainer.commands import refuse_replacing_warm_start

    refuse_replacing_warm_start(finished, resume=True, command="train")


def test_resume_refuses_changes_to_what_the_weights_were_trained_for(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    _fake_checkpoint(run, 4)
    save_config(load_config("default", [f"run_dir={run}", "steps=8"]), run / "config.yaml")
    for change, shown in ((["--model", "Qwen/Qwen2.5-0.5B"], "policy.model: 'tiny' -> 'Qwen/Qwen2.5-0.5B'"),
                          (["policy.hidden_size=32"], "policy.hidden_size: 128 -> 32"),
                          (["--env", "rods/ToolChain-Easy-Chat-v0"], "data.env_id: 'rods/ToolChain-Compact-v0' ->"),
                          (["data.slot_ids=typed"], "data.slot_ids: 'ordered' -> 'typed'"),
                          (["lora.rank=8"], "lora.rank: 0 -> 8"),
                          (["lora.target_modules=[q_proj]"], "lora.target_modules: ['all-linear'] -> ['q_proj']")):
        with pytest.raises(ValueError, match="would change what the run's saved weights are") as info:
            load_from_args(_args("train", "--run-dir", str(run), "--resume", *change))
        assert shown in str(info.value)
    # how the weights load, another environment of the same view, ordered -> shuffled ids, and the rest may change
    cfg = load_from_args(_args("train", "--run-dir", str(run), "--resume", "policy.dtype=bfloat16", "steps=12",
                               "--env", "rods/ToolChain-Easy-Compact-v0", "data.slot_ids=shuffled",
                               "policy.gradient_checkpointing=true", "lora.dropout=0.1"))
    assert (cfg.policy.dtype, cfg.steps, cfg.data.slot_ids) == ("bfloat16", 12, "shuffled")
    assert cfg.policy.gradient_checkpointing and cfg.lora.dropout == 0.1
    # LoRA's shape is free while no GRPO checkpoint holds adapters (a finished warm start alone)
    warm_only = tmp_path / "warm_only"
    (warm_only / "sft_policy").mkdir(parents=True)
    (warm_only / "sft_policy" / "config.json").write_text("{}")
    save_config(load_config("default", [f"run_dir={warm_only}"]), warm_only / "config.yaml")
    assert load_from_args(_args("train", "--run-dir", str(warm_only), "--resume", "lora.rank=8")).lora.rank == 8
    # a warm start under way (its checkpoint, no sft_policy/ yet) keeps training its weights the way it began
    midway = tmp_path / "midway"
    (midway / "sft_checkpoint").mkdir(parents=True)
    save_config(load_config("default", [f"run_dir={midway}"]), midway / "config.yaml")
    with pytest.raises(ValueError, match="lora.sft: False -> True would change what the run's saved weights are"):
        load_from_args(_args("train", "--run-dir", str(midway), "--resume", "lora.rank=4", "lora.sft=true"))
    # ... and a warm start under way through adapters keeps their shape
    save_config(load_config("default", [f"run_dir={midway}", "lora.rank=4", "lora.sft=true"]), midway / "config.yaml")
    with pytest.raises(ValueError, match="lora.rank: 4 -> 8 would change"):
        load_from_args(_args("train", "--run-dir", str(midway), "--resume", "lora.rank=8"))
    with pytest.raises(ValueError, match="lora.sft with policy.dtype=bfloat16: merging"):
        load_config("default", ["lora.rank=4", "lora.sft=true", "policy.dtype=bfloat16"])
    capsys.readouterr()


def test_evaluate_refuses_a_run_dir_without_a_policy(tmp_path: Path, capsys) -> None:
    """A mistyped --run-dir must not quietly evaluate a freshly initialised model."""
    (tmp_path / "empty").mkdir()
    for run, what in ((tmp_path / "nope", "does not exist"), (tmp_path / "empty", "holds no trained policy")):
        with pytest.raises(SystemExit) as exit_info:
            main(["evaluate", "--run-dir", str(run), "--tasks", "2"])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and f"--run-dir {run} {what}" in err, err
    assert not (tmp_path / "nope").exists() and not any((tmp_path / "empty").iterdir())


def test_a_saved_evaluation_is_reused_only_for_the_same_tasks_and_samples() -> None:  # and sampled stream
    from rods_gym.trainer.pipeline import same_evaluation

    tasks = {"test": [object()] * 4}
    saved = {"test": {"episodes": 4, "success": 0.5, "sampled": {"samples": 2, "seed": 0, "episodes": 8}}}
    assert same_evaluation(saved, tasks, 2)
    assert not same_evaluation(saved, tasks, 2, seed=1)  # another run seed samples another stream
    assert not same_evaluation(saved, tasks, 0)  # eval.samples changed
    assert not same_evaluation(saved, {"test": [object()] * 12}, 2)  # eval.tasks changed
    assert not same_evaluation(saved, {**tasks, "dev": [object()] * 4}, 2)  # eval.splits changed
    assert same_evaluation({"test": {"episodes": 4}}, tasks, 0)


def test_paths_splits_and_envs_that_do_not_exist_are_named(tmp_path: Path, monkeypatch, capsys) -> None:
    for missing in (tmp_path / "nope", str(tmp_path / "nope"), "runs/x/sft_policy", "./nope", "~/rods-gym-no-such-dir"):
        with pytest.raises(FileNotFoundError, match="no such directory"):
            load_policy(missing)
    # a saved policy under ~ loads (the path is expanded before transformers sees it)
    from rods_gym.trainer.config import PolicyConfig
    from rods_gym.trainer.policy import build_tiny_policy, save_policy

    tiny = PolicyConfig(hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2, max_positions=1024)  # holds the default rollout.max_context
    save_policy(build_tiny_policy(tiny, "compact"), tmp_path / "home" / "pol")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert load_policy("~/pol").name == str(tmp_path / "home" / "pol")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:  # rods evaluate: one line
        main(["evaluate", "--policy", str(tmp_path / "nope"), "--tasks", "1"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "rods evaluate: error:" in err and "no such directory" in err and "Traceback" not in err
    # a compact policy in the structured view: refused in one line; in the chat view: refused too, since the
    # embedded model records its view; a policy without that record (saved before it existed) is refused there
    # by the chat-template probe (its template does not render tools), and in the compact view with other slot
    # ids it runs, with a warning that its tokenizer does not know that view's text
    pol = str(tmp_path / "home" / "pol")
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--policy", pol, "--tasks", "1", "--env", "rods/ToolChain-Structured-v0"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "uses the 'structured' view; LLM policies need one of" in err
    assert "Traceback" not in err
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--policy", pol, "--tasks", "1", "--env", "rods/ToolChain-Chat-v0"])
    assert exit_info.value.code == 2 and "was built for the compact view" in capsys.readouterr().err
    untagged = tmp_path / "untagged"
    shutil.copytree(pol, untagged)
    config = json.loads((untagged / "config.json").read_text())
    del config["rods_gym_view"]
    (untagged / "config.json").write_text(json.dumps(config))
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--policy", str(untagged), "--tasks", "1", "--env", "rods/ToolChain-Chat-v0"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "ignores the tools" in err and "Traceback" not in err
    assert main(["evaluate", "--policy", str(untagged), "--tasks", "1", "data.slot_ids=typed",
                 "rollout.max_turns=1", "rollout.max_action_tokens=2"]) == 0
    assert "rods evaluate: warning: the policy's tokenizer" in capsys.readouterr().err
    assert main(["evaluate", "--policy", pol, "--tasks", "1", "rollout.max_turns=1", "rollout.max_action_tokens=2"]) == 0
    assert "does not know" not in capsys.readouterr().err  # its own view
    # --samples: sampled episodes beside the greedy one, as the job's own evaluation reports them (default: none)
    assert main(["evaluate", "--policy", pol, "--tasks", "2", "--splits", "dev", "rollout.max_turns=1",
                 "rollout.max_action_tokens=2", "--samples", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["dev"]
    assert result["episodes"] == 2 and result["sampled"]["samples"] == 3 and result["sampled"]["episodes"] == 6
    assert main(["evaluate", "--policy", pol, "--tasks", "2", "--splits", "dev", "rollout.max_turns=1",
                 "rollout.max_action_tokens=2", "--json"]) == 0
    assert "sampled" not in json.loads(capsys.readouterr().out)["dev"]
    with pytest.raises(FileNotFoundError, match="neither a split name .*train, dev, test, ood"):
        gym.make("rods/ToolChain-v0", task_set="validation")
    with pytest.raises(ValueError, match="not a rods_gym tool-use environment"):
        env_mode("CartPole-v1")


def test_evaluate_finds_a_runs_latest_policy(tmp_path: Path, capsys, monkeypatch) -> None:
    from rods_gym.trainer.checkpoint import latest_policy
    from rods_gym.trainer.config import PolicyConfig
    from rods_gym.trainer.policy import build_tiny_policy, save_policy

    run = tmp_path / "run"
    assert latest_policy(run) is None
    tiny = PolicyConfig(hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2, max_positions=1024)
    save_policy(build_tiny_policy(tiny, "compact"), run / "sft_policy")
    assert latest_policy(run) == run / "sft_policy"
    _fake_checkpoint(run, 3)
    assert latest_policy(run) == run / "sft_policy"  # a checkpoint without a saved policy is skipped
    save_policy(build_tiny_policy(tiny, "compact"), run / "checkpoints" / "step-000003" / "policy")
    assert latest_policy(run) == run / "checkpoints" / "step-000003" / "policy"
    capsys.readouterr()
    assert main(["evaluate", "--run-dir", str(run), "--tasks", "2", "--splits", "dev"]) == 0
    captured = capsys.readouterr()
    assert f"evaluating {run / 'checkpoints' / 'step-000003' / 'policy'}" in captured.err
    assert captured.out.startswith("dev ") and "(2 tasks)" in captured.out
    assert main(["evaluate", "--run-dir", str(run), "--tasks", "5", "--splits", "dev", "--samples", "2"]) == 0
    greedy, sampled = capsys.readouterr().out.strip().splitlines()  # both per depth and per turn type
    assert sampled.startswith("dev    sampled x2 at T=") and "(10 episodes)" in sampled
    for line in (greedy, sampled):
        assert " depth 1 " in line and " withheld tool " in line and " plain " in line, line  # turn types in words
    # a run is evaluated with its own config: its environment, env settings and limits, unless overridden
    save_config(load_config("default", [f"run_dir={run}", "data.env_id=rods/ToolChain-Easy-Compact-v0",
                                        "data.slot_ids=shuffled", "data.env_max_steps=9", "rollout.max_turns=3"]),
                run / "config.yaml")
    import rods_gym.trainer.loop as loop

    seen: list = []
    real = loop.evaluation_engine

    def spy(cfg, policy):  # what the evaluation's engine was built with
        engine = real(cfg, policy)
        seen.append((engine.env_id, engine.env_kwargs, engine.settings.max_turns))
        return engine

    monkeypatch.setattr(loop, "evaluation_engine", spy)
    assert main(["evaluate", "--run-dir", str(run), "--tasks", "2", "--splits", "dev"]) == 0
    assert "in rods/ToolChain-Easy-Compact-v0 with the run's config" in capsys.readouterr().err
    assert seen == [("rods/ToolChain-Easy-Compact-v0", {"max_steps": 9, "slot_ids": "shuffled"}, 3)]
    assert main(["evaluate", "--run-dir", str(run), "--tasks", "2", "--splits", "dev", "rollout.max_turns=2",
                 "--env", "rods/ToolChain-Compact-v0"]) == 0
    assert seen[-1] == ("rods/ToolChain-Compact-v0", {"max_steps": 9, "slot_ids": "shuffled"}, 2)
    # --policy inside a run (its warm start, a checkpoint's policy/, or the checkpoint itself): the run's config too
    for given in (run / "sft_policy", run / "checkpoints" / "step-000003" / "policy", run / "checkpoints" / "step-000003"):
        assert main(["evaluate", "--policy", str(given), "--tasks", "2", "--splits", "dev"]) == 0
        assert f"with the run's config ({run.resolve() / 'config.yaml'}" in capsys.readouterr().err
        assert seen[-1] == ("rods/ToolChain-Easy-Compact-v0", {"max_steps": 9, "slot_ids": "shuffled"}, 3)
    assert main(["evaluate", "--policy", str(run / "sft_policy"), "--config", "default", "--tasks", "2",
                 "--splits", "dev"]) == 0  # --config wins
    assert "with the run's config" not in capsys.readouterr().err
    assert seen[-1][0] == "rods/ToolChain-Compact-v0" and seen[-1][2] == 16
    monkeypatch.setenv("HOME", str(tmp_path))  # a quoted ~ path (the shell did not expand it) finds the run too
    assert main(["evaluate", "--policy", "~/run/checkpoints/step-000003", "--tasks", "2", "--splits", "dev"]) == 0
    assert "with the run's config" in capsys.readouterr().err and seen[-1][2] == 3
    with pytest.raises(SystemExit):  # a hub name is still a hub name, not a missing local directory
        main(["evaluate", "--policy", "no-such-org/no-such-model", "--tasks", "1"])
    assert "not a local directory and not in the Hugging Face cache" in capsys.readouterr().err
    shutil.copytree(run / "sft_policy", tmp_path / "elsewhere")  # saved outside a run: the default config
    assert main(["evaluate", "--policy", str(tmp_path / "elsewhere"), "--tasks", "2", "--splits", "dev"]) == 0
    assert "with the run's config" not in capsys.readouterr().err and seen[-1][0] == "rods/ToolChain-Compact-v0"


def test_ctrl_c_says_how_to_resume_instead_of_a_traceback(capsys, tmp_path: Path) -> None:
    from rods_gym.trainer.commands import _resumable

    run = tmp_path / "x"
    (run / "sft_policy").mkdir(parents=True)
    (run / "sft_policy" / "config.json").write_text("{}")
    (run / "checkpoints" / "step-000002").mkdir(parents=True)
    with pytest.raises(SystemExit) as exit_info:
        with _resumable("train", str(run)):
            raise KeyboardInterrupt
    assert exit_info.value.code == 130
    assert capsys.readouterr().err.strip() == (f"rods train: interrupted; {run} keeps sft_policy/, checkpoints/: "
                                               f"continue with rods train --run-dir {run} --resume")
    # SIGTERM (kill's default, a batch scheduler's notice) says the same, with the shell's status for it
    import os
    import signal
    import time

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as exit_info:
        with _resumable("sft", "runs/y"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler interrupts this
    assert exit_info.value.code == 143 and signal.getsignal(signal.SIGTERM) == before
    from rods_gym.trainer.commands import Terminated

    assert not issubclass(Terminated, Exception)  # an `except Exception` on the way must not swallow it
    assert capsys.readouterr().err.strip() == ("rods sft: terminated (SIGTERM); nothing was saved in runs/y yet "
                                               "(--resume starts over): continue with rods sft --run-dir runs/y --resume")


def test_a_difficulty_in_the_env_id_is_said_to_have_no_effect(tmp_path: Path) -> None:
    """The trainer plays task-set tasks only, so an env id's difficulty preset changes nothing: it warns."""
    from rods_gym.trainer.preflight import check_env_difficulty

    easy = load_config("default", ["data.env_id=rods/ToolChain-Easy-Compact-v0"])
    with pytest.warns(UserWarning, match="names the easy difficulty, which has no effect here"):
        message = check_env_difficulty(easy)
    assert "train, eval on test" in message
    assert check_env_difficulty(load_config("default", [])) is None
    assert check_env_difficulty(load_config("chat_tiny", [])) is None  # a shipped config names none


def test_resume_from_checkpoints_alone_restores_the_runs_config(tmp_path: Path, capsys) -> None:
    """A run directory copied with its GRPO checkpoints but not its config.yaml resumes the run the checkpoints
    hold: the latest checkpoint's saved config is written back (its model, not the default one)."""
    from rods_gym.trainer.checkpoint import STATE_FILE
    from rods_gym.trainer.commands import load_from_args
    from rods_gym.trainer.config import load_config

    run = tmp_path / "copied"
    cfg = load_config(None, [f"run_dir={run}", "policy.num_layers=1", "steps=7", "data.source=fixed"])
    ckpt = run / "checkpoints" / "step-000003"
    ckpt.mkdir(parents=True)
    torch.save({"config": cfg.to_dict()}, ckpt / STATE_FILE)
    args = build_parser().parse_args(["train", "--run-dir", str(run), "--resume", "steps=9"])
    resumed = load_from_args(args)
    out = capsys.readouterr().out
    assert "restored it from the config checkpoint step-000003 was saved with" in out
    assert (resumed.policy.num_layers, resumed.data.source, resumed.steps) == (1, "fixed", 9)
    assert load_config(run / "config.yaml").policy.num_layers == 1


def test_resume_notes_are_printed_by_the_main_process_only(tmp_path: Path, capsys, monkeypatch) -> None:
    """Under ``accelerate launch`` every process reads the config; only rank 0 prints what resume found."""
    from rods_gym.trainer.commands import load_from_args
    from rods_gym.trainer.config import load_config, save_config

    run = tmp_path / "run"
    run.mkdir()
    save_config(load_config(None, [f"run_dir={run}"]), run / "config.yaml")
    argv = ["train", "--run-dir", str(run), "--resume", "steps=3"]
    monkeypatch.setenv("RANK", "1")
    assert load_from_args(build_parser().parse_args(argv)).steps == 3
    assert capsys.readouterr().out == ""
    monkeypatch.setenv("RANK", "0")
    load_from_args(build_parser().parse_args(argv))
    assert "resume: the run's saved config" in capsys.readouterr().out


def test_a_resume_cannot_ask_for_fewer_steps_than_it_has_trained(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    _fake_checkpoint(run, 10)
    (run / "checkpoints" / "step-000010" / "rng-rank0.pt").write_bytes(b"")  # written by one process
    save_config(load_config("default", [f"run_dir={run}", "steps=12"]), run / "config.yaml")
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--run-dir", str(run), "--resume", "steps=4"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "steps=4: the run's latest checkpoint is step-000010, 10 GRPO steps already trained; pass steps=10" in err
    assert load_config(run / "config.yaml").steps == 12  # the record of the run is untouched


def test_a_warm_start_longer_than_the_context_is_named_in_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    """The default (compact-sized) policy on the chat view: its demonstrations do not fit rollout.max_context.
    Refused before any work, naming the two settings to raise; where only most do not fit, a warning; and an
    error that only the data shows once the run has begun is one line too, not a traceback."""
    from rods_gym.trainer.commands import _one_line_errors
    from rods_gym.trainer.policy import make_policy
    from rods_gym.trainer.sft import check_demonstrations_fit
    from rods_gym.trainer.tasks import load_tasks

    run = tmp_path / "run"
    argv = ["train", "--env", "rods/ToolChain-Chat-v0", "--run-dir", str(run), "sft.demos=16",
            "sft.steps=2", "eval.tasks=4", "steps=1", "progress_bar=false", "threads=1", "sft.threads=1"]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("rods train: error: 8 of 8 oracle demonstrations of seed tasks spread over the set are "
                          "longer than rollout.max_context=1024")
    assert "rollout.max_context=4096 policy.max_positions=4096" in err and not run.exists()
    with pytest.raises(SystemExit) as exit_info:
        with _one_line_errors("sft"):
            raise ValueError("16 of 16 oracle demonstrations are longer than rollout.max_context=1024 tokens")
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == ("rods sft: error: 16 of 16 oracle demonstrations are longer than "
                                               "rollout.max_context=1024 tokens (RODS_TRACEBACK=1 shows where)")
    monkeypatch.setenv("RODS_TRACEBACK", "1")
    with pytest.raises(ValueError, match="16 of 16"):
        with _one_line_errors("sft"):
            raise ValueError("16 of 16")
    cfg = load_config("default", ["data.env_id=rods/ToolChain-Chat-v0"])
    seeds = load_tasks(cfg.data.train_split, cfg.data)
    deep = seeds[-4:]  # the set is ordered by depth: its deepest tasks, none of whose demonstrations fits
    with pytest.raises(ValueError, match="4 of 4 oracle demonstrations .* nothing to imitate; raise rollout.max_context"):
        check_demonstrations_fit(cfg, make_policy(cfg.policy, "chat"), deep, n=4)
    mixed = seeds[:1] + seeds[-3:]  # one short (depth 1), three deep: most would be left out
    with pytest.warns(UserWarning, match="3 of 4 oracle demonstrations .* leave most of its demonstrations out"):
        check_demonstrations_fit(cfg, make_policy(cfg.policy, "chat"), mixed, n=4)


def test_a_warm_start_checkpoint_from_before_a_new_sft_field_still_resumes(tmp_path: Path) -> None:
    """A field added to SFTConfig since a checkpoint was made reads there as its default (the value that
    warm start ran with): a checkpoint without ``skip_last_call`` is continued at 0 and refused at 0.6."""
    from rods_gym.trainer.sft import SFT_SETTINGS, check_sft_checkpoint, sft_settings

    cfg = load_config("oracle")
    old = sft_settings(cfg.sft, cfg.seed)
    del old["skip_last_call"]
    (tmp_path / SFT_SETTINGS).write_text(json.dumps(old))
    check_sft_checkpoint(tmp_path, sft_settings(cfg.sft, cfg.seed))
    with pytest.raises(ValueError, match=r"sft.skip_last_call: 0.0 there, 0.6 now"):
        check_sft_checkpoint(tmp_path, sft_settings(load_config("default").sft, cfg.seed))
