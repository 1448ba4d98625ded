"""The scripted user's words: turn messages and replies, rendered from a task's structure.

A turn message states the turn's goals (its sink calls, through each tool's ``phrase``).
An argument that an earlier call reveals is described by that call ("the customer_id of
the store customer with email ..."), so the agent must make the earlier call; a withheld
fact is replaced by a note that the user will give it when asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .task import TaskSpec, format_value

if TYPE_CHECKING:
    from .suite import Suite

OPENERS = ("Hi! Please {goal}.", "Hello, I need you to {goal}.", "Could you {goal}?", "I'd like you to {goal}.")
NEXT_OPENERS = ("Thanks. Now please {goal}.", "Great. Next, {goal}.", "One more thing: {goal}.")




def describe_call(task: TaskSpec, cid: str, suite: "Suite", turn: int, depth: int = 0) -> str:
    call = task.call(cid)
    tool = suite.tools[call.tool]
    bound = task.bound(cid)
    withheld = {p for t in task.turns for c, p in t.withheld if c == cid}
    described: dict[str, str] = {}
    for p, v in call.args.items():
        if p in bound:
            d = bound[p]
            src = task.call(d.src)
            if src.turn < turn:
                described[p] = f"the same {d.field} as before"
            else:
                described[p] = f"(the {d.field} you get when you {describe_call(task, d.src, suite, turn, depth + 1)})"
        elif p in withheld:
            described[p] = f"[my {p.replace('_', ' ')}: ask me for it]"
        else:
            described[p] = format_value(v)
    text = tool.phrase.format_map(_Missing(described))
    extras = [f"{p.replace('_', ' ')} {described[p]}" for p in call.args if "{" + p + "}" not in tool.phrase]
    if extras:
        text += " with " + " and ".join(extras)
    return text


class _Missing(dict):
    def __missing__(self, key: str) -> str:
        return "(not needed)"


def render_turn_messages(task: TaskSpec, suite: "Suite") -> list[str]:
    """One user message per turn, deterministic in the task."""
    producers = {d.src for d in task.deps}
    out = []
    salt = sum(map(ord, task.id))
    for turn in range(len(task.turns)):
        goals = []
        for c in task.calls:
            if c.turn != turn or (c.id in producers and any(task.call(d.dst).turn == turn for d in task.deps if d.src == c.id)):
                continue
            text = describe_call(task, c.id, suite, turn)
            if task.answer is not None and task.answer.call == c.id:
                text += f", and tell me the {task.answer.field.replace('_', ' ')} you find"
            goals.append(text)
        goal = "; also ".join(goals)
        openers = OPENERS if turn == 0 else NEXT_OPENERS
        out.append(openers[(salt + turn) % len(openers)].format(goal=goal))
    return out


def unlock_message(tools: tuple[str, ...]) -> str:
    return f"I've enabled {', '.join(tools)} for you now. Please go ahead."


def answer_message(facts: list[tuple[str, Any]]) -> str:
    return "Sure: " + "; ".join(f"my {p.replace('_', ' ')} is {format_value(v)}" for p, v in facts) + "."


NOTHING_TO_ADD = "I have nothing more to add; please go ahead."
