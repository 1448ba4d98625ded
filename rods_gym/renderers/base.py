"""The renderer interface and the value-slot table shared by the compact and structured views."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from ..task import format_value

if TYPE_CHECKING:
    from ..episode import Action, Episode, StepOutcome
    from ..suite import Suite


class Renderer:
    """Turns an :class:`Episode` into observations and agent input into actions.

    ``decode`` must never raise on agent input: anything it cannot parse becomes an
    ``Invalid`` action carrying the error class and a message.
    """

    observation_space: gym.Space
    action_space: gym.Space

    def __init__(self, suite: "Suite") -> None:
        self.suite = suite
        self._field_types: dict[tuple[str, str], str] = {}  # field_type answers (the suite is read-only)
        self._tool_field_types: dict[str, dict[str, str]] = {}

    def reset(self, episode: "Episode") -> Any:
        raise NotImplementedError

    def decode(self, action: Any) -> "Action":
        raise NotImplementedError

    def observe(self, episode: "Episode", outcome: "StepOutcome") -> Any:
        raise NotImplementedError

    def encode(self, action: "Action", episode: "Episode") -> Any:
        """The renderer's own action for an abstract one (used by the oracle and tests)."""
        raise NotImplementedError

    def field_type(self, tool_name: str, field: str) -> str:
        """The value type of an output field of a tool (declared outputs first, then the entity)."""
        known = self._field_types.get((tool_name, field))
        if known is None:
            known = self._field_types[(tool_name, field)] = self._find_field_type(tool_name, field)
        return known

    def field_types(self, tool_name: str) -> dict[str, str]:
        """:meth:`field_type` of every declared output and entity field of a tool (built once)."""
        known = self._tool_field_types.get(tool_name)
        if known is None:
            tool = self.suite.tools[tool_name]
            names = [f for f, _ in tool.outputs]
            if tool.entity in self.suite.entities:
                names += self.suite.entities[tool.entity].field_names
            known = self._tool_field_types[tool_name] = {f: self.field_type(tool_name, f) for f in names}
        return known

    def _find_field_type(self, tool_name: str, field: str) -> str:
        tool = self.suite.tools[tool_name]
        for name, vtype in tool.outputs:
            if name == field:
                return vtype
        ent = self.suite.entities[tool.entity]
        if field in ent.field_names:
            return ent.field(field).type
        return "count" if field == "total" else "flag" if field == "deleted" else "text"

    def text(self) -> str:
        """A human-readable rendering of the episode so far (``render_mode='ansi'``)."""
        raise NotImplementedError


def value_key(value: Any) -> str:
    """Equal values (numbers within 1e-6) get equal keys."""
    t = type(value)
    if t is str:
        return "s" + value
    if t is int or t is float:
        return "n" + repr(round(float(value), 6))
    return "j" + json.dumps(value, sort_keys=True)


class SlotTable:
    """Every distinct value seen in the episode (user facts and tool outputs), numbered.

    Equal values share a slot, so an id returned by one call and passed to the next is the
    same slot. When all ``capacity`` slots are used, a new value takes over the oldest slot
    (round robin) that does not hold a user fact (a stated value keeps its slot even when a
    tool returned it first), preferring slots whose type is not in ``keep_types``: the
    renderers keep the linkable types (ids, contacts, dates...), the only values that later
    calls consume, over text and categories, which are at most read out in an answer right
    away. Values of one batch (:meth:`new_batch`: one tool result) take over older slots
    first, so a result does not evict its own values (its answer) while older ones can go.
    ``add`` returns ``None`` only when every slot holds a user fact.
    """

    __slots__ = ("capacity", "keep_types", "values", "types", "sources", "index", "written", "_evict", "_clock",
                 "_batch")

    def __init__(self, capacity: int, keep_types: frozenset[str] = frozenset()) -> None:
        self.capacity = capacity
        self.keep_types = keep_types
        self.values: list[Any] = []
        self.types: list[str] = []
        self.sources: list[str] = []
        self.index: dict[str, int] = {}  # value_key -> slot (read it; only add() and add_new() write it)
        # per slot: the write count when its value was last added; a slot is in the current batch
        # when it is >= the count at the batch's start (code that inlines add() sets it to that)
        self.written: list[int] = []
        self._evict = 0
        self._clock = 0
        self._batch = 0

    def new_batch(self) -> int:
        """Start a batch: the values added from now on (also those that already had a slot) do not
        evict each other while older slots remain. Returns the batch's start count."""
        self._batch = self._clock
        return self._batch

    def add(self, value: Any, vtype: str, source: str) -> int | None:
        key = "s" + value if type(value) is str else value_key(value)
        k = self.index.get(key)
        if k is not None:
            if source == "user":  # a stated fact keeps its slot, even if a tool returned it first
                self.sources[k] = source
            self.written[k] = self._clock
            return k
        return self.add_new(key, value, vtype, source)

    def add_new(self, key: str, value: Any, vtype: str, source: str) -> int | None:
        """:meth:`add` for a value whose key ``key`` (``value_key(value)``) has no slot yet."""
        values = self.values
        if len(values) < self.capacity:
            k = len(values)
            values.append(value)
            self.types.append(vtype)
            self.sources.append(source)
            self.written.append(self._clock)
        else:
            k = self._victim()
            if k is None:
                return None
            del self.index[value_key(values[k])]
            values[k], self.types[k], self.sources[k] = value, vtype, source
            self.written[k] = self._clock
        self._clock += 1
        self.index[key] = k
        return k

    def _victim(self) -> int | None:
        # first a slot older than the batch, then (a batch larger than the table) one of the batch;
        # each time first a slot of a type not kept, then any tool value
        for older, any_type in ((True, False), (True, True), (False, False), (False, True)):
            for step in range(self.capacity):  # bounded scan for the oldest non-user slot
                k = (self._evict + step) % self.capacity
                if self.sources[k] != "user" and (any_type or self.types[k] not in self.keep_types) \
                        and (not older or self.written[k] < self._batch):
                    self._evict = (k + 1) % self.capacity
                    return k
        return None

    def find(self, value: Any) -> int | None:
        return self.index.get(value_key(value))

    def find_answer(self, answer: str) -> int | None:
        """The slot a reply should send for an answer written ``answer``: the value written the
        same way, else the same number (a count of 2 shares the slot of an amount 2.0, and the
        reply "2.0" contains the answer "2")."""
        for k, v in enumerate(self.values):
            if format_value(v) == answer:
                return k
        try:
            return self.find(float(answer))
        except (ValueError, OverflowError):
            return None

    def __len__(self) -> int:
        return len(self.values)
