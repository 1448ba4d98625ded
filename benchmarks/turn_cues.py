"""Do the features view's turn cues make multi-turn tasks learnable? (issue 50 item 2)

MaskablePPO from scratch on a fresh procedural task every episode (``ppo_regime.py``'s procedural arm, its cpu
settings and budget), once in the view the headline ran (``-v0``: no turn cues) and once with turn cues (``-v1``:
the reply's row says when it closes a user turn, ask and reply keep their positions), on the same seeds; greedy
success on the held-out split, paired by seed and task, overall and per turn type, with the multi-turn probe
(``benchmarks/_multiturn.py``: what the policy does where it must reply to move the conversation on).

    python benchmarks/turn_cues.py --scale cpu --seeds 1,2 --held-out test --json OUT.json
    python benchmarks/turn_cues.py --report OUT.json          # the tables again, from the file

Targets (issue 50): with the cues, held-out multi-turn success >= 0.3, and no other turn type lower (paired CI
not below 0). Settings were chosen on the dev split with seed 0 (``--held-out dev --seeds 0``); report other seeds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

if __name__ == "__main__" and not __package__:  # run as a file: import the package, not its modules by name
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks._multiturn import describe  # noqa: E402
from benchmarks._ppo_view import Evaluator  # noqa: E402
from benchmarks._script import run_script  # noqa: E402
from benchmarks.evaluator import spread  # noqa: E402
from benchmarks.ppo_regime import VIEW, load_scale, run_arm, turn_type  # noqa: E402
from benchmarks.stats import fmt_ci, paired_difference, rng_for  # noqa: E402
from rods_gym import load_split  # noqa: E402
from rods_gym.registration import FEATURES_VERSIONS as VERSIONS  # noqa: E402  (version -> turn cues)
MULTI_TURN_TARGET = 0.3


def run(scale_name: str, seeds: Sequence[int], held_out: str) -> dict[str, Any]:
    """Both versions on every seed: per-task greedy success on the held-out split and the probe."""
    torch.set_num_threads(1)
    scale = load_scale(scale_name)
    fixed_set, split = load_split("train"), load_split(held_out)
    n = scale["eval_tasks"]
    train, tasks = spread(fixed_set, n), spread(split, n)
    out: dict[str, Any] = {"scale": scale_name, "held_out": held_out, "seeds": list(seeds), "budget": scale["points"][-1],
                           "tasks": [t.id for t in tasks], "turn_types": [turn_type(t) for t in tasks], "runs": {}}
    for version, cues in VERSIONS.items():
        env_kwargs = {"candidate_order": "shuffled", "turn_cues": cues}
        evaluator = Evaluator(VIEW, **env_kwargs)
        for seed in seeds:
            print(f"== {version} (turn_cues={cues}), seed {seed}", flush=True)
            res = run_arm("procedural", scale["points"][-1:], scale["ppo"], seed, evaluator, fixed_set, train, tasks,
                          env_kwargs, {held_out: split})
            last = res["curve"][-1]
            out["runs"][f"{version}/{seed}"] = {"success": [float(last["held_out_success"][t.id]) for t in tasks],
                                                "probe": res["probe"][held_out], "steps": last["steps"],
                                                "train_s": last["train_s"]}
    return out


def report(out: dict[str, Any]) -> tuple[str, bool]:
    """The table of both versions and their paired differences, overall and per turn type; whether the targets
    pass."""
    seeds, types = out["seeds"], np.asarray(out["turn_types"])
    matrix = {v: np.asarray([out["runs"][f"{v}/{s}"]["success"] for s in seeds]) for v in VERSIONS}
    groups = [("all", np.ones(len(types), bool))] + [(k, types == k) for k in sorted(set(types))]
    lines = [f"MaskablePPO, procedural tasks, {out['budget']:,} env steps, seeds {', '.join(map(str, seeds))}; greedy "
             f"success on {len(types)} {out['held_out']} tasks, mean over seeds x tasks; v1 - v0 paired over seeds x "
             "tasks [95% CI]", "", "| tasks | n | v0 (no turn cues) | v1 (turn cues) | v1 - v0 |", "|---|---|---|---|---|"]
    ok = True
    for name, keep in groups:
        a, b = matrix["v1"][:, keep], matrix["v0"][:, keep]
        d = paired_difference(a, b, rng_for(0, f"turn_cues/{name}"))
        lines.append(f"| {name} | {int(keep.sum())} | {b.mean():.3f} | {a.mean():.3f} | {fmt_ci(d)} |")
        if name == "multi-turn":
            ok &= bool(a.mean() >= MULTI_TURN_TARGET)
        elif d["lo"] < 0 and d["diff"] < 0:
            ok = False  # another turn type lower
    lines.append("")
    for v in VERSIONS:
        for s in seeds:
            lines.append(f"- probe, {v} seed {s}: {describe(out['runs'][f'{v}/{s}']['probe'])}")
    mt = matrix["v1"][:, types == "multi-turn"].mean()
    lines += ["", f"{'PASS' if ok else 'MISS'} with turn cues: {out['held_out']} multi-turn success {mt:.3f} (target >= "
              f"{MULTI_TURN_TARGET}) and no other turn type lower (paired CI)"]
    return "\n".join(lines), ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=("smoke", "cpu"), default="smoke", help="a scale of configs/ppo_regime.yaml")
    ap.add_argument("--seeds", default="1,2", help="comma-separated training seeds (0: the dev seed)")
    ap.add_argument("--held-out", choices=("test", "dev"), default="test")
    ap.add_argument("--json", type=Path, help="write the runs here")
    ap.add_argument("--report", type=Path, help="print the tables of a --json file, train nothing")
    args = ap.parse_args(argv)
    if args.report is not None:
        if not args.report.is_file():
            raise ValueError(f"--report {args.report}: no such file (run with --json first)")
        out = json.loads(args.report.read_text())
    else:
        try:
            seeds = [int(s) for s in args.seeds.split(",") if s]
        except ValueError:
            raise ValueError(f"--seeds {args.seeds!r}: expected comma-separated integers, e.g. 1,2") from None
        if not seeds:
            raise ValueError("--seeds: give at least one seed")
        out = run(args.scale, seeds, args.held_out)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(out, indent=1))
    text, _ = report(out)
    print(text)
    return 0


if __name__ == "__main__":
    run_script(main)
