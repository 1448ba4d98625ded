"""One episode as a renderer-independent state machine: actions in, events and reward out.

Actions are :class:`ToolCall`, :class:`Ask` (a question to the user), :class:`Reply` (the
agent's reply for the current user turn) or :class:`Invalid` (input a renderer could not
parse). Reward is dense progress: ``Phi = satisfied requirements / all requirements``
(required calls, plus the answer for an information goal), and each step pays
``Phi(s') - Phi(s)``, so the return is the final progress. Progress is updated
incrementally when a call executes; nothing is replayed.

A required call is *satisfied* by an executed call with the same tool and arguments, made
while its turn is active, when every argument that depends on an earlier call equals the
value that earlier call actually returned (so dependencies are respected).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from .domain import ToolSpec
from .executor import ToolError, values_equal
from .instructions import NOTHING_TO_ADD, answer_message, unlock_message
from .task import TaskSpec
from .world import WorldState

ERROR_CLASSES = ("none", "malformed", "too_long", "unknown_tool", "unavailable_tool", "locked_tool",
                 "invalid_arguments", "execution_error", "episode_over")
MAX_REPLY_CHARS = 4000
# what an action did, in env.step's info["effect"]: rejected (an error class other than none);
# progress (a required call satisfied, or the final answer given); revealed (the user answered an
# ask with withheld facts); unlocked (the user unlocked tools); turn (the conversation moved to its
# next turn); none (accepted, but nothing the task needs changed: a call with wrong arguments, an
# ask with nothing to add, a final reply without the answer)
EFFECTS = ("rejected", "progress", "revealed", "unlocked", "turn", "none")


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: Any


@dataclass(frozen=True)
class Ask:
    text: str = ""


@dataclass(frozen=True)
class Reply:
    text: str = ""


@dataclass(frozen=True)
class Invalid:
    error: str
    message: str
    params: tuple[str, ...] = ()  # the called tool's parameters the problem concerns, when known
    # the tool a call named, when the renderer read its name before finding the problem: the episode
    # then reports an unavailable or locked tool first, as it does for a well-formed call
    tool: str | None = None


Action = ToolCall | Ask | Reply | Invalid


@dataclass(frozen=True)
class RewardConfig:
    """Optional shaping on top of progress. Off by default, so the return stays in [0, 1]."""

    error_penalty: Mapping[str, float] = field(default_factory=dict)  # error class -> penalty (>= 0)
    success_bonus: float = 0.0

    def __post_init__(self) -> None:
        for k, v in self.error_penalty.items():
            if k not in ERROR_CLASSES or k == "none":
                raise ValueError(f"RewardConfig.error_penalty: unknown error class {k!r}; use one of {ERROR_CLASSES[1:]}")
            if v < 0:
                raise ValueError(f"RewardConfig.error_penalty[{k!r}] must be >= 0 (it is subtracted)")


class CompiledTask:
    """Per-task lookup tables for incremental matching, built once per task."""

    def __init__(self, task: TaskSpec, tools: Mapping[str, ToolSpec]) -> None:
        self.task = task
        self.by_tool: dict[str, list[str]] = {}
        self.turn_of = {c.id: c.turn for c in task.calls}
        self.call_tool = {c.id: c.tool for c in task.calls}
        self.order = tuple((c.id, c.turn) for c in task.calls)
        self.facts: dict[str, dict[str, Any]] = {}
        self.bound: dict[str, list[tuple[str, str, str]]] = {}  # cid -> [(param, src, field)]
        self.keys: dict[str, frozenset[str]] = {}
        for c in task.calls:
            self.by_tool.setdefault(c.tool, []).append(c.id)
            b = task.bound(c.id)
            self.bound[c.id] = [(p, d.src, d.field) for p, d in b.items()]
            self.facts[c.id] = {p: v for p, v in c.args.items() if p not in b}
            self.keys[c.id] = frozenset(c.args)
        # what _match tests per tool, in task order: (cid, turn, keys, facts, bound)
        self.plans: dict[str, tuple[tuple[str, int, frozenset[str], tuple[tuple[str, Any], ...],
                                          tuple[tuple[str, str, str], ...]], ...]] = {
            tool: tuple((cid, self.turn_of[cid], self.keys[cid], tuple(self.facts[cid].items()),
                         tuple(self.bound[cid])) for cid in cids)
            for tool, cids in self.by_tool.items()}
        self.n_required = len(task.calls) + (task.answer is not None)
        self.tools = task.tools
        self.available = frozenset(self.tools)
        self.sink_tools = tuple(dict.fromkeys(c.tool for c in task.calls))
        self.search_tools = frozenset(c.tool for c in task.calls if tools[c.tool].kind == "search")
        self.answer_number = _as_number(task.answer.value) if task.answer is not None else None


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _as_number(value: str) -> float | None:
    """``value`` as a number when it is written as one (``-12``, ``1,234.5``; not ``nan``, ``Infinity`` or ``1e5``)."""
    text = value.strip()
    return float(text.replace(",", "")) if _NUMBER.fullmatch(text) else None


_WORD = "A-Za-z0-9_"


def contains_answer(text: str, answer: str, number: float | None) -> bool:
    """Whether ``text`` names ``answer``. A numeric answer (``number``) is named by a number in the text equal
    to it (``1,234.0`` names ``1234``; ``13``, ``3.5`` and ``ORD-3`` do not name ``3``); any other answer by
    itself as a whole token, case-insensitive (``ORD-12`` does not name ``ORD-1``)."""
    if number is None:
        return bool(answer) and re.search(f"(?<![{_WORD}]){re.escape(answer)}(?![{_WORD}])", text,
                                          flags=re.IGNORECASE) is not None
    return any(abs(float(m.replace(",", "")) - number) <= 1e-6 for m in _NUMBER.findall(text))


def singles_out(text: str, answer: str, number: float | None, others: set[str]) -> bool:
    """Whether the reply ``text`` names ``answer`` and none of ``others``: the other values of the
    answer's field that the episode's tool results showed. A reply that lists every candidate (or
    pastes every tool output) contains the answer without giving it, so it does not count."""
    if not contains_answer(text, answer, number):
        return False
    rest = re.sub(re.escape(answer), " ", text, flags=re.IGNORECASE)
    for other in others:
        other_number = _as_number(other)
        if number is not None and other_number is not None and abs(other_number - number) <= 1e-6:
            continue  # the answer written another way (45 and 45.0)
        if contains_answer(rest, other, other_number):
            return False
    return True


def field_values(result: Mapping[str, Any], field_name: str) -> list[str]:
    """The values of ``field_name`` in one tool result (its own field, or its listed records')."""
    values = [result[field_name]] if field_name in result else []
    records = result.get("results")
    if isinstance(records, list):
        values.extend(r[field_name] for r in records if isinstance(r, Mapping) and field_name in r)
    return [v if isinstance(v, str) else str(v) for v in values if v is not None and not isinstance(v, (dict, list))]


@dataclass
class StepOutcome:
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    error: str = "none"
    events: list[dict[str, Any]] = field(default_factory=list)

    def effect(self, progressed: bool) -> str:
        """What the action did (one of ``EFFECTS``); ``progressed``: whether the task's progress rose."""
        if self.error != "none":
            return "rejected"
        if progressed:
            return "progress"
        for event in self.events:
            if event.get("facts"):
                return "revealed"
            if event.get("unlocked"):
                return "unlocked"
            if "turn" in event:
                return "turn"
        return "none"


class Episode:
    def __init__(self, task: TaskSpec, compiled: CompiledTask, state: WorldState, tools: Mapping[str, ToolSpec],
                 checkers: Mapping[str, Any], executor: Any, reward: RewardConfig, max_steps: int) -> None:
        self.task, self.c, self.state = task, compiled, state
        self.tools, self.checkers, self.executor = tools, checkers, executor
        self.reward_cfg, self.max_steps = reward, max_steps
        self.turn = 0
        self.steps = 0
        self.done = False
        self.satisfied: dict[str, dict[str, Any]] = {}
        self.answered = False
        self.locked: set[str] = set(task.turns[0].locked)
        self.pending: list[tuple[str, str]] = list(task.turns[0].withheld)
        self.last_error = "none"
        self.n_errors = 0
        # an information goal's competitors: other values of the answer's field the tool results showed
        self.other_answers: set[str] = set()

    # -- views -------------------------------------------------------------------------
    @property
    def progress(self) -> float:
        return (len(self.satisfied) + self.answered) / self.c.n_required

    @property
    def success(self) -> bool:
        return len(self.satisfied) + self.answered == self.c.n_required

    def available_tools(self) -> tuple[str, ...]:
        if not self.locked:
            return self.c.tools
        return tuple(t for t in self.c.tools if t not in self.locked)

    def todo(self) -> list[str]:
        """Required calls of the active turns not yet satisfied, in task order."""
        return [cid for cid, turn in self.c.order if turn <= self.turn and cid not in self.satisfied]

    def user_message(self, turn: int) -> str:
        return self.task.turns[turn].message

    def withheld_values(self) -> list[tuple[str, Any]]:
        return [(p, self.task.call(cid).args[p]) for cid, p in self.pending]

    # -- stepping ----------------------------------------------------------------------
    def step(self, action: Action) -> StepOutcome:
        out = StepOutcome()
        if self.done:
            return self._error(out, "episode_over", "the episode is over; call reset()", None)
        self.steps += 1
        n_required = self.c.n_required
        satisfied = self.satisfied
        before = len(satisfied) + self.answered
        if isinstance(action, ToolCall):  # the types are disjoint; the common one first
            self._call(action, out)
        elif isinstance(action, Reply):
            self._reply(action.text, out)
        elif isinstance(action, Ask):
            self._ask(out)
        elif isinstance(action, Invalid):
            if action.tool is None or self._tool_open(action.tool, out):
                self._error(out, action.error, action.message, action.tool, action.params)
        else:  # pragma: no cover - renderers only produce the types above
            raise TypeError(f"unknown action {action!r}")
        if out.error == "none":
            self.last_error = "none"
        done = len(satisfied) + self.answered
        out.reward += done / n_required - before / n_required
        success = done == n_required
        if success and not self.done and (self.turn == len(self.task.turns) - 1):
            self.done = out.terminated = True
        if out.terminated and success:
            out.reward += self.reward_cfg.success_bonus
        if not self.done and self.steps >= self.max_steps:
            self.done = out.truncated = True
        return out

    def _error(self, out: StepOutcome, cls: str, message: str, tool: str | None,
               params: tuple[str, ...] = ()) -> StepOutcome:
        """Record a rejected action; ``params`` are the called tool's parameters the error concerns."""
        out.error = cls
        self.last_error = cls
        self.n_errors += 1
        out.reward -= self.reward_cfg.error_penalty.get(cls, 0.0)
        out.events.append({"kind": "error", "error": cls, "message": message, "tool": tool, "params": list(params)})
        if cls == "episode_over":
            out.terminated = True
        return out

    def _tool_open(self, name: str, out: StepOutcome) -> bool:
        """Whether the suite's tool ``name`` may be called now; if not, the action is rejected as an
        unavailable tool (not in this conversation) or a locked one (not enabled by the user yet)."""
        if name not in self.c.available:
            self._error(out, "unavailable_tool", f"{name} is not available in this conversation; available: "
                        f"{', '.join(self.available_tools())}", name)
            return False
        if name in self.locked:
            self._error(out, "locked_tool", f"{name} is not enabled yet; ask the user to enable it", name)
            return False
        return True

    def _call(self, action: ToolCall, out: StepOutcome) -> None:
        name, args = action.name, action.arguments
        tool = self.tools.get(name)
        if tool is None:
            self._error(out, "unknown_tool", f"there is no tool named {_short(name)}; available: "
                        f"{', '.join(self.available_tools())}", None)
            return
        if not self._tool_open(name, out):
            return
        problem = self.checkers[name].check(args)
        if problem is not None:
            self._error(out, "invalid_arguments", problem, name, self.checkers[name].culprits(args))
            return
        try:
            result = self.executor.run(tool, args, self.state)
        except ToolError as exc:
            named = set(exc.params)
            self._error(out, "execution_error", f"{exc.code}: {exc}", name,
                        tuple(p for p in tool.param_names if p in named))
            return
        out.events.append({"kind": "result", "tool": name, "content": result})
        answer = self.task.answer
        if answer is not None:
            self.other_answers.update(v for v in field_values(result, answer.field)
                                      if v.lower() != answer.value.lower())
        self._match(name, args, result)

    def _match(self, name: str, args: Mapping[str, Any], result: Mapping[str, Any]) -> None:
        satisfied, turn = self.satisfied, self.turn
        for cid, call_turn, keys, facts, bound in self.c.plans.get(name, ()):
            if cid in satisfied or call_turn > turn or args.keys() != keys:
                continue
            ok = True
            for p, v in facts:  # text equals text only; ints compare exactly (as values_equal)
                a = args[p]
                tv = type(v)
                if not (a == v if tv is str or (tv is int and type(a) is int) else values_equal(a, v)):
                    ok = False
                    break
            if not ok:
                continue
            for p, src, f in bound:
                got = satisfied.get(src)
                if got is None or not _revealed(got, f, args[p]):
                    ok = False
                    break
            if ok:
                satisfied[cid] = dict(result)
                return

    def _ask(self, out: StepOutcome) -> None:
        if self.pending:
            facts = self.withheld_values()
            self.pending = []
            out.events.append({"kind": "user", "text": answer_message(facts), "facts": facts})
        elif self.locked:
            self._unlock(out)
        else:
            out.events.append({"kind": "user", "text": NOTHING_TO_ADD, "facts": []})

    def _unlock(self, out: StepOutcome) -> None:
        tools = tuple(sorted(self.locked))
        self.locked.clear()
        out.events.append({"kind": "user", "text": unlock_message(tools), "facts": [], "unlocked": list(tools)})

    def _reply(self, text: str, out: StepOutcome) -> None:
        if self.locked:
            self._unlock(out)
            return
        last = self.turn == len(self.task.turns) - 1
        if last:
            a = self.task.answer
            if a is not None and not self.answered and singles_out(text[:MAX_REPLY_CHARS], a.value, self.c.answer_number,
                                                                   self.other_answers):
                self.answered = True
            self.done = out.terminated = True
            return
        self.turn += 1
        t = self.task.turns[self.turn]
        self.locked = set(t.locked)
        self.pending = list(t.withheld)
        out.events.append({"kind": "user", "text": t.message, "facts": [], "turn": self.turn})


def _revealed(result: Mapping[str, Any], field_name: str, value: Any) -> bool:
    if "results" in result and field_name not in result:
        for r in result["results"]:
            if _equal(r.get(field_name), value):
                return True
        return False
    return _equal(result.get(field_name), value)


def _equal(got: Any, value: Any) -> bool:
    """``values_equal``, with its common case (a text value: plain ==) answered first."""
    return got == value if type(value) is str else values_equal(got, value)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
