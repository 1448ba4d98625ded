"""Data efficiency of the curricula: arms x seeds at equal rollout budgets (README, "Benchmarks").

    python benchmarks/data_efficiency.py --scale smoke                 # CI, under a minute (plumbing only)
    python benchmarks/data_efficiency.py --scale smoke --results none  # the same, RESULTS.md left as it is
    python benchmarks/data_efficiency.py --scale cpu                   # the headline arms x 5 seeds on 2 cores (RESULTS.md)
    python benchmarks/data_efficiency.py --scale gpu                   # a real instruct model (see configs/gpu.yaml)
    python benchmarks/data_efficiency.py --scale cpu --report-only     # tables and plots from the runs so far

Protocol. The arms (fixed, augment, offline, rods and the ablations replay_only, dapo, naive)
differ only in their task source: same model, G, tasks per step, learning rate and rollout
budget. For each seed, one SFT warm start on oracle demonstrations of the seed tasks is
trained once and every arm of that seed starts from it (the SFT is not part of the RL
rollout budget). Each arm then runs GRPO up to the budget of training rollout trajectories
(DAPO's refill rollouts count), and its policy is evaluated greedily on fixed, evenly spaced
subsets of the test and OOD splits at several points along the budget. The offline arm
trains on a set synthesized once, up front, by ``rods synth`` (cached under the output
directory, keyed by its size and seed).

Recorded per arm and seed: the curve (rollouts used, distinct training tasks, test/OOD
success and progress overall and per depth, task by task) and the per-group / per-step
curriculum telemetry (silent-group fraction, regions, boundary fraction, boundary-vs-rest
variance ratio, pool composition). Reported: 95% bootstrap CIs over seeds x tasks, PNG plots,
``results.json``, and a Markdown section in ``--results`` (default ``benchmarks/RESULTS.md``)
between ``<!-- data_efficiency:SCALE -->`` markers, with the targets of the issue checked.

Output layout (``--out``, default ``runs/data_efficiency/SCALE``)::

    offline/synth-<split>-n<N>-seed<S>.jsonl   the offline arm's task set
    seed<k>/warm_start/    sft_policy/, warm_start.json (its evaluation, task by task)
    seed<k>/<arm>/         run.json (curve, groups, history), train/ (checkpoint, metrics.jsonl)
    results.json           the summary (curves with CIs, telemetry, targets) and the setup
    plots/*.png
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import yaml

if __name__ == "__main__" and not __package__:  # run as a file: import the package, not its modules by name
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks.llm_runs import (RUN_FILE, WARM_START, EvalSpec, arm_job, quiet, record_file, run_arm,  # noqa: E402
                                 run_warm_start, warm_start_job)
from benchmarks.llm_summary import summarize_benchmark  # noqa: E402
from benchmarks.plots import all_figures  # noqa: E402
from benchmarks.provenance import code_version, machine, utc_now  # noqa: E402
from benchmarks.report import table, write_section  # noqa: E402
from benchmarks.runner import load_records, run_jobs  # noqa: E402
from benchmarks.stats import fmt_ci  # noqa: E402

HERE = Path(__file__).resolve().parent
CONFIG_DIR = HERE / "configs"
DEFAULT_RESULTS = HERE / "RESULTS.md"
ARMS = ("fixed", "augment", "offline", "rods", "replay_only", "dapo", "naive")
SCALES = ("smoke", "cpu", "gpu")


# -- the scale ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Scale:
    """One scale of the benchmark (``benchmarks/configs/<scale>.yaml``)."""

    scale: str
    arms: tuple[str, ...]
    seeds: tuple[int, ...]
    rollout_budget: int  # training rollout trajectories per arm and seed
    eval_at: tuple[int, ...]  # cumulative rollouts at which to evaluate; the last equals the budget
    eval_tasks: Mapping[str, int]  # split -> evenly spaced tasks evaluated (<= 0: all)
    train_config: str = "default"  # a shipped trainer config name or a YAML path
    train_overrides: Mapping[str, Any] = field(default_factory=dict)
    source_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    offline_tasks: int = 17000
    offline_synth_seed: int = 0
    bootstrap_samples: int = 2000
    bootstrap_seed: int = 0
    jobs: int = 1  # arm runs in parallel (processes)
    threads: int = 1  # torch threads per process
    description: str = ""

    def __post_init__(self) -> None:
        where = f"scale {self.scale!r}"
        unknown = sorted(set(self.arms) - set(ARMS))
        if unknown or not self.arms:
            raise ValueError(f"{where}: arms must be a non-empty subset of {ARMS}, got unknown {unknown}")
        if len(set(self.arms)) != len(self.arms):
            raise ValueError(f"{where}: arms must be distinct, got {list(self.arms)}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"{where}: seeds must be a non-empty list of distinct ints, got {list(self.seeds)}")
        if self.rollout_budget < 1:
            raise ValueError(f"{where}: rollout_budget must be >= 1, got {self.rollout_budget}")
        pts = list(self.eval_at)
        if not pts or pts != sorted(set(pts)) or pts[0] < 1 or pts[-1] != self.rollout_budget:
            raise ValueError(f"{where}: eval_at must be increasing positive rollout counts ending at the budget "
                             f"{self.rollout_budget}, got {pts}")
        if not self.eval_tasks:
            raise ValueError(f"{where}: eval_tasks must name at least one split")
        unknown = sorted(set(self.source_options) - set(ARMS))
        if unknown:
            raise ValueError(f"{where}: source_options for unknown arms {unknown}")
        if self.jobs < 1 or self.threads < 1 or self.bootstrap_samples < 100 or self.offline_tasks < 1:
            raise ValueError(f"{where}: jobs and threads must be >= 1, bootstrap_samples >= 100, offline_tasks >= 1")


def load_scale(name_or_path: str) -> Scale:
    path = Path(name_or_path)
    if not path.exists():
        path = CONFIG_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        raise FileNotFoundError(f"--scale {name_or_path!r} is neither a YAML file nor one of {SCALES} "
                                f"({CONFIG_DIR})")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the top level must be a mapping")
    train = data.pop("train", {}) or {}
    offline = data.pop("offline", {}) or {}
    boot = data.pop("bootstrap", {}) or {}
    for section, d, known in (("train", train, {"config", "overrides"}), ("offline", offline, {"tasks", "synth_seed"}),
                              ("bootstrap", boot, {"samples", "seed"})):
        bad = sorted(set(d) - known)
        if bad:
            raise ValueError(f"{path}: unknown key(s) {bad} in section {section!r}; known: {sorted(known)}")
    names = {f.name for f in dataclasses.fields(Scale)}
    bad = sorted(set(data) - names)
    if bad:
        raise ValueError(f"{path}: unknown key(s) {bad}; known: {sorted(names | {'train', 'offline', 'bootstrap'})}")
    kw: dict[str, Any] = dict(data)
    for k in ("arms", "seeds", "eval_at"):
        if k in kw:
            kw[k] = tuple(kw[k])
    kw.setdefault("scale", path.stem)
    if "config" in train:
        kw["train_config"] = str(train["config"])
    kw["train_overrides"] = dict(train.get("overrides") or {})
    if "tasks" in offline:
        kw["offline_tasks"] = int(offline["tasks"])
    if "synth_seed" in offline:
        kw["offline_synth_seed"] = int(offline["synth_seed"])
    if "samples" in boot:
        kw["bootstrap_samples"] = int(boot["samples"])
    if "seed" in boot:
        kw["bootstrap_seed"] = int(boot["seed"])
    return Scale(**kw)


# -- configs of the runs ---------------------------------------------------------------------------
BENCHMARK_FIELDS = {"time_limit_min": 0, "progress_bar": False, "tensorboard": False, "checkpoint_every": 0,
                    "keep_checkpoints": 1, "log_every": 1}


def base_train(scale: Scale) -> dict[str, Any]:
    """The shared training config (the fixed arm's), as a plain mapping, validated."""
    from rods_gym.trainer.config import load_config

    cfg = load_config(scale.train_config, {**scale.train_overrides, **BENCHMARK_FIELDS,
                                           "eval": {**dict(scale.train_overrides.get("eval", {})), "every": 0}})
    if cfg.grpo.scheduler != "constant":
        raise ValueError(f"scale {scale.scale!r}: grpo.scheduler must be 'constant' (runs are trained in chunks "
                         f"between evaluation points), got {cfg.grpo.scheduler!r}")
    per_step = cfg.rollout.tasks_per_step * cfg.rollout.group_size
    off = [p for p in scale.eval_at if p % per_step]
    if off:
        raise ValueError(f"scale {scale.scale!r}: eval_at {off} are not multiples of tasks_per_step x group_size "
                         f"= {per_step} rollouts per step")
    return cfg.to_dict()


def arm_train(base: Mapping[str, Any], arm: str, scale: Scale, offline_path: Path | None) -> dict[str, Any]:
    from rods_gym.trainer.config import load_config

    options = dict(scale.source_options.get(arm, {}))
    if arm == "offline":
        if offline_path is None:
            raise ValueError("the offline arm needs its synthesized task set")
        options["path"] = str(offline_path)
    data = {**base["data"], "source": arm, "source_options": options}
    train = {**base, "data": data}
    return load_config(None, train).to_dict()  # validates the arm's config here, not in a worker


def offline_file(scale: Scale, base: Mapping[str, Any], out: Path) -> Path:
    tag = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(str(base["data"]["train_split"])).stem)
    return out / "offline" / f"synth-{tag}-n{scale.offline_tasks}-seed{scale.offline_synth_seed}.jsonl"


