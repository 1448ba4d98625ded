"""The headline: does the curriculum matter for a learner trained from scratch by RL on the features view? One
learner (``--learner ppo``: MaskablePPO with a critic; ``--learner grpo``: the critic-free GRPO learner, where a
silent group carries exactly zero gradient), one task source per arm from the curricula registry, equal env-step
budgets, greedy test and OOD success with 95% CIs, PASS/MISS targets decided by paired differences.

    python benchmarks/headline.py --learner ppo --scale smoke         # CI: every arm, tiny, ~2 min
    python benchmarks/headline.py --learner grpo --scale smoke
    flock /tmp/rods-cpu.lock env OMP_NUM_THREADS=1 python benchmarks/headline.py --learner grpo --scale cpu
        # all 10 arms x seeds 100-104 (never used for a choice), 196,608 env steps
    python benchmarks/headline.py --learner grpo --scale cpu --dev --arms fixed,rods --group-size 4 --out DIR
        # a choice made on the dev split only (seeds 0-1, the scale's dev_seeds), never on test
    python benchmarks/headline.py --learner ppo --scale cpu --report-only   # tables and plots from the runs on disk
    python benchmarks/headline.py ... --ray local | --ray HOST:6379  # the runs as Ray tasks (local instance / cluster)

Arms (``rods_gym.curricula.ARMS``): fixed (the 400 train seeds in epochs), rods, augment (the environment
perturbed, the task instance kept: no new samples), augment_redraw (augment plus the task's values redrawn per
episode), offline (17,000 synthesized once), procedural (a fresh sampler task per group: the upper reference), and
the ablations replay_only, naive (structure-blind resampler), rods_random (random parents), rods_augment (RODS's
source in the augmented env). Scales: ``benchmarks/configs/headline.yaml``. ``--group-size G`` changes G for every
arm and keeps the batch's episode count (tasks per batch = episodes // G). Output (``--out``, default
``benchmarks/out/headline/LEARNER/SCALE``): ``runs/LEARNER/ARM/seedK.json`` (one per run; reused while its
settings match, so a sweep resumes), ``offline/``, ``summary.json``, ``report.md``, ``plots/*.png``; with
``--dev``: ``dev_report.md`` only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

if __name__ == "__main__" and not __package__:  # run as a file: import the package, not its modules by name
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import yaml  # noqa: E402

from benchmarks import headline_summary as hs  # noqa: E402
from benchmarks.evaluator import action_dims, greedy_evaluate, random_masked_predict, split_tasks  # noqa: E402
from benchmarks.learners import LEARNERS, RODS_FAMILY, offline_set, run_job, worker_init  # noqa: E402
from benchmarks.provenance import provenance, utc_now  # noqa: E402
from benchmarks.runner import Job, load_records, run_jobs  # noqa: E402

HERE = Path(__file__).resolve().parent
SCALES_FILE = HERE / "configs" / "headline.yaml"
ARMS = ("fixed", "rods", "augment", "augment_redraw", "offline", "procedural", "replay_only", "naive", "rods_random",
        "rods_augment")
DEFAULT_ENV_ID = "rods/ToolChain-Easy-Features-v0"  # the features view, shuffled candidate order


@dataclass(frozen=True)
class Scale:
    """One scale of ``configs/headline.yaml`` for one learner."""

    name: str
    learner: str
    seeds: tuple[int, ...]
    dev_seeds: tuple[int, ...]
    budget: int  # env steps per run
    n_points: int  # evaluation points, evenly spaced, the last at the budget
    eval_tasks: Mapping[str, int]  # split -> evenly spaced tasks (<= 0: all)
    offline_n: int  # size of the offline arm's synthesized set
    group_size: int
    tasks_per_batch: int
    learner_config: Mapping[str, Any]  # PPOConfig / FeaturesGRPOConfig fields
    rods: Mapping[str, Any] = field(default_factory=dict)  # RODSConfig overrides for the RODS family
    chosen: str = ""

    def eval_at(self) -> list[int]:
        """The evaluation points; for PPO multiples of its rollout, so every arm stops at the same env step."""
        if self.learner == "grpo":
            return [self.budget * (i + 1) // self.n_points for i in range(self.n_points)]
        r = int(self.learner_config["n_envs"]) * int(self.learner_config["n_steps"])
        if self.budget % r:
            raise ValueError(f"scale {self.name}: budget {self.budget} is not a multiple of PPO's rollout size {r}")
        chunks = self.budget // r
        if chunks < self.n_points:
            raise ValueError(f"scale {self.name}: {chunks} PPO rollouts cannot hold {self.n_points} evaluation points")
        return [r * round(chunks * (i + 1) / self.n_points) for i in range(self.n_points)]


def load_scale(name: str, learner: str, path: Path = SCALES_FILE) -> Scale:
    scales = (yaml.safe_load(path.read_text()) or {}).get("scales", {})
    if name not in scales:
        raise ValueError(f"--scale {name!r}: {path} has {sorted(scales)}")
    d = dict(scales[name])
    per = d.pop("learners")[learner]
    config = per.get("config") or {}
    if isinstance(config, str):  # "FILE:SCALE": the ppo settings of configs/FILE.yaml's scale
        file, _, other = config.partition(":")
        config = yaml.safe_load((path.parent / f"{file}.yaml").read_text())[other]["ppo"]
    return Scale(name=name, learner=learner, seeds=tuple(d.pop("seeds")), dev_seeds=tuple(d.pop("dev_seeds")),
                 group_size=int(per["group_size"]), tasks_per_batch=int(per["tasks_per_batch"]),
                 learner_config=dict(config), **d)


def parse_seeds(text: str) -> tuple[int, ...]:
    """``N`` (seeds 0..N-1), ``A-B`` (A..B) or ``a,b,c``."""
    try:
        if "," in text:
            return tuple(int(x) for x in text.split(",") if x.strip())
        if "-" in text.strip("-"):
            a, b = text.split("-")
            return tuple(range(int(a), int(b) + 1))
        n = int(text)
    except ValueError:
        raise ValueError(f"--seeds {text!r}: give N, A-B or a,b,c") from None
    if n < 1:
        raise ValueError(f"--seeds must be >= 1, got {n}")
    return tuple(range(n))


def json_object(text: str, flag: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"{flag} must be a JSON object, got {text!r}")
    return value


def setup_scale(args: argparse.Namespace) -> Scale:
    """The scale with the command line's changes, checked before any run starts."""
    scale = load_scale(args.scale, args.learner)
    if args.seeds is not None:
        scale = replace(scale, seeds=parse_seeds(args.seeds))
    elif args.dev:
        scale = replace(scale, seeds=scale.dev_seeds)
    if args.budget is not None:
        scale = replace(scale, budget=args.budget)
    if args.group_size is not None:
        episodes = scale.group_size * scale.tasks_per_batch
        if args.group_size < 2 or episodes % args.group_size:
            raise ValueError(f"--group-size must be >= 2 (a group needs a variance) and divide the batch's "
                             f"{episodes} episodes, got {args.group_size}")
        scale = replace(scale, group_size=args.group_size, tasks_per_batch=episodes // args.group_size)
    overrides = json_object(args.rods, "--rods")
    if overrides:
        from rods_gym.curricula import RODSConfig

        scale = replace(scale, rods={**scale.rods, **overrides})
        RODSConfig.from_dict({"group_size": scale.group_size, **scale.rods})  # names a bad field now
    learner_overrides = json_object(args.learner_config, "--learner-config")
    if learner_overrides:
        scale = replace(scale, learner_config={**scale.learner_config, **learner_overrides})
    if args.dev:
        scale = replace(scale, eval_tasks={"dev": 0})
    scale.eval_at()  # checks the budget
    return scale


def job_of(arm: str, seed: int, scale: Scale, env_id: str, env_kwargs: Mapping[str, Any], offline: str | None) -> Job:
    """Everything one run depends on (its record is reused while all of it matches)."""
    return Job(arm, seed, scale.learner, {
        "budget": scale.budget, "eval_at": scale.eval_at(), "eval_tasks": dict(scale.eval_tasks),
        "group_size": scale.group_size, "tasks_per_batch": scale.tasks_per_batch,
        "learner_config": dict(scale.learner_config), "rods": dict(scale.rods), "env_id": env_id,
        "env_kwargs": dict(env_kwargs), "offline": offline if arm == "offline" else None})


def random_baseline(scale: Scale, env_id: str, env_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The random masked agent on the evaluation tasks, one pass per seed."""
    import gymnasium as gym

    sets = split_tasks(scale.eval_tasks)
    out: dict[str, Any] = {"tasks": {s: [t.id for t in ts] for s, ts in sets.items()}, "eval": {}}
    for s, ts in sets.items():
        envs = [gym.make(env_id, **env_kwargs) for _ in range(min(64, len(ts)))]
        nvec = action_dims(envs[0].action_space)
        out["eval"][s] = [greedy_evaluate(random_masked_predict(k, nvec), envs, ts) for k in scale.seeds]
    return out


def parse_args(argv: Sequence[str] | None, learner: str | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--learner", choices=LEARNERS, default=learner or "ppo")
    ap.add_argument("--scale", default="smoke", help=f"a scale of {SCALES_FILE.name} (default smoke)")
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated arms (default: all)")
    ap.add_argument("--seeds", default=None, help="N (0..N-1), A-B or a,b,c (default: the scale's; --dev: its dev "
                    "seeds)")
    ap.add_argument("--budget", type=int, default=None, help="env steps per run (PPO: a multiple of its rollout)")
    ap.add_argument("--env-id", default=DEFAULT_ENV_ID, help="the view to train and evaluate on")
    ap.add_argument("--env-kwargs", default="{}", help="JSON dict passed to gym.make (training and evaluation)")
    ap.add_argument("--jobs", type=int, default=2, help="runs in parallel (at most 2 on the 2-core CPU machine)")
    ap.add_argument("--ray", default=None, metavar="ADDRESS", help="run on Ray: 'local' (a local instance of --jobs "
                    "CPUs) or a cluster address")
    ap.add_argument("--out", type=Path, default=None, help="default benchmarks/out/headline/LEARNER/SCALE")
    ap.add_argument("--report-only", action="store_true", help="summarize the runs on disk, train nothing")
    ap.add_argument("--dev", action="store_true", help="evaluate on the dev split only, with the scale's dev seeds "
                    "(for choosing knobs; test and OOD are not touched)")
    ap.add_argument("--rods", default="{}", help="JSON dict of RODSConfig overrides for the RODS-family arms")
    ap.add_argument("--learner-config", default="{}", help="JSON dict of learner settings over the scale's "
                    "(PPOConfig / FeaturesGRPOConfig fields)")
    ap.add_argument("--group-size", type=int, default=None, help="G for every arm; tasks per batch becomes the "
                    "scale's episodes per batch // G")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None, learner: str | None = None) -> int:
    args = parse_args(argv, learner)
    scale = setup_scale(args)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise ValueError(f"--arms: unknown {unknown}; choose from {', '.join(ARMS)}")
    if args.jobs < 1 or (args.jobs > 2 and args.scale != "gpu" and args.ray is None):
        raise ValueError(f"--jobs must be 1 or 2 at {args.scale} scale (the CPU machine has 2 cores), got {args.jobs}")
    env_kwargs = json_object(args.env_kwargs, "--env-kwargs")
    import gymnasium as gym

    import rods_gym  # noqa: F401

    if args.env_id not in gym.registry:
        raise ValueError(f"--env-id {args.env_id!r} is not a registered environment")
    gym.make(args.env_id, **env_kwargs).close()  # the view's modules load now, before the workers fork
    out = args.out or HERE / "out" / "headline" / scale.learner / scale.name
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    offline = out / "offline" / f"synth-train-n{scale.offline_n}-seed0.jsonl"
    if "offline" in arms and not args.report_only:
        offline = offline_set(out, scale.offline_n)
    order = sorted(arms, key=lambda a: (a not in RODS_FAMILY, a != "procedural"))  # slowest first
    jobs = [job_of(a, s, scale, args.env_id, env_kwargs, str(offline)) for a in order for s in scale.seeds]
    failures: list[str] = []
    if args.report_only:
        records = load_records(jobs, out)
    else:
        result = run_jobs(jobs, run_job, out, workers=args.jobs, ray=args.ray, initializer=worker_init)
        records, failures = result.records, result.failures
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for j in jobs:
        if j in records:
            runs.setdefault(j.arm, {})[j.seed] = records[j]
    if not runs:
        raise ValueError(f"no finished run in {out} for these settings (run without --report-only first)")
    runs = {a: runs[a] for a in arms if a in runs}
    prov = provenance(argv=None if argv is None else [sys.argv[0], *argv])
    setup = {"scale": scale.name, "learner": scale.learner, **prov, "wall_seconds": time.perf_counter() - t0,
             "env_id": args.env_id, "env_kwargs": env_kwargs, "budget": scale.budget, "seeds": list(scale.seeds),
             "dev_seeds": list(scale.dev_seeds), "group_size": scale.group_size,
             "tasks_per_batch": scale.tasks_per_batch, "learner_config": dict(scale.learner_config),
             "rods": dict(scale.rods), "chosen": scale.chosen, "failures": failures,
             "missing": [str(j) for j in jobs if j not in records]}
    if args.dev:
        text = hs.dev_report(runs, setup)
        (out / "dev_report.md").write_text(text + "\n")
        print(text)
        return 1 if failures else 0
    base_path = out / "random_baseline.json"
    baseline = json.loads(base_path.read_text()) if base_path.exists() else None
    if baseline is None or baseline.get("seeds") != list(scale.seeds):
        baseline = {**random_baseline(scale, args.env_id, env_kwargs), "seeds": list(scale.seeds)}
        base_path.write_text(json.dumps(baseline))
    summary = hs.summarize(runs, hs.task_meta(split_tasks(scale.eval_tasks)), baseline)
    previous = out / "summary.json"
    if args.report_only and previous.exists():  # the run's command, date and wall time, not this report's
        ran = json.loads(previous.read_text()).get("setup", {})
        if ran.get("command"):
            setup.update({k: ran[k] for k in ("command", "date", "machine", "wall_seconds", "code") if k in ran})
            setup["report_regenerated"] = utc_now()
    summary["plots"] = plots(summary, out / "plots")
    summary["setup"] = setup
    text = hs.report(summary, setup)
    (out / "report.md").write_text(text + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=float))
    print(text)
    return 1 if failures else 0


def plots(summary: Mapping[str, Any], out: Path) -> dict[str, str]:
    from benchmarks.plots import silent_by_quarter, success_curves

    out.mkdir(parents=True, exist_ok=True)
    return {"success_vs_env_steps": str(success_curves(summary, out / "success_vs_env_steps.png", x="env_steps",
                                                       xlabel="env steps")),
            "success_vs_distinct_tasks": str(success_curves(summary, out / "success_vs_distinct_tasks.png",
                                                            x="distinct_tasks", xlabel="distinct tasks trained on")),
            "silent_fraction": str(silent_by_quarter(summary, out / "silent_fraction.png"))}


if __name__ == "__main__":
    from benchmarks._script import run_script

    run_script(main)
