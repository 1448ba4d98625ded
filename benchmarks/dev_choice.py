"""Choosing the headline's G per learner on the DEV split (never on test), by a rule fixed before the runs: for each
candidate G, the dev runs of ``headline.py --dev --group-size G`` (the scale's dev seeds, arms fixed and rods); the
chosen G is the one with the highest mean final dev success over those arms, seeds and the 100 dev tasks; a tie (equal
to three decimals) goes to G = 8, the paper's.

    python benchmarks/dev_choice.py --learner grpo benchmarks/out/headline/dev/grpo-g{2,4,8,16}
    python benchmarks/dev_choice.py --learner ppo DIR ... --json choice.json

Prints a Markdown table (per G and arm: dev success with its 95% CI over seeds x tasks, distinct tasks, silent
fraction; the paired difference RODS - fixed) and the choice; ``--json`` also writes them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

if __name__ == "__main__" and not __package__:  # run as a file: import the package, not its modules by name
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import numpy as np  # noqa: E402

from benchmarks.report import table  # noqa: E402
from benchmarks.stats import bootstrap_ci, fmt_ci, paired_difference, rng_for  # noqa: E402

ARMS = ("fixed", "rods")
PAPER_G = 8


def dev_runs(out: Path, learner: str) -> tuple[int, dict[str, dict[int, dict[str, Any]]]]:
    """G and arm -> seed -> record of one ``--dev`` output folder."""
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    sizes = set()
    for path in sorted((out / "runs" / learner).glob("*/seed*.json")):
        rec = json.loads(path.read_text())
        settings = json.loads(rec["key"])["settings"]
        if list(settings["eval_tasks"]) != ["dev"]:
            raise ValueError(f"{path} was not evaluated on the dev split only: a choice is never made on test")
        sizes.add(int(settings["group_size"]))
        runs.setdefault(rec["arm"], {})[int(rec["seed"])] = rec
    if len(sizes) != 1:
        raise ValueError(f"{out}: expected the runs of one G, found {sorted(sizes)}")
    return sizes.pop(), runs


def dev_matrix(by_seed: dict[int, dict[str, Any]]) -> np.ndarray:
    return np.array([by_seed[s]["points"][-1]["eval"]["dev"]["success"] for s in sorted(by_seed)], np.float64)


def choose(folders: Sequence[Path], learner: str) -> dict[str, Any]:
    rows, scores = [], {}
    for folder in folders:
        g, runs = dev_runs(folder, learner)
        missing = [a for a in ARMS if a not in runs]
        if missing:
            raise ValueError(f"{folder}: no dev runs of {missing}")
        seeds = sorted(runs[ARMS[0]])
        scores[g] = float(np.mean([dev_matrix(runs[a]).mean() for a in ARMS]))
        for arm in ARMS:
            by_seed = runs[arm]
            ci = bootstrap_ci(dev_matrix(by_seed), rng_for(0, f"dev/{learner}/{g}/{arm}"))
            silent = float(np.mean([gr["silent"] for r in by_seed.values() for gr in r["groups"]]))
            rows.append([g, arm, ",".join(map(str, sorted(by_seed))), fmt_ci(ci),
                         f"{np.mean([r['distinct_tasks'] for r in by_seed.values()]):.0f}", f"{silent:.3f}"])
        diff = paired_difference(dev_matrix(runs["rods"]), dev_matrix(runs["fixed"]), rng_for(0, f"dev/{g}/diff"))
        rows.append([g, "rods - fixed (paired)", ",".join(map(str, seeds)), fmt_ci(diff), "", ""])
    best = max(round(v, 3) for v in scores.values())
    tied = [g for g, v in scores.items() if round(v, 3) == best]
    chosen = PAPER_G if PAPER_G in tied else max(tied, key=lambda g: scores[g])
    return {"learner": learner, "scores": scores, "chosen": chosen, "rows": rows,
            "rule": "highest mean final dev success over fixed and rods (dev seeds, 100 dev tasks); ties to G = 8"}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="headline.py --dev output folders, one per G")
    ap.add_argument("--learner", choices=("ppo", "grpo"), required=True)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    result = choose(args.folders, args.learner)
    lines = table(["G", "arm", "seeds", "dev success [95% CI]", "distinct tasks", "silent fraction"], result["rows"])
    lines += ["", "Mean dev success of fixed and rods per G: " + ", ".join(
        f"G={g} {v:.3f}" for g, v in sorted(result["scores"].items())) + f"; chosen: **G = {result['chosen']}** "
              f"({result['rule']})."]
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    from benchmarks._script import run_script

    run_script(main)