def offline_set(scale: Scale, base: Mapping[str, Any], out: Path, log: Callable[[str], None]) -> Path:
    """The offline arm's task set: ``rods synth`` from the train split, cached by split, size and seed."""
    from rods_gym.cli import main as rods_main

    split = str(base["data"]["train_split"])
    path = offline_file(scale, base, out)
    if path.exists():
        log(f"offline set: reusing {path}")
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    t0 = time.perf_counter()
    rc = rods_main(["synth", "--seeds", split, "--n", str(scale.offline_tasks), "--seed", str(scale.offline_synth_seed),
                    "--out", str(tmp), "--no-progress"])
    if rc not in (0, 1) or not tmp.exists():
        raise RuntimeError(f"rods synth failed (exit {rc}) making {path}")
    os.replace(tmp, path)
    made = sum(1 for _ in path.open())
    log(f"offline set: {made} tasks in {time.perf_counter() - t0:.0f}s -> {path}")
    return path


# -- running -----------------------------------------------------------------------------------------
def run_benchmark(scale: Scale, out: Path, *, log: Callable[[str], None] = print, report_only: bool = False
                  ) -> dict[str, Any]:
    """Every warm start and arm run of ``scale`` through the runner (finished ones are reused); returns what was
    loaded: ``{"warm": seed -> record, "runs": arm -> seed -> record, "failures": [...]}``."""
    out.mkdir(parents=True, exist_ok=True)
    base = base_train(scale)
    evals = EvalSpec(tuple((s, int(n)) for s, n in scale.eval_tasks.items()), int(base["eval"]["batch_episodes"]))
    seed_jobs = {s: warm_start_job(s, base, str(out / f"seed{s}" / WARM_START), evals, scale.threads)
                 for s in scale.seeds}
    pool = {"workers": scale.jobs, "context": "spawn", "initializer": quiet, "path_of": record_file, "log": log}
    if report_only:
        warm = {j.seed: r for j, r in load_records(seed_jobs.values(), path_of=record_file).items()}
        if not warm:
            raise ValueError(f"--report-only: {out} holds no finished warm start (seed<k>/{WARM_START}/{RUN_FILE}) "
                             f"of seeds {list(scale.seeds)}; run without --report-only first")
        failures: list[str] = []
    else:
        offline_path = offline_set(scale, base, out, log) if "offline" in scale.arms else None
        done = run_jobs(list(seed_jobs.values()), run_warm_start, **pool)
        warm, failures = {j.seed: r for j, r in done.records.items()}, list(done.failures)
        for s in sorted(warm):
            w = warm[s]
            tests = ", ".join(f"{k} {v['mean_success']:.3f}" for k, v in w["eval"].items())
            log(f"seed {s}: warm start ready ({w['seconds']:.0f}s; SFT {w['sft'].get('seconds', 0):.0f}s); "
                f"success {tests}")
    offline_path = offline_file(scale, base, out) if "offline" in scale.arms else None
    arm_jobs = [arm_job(arm, s, arm_train(base, arm, scale, offline_path), str(out / f"seed{s}" / arm),
                        warm[s]["policy_dir"], scale.eval_at, evals, scale.threads)
                for arm in scale.arms for s in scale.seeds if s in warm]  # arm-major: the arms by priority
    if report_only:
        records = load_records(arm_jobs, path_of=record_file)
    else:
        done = run_jobs(arm_jobs, run_arm, **pool)
        records, failures = done.records, failures + done.failures
        for job in done.ran:
            rec, last = records[job], records[job]["points"][-1]
            log(f"{job.arm:11s} seed {job.seed}: {rec['steps']} steps, {last['rollouts']} rollouts, "
                f"{last['distinct_tasks']} tasks, " + ", ".join(f"{k} {v['mean_success']:.3f}"
                                                              for k, v in last["eval"].items())
                + f" ({rec['seconds']:.0f}s)")
    runs: dict[str, dict[int, dict[str, Any]]] = {a: {} for a in scale.arms}
    for job, rec in records.items():
        runs[job.arm][job.seed] = rec
    return {"warm": warm, "runs": runs, "failures": failures}


