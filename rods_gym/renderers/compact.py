"""The ``compact`` view: short symbolic text for small models trained from scratch.

Values never appear literally: every value is a slot token ``$k`` (see :class:`SlotTable`).
Observations::

    tools find_customer_by_email ( email ) cancel_order ( order_id ) | user find_customer_by_email email $0 ;
      cancel_order order_id from search_orders order_id ; answer get_order status
    ok customer_id $1                      a tool result (searches: ok results N [ f $k ... ] ...)
    error invalid_arguments patient_id    a rejected action: its error class, then the parameters it concerns
    user fact email $4 | user enabled get_order | user nothing | user <next turn>

Actions: ``call TOOL param $k ...`` | ``ask`` | ``reply`` | ``reply $k``.

Slot ids: ``slot_ids="ordered"`` (the default) numbers values in order of first appearance
(``$0`` the first value the user states); ``"shuffled"`` shows each episode's values under a
random permutation of the ids (drawn by :meth:`shuffle_slots` from a generator the env
seeds with the task, so every episode of a task shows the same ids), so that an id says nothing
about where its value appeared and a policy has to copy the id it read next to the field it needs;
``"typed"`` names each value by its type and its rank among the episode's live values of that
type (``$email.0``, ``$account_id.1``), the way a program names variables, so that filling a
parameter takes knowing its type and, only when several values share it, which one. Small
transformers trained from scratch learn to bind a value to the field it follows (associative
recall) slowly; typed ids leave that binding only where it is part of the task (two accounts of
one transfer, several dates).
A withheld fact shows as ``param ?`` (ask for it); ``from TOOL field`` marks an argument
that an earlier call reveals. The vocabulary (``vocabulary()``) is closed and built from the
suite, which is what the embedded tokenizer is made of.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from ..episode import Action, Ask, ERROR_CLASSES, Invalid, Reply, ToolCall
from ..task import format_value
from .base import Renderer, SlotTable
from .text_space import TranscriptText

if TYPE_CHECKING:
    from ..episode import Episode, StepOutcome
    from ..suite import Suite

N_SLOTS = 64
MAX_ACTION_CHARS = 1024
MAX_OBS_CHARS = 4000
SLOT_IDS = ("ordered", "shuffled", "typed")
KEYWORDS = ("tools", "(", ")", "|", "user", ";", "call", "ask", "reply", "ok", "error", "fact", "from", "answer",
            "enabled", "nothing", "results", "[", "]", "?", "$?")


def vocabulary(suite: "Suite") -> list[str]:
    """Every token the compact view can produce, in a stable order."""
    names: dict[str, None] = {}
    for t in suite.tools.values():
        names[t.name] = None
    for t in suite.tools.values():
        for p in t.params:
            names[p.name] = None
        for f, _ in t.outputs:
            names[f] = None
    for extra in ("total", "deleted"):
        names[extra] = None
    words = list(KEYWORDS) + list(ERROR_CLASSES) + list(names)
    words += [str(n) for n in range(11)]
    words += [f"${k}" for k in range(N_SLOTS)]
    return list(dict.fromkeys(words))


def typed_slot_parts(suite: "Suite") -> tuple[list[str], list[str]]:
    """The two parts of every typed slot id (``slot_ids="typed"``): ``$TYPE`` for each value type
    of the suite, and the ranks ``.0`` ... ``.63``; an id is a type part followed by a rank part."""
    return [f"${t}" for t in sorted(suite.types)], [f".{j}" for j in range(N_SLOTS)]


class CompactRenderer(Renderer):
    def __init__(self, suite: "Suite", slot_ids: str = "ordered") -> None:
        super().__init__(suite)
        if slot_ids not in SLOT_IDS:
            raise ValueError(f"unknown slot_ids {slot_ids!r}; choose one of {SLOT_IDS}")
        self.slot_ids = slot_ids
        self._keep_types = frozenset(t for t, vt in suite.types.items() if vt.linkable)
        self.vocab = vocabulary(suite)
        words = [*self.vocab, *(w for part in typed_slot_parts(suite) for w in part)] if slot_ids == "typed" else self.vocab
        charset = "".join(sorted({ch for w in words for ch in w} | {" ", "\n"}))
        self.observation_space = TranscriptText(max_length=MAX_OBS_CHARS, min_length=0, charset=charset)  # "" ends it
        self.action_space = gym.spaces.Text(max_length=MAX_ACTION_CHARS, charset=charset)
        self._tokens = frozenset(self.vocab)
        self.slots = SlotTable(N_SLOTS, self._keep_types)
        self.transcript: list[str] = []
        self._shown = list(range(N_SLOTS))  # slot table index -> the id shown as $id
        self._index = list(range(N_SLOTS))  # shown id -> slot table index
        # typed ids: per slot table index, the id shown and the value it was given to; shown id -> index
        self._typed: list[tuple[str, Any]] = [("", None)] * N_SLOTS
        self._typed_index: dict[str, int] = {}

    def shuffle_slots(self, rng: np.random.Generator) -> None:
        """Draw the next episode's id permutation from ``rng``: with ``slot_ids="shuffled"`` the env
        calls this before every :meth:`reset`; ``"ordered"`` keeps the identity."""
        self._shown = [int(k) for k in rng.permutation(N_SLOTS)]
        self._index = [0] * N_SLOTS
        for k, shown in enumerate(self._shown):
            self._index[shown] = k

    def slot_token(self, k: int) -> str:
        """The token that shows slot table entry ``k``."""
        if self.slot_ids == "typed":
            return self._typed_token(k)
        return f"${self._shown[k]}"

    def _typed_token(self, k: int) -> str:
        """``$TYPE.RANK`` of entry ``k``: given when its value entered the table (a value that took
        over an evicted entry gets a new one), the lowest rank no live value of its type holds."""
        value = self.slots.values[k]
        token, owner = self._typed[k]
        if token and owner is value:
            return token
        if token:
            del self._typed_index[token]
        prefix = f"${self.slots.types[k]}."
        rank = next(j for j in range(N_SLOTS + 1) if f"{prefix}{j}" not in self._typed_index)  # < N_SLOTS live values
        token = f"{prefix}{rank}"
        self._typed[k] = (token, value)
        self._typed_index[token] = k
        return token

    # -- rendering ---------------------------------------------------------------------
    def _slot(self, value: Any, vtype: str, source: str) -> str:
        k = self.slots.add(value, vtype, source)
        return "$?" if k is None else self.slot_token(k)

    def _turn_text(self, episode: "Episode", turn: int) -> str:
        task = episode.task
        withheld = {(c, p) for c, p in task.turns[turn].withheld}
        parts = []
        for c in task.calls:
            if c.turn != turn:
                continue
            tool = self.suite.tools[c.tool]
            bound = task.bound(c.id)
            words = [c.tool]
            for p, v in c.args.items():
                if p in bound:
                    d = bound[p]
                    words += [p, "from", task.call(d.src).tool, d.field]
                elif (c.id, p) in withheld:
                    words += [p, "?"]
                else:
                    words += [p, self._slot(v, tool.param(p).type, "user")]
            parts.append(" ".join(words))
        text = " ; ".join(parts)
        if task.answer is not None and turn == len(task.turns) - 1:
            text += f" ; answer {task.call(task.answer.call).tool} {task.answer.field}"
        return "user " + text

    def reset(self, episode: "Episode") -> str:
        self.slots = SlotTable(N_SLOTS, self._keep_types)
        self._typed, self._typed_index = [("", None)] * N_SLOTS, {}
        tools = " ".join(f"{t} ( {' '.join(self.suite.tools[t].param_names)} )" for t in episode.available_tools())
        obs = f"tools {tools} | {self._turn_text(episode, 0)}"
        self.transcript = [obs]
        return self._bound(obs)

    def _result_text(self, tool_name: str, content: dict[str, Any]) -> str:
        self.slots.new_batch()
        if "results" in content:
            words = ["ok", "results", str(min(content["total"], 10))]
            for rec in content["results"]:
                words.append("[")
                for f, v in rec.items():
                    words += [f, self._slot(v, self.field_type(tool_name, f), tool_name)]
                words.append("]")
            return " ".join(words)
        words = ["ok"]
        for f, v in content.items():
            if f in self._tokens:
                words += [f, self._slot(v, self.field_type(tool_name, f), tool_name)]
        return " ".join(words)

    def observe(self, episode: "Episode", outcome: "StepOutcome") -> str:
        lines = []
        for ev in outcome.events:
            if ev["kind"] == "result":
                lines.append(self._result_text(ev["tool"], ev["content"]))
            elif ev["kind"] == "error":  # the class, then the call's parameters it concerns
                named = [p for p in ev.get("params", ()) if p in self._tokens]
                lines.append(" ".join(["error", ev["error"], *named]))
            elif "turn" in ev:
                avail = " ".join(f"{t} ( {' '.join(self.suite.tools[t].param_names)} )" for t in episode.available_tools())
                lines.append(f"tools {avail} | {self._turn_text(episode, ev['turn'])}")
            elif ev.get("unlocked"):
                lines.append("user enabled " + " ".join(ev["unlocked"]))
            elif ev["facts"]:
                words = ["user"]
                for p, v in ev["facts"]:
                    words += ["fact", p, self._slot(v, self._fact_type(episode, p), "user")]
                lines.append(" ".join(words))
            else:
                lines.append("user nothing")
        obs = "\n".join(lines)
        # render() also explains errors in words; the observation keeps to the closed vocabulary
        notes = [f"# {ev['error']}: {ev['message']}" for ev in outcome.events if ev["kind"] == "error"]
        self.transcript.append("\n".join([obs, *notes]))
        return self._bound(obs)

    def _fact_type(self, episode: "Episode", param: str) -> str:
        for c in episode.task.calls:
            if param in c.args:
                return self.suite.tools[c.tool].param(param).type
        return "text"

    @staticmethod
    def _bound(text: str) -> str:
        return text if len(text) <= MAX_OBS_CHARS else text[:MAX_OBS_CHARS]

    # -- parsing -----------------------------------------------------------------------
    def decode(self, action: Any) -> Action:
        if not isinstance(action, str):
            return Invalid("malformed", f"an action must be a string, got {type(action).__name__}")
        if len(action) > MAX_ACTION_CHARS:
            return Invalid("too_long", f"the action has {len(action)} characters; the limit is {MAX_ACTION_CHARS}")
        self.transcript.append(action)
        words = action.split()
        if not words:
            return Invalid("malformed", "empty action; use call/ask/reply")
        head = words[0]
        if head == "ask":
            return Ask(" ".join(words[1:]) + "?") if len(words) == 1 else Invalid("malformed", "ask takes no arguments")
        if head == "reply":
            if len(words) == 1:
                return Reply("done")
            if len(words) == 2:
                value = self._value(words[1])
                if isinstance(value, Invalid):
                    return value
                return Reply(format_value(value))
            return Invalid("malformed", "reply takes at most one slot")
        if head != "call":
            return Invalid("malformed", f"actions start with call, ask or reply, not {head[:30]!r}")
        if len(words) < 2:
            return Invalid("malformed", "call needs a tool name")
        name = words[1]
        if name not in self.suite.tools:
            return ToolCall(name[:60], {})  # the episode reports unknown_tool
        rest = words[2:]
        if len(rest) % 2:
            return Invalid("malformed", "arguments come in pairs: param $k", tool=name)
        args: dict[str, Any] = {}
        params = self.suite.tools[name].param_names
        for p, s in zip(rest[::2], rest[1::2]):
            named = (p,) if p in params else ()
            if p in args:
                return Invalid("invalid_arguments", f"argument {p[:30]!r} given twice", named, tool=name)
            value = self._value(s)
            if isinstance(value, Invalid):
                return Invalid(value.error, value.message, named, tool=name)
            args[p[:60]] = value
        return ToolCall(name, args)

    def _value(self, token: str) -> Any:
        if self.slot_ids == "typed":
            return self._typed_value(token)
        if not token.startswith("$") or not (token[1:].isascii() and token[1:].isdigit()):
            return Invalid("malformed", f"values are slot tokens like $3, got {token[:30]!r}")
        shown = int(token[1:])
        k = self._index[shown] if shown < N_SLOTS else shown
        if k >= len(self.slots):
            return Invalid("invalid_arguments", f"slot ${shown} is empty")
        return self.slots.values[k]

    def _typed_value(self, token: str) -> Any:
        vtype, dot, rank = token[1:].rpartition(".")
        if not token.startswith("$") or not dot or vtype not in self.suite.types \
                or not (rank.isascii() and rank.isdigit()):
            return Invalid("malformed", f"values are typed slot tokens like $email.0, got {token[:40]!r}")
        k = self._typed_index.get(token)
        if k is None:
            return Invalid("invalid_arguments", f"slot {token[:40]} is empty")
        return self.slots.values[k]

    def encode(self, action: Action, episode: "Episode") -> str:
        if isinstance(action, ToolCall):
            words = ["call", action.name]
            for p, v in action.arguments.items():
                k = self.slots.find(v)
                if k is None:
                    raise ValueError(f"value {v!r} has no slot; the compact view cannot express it")
                words += [p, self.slot_token(k)]
            return " ".join(words)
        if isinstance(action, Ask):
            return "ask"
        if isinstance(action, Reply):
            k = None
            if episode.task.answer is not None and episode.turn == len(episode.task.turns) - 1:
                a = episode.task.answer
                k = self.slots.find_answer(a.value)
            return "reply" if k is None else f"reply {self.slot_token(k)}"
        raise ValueError(f"cannot encode {action!r}")

    def text(self) -> str:
        return "\n".join(self.transcript)

