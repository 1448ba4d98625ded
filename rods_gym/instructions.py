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
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from .task import Answer, Call, Dep, TaskSpec, format_value

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


@lru_cache(maxsize=4096)
def _extras(phrase: str, params: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``(param, spoken name)`` of the ``params`` that ``phrase`` has no placeholder for, in order."""
    return tuple((p, p.replace("_", " ")) for p in params if "{" + p + "}" not in phrase)


class _TaskIndex:
    """A task's calls, bound arguments and withheld parameters by call id (built once per rendering)."""

    __slots__ = ("call", "bound", "withheld")

    def __init__(self, calls: Sequence[Call], deps: Sequence[Dep],
                 withheld: Iterable[Iterable[tuple[str, str]]]) -> None:
        """``withheld``: per turn, its withheld ``(call id, param)`` pairs."""
        self.call: dict[str, Call] = {}
        for c in calls:
            self.call.setdefault(c.id, c)  # the first call of an id, as task.call() finds
        self.bound: dict[str, dict[str, Dep]] = {}
        for d in deps:
            self.bound.setdefault(d.dst, {})[d.param] = d
        self.withheld: dict[str, set[str]] = {}
        for pairs in withheld:
            for c, p in pairs:
                self.withheld.setdefault(c, set()).add(p)


def describe_call(task: TaskSpec, cid: str, suite: "Suite", turn: int, depth: int = 0,
                  wording: Wording = WORDINGS[0]) -> str:
    index = _TaskIndex(task.calls, task.deps, (t.withheld for t in task.turns))
    return _describe(index, cid, suite, turn, depth, wording)


def _describe(index: _TaskIndex, cid: str, suite: "Suite", turn: int, depth: int, wording: Wording) -> str:
    call = index.call.get(cid)
    if call is None:
        raise KeyError(cid)  # as task.call() raises
    phrase = suite.tools[call.tool].phrase
    bound = index.bound.get(cid, {})
    withheld = index.withheld.get(cid, ())
    described = _Missing()  # the phrase's placeholders, filled below
    for p, v in call.args.items():
        d = bound.get(p)
        if d is not None:
            src = index.call.get(d.src)
            if src is None:
                raise KeyError(d.src)
            field = _name(d.field, wording)
            if src.turn < turn:
                described[p] = wording.earlier.format(field=field)
            else:
                inner = _describe(index, d.src, suite, turn, depth + 1, wording)
                described[p] = wording.dependency.format(field=field, call=inner)
        elif p in withheld:
            described[p] = wording.withheld.format(param=p.replace("_", " "))
        else:
            described[p] = format_value(v)
    text = phrase.format_map(described)
    extras = _extras(phrase, tuple(call.args))
    if extras:
        text += wording.extra + wording.extra_joiner.join([f"{name} {described[p]}" for p, name in extras])
    return text


class _Missing(dict):
    def __missing__(self, key: str) -> str:
        return "(not needed)"


def render_turn_messages(task: TaskSpec, suite: "Suite", style: int | None = None) -> list[str]:
    """One user message per turn, deterministic in the task (and the style, when given).

    ``style=None`` is the default wording with openers picked from the task id; a style
    ``k`` uses ``WORDINGS[k % N_STYLES]`` with openers picked from ``k``.
    """
    return render_messages(task.id, task.calls, task.deps, [t.withheld for t in task.turns], task.answer, suite, style)


def render_messages(task_id: str, calls: Sequence[Call], deps: Sequence[Dep],
                    withheld: Sequence[Iterable[tuple[str, str]]], answer: Answer | None, suite: "Suite",
                    style: int | None = None) -> list[str]:
    """:func:`render_turn_messages` of a task given by its parts (``withheld``: per turn, its
    withheld ``(call id, param)`` pairs), for a caller that has not built the task yet."""
    wording = WORDINGS[0] if style is None else WORDINGS[style % N_STYLES]
    index = _TaskIndex(calls, deps, withheld)
    # the turns each producer feeds
    feeds: dict[str, set[int]] = {}
    well_formed = all(d.dst in index.call for d in deps)
    if well_formed:
        for d in deps:
            feeds.setdefault(d.src, set()).add(index.call[d.dst].turn)
    producers = set() if well_formed else {d.src for d in deps}
    out = []
    salt = sum(map(ord, task_id)) if style is None else style // N_STYLES
    for turn in range(len(withheld)):
        goals = []
        for c in calls:
            if well_formed:
                feeds_this_turn = turn in feeds.get(c.id, ())
            else:  # a dependency on a missing call: evaluate as written, raising where it is reached
                feeds_this_turn = c.id in producers and any(index.call[d.dst].turn == turn for d in deps
                                                            if d.src == c.id)
            if c.turn != turn or feeds_this_turn:
                continue
            text = _describe(index, c.id, suite, turn, 0, wording)
            if answer is not None and answer.call == c.id:
                text += wording.answer.format(field=answer.field.replace("_", " "))
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
