"""What the augmentation arms change in each view, and what they cost at reset (docs/augmentation.md).

Over the 400 train seeds (``reset(seed=i)`` on task i) under ``augment`` (``rods_gym.augment.FAITHFUL``), along the
oracle's path, per view: the episodes with extra distractors, with world edits, with a renamed tool, with an
observation that differs from the plain env's, and (features) with more candidates than the plain env; in the
features view also the call candidates whose result the world edits change. Then the features view's reset cost
per configuration (best of 3 warm passes over the 400 seeds, process time). Prints markdown with its provenance.

    python benchmarks/augmentation_views.py          # ~1 min of CPU
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from rods_gym.augment import FAITHFUL, WITH_REDRAW, AugmentConfig, AugmentWrapper, make_augmented_env
from rods_gym.env import ToolChainEnv, load_split
from rods_gym.episode import ToolCall
from rods_gym.executor import ToolError
from rods_gym.features_env import FeaturesEnv
from rods_gym.task import TaskSpec
from rods_gym.world import WorldState

if __name__ == "__main__" and not __package__:  # run as a file: import the package, not its modules by name
    sys.path[0] = str(Path(__file__).resolve().parents[1])
from benchmarks.provenance import provenance  # noqa: E402

VIEWS = ("chat", "compact", "structured", "features")
MAX_STEPS = 80


def envs(mode: str, config: AugmentConfig | None) -> Any:
    if mode == "features":
        return FeaturesEnv() if config is None else AugmentWrapper(FeaturesEnv(), config)
    return ToolChainEnv(mode=mode) if config is None else make_augmented_env(config, mode=mode)


def result(env: Any, call: ToolCall, state: WorldState) -> Any:
    """What ``call`` would return on (a fork of) ``state``."""
    suite = env.unwrapped.suite
    try:
        return suite.executor.run(suite.tools[call.name], call.arguments, state.fork())
    except ToolError as exc:
        return f"{exc.code}: {exc}"


def candidates(renderer: Any) -> list[Any]:
    """The features view's candidate actions now."""
    return renderer.candidates() if hasattr(renderer, "candidates") else list(renderer._cands)


def view_row(mode: str, seeds: list[TaskSpec]) -> str:
    env, plain = envs(mode, FAITHFUL), envs(mode, None)
    counts = dict.fromkeys(("distractors", "edits", "renamed", "differs", "more"), 0)
    offered = changed = 0
    for i, seed in enumerate(seeds):
        obs, info = env.reset(seed=i, options={"task": seed})
        pobs, _ = plain.reset(seed=i, options={"task": seed})
        got = info["augment"]
        counts["distractors"] += got["extra_distractors"] > 0
        counts["edits"] += got["extra_records"] + got["changed_records"] > 0
        counts["renamed"] += got.get("renamed_tools", 0) > 0
        differs, more = repr(obs) != repr(pobs), False
        for _ in range(MAX_STEPS):
            if mode == "features":
                more |= int(env.unwrapped.action_masks().sum()) > int(plain.action_masks().sum())
                for c in candidates(env.unwrapped.renderer):
                    if isinstance(c, ToolCall):
                        offered += 1
                        changed += result(env, c, env.unwrapped.episode.state) != result(env, c, plain.episode.state)
            try:
                action, plain_action = env.unwrapped.oracle_action(), plain.oracle_action()
            except ValueError:  # the features view cannot encode this oracle call (its own limit)
                break
            obs, _, term, trunc, _ = env.step(action)
            pobs, _, _, _, _ = plain.step(plain_action)
            differs |= repr(obs) != repr(pobs)
            if term or trunc:
                break
        counts["differs"] += differs
        counts["more"] += more
    n = len(seeds)
    more = f"{counts['more']}/{n}" if mode == "features" else "n/a"
    cells = [f"{counts[k]}/{n}" for k in ("distractors", "edits", "renamed", "differs")]
    row = f"| {mode} | {' | '.join(cells)} | {more} |"
    if mode == "features":
        row += f"\n\nfeatures: call candidates whose result the world edits change: {changed}/{offered}"
    return row


def reset_ms(config: AugmentConfig | None, seeds: list[TaskSpec]) -> float:
    env = envs("features", config)
    best = float("inf")
    for _ in range(4):  # the first pass warms the caches
        start = time.process_time()
        for i, seed in enumerate(seeds):
            env.reset(seed=i, options={"task": seed})
        best = min(best, (time.process_time() - start) / len(seeds))
    return best * 1e3


def main() -> None:
    seeds = load_split("train")
    prov = provenance()
    print(f"`{prov['command']}`: date {prov['date']}, machine {prov['machine']}, code {prov['code']}\n")
    print("| view | extra distractors | world edits | renamed tool | an observation differs | more candidates |")
    print("| --- | --- | --- | --- | --- | --- |")
    for mode in VIEWS:
        print(view_row(mode, seeds), flush=True)
    off = AugmentConfig.off().to_dict()
    configs = {"plain FeaturesEnv": None, "wrapper, off": AugmentConfig.off(),
               "distractors only": AugmentConfig(**{**off, "distractors": 0.5}),
               "world edits only": AugmentConfig(**{**off, "perturb_world": 0.5}),
               "augment": FAITHFUL, "augment_redraw": WITH_REDRAW}
    print("\n| features view | ms per reset |\n| --- | --- |")
    for name, config in configs.items():
        print(f"| {name} | {reset_ms(config, seeds):.2f} |", flush=True)


if __name__ == "__main__":
    main()
