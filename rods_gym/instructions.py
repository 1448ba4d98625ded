"""The scripted user's words: turn messages and replies, rendered from a task's structure.

A turn message states the turn's goals (its sink calls, through each tool's ``phrase``).
An argument that an earlier call reveals is described by that call ("the customer_id of
the store customer with email ..."), so the agent must make the earlier call; a withheld
fact is replaced by a note that the user will give it when asked.

The wording comes in several *styles* (:data:`WORDINGS`): openers, how a dependency, an
earlier-turn value, a withheld fact and the answer request are phrased, and how goals are
joined. The sampler uses the default wording (``style=None``); the resampler draws a style
per variant, so variants differ from their parents in wording as well as in tools and values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .task import TaskSpec, format_value

if TYPE_CHECKING:
    from .suite import Suite

OPENERS = ("Hi! Please {goal}.", "Hello, I need you to {goal}.", "Could you {goal}?", "I'd like you to {goal}.")
NEXT_OPENERS = ("Thanks. Now please {goal}.", "Great. Next, {goal}.", "One more thing: {goal}.")


@dataclass(frozen=True)
class Wording:
    """One phrasing of the user's messages. Placeholders: ``{field}``, ``{call}``, ``{param}``, ``{goal}``."""

    openers: tuple[str, ...] = OPENERS
    next_openers: tuple[str, ...] = NEXT_OPENERS
    dependency: str = "(the {field} you get when you {call})"
    earlier: str = "the same {field} as before"
    withheld: str = "[my {param}: ask me for it]"
    answer: str = ", and tell me the {field} you find"
    joiner: str = "; also "
    extra: str = " with "
    extra_joiner: str = " and "
    spaced_fields: bool = False  # write ``customer id`` instead of ``customer_id`` in descriptions


WORDINGS: tuple[Wording, ...] = (
    Wording(),
    Wording(
        openers=("Hey, can you {goal}?", "Please {goal}.", "I need some help: {goal}.", "Would you {goal}?"),
        next_openers=("OK. Next, please {goal}.", "Now {goal}, please.", "Also, {goal}."),
        dependency="(whatever {field} comes back when you {call})",
        earlier="the {field} you found earlier",
        withheld="[ask me for my {param}]",
        answer=", then let me know the {field}",
        joiner=". Also ",
        spaced_fields=True,
    ),
    Wording(
        openers=("Good morning. I want you to {goal}.", "Can you please {goal}?", "Your task: {goal}.",
                 "I have a request: {goal}."),
        next_openers=("Perfect. Next request: {goal}.", "Thank you. Please also {goal}.", "Now, {goal}."),
        dependency="(the {field} returned when you {call})",
        earlier="the {field} from before",
        withheld="[my {param} - I'll tell you if you ask]",
        answer=", and report the {field} back to me",
        joiner=", and then ",
        extra=" using ",
        extra_joiner=", ",
    ),
    Wording(
        openers=("Hello! Could you {goal}?", "I'd appreciate it if you could {goal}.", "Help me {goal}, please.",
                 "Please go ahead and {goal}."),
        next_openers=("Thanks! Could you now {goal}?", "Next up: {goal}.", "Another thing: please {goal}."),
        dependency="(use the {field} that you obtain when you {call})",
        earlier="the {field} we used before",
        withheld="[I'll give you my {param} when you ask]",
        answer="; I need to know the {field}",
        joiner="; and ",
        extra=" for ",
        spaced_fields=True,
    ),
    Wording(
        openers=("Hi there. Please {goal}.", "Could you help me {goal}?", "I'm asking you to {goal}.",
                 "Quick request: {goal}."),
        next_openers=("Great, thanks. Please {goal} as well.", "Then {goal}.", "After that, {goal}."),
        dependency="(first {call}, and take the {field} from the result)",
        earlier="the {field} you already have",
        withheld="[my {param}, which I'll share when asked]",
        answer=", and tell me what the {field} is",
        joiner=". Besides that, ",
        extra=" given ",
        extra_joiner=" and ",
    ),
)
N_STYLES = len(WORDINGS)


def _name(name: str, wording: Wording) -> str:
    return name.replace("_", " ") if wording.spaced_fields else name


