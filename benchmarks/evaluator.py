"""The one batched greedy evaluator of the Gymnasium views (features, structured): one episode per task, envs
stepped in lockstep, one batched ``predict`` per step; plus the random masked agent it is compared with and the
evenly spaced evaluation tasks of a split."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

Predict = Callable[..., Any]  # MaskablePPO.predict's signature: (obs, action_masks=..., deterministic=...)
EVAL_SEED = 10_000  # task i of an evaluation is reset with seed EVAL_SEED + i


def greedy_evaluate(predict: Predict, envs: Sequence[Any], tasks: Sequence[Any], seed: int | None = EVAL_SEED
                    ) -> dict[str, list]:
    """One greedy episode per task. The ``envs`` (reused across calls; any number) run tasks in order, each
    taking the next task when its episode ends, and their observations are batched into one
    ``predict(obs, action_masks=..., deterministic=True)`` call per step (``MaskablePPO.predict``,
    ``FeaturesGRPO.predict``). Task ``i`` is reset with seed ``seed + i`` (``seed=None``: the env's own
    generator, as it stands). Returns per task, in order: id, success, final progress."""
    if not envs:
        raise ValueError("greedy_evaluate needs at least one env")
    success = [False] * len(tasks)
    progress = [0.0] * len(tasks)
    running: dict[int, tuple[int, Any]] = {}  # env index -> (task index, observation)
    next_task = 0

    def start(e: int) -> None:
        nonlocal next_task
        if next_task < len(tasks):
            reset_seed = None if seed is None else seed + next_task
            o, _ = envs[e].reset(seed=reset_seed, options={"task": tasks[next_task]})
            running[e] = (next_task, o)
            next_task += 1

    for e in range(len(envs)):
        start(e)
    while running:
        live = sorted(running)
        batch = stack_obs([running[e][1] for e in live])
        masks = np.stack([envs[e].unwrapped.action_masks() for e in live])
        actions, _ = predict(batch, action_masks=masks, deterministic=True)
        for j, e in enumerate(live):
            i = running[e][0]
            o, _, term, trunc, info = envs[e].step(actions[j])
            if term or trunc:
                success[i], progress[i] = bool(info.get("success", False)), float(info.get("progress", 0.0))
                del running[e]
                start(e)
            else:
                running[e] = (i, o)
    return {"ids": [t.id for t in tasks], "success": success, "progress": progress}


def stack_obs(obs: Sequence[Any]) -> Any:
    """A batch of observations: stacked per key for ``Dict`` spaces, stacked arrays otherwise."""
    if isinstance(obs[0], Mapping):
        return {k: np.stack([o[k] for o in obs]) for k in obs[0]}
    return np.stack(obs)


def action_dims(space: Any) -> list[int]:
    """The sizes of an action space's dimensions: ``MultiDiscrete``'s nvec, or ``[n]`` for ``Discrete``."""
    return [int(n) for n in space.nvec] if hasattr(space, "nvec") else [int(space.n)]


def random_masked_predict(seed: int, nvec: Sequence[int]) -> Predict:
    """A random agent that takes only valid actions (uniform per action dimension), as a ``predict``."""
    rng = np.random.default_rng(seed)

    def predict(obs: Any, action_masks: np.ndarray, deterministic: bool = True) -> Any:
        acts = np.array([_random_action(m, nvec, rng) for m in action_masks])
        return (acts if len(nvec) > 1 else acts[:, 0]), None

    return predict


def _random_action(mask: np.ndarray, nvec: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    out, start = [], 0
    for n in nvec:
        valid = np.flatnonzero(mask[start:start + int(n)])
        out.append(int(rng.choice(valid)) if valid.size else 0)  # a dimension the action type does not use
        start += int(n)
    return np.array(out)


def spread(tasks: Sequence[Any], k: int) -> list[Any]:
    """``k`` evenly spaced tasks of ``tasks`` (all of them when ``k <= 0`` or ``k >= len``); the checked-in splits
    are ordered by stratum, so the first ``k`` would all be alike."""
    if 0 < k < len(tasks):
        return [tasks[int(i)] for i in np.linspace(0, len(tasks) - 1, k).round().astype(int)]
    return list(tasks)


def split_tasks(eval_tasks: Mapping[str, int]) -> dict[str, list[Any]]:
    """Per split name, its evenly spaced evaluation tasks (``{"test": 0, "ood": 0}``: all of both)."""
    from rods_gym import load_split

    return {split: spread(load_split(split), k) for split, k in eval_tasks.items()}