# -- reporting ---------------------------------------------------------------------------------------
def markdown(scale: Scale, summary: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    arms = summary["arms"]
    base = meta["train"]
    r, p, g, s = base["rollout"], base["policy"], base["grpo"], base["sft"]
    lines = [f"## Data efficiency — `{scale.scale}` scale", ""]
    if meta.get("partial"):
        lines += [f"**Partial results**: {meta['partial']}", ""]
    lines += [
        f"Command: `{meta['command']}`  ",
        f"Date: {meta['date']}; wall time {meta['wall_seconds'] / 60:.1f} min; machine: {meta['machine']}; "
        f"code {meta.get('code', '?')}."
        + (f" Report regenerated {meta['regenerated']}." if meta.get("regenerated") else ""),
        "",
        f"Setup: policy `{p['model']}` ({meta.get('parameters', '?')} parameters) on `{base['data']['env_id']}`; "
        f"G = {r['group_size']}, {r['tasks_per_step']} tasks per step, lr {g['lr']}, budget "
        f"{scale.rollout_budget} training rollouts per arm and seed (DAPO refills count), evaluated at "
        f"{', '.join(map(str, scale.eval_at))} rollouts; seeds {', '.join(map(str, scale.seeds))}; greedy "
        "evaluation on evenly spaced subsets: " + ", ".join(f"{k} {v} tasks" for k, v in summary["tasks"].items())
        + f". Offline arm: {meta.get('offline_tasks', 'n/a')} tasks from `rods synth` (seed "
        f"{scale.offline_synth_seed}). Warm start: "
        + (f"SFT on {s['demos']} oracle demonstrations for {s['steps']} steps, once per seed and shared by all "
           "arms of that seed; not counted in the rollout budget." if s["enabled"] else "none (the model as loaded).")
        + f" CIs: 95% two-level bootstrap over seeds x tasks ({scale.bootstrap_samples} samples).",
        "",
    ]
    first = next(iter(arms.values()))
    rows = [("warm start (SFT)" if s["enabled"] else "start (no SFT)", first["curve"][0], None)]
    rows += [(arm, e["final"], e["silent_fraction"]) for arm, e in arms.items()]
    lines += table(["arm", "seeds", "test success [95% CI]", "OOD success [95% CI]", "test progress", "OOD progress",
                    "rollouts", "distinct tasks", "silent fraction"],
                   [[name, len(pt["seeds"]), *(fmt_ci(pt[k]["success"]) if k in pt else "—" for k in ("test", "ood")),
                     *(f"{pt[k]['progress']['mean']:.3f}" if k in pt else "—" for k in ("test", "ood")),
                     f"{pt['rollouts_mean']:.0f}", f"{pt['distinct_tasks_mean']:.0f}",
                     "—" if silent is None else f"{silent:.3f}"] for name, pt, silent in rows])
    depths = sorted({d for e in arms.values() for d in e["final"]["test"]["per_depth"]}, key=int)
    if depths:
        lines += ["", "Final test success per depth (mean over seeds x tasks; n tasks per depth in the header):", ""]
        lines += table(["arm", *(f"depth {d} (n={first['final']['test']['per_depth'].get(d, {}).get('n', 0)})"
                                 for d in depths)],
                       [[arm, *(fmt_ci(e["final"]["test"]["per_depth"][d]["success"])
                                if d in e["final"]["test"]["per_depth"] else "—" for d in depths)]
                        for arm, e in arms.items()])
    dapo = arms.get("dapo", {}).get("refills")
    if dapo is not None and not dapo["active"] and dapo["steps_with_silent_groups"]:
        lines += ["", f"Note: the dapo arm had silent groups in {dapo['steps_with_silent_groups']} steps but no refill "
                  "rollouts: every step's own batch already reached the rollout budget, which refills may not pass "
                  "(or the source asked for none), so this arm trained like `fixed` (silent groups kept, zero "
                  "advantage)."]
    lines += ["", "Targets (\"RODS beats X\" decided by the paired difference):", ""]
    lines += [f"- **{t['verdict']}** {t['name']}: {t['detail']}" for t in summary["targets"]]
    lines += ["", "Plots: " + ", ".join(f"`{v}`" for v in meta["plots"].values()) + f"; raw results: `{meta['out']}`."]
    return "\n".join(lines) + "\n"


def report(scale: Scale, out: Path, loaded: Mapping[str, Any], *, command: str, wall_seconds: float,
           results: Path | None, log: Callable[[str], None] = print, report_only: bool = False) -> dict[str, Any]:
    warm, runs = loaded["warm"], {a: r for a, r in loaded["runs"].items() if r}
    if not warm or not runs:
        raise RuntimeError(f"nothing to report in {out}: no finished warm start and arm run")
    boot = {"samples": scale.bootstrap_samples, "seed": scale.bootstrap_seed}
    summary = summarize_benchmark(warm, runs, boot)
    plots = all_figures(summary, out / "plots")
    expected = len(scale.arms) * len(scale.seeds)
    got = sum(len(r) for r in runs.values())
    base = base_train(scale)
    now = utc_now()
    meta = {"command": command, "date": now, "machine": machine(), "code": code_version(),
            "wall_seconds": wall_seconds, "out": str(out),
            "plots": plots, "train": base,
            "scale": dataclasses.asdict(scale), "failures": list(loaded.get("failures", [])),
            "partial": None if got == expected else f"{got} of {expected} arm x seed runs finished"}
    offline = offline_file(scale, base, out)
    if "offline" in runs and offline.exists():
        with offline.open() as fh:
            meta["offline_tasks"] = sum(1 for _ in fh)
    meta["parameters"] = _parameters(warm)
    previous = out / "results.json"
    if report_only and previous.exists():  # the runs' own command, date and wall time; this report's noted apart
        before = json.loads(previous.read_text())["meta"]
        meta.update({k: before[k] for k in ("command", "date", "machine", "code", "wall_seconds") if k in before})
        meta["regenerated"] = f"{now} by `{command}`"
    (out / "results.json").write_text(json.dumps({"meta": meta, "summary": summary}, indent=1, default=str))
    text = markdown(scale, summary, meta)
    if results is not None:
        write_section(results, f"data_efficiency:{scale.scale}", text)
        log(f"wrote the {scale.scale} section of {results}")
    log(text)
    return {"meta": meta, "summary": summary, "markdown": text}


def _parameters(warm: Mapping[int, Mapping[str, Any]]) -> str:
    rec = warm[min(warm)]
    cfg_file = Path(rec["policy_dir"]) / "config.json" if rec.get("policy_dir") else None
    if cfg_file is None or not cfg_file.exists():
        return "?"
    c = json.loads(cfg_file.read_text())
    h, i, n, v = c.get("hidden_size"), c.get("intermediate_size"), c.get("num_hidden_layers"), c.get("vocab_size")
    if None in (h, i, n, v):
        return "?"
    approx = v * h + n * (4 * h * h + 3 * h * i)
    return f"~{approx / 1e6:.2f}M"


# -- command line ------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", default="smoke", help=f"one of {SCALES} or a scale YAML file (default smoke)")
    p.add_argument("--arms", default=None, help=f"comma-separated arms (default: the scale's); from {','.join(ARMS)}")
    p.add_argument("--seeds", default=None, help="comma-separated seeds (default: the scale's)")
    p.add_argument("--budget", type=int, default=None,
                   help="rollout budget per arm and seed; evaluation points are rescaled to it")
    p.add_argument("--out", type=Path, default=None, help="output directory (default runs/data_efficiency/SCALE)")
    p.add_argument("--results", default=str(DEFAULT_RESULTS),
                   help="Markdown file whose SCALE section is written ('none' to skip; default benchmarks/RESULTS.md, "
                        "except at the smoke scale, whose numbers mean nothing: none)")
    p.add_argument("--jobs", type=int, default=None, help="arm runs in parallel processes (default: the scale's)")
    p.add_argument("--threads", type=int, default=None, help="torch threads per process (default: the scale's)")
    p.add_argument("--report-only", action="store_true", help="only aggregate the runs already in --out")
    return p.parse_args(argv)


def apply_args(scale: Scale, args: argparse.Namespace) -> Scale:
    kw: dict[str, Any] = {}  # an option given is applied, 0 and '' included: the scale's checks then name it
    if args.arms is not None:
        kw["arms"] = tuple(a.strip() for a in args.arms.split(",") if a.strip())
    if args.seeds is not None:
        try:
            kw["seeds"] = tuple(int(s) for s in args.seeds.split(",") if s.strip())
        except ValueError:
            raise ValueError(f"--seeds {args.seeds!r}: give comma-separated integers") from None
    if args.budget is not None and args.budget < 1:
        raise ValueError(f"--budget must be >= 1 rollout, got {args.budget}")
    if args.budget is not None:  # evaluation points scale with it, on the grid of the scale's points (whole GRPO steps)
        grid = math.gcd(*scale.eval_at)
        factor = args.budget / scale.rollout_budget
        points = {max(grid, grid * round(p * factor / grid)) for p in scale.eval_at[:-1]}
        kw["rollout_budget"] = args.budget
        kw["eval_at"] = tuple(sorted({p for p in points if p < args.budget} | {args.budget}))
    if args.jobs is not None:
        kw["jobs"] = args.jobs
    if args.threads is not None:
        kw["threads"] = args.threads
    return dataclasses.replace(scale, **kw) if kw else scale


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    scale = apply_args(load_scale(args.scale), args)
    out = args.out or Path("runs") / "data_efficiency" / scale.scale
    smoke_default = args.scale == "smoke" and args.results == str(DEFAULT_RESULTS)
    results = None if args.results.lower() == "none" or smoke_default else Path(args.results)
    command = "python benchmarks/data_efficiency.py " + shlex.join(argv)

    def log(msg: str) -> None:
        print(msg, flush=True)

    quiet()
    t0 = time.perf_counter()
    log(f"data efficiency, {scale.scale} scale: arms {', '.join(scale.arms)}; seeds {list(scale.seeds)}; "
        f"budget {scale.rollout_budget} rollouts; evaluation at {list(scale.eval_at)}; out {out}")
    loaded = run_benchmark(scale, out, log=log, report_only=args.report_only)
    report(scale, out, loaded, command=command, wall_seconds=time.perf_counter() - t0, results=results, log=log,
           report_only=args.report_only)
    if loaded["failures"]:
        log("failed runs:\n  " + "\n  ".join(loaded["failures"]))
        return 1
    return 0


if __name__ == "__main__":
    from benchmarks._script import run_script

    run_script(main)