class _TaskIndex:
    """A task's calls, bound arguments and withheld parameters by call id (built once per rendering)."""

    __slots__ = ("call", "bound", "withheld")

    def __init__(self, task: TaskSpec) -> None:
        self.call: dict[str, Any] = {}
        for c in task.calls:
            self.call.setdefault(c.id, c)  # the first call of an id, as task.call() finds
        self.bound: dict[str, dict[str, Any]] = {c.id: {} for c in task.calls}
        for d in task.deps:
            self.bound.setdefault(d.dst, {})[d.param] = d
        self.withheld: dict[str, set[str]] = {}
        for t in task.turns:
            for c, p in t.withheld:
                self.withheld.setdefault(c, set()).add(p)


def describe_call(task: TaskSpec, cid: str, suite: "Suite", turn: int, depth: int = 0,
                  wording: Wording = WORDINGS[0]) -> str:
    return _describe(task, _TaskIndex(task), cid, suite, turn, depth, wording)


def _describe(task: TaskSpec, index: _TaskIndex, cid: str, suite: "Suite", turn: int, depth: int,
              wording: Wording) -> str:
    if cid not in index.call:
        task.call(cid)  # raises the KeyError naming the id
    call = index.call[cid]
    tool = suite.tools[call.tool]
    bound = index.bound.get(cid, {})
    withheld = index.withheld.get(cid, ())
    described = _Missing()  # the phrase's placeholders, filled below
    for p, v in call.args.items():
        if p in bound:
            d = bound[p]
            src = task.call(d.src) if d.src not in index.call else index.call[d.src]
            if src.turn < turn:
                described[p] = wording.earlier.format(field=_name(d.field, wording))
            else:
                inner = _describe(task, index, d.src, suite, turn, depth + 1, wording)
                described[p] = wording.dependency.format(field=_name(d.field, wording), call=inner)
        elif p in withheld:
            described[p] = wording.withheld.format(param=p.replace("_", " "))
        else:
            described[p] = format_value(v)
    text = tool.phrase.format_map(described)
    extras = [f"{p.replace('_', ' ')} {described[p]}" for p in call.args if "{" + p + "}" not in tool.phrase]
    if extras:
        text += wording.extra + wording.extra_joiner.join(extras)
    return text


class _Missing(dict):
    def __missing__(self, key: str) -> str:
        return "(not needed)"


def render_turn_messages(task: TaskSpec, suite: "Suite", style: int | None = None) -> list[str]:
    """One user message per turn, deterministic in the task (and the style, when given).

    ``style=None`` is the default wording with openers picked from the task id; a style
    ``k`` uses ``WORDINGS[k % N_STYLES]`` with openers picked from ``k``.
    """
    wording = WORDINGS[0] if style is None else WORDINGS[style % N_STYLES]
    index = _TaskIndex(task)
    # the turns each producer feeds
    feeds: dict[str, set[int]] = {}
    well_formed = all(d.dst in index.call for d in task.deps)
    for d in task.deps:
        if well_formed:
            feeds.setdefault(d.src, set()).add(index.call[d.dst].turn)
    producers = {d.src for d in task.deps}
    out = []
    salt = sum(map(ord, task.id)) if style is None else style // N_STYLES
    for turn in range(len(task.turns)):
        goals = []
        for c in task.calls:
            if well_formed:
                feeds_this_turn = turn in feeds.get(c.id, ())
            else:  # a dependency on a missing call: evaluate as written, raising where it is reached
                feeds_this_turn = c.id in producers and any(task.call(d.dst).turn == turn for d in task.deps
                                                            if d.src == c.id)
            if c.turn != turn or feeds_this_turn:
                continue
            text = _describe(task, index, c.id, suite, turn, 0, wording)
            if task.answer is not None and task.answer.call == c.id:
                text += wording.answer.format(field=task.answer.field.replace("_", " "))
            goals.append(text)
        goal = wording.joiner.join(goals)
        openers = wording.openers if turn == 0 else wording.next_openers
        out.append(openers[(salt + turn) % len(openers)].format(goal=goal))
    return out


def unlock_message(tools: tuple[str, ...]) -> str:
    return f"I've enabled {', '.join(tools)} for you now. Please go ahead."


def answer_message(facts: list[tuple[str, Any]]) -> str:
    return "Sure: " + "; ".join(f"my {p.replace('_', ' ')} is {format_value(v)}" for p, v in facts) + "."


NOTHING_TO_ADD = "I have nothing more to add; please go ahead."
