"""Why a features-view policy fails multi-turn tasks, in figures (issue 50 item 3): greedy episodes on the held-out
multi-turn tasks, watched at the state where they must reply to move to the next user turn.

A *turn end* is a state of a non-final user turn whose required calls are all satisfied: the only useful action is
the reply that moves the conversation on (in a single-turn task the episode ends by itself when its last call is
made). :func:`probe` runs each multi-turn task greedily and reports how many reach a turn end, what the policy does
there (the reply, a call it made before, another call, a question; and its probability of the reply), how many
reach the next turn, how the episodes end (success, a final reply, truncation), and the success when the reply is
forced at every turn end (the rest greedy): the gap between the two is what the reply decision alone costs.
Beside it, the policy's probability of the reply in the states of single-turn tasks that still have calls to make
(where a reply ends the episode early)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

import numpy as np
import torch

from rods_gym.episode import Ask, Reply, ToolCall
from rods_gym.features_env import FeaturesEnv
from rods_gym.renderers.features import CANDIDATE, GLOBAL, N_CANDIDATES


def reply_probability(model: Any, obs: np.ndarray, mask: np.ndarray, position: int) -> float:
    """The policy's probability of the candidate at ``position`` (masked softmax)."""
    with torch.no_grad():
        t, _ = model.policy.obs_to_tensor(obs[None])
        dist = model.policy.get_distribution(t, action_masks=mask[None])
        return float(dist.distribution.probs[0, position])


def kind_of(env: FeaturesEnv, obs: np.ndarray, action: int) -> str:
    """What the candidate at ``action`` is: reply (no value), reply value, ask, call made before, new call."""
    cand = env.renderer.candidates()[action]
    if isinstance(cand, Reply):
        return "reply" if cand.text == "done" else "reply value"
    if isinstance(cand, Ask):
        return "ask"
    if isinstance(cand, ToolCall):
        made = obs[GLOBAL + action * CANDIDATE + 7] > 0.5
        return "call made before" if made else "new call"
    return "empty"


def _reply_position(env: FeaturesEnv) -> int:
    return next(i for i, c in enumerate(env.renderer.candidates()) if isinstance(c, Reply) and c.text == "done")


def turn_end(env: FeaturesEnv) -> bool:
    ep = env.episode
    return ep.turn < len(ep.task.turns) - 1 and not ep.todo()


def run(model: Any, env: FeaturesEnv, task: Any, force_reply: bool) -> dict[str, Any]:
    """One greedy episode of ``task``; at turn ends the reply is taken when ``force_reply``."""
    obs, _ = env.reset(options={"task": task})
    out: dict[str, Any] = {"turn_end": None, "advanced": False, "end": "", "success": False}
    while True:
        mask = env.action_masks()
        action = int(model.predict(obs[None], action_masks=mask[None], deterministic=True)[0][0])
        if turn_end(env):
            reply = _reply_position(env)
            if out["turn_end"] is None:
                out["turn_end"] = {"action": kind_of(env, obs, action),
                                   "p_reply": reply_probability(model, obs, mask, reply)}
            if force_reply:
                action = reply
        turn = env.episode.turn
        obs, _, terminated, truncated, info = env.step(action)
        out["advanced"] = out["advanced"] or info["turn"] > turn
        if terminated or truncated:
            out["success"] = bool(info["success"])
            out["end"] = "success" if info["success"] else ("truncated" if truncated else "final reply")
            return out


def single_turn_reply_probability(model: Any, env: FeaturesEnv, tasks: Sequence[Any], limit: int = 200) -> float:
    """The mean probability of the reply in greedy states of single-turn tasks with calls still to make."""
    probs = []
    for task in [t for t in tasks if len(t.turns) == 1][:limit]:
        obs, _ = env.reset(options={"task": task})
        for _ in range(4):
            mask = env.action_masks()
            if env.episode.todo():
                probs.append(reply_probability(model, obs, mask, _reply_position(env)))
            action = int(model.predict(obs[None], action_masks=mask[None], deterministic=True)[0][0])
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
    return float(np.mean(probs)) if probs else float("nan")


def probe(model: Any, tasks: Sequence[Any], **env_kwargs: Any) -> dict[str, Any]:
    """The figures of the module docstring over the multi-turn tasks among ``tasks``."""
    env = FeaturesEnv(**env_kwargs)
    multi = [t for t in tasks if len(t.turns) > 1]
    greedy = [run(model, env, t, force_reply=False) for t in multi]
    forced = [run(model, env, t, force_reply=True) for t in multi]
    at_end = [g["turn_end"] for g in greedy if g["turn_end"] is not None]
    actions = Counter(e["action"] for e in at_end)
    n = max(1, len(multi))
    return {
        "tasks": len(multi),
        "reach_turn_end": len(at_end) / n,
        "action_at_turn_end": {k: v / max(1, len(at_end)) for k, v in sorted(actions.items())},
        "p_reply_at_turn_end": float(np.mean([e["p_reply"] for e in at_end])) if at_end else float("nan"),
        "advanced": sum(g["advanced"] for g in greedy) / n,
        "ends": {k: v / n for k, v in sorted(Counter(g["end"] for g in greedy).items())},
        "success": sum(g["success"] for g in greedy) / n,
        "success_reply_forced": sum(f["success"] for f in forced) / n,
        "p_reply_single_turn_midway": single_turn_reply_probability(model, env, tasks),
    }


def describe(figures: dict[str, Any]) -> str:
    f = figures
    acts = ", ".join(f"{k} {v:.2f}" for k, v in f["action_at_turn_end"].items())
    ends = ", ".join(f"{k} {v:.2f}" for k, v in f["ends"].items())
    return (f"{f['tasks']} multi-turn tasks: reach a turn end {f['reach_turn_end']:.2f}; there the greedy action is "
            f"[{acts}], p(reply) {f['p_reply_at_turn_end']:.3f} (single-turn states with calls to make: "
            f"{f['p_reply_single_turn_midway']:.3f}); next turn reached {f['advanced']:.2f}; episodes end [{ends}]; "
            f"success {f['success']:.3f}, with the reply forced at turn ends {f['success_reply_forced']:.3f}")


__all__ = ["probe", "describe", "N_CANDIDATES"]
