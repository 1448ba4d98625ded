"""The reference policy: the action sequence that solves any task.

It acts online from the episode's state (the values earlier calls actually returned), so
the same function proves a task solvable, produces demonstrations for SFT in any renderer,
and serves as the upper bound in evaluations.
"""

from __future__ import annotations

from typing import Any

from .episode import Action, Ask, Episode, Reply, ToolCall

DONE = "Done: everything you asked for is complete."  # the oracle's reply when a task without an answer is done


def oracle_action(episode: Episode, *, defer_unlock: bool = False) -> Action:
    """The next action of a shortest solution. While a tool the task needs is locked (withheld until the
    agent says it cannot proceed), the oracle says so at once; with ``defer_unlock`` it first makes every
    call it can make with the tools it has, and says so only when the rest needs the locked one (as long a
    solution, in another order)."""
    if episode.done:
        raise RuntimeError("the episode is over")
    task = episode.task
    if episode.locked and not defer_unlock:
        return _cannot_proceed(episode)
    if episode.pending:
        names = " and ".join(p.replace("_", " ") for _, p in episode.pending)
        return Ask(f"Could you tell me your {names}?")
    for cid in episode.todo():
        call = task.call(cid)
        bound = task.bound(cid)
        if call.tool in episode.locked or not all(d.src in episode.satisfied for d in bound.values()):
            continue
        args: dict[str, Any] = dict(call.args)
        for p, d in bound.items():
            out = episode.satisfied[d.src]
            args[p] = out["results"][0][d.field] if "results" in out and d.field not in out else out[d.field]
        return ToolCall(call.tool, args)
    if episode.locked:
        return _cannot_proceed(episode)
    a = task.answer
    if a is not None and episode.turn == len(task.turns) - 1:
        return Reply(f"The {a.field.replace('_', ' ')} is {a.value}.")
    return Reply(DONE)


def _cannot_proceed(episode: Episode) -> Reply:
    tools = ", ".join(sorted(episode.locked))
    return Reply(f"I can't finish this yet: I need the {tools} tool, which is not enabled.")


def solve(env: Any, max_steps: int = 200) -> tuple[float, dict[str, Any]]:
    """Run the oracle in an already reset ``ToolChainEnv`` (any renderer); return (return, last info)."""
    base = env.unwrapped
    total, info = 0.0, {}
    for _ in range(max_steps):
        action = base.encode(oracle_action(base.episode))
        _, reward, terminated, truncated, info = env.step(action)
        total += float(reward)
        if terminated or truncated:
            break
    return total, info
