"""The ``features`` view: a compact, task-independent encoding for PPO that transfers to unseen tasks.

The ``structured`` view names tools by one-hot index and values by slot position, so a policy
learns which index to pick in each training task and carries little of it to a new one. Here the
agent chooses among *candidate actions* (a pointer-style choice), and every candidate is described
only by what it does relative to the conversation, never by a tool's or a value's identity:

* candidates (``Discrete(N_CANDIDATES)``, the ``action_masks()`` row marks the ones that exist):
  in ``ranked`` order position 0 asks the user, 1 replies with no value (next turn / done), ``2 .. 2 +
  N_REPLY_VALUES`` reply with a value the tools returned (the likeliest answer first), the rest are tool calls: for
  every available tool, type-consistent bindings of its parameters to the episode's values (the
  best-scored binding first, then bindings that change one parameter), those of the pending (todo)
  tools first; in ``shuffled`` order (the default) the same candidates sit at positions permuted per task.
  A candidate call passes the tool's argument checker and names an available, unlocked
  tool, so the env never rejects it for its form; only the world can (``execution_error``: an
  insufficient balance, an ambiguous search), as with a real API.
* observation (``Box``, float32, ``GLOBAL + N_CANDIDATES * CANDIDATE`` values in [0, 1]): the
  episode's flags (answer wanted, a fact withheld, a tool locked, last action ok), progress, turn,
  number of todo calls, the last error class; then per candidate its kind, whether its tool is a
  todo tool / was called / this exact call was made already, how many of its arguments are the
  ones the task's plan names for them (a fact the user stated for that tool's parameter, or the
  output field of the tool the plan says it comes from: the same plan the ``compact`` view writes in
  its user line, ``cancel_order order_id from search_orders order_id``), whether its argument keys
  are those of a todo call, where its values came from (the user, a tool output, a call that made
  progress, an output field named as the parameter, the first record of a search) and, for a reply,
  whether its value is the output field the answer asks for.

The same task shows the same features in every episode; two tasks with different tools but the same
structure show the same candidates' features (in ``ranked`` order the same observation). Columns of a
candidate's row: 0 exists, 1-4 kind (ask, reply, reply with a value, call), 5 todo tool, 6 tool called
before, 7 this call made before, 8 the tool's parameter count, 9 share of plan-matched arguments, 10 all
matched, 11 argument keys of a todo call, 12-16 shares of values from the user / a tool / a call that made
progress / an output field named as the parameter, mean recency, 17-18 (replies) the answer's tool and
field / its field (the reply with no value, with turn cues: it moves to the next user turn / no call is left in
the active turns; column 5 then says both), 19 share from a first record. ``turn_cues`` (the ``-v1`` features ids)
also keeps ask and reply at positions 0 and 1 in shuffled order: without them (``-v0``) the reply that moves a
multi-turn conversation on sits at a different position in every task and its row never changes, and MaskablePPO
learns to reply mid-conversation in almost no task (docs/features.md, "Multi-turn tasks"). The view is its own
env class (FeaturesEnv) because
``ToolChainEnv.action_masks`` serves the structured view only. Construct it with ``gym.make("rods/ToolChain-Features-v0")`` (or
``rods/ToolChain-{Easy,Medium,Hard}-Features-v0``, any :class:`~rods_gym.env.ToolChainEnv` kwarg
passes through), or :class:`rods_gym.features_env.FeaturesEnv`; use it with sb3-contrib's
``MaskablePPO("MlpPolicy", ...)`` through ``ActionMasker`` or ``env.action_masks()``.

How it is computed (the view is on every env step of a PPO run, so it is written for speed, and
``tests/test_features_equivalence.py`` checks it against the straightforward version it replaced, kept
as ``tests/features_reference.py``): what an episode cannot change is built once per task
(:class:`_TaskTables`: the candidate permutation, the facts each turn states with their value types, and the
plan of the todo calls per turn and satisfied set, per tool and parameter); per step only what the action
changed is updated (a value's slot and its recency order within its type, which slots hold a (tool, field)'s
output now), and a call's parameter takes only its two best-scored values (the binding rule never looks
further), found by walking its type's slots from the most recent. A step that changed nothing a candidate
depends on (a rejected action, a question with nothing to add) keeps the candidates and their rows; only the
episode's flags are written again. The observation is packed as float32 bytes (``struct``), not built from
nested lists.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from ..episode import ERROR_CLASSES, Action, Ask, Invalid, Reply, ToolCall
from ..task import format_value, task_generator
from .base import Renderer, SlotTable, value_key

if TYPE_CHECKING:
    from ..episode import CompiledTask, Episode, StepOutcome
    from ..suite import Suite

N_SLOTS = 48
N_CANDIDATES = 32
N_REPLY_VALUES = 3
PER_TOOL = 3  # bindings per tool: the best-scored one, then one-parameter changes
FIRST_CALL = 2 + N_REPLY_VALUES
GLOBAL = 12 + len(ERROR_CLASSES)
CANDIDATE = 20
CANDIDATE_ORDERS = ("ranked", "shuffled")
PLAN_CACHE = 4096  # tasks whose tables are kept (then the cache starts again)
STATE_CACHE = 256  # plans kept per task (one per turn and satisfied set reached)
CHECK_CACHE = 1 << 16

ASK, REPLY, REPLY_VALUE, CALL = 1, 2, 3, 4  # candidate kinds (feature columns 1..4)
EMPTY = Invalid("invalid_arguments", "no candidate action at this position")
ASK_ROW = [1.0, 1.0] + [0.0] * (CANDIDATE - 2)
REPLY_ROW = [1.0, 0.0, 1.0] + [0.0] * (CANDIDATE - 3)


def shuffled_positions(task: Any, turn_cues: bool) -> list[int]:
    """The positions of the ranked candidates in ``shuffled`` order, drawn from a generator seeded with the task.
    With ``turn_cues`` ask and reply (the conversation's own actions, the same in every task) stay at 0 and 1 and
    only the task's candidates (reply values, calls) are permuted over the other 30 positions; without, all 32."""
    if not turn_cues:
        return task_generator(task).permutation(N_CANDIDATES).tolist()
    fixed = 2
    return list(range(fixed)) + [fixed + int(p) for p in task_generator(task).permutation(N_CANDIDATES - fixed)]


def reply_row(next_turn: bool, calls_done: bool) -> list[float]:
    """The reply's row (no value) with turn cues: columns 17 and 18 say that it moves the conversation to the next
    user turn (it is not the last) and that no call is left to make in the active turns; column 5, both: the reply
    is what the task needs next, as column 5 says of a call whose tool the plan still needs. Without turn cues the
    row is ``REPLY_ROW`` (``reply_row(False, False)``)."""
    row = list(REPLY_ROW)
    row[5], row[17], row[18] = float(next_turn and calls_done), float(next_turn), float(calls_done)
    return row


_ROW = struct.Struct(f"{CANDIDATE}f")  # one candidate's row, as float32 bytes
_FLAGS = struct.Struct("12f")  # the episode's flags: the global features before the error one-hot
_ERROR_BYTES = {e: struct.pack(f"{len(ERROR_CLASSES)}f", *(float(e == x) for x in ERROR_CLASSES))
                for e in ERROR_CLASSES}  # the last error's one-hot
_ROW_BYTES, _FLAGS_BYTES = _ROW.size, 4 * GLOBAL
_ASK_BYTES = _ROW.pack(*ASK_ROW)
_REPLY_BYTES = {(n, d): _ROW.pack(*reply_row(n, d)) for n in (False, True) for d in (False, True)}
ASK_ACTION, DONE_ACTION = Ask("?"), Reply("done")
_NO_SECOND = -1  # a parameter with one option only (None is an option: the parameter left out)
_NOTHING: frozenset[Any] = frozenset()


class _Slot:
    """What the features say about one value: where it came from and how it was seen."""

    __slots__ = ("key", "vtype", "user", "tool", "field", "first", "progress", "clock")

    def __init__(self, key: str) -> None:
        self.key = key  # value_key of the value
        self.vtype = ""
        self.user = False
        self.tool: str | None = None  # the tool whose output held it (the latest)
        self.field: str | None = None
        self.first = False  # a single result, or the first record of a search
        self.progress = False  # a call that satisfied a requirement returned it
        self.clock = 0


class _ToolPlan:
    """What the task's plan says about one tool while it has todo calls: the argument key sets of those
    calls and their union, and per parameter (in the tool's order) the value keys the user stated for it
    and the (tool, output field)s it is to come from."""

    __slots__ = ("keys", "planned", "facts", "sources", "linked")

    def __init__(self, keys: tuple[frozenset[str], ...], facts: tuple[tuple[str, ...], ...],
                 sources: tuple[tuple[tuple[str, str], ...], ...]) -> None:
        self.keys = keys
        self.planned: frozenset[str] = frozenset().union(*keys)
        self.facts = facts
        self.sources = sources
        self.linked = tuple(bool(f or s) for f, s in zip(facts, sources))  # the plan names a value for it


class _TaskTables:
    """What no step of an episode changes, built once per task: the candidates' positions (permuted in
    shuffled order) with the ask and reply candidates placed; per turn the facts the user states in it,
    with their value types; the value type of each parameter the user may be asked for; the answer's
    (tool, field); the plans of the todo calls (per turn and satisfied calls, as the episodes reach them);
    and the candidates every episode starts with."""

    __slots__ = ("position", "cands", "marks", "block", "turn_facts", "fact_types", "answer_source", "active",
                 "last_turn", "turn_scale", "plans", "start")

    def __init__(self, episode: "Episode", renderer: "FeaturesRenderer") -> None:
        task, tools = episode.task, renderer.suite.tools
        # the position of each ranked candidate; the candidates, mask and observation bytes with ask and reply only
        self.position: list[int] = list(range(N_CANDIDATES))
        if renderer.candidate_order == "shuffled":
            self.position = shuffled_positions(task, renderer.turn_cues)
        self.cands: list[Any] = [EMPTY] * N_CANDIDATES
        self.marks = bytearray(N_CANDIDATES)
        block = bytearray(_FLAGS_BYTES + N_CANDIDATES * _ROW_BYTES)
        for r, cand, row in ((0, ASK_ACTION, _ASK_BYTES), (1, DONE_ACTION, _REPLY_BYTES[(False, False)])):
            pos = self.position[r]
            self.cands[pos], self.marks[pos] = cand, True
            block[_FLAGS_BYTES + pos * _ROW_BYTES:_FLAGS_BYTES + (pos + 1) * _ROW_BYTES] = row
        self.block = bytes(block)
        turn_facts = []
        for turn in range(len(task.turns)):
            withheld = set(task.turns[turn].withheld)
            turn_facts.append(tuple((v, tools[task.call(cid).tool].param(p).type) for cid, p, v in task.facts(turn)
                                    if (cid, p) not in withheld))
        self.turn_facts = tuple(turn_facts)
        self.fact_types: dict[str, str] = {}
        for c in task.calls:
            for p in c.args:
                self.fact_types.setdefault(p, tools[c.tool].param(p).type)
        answer = task.answer
        self.answer_source = None if answer is None else (episode.c.call_tool[answer.call], answer.field)
        # per turn the calls required by then (the todo count is that less the satisfied ones: a call is
        # satisfied only while its turn is active)
        self.active = tuple(sum(c.turn <= turn for c in task.calls) for turn in range(len(task.turns)))
        self.last_turn, self.turn_scale = len(task.turns) - 1, max(1, len(task.turns) - 1)
        self.plans: dict[tuple[Any, ...], dict[str, _ToolPlan]] = {}
        self.start: tuple[Any, ...] | None = None  # the candidates after reset: the same in every episode


def _as_index(action: Any) -> int | None:
    """An int, a NumPy integer, a whole float or a 0-d array of one, as an int; anything else None."""
    if isinstance(action, np.ndarray):
        if action.ndim != 0:
            return None
        action = action.item()
    if isinstance(action, bool) or not isinstance(action, (int, float, np.integer, np.floating)):
        return None
    try:
        return int(action) if float(action).is_integer() else None
    except (OverflowError, ValueError):
        return None


def _score(option: tuple[Any, ...]) -> Any:
    return option[0]


class FeaturesRenderer(Renderer):
    """``candidate_order``: ``shuffled`` (the default: the candidates at positions permuted by a generator
    seeded with the task, as the compact view's shuffled ids: every episode of a task shows the same order,
    and a position says nothing about a candidate, so a policy has to read its features) or ``ranked`` (ask,
    reply, reply values, then the calls, todo tools and plan-matched bindings first: there the first call
    position alone is nearly always the right call, which a policy learns as a rule within a few thousand
    steps, on any task set, so it measures no learning from tasks)."""

    def __init__(self, suite: "Suite", candidate_order: str = "shuffled", turn_cues: bool = False) -> None:
        super().__init__(suite)
        if candidate_order not in CANDIDATE_ORDERS:
            raise ValueError(f"candidate_order must be one of {CANDIDATE_ORDERS}, got {candidate_order!r}")
        if not isinstance(turn_cues, bool):
            raise ValueError(f"turn_cues must be True or False, got {turn_cues!r}")
        self.candidate_order, self.turn_cues = candidate_order, turn_cues
        self._keep_types = frozenset(t for t, vt in suite.types.items() if vt.linkable)
        self.n_params = max(len(t.params) for t in suite.tools.values())
        self.observation_space = gym.spaces.Box(0.0, 1.0, (GLOBAL + N_CANDIDATES * CANDIDATE,), np.float32)
        self.action_space = gym.spaces.Discrete(N_CANDIDATES)
        # per tool: (name, type, required) of its parameters, their names, and the row's parameter-count column
        self._params = {t.name: tuple((p.name, p.type, p.required) for p in t.params) for t in suite.tools.values()}
        self._names = {t: tuple(p for p, _, _ in ps) for t, ps in self._params.items()}
        self._arity = {t: len(ps) / self.n_params for t, ps in self._params.items()}
        self._required_types = {t: tuple(dict.fromkeys(v for _, v, r in ps if r)) for t, ps in self._params.items()}
        self._checkers = suite.checkers
        self._tables: dict["CompiledTask", _TaskTables] = {}
        self._checked: dict[tuple[Any, ...], bool] = {}  # (tool, value keys) -> the checker accepts
        self._bound: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # (tool, slots) -> _binding(), while slots keep values
        self._task: _TaskTables | None = None
        self.slots = SlotTable(N_SLOTS, self._keep_types)
        self._meta: list[_Slot] = []
        self._clock = 0
        self._made: set[tuple[Any, ...]] = set()  # (tool, value key or None per parameter) of the calls executed
        self._by_type: dict[str, list[int]] = {}  # value type -> its slots, the least recently seen first
        self._by_source: dict[tuple[str, str], set[int]] = {}  # (tool, field) -> the slots whose latest source it is
        self._called: set[str] = set()
        self._done = 0
        self._answered = False
        # per position an Action, or what makes one when it is chosen: (None, slot) a reply with the slot's value,
        # (tool, slot or None per parameter) a call (most candidates are never chosen: none is built before)
        self._cands: list[Any] = [EMPTY] * N_CANDIDATES
        self._marks = bytes(N_CANDIDATES)  # the mask, one byte per position
        self._block = b""  # the last observation's bytes (float32), its global features zero
        self._obs_row: np.ndarray | None = None  # write_into()'s rows, and their bytes
        self._obs_out: memoryview | None = None
        self._mask_out: memoryview | None = None
        self._n_cands = 0  # the global feature's candidate count (reply positions always counted)
        self._last_call: ToolCall | None = None
        self._log: list[Any] = []  # lines, or (tool, result) to write out as a line

    # -- value slots -------------------------------------------------------------------
    def _slot(self, value: Any, vtype: str, user: bool) -> _Slot | None:
        """The slot of ``value`` (added when new: a new value, or one in an evicted slot, gets fresh facts),
        now the most recently seen of its type."""
        slots = self.slots
        key = "s" + value if type(value) is str else value_key(value)
        k = slots.index.get(key)
        if k is not None:
            slots.add(value, vtype, "user" if user else "tool")
            m = self._meta[k]
            order = self._by_type[m.vtype]
            if order[-1] != k:
                order.remove(k)
                order.append(k)
        else:
            k = slots.add_new(key, value, vtype, "user" if user else "tool")
            if k is None:
                return None
            m = _Slot(key)
            m.vtype = vtype
            if k == len(self._meta):
                self._meta.append(m)
            else:  # an evicted slot: its old value leaves the type and source indexes and the bindings
                old = self._meta[k]
                self._bound.clear()
                self._by_type[old.vtype].remove(k)
                if old.tool is not None:
                    self._by_source[(old.tool, old.field)].discard(k)  # type: ignore[index]
                self._meta[k] = m
            order = self._by_type.get(vtype)
            if order is None:
                self._by_type[vtype] = [k]
            else:
                order.append(k)
        self._clock += 1
        m.clock = self._clock
        return m

    def _user_fact(self, value: Any, vtype: str) -> None:
        m = self._slot(value, vtype, True)
        if m is not None:
            m.user = True

    def _tool_result(self, tool: str, content: dict[str, Any], progress: bool) -> None:
        """A tool's result: each value (a search's records' fields, the first record's marked, then its total)
        gets or refreshes its slot, and the tool and field as its latest source."""
        types = self.field_types(tool)
        if "results" in content:
            items = [(f, v, i == 0) for i, rec in enumerate(content["results"]) for f, v in rec.items()]
            if "total" in content:
                items.append(("total", content["total"], True))
        else:
            items = [(f, v, True) for f, v in content.items()]
        by_source = self._by_source
        for field, value, first in items:
            m = self._slot(value, types.get(field) or self.field_type(tool, field), False)
            if m is None:
                continue
            if m.tool != tool or m.field != field:
                k = self.slots.index[m.key]
                if m.tool is not None:
                    by_source[(m.tool, m.field)].discard(k)  # type: ignore[index]
                source = by_source.get((tool, field))
                if source is None:
                    by_source[(tool, field)] = {k}
                else:
                    source.add(k)
                m.tool, m.field = tool, field
            if first:
                m.first = True
            if progress:
                m.progress = True

    # -- episode -----------------------------------------------------------------------
    def _tables_of(self, episode: "Episode") -> _TaskTables:
        c = episode.c
        tables = self._tables.get(c)
        if tables is None:
            if len(self._tables) >= PLAN_CACHE:
                self._tables.clear()
            tables = self._tables[c] = _TaskTables(episode, self)
        return tables

    def reset(self, episode: "Episode") -> np.ndarray:
        self._task = self._tables_of(episode)
        self.slots = SlotTable(N_SLOTS, self._keep_types)
        self._meta, self._clock, self._last_call = [], 0, None
        self._by_type, self._by_source, self._bound = {}, {}, {}
        self._made, self._called, self._done, self._answered = set(), set(), 0, episode.answered
        for value, vtype in self._task.turn_facts[0]:
            self._user_fact(value, vtype)
        self._log = [f"user: {episode.user_message(0)}"]
        if self._task.start is None:
            self._candidates(episode)
            self._task.start = (self._cands, self._marks, self._block, self._n_cands)
        else:
            self._cands, self._marks, self._block, self._n_cands = self._task.start
            if self._mask_out is not None:
                self._mask_out[:] = self._marks
        return self._obs(episode)

    def observe(self, episode: "Episode", outcome: "StepOutcome") -> np.ndarray:
        done = len(episode.satisfied) + episode.answered
        progress, self._done = done > self._done, done
        changed = episode.answered != self._answered  # a final reply: the answer is no longer wanted
        self._answered = episode.answered
        for ev in outcome.events:
            kind = ev["kind"]
            if kind == "result":
                changed = True
                name, content = ev["tool"], ev["content"]
                self._called.add(name)
                self.slots.new_batch()
                call = self._last_call
                if call is not None and call.name == name:
                    args = call.arguments  # the key _calls gives a binding: (tool, value key or None per parameter)
                    self._made.add((name,) + tuple(value_key(args[p]) if p in args else None
                                                   for p in self._names[name]))
                self._tool_result(name, content, progress)
                self._log.append((name, content))  # written out by text()
            elif kind == "user":
                if ev["facts"] or "turn" in ev or ev.get("unlocked"):
                    changed = True
                fact_types = self._task.fact_types  # type: ignore[union-attr]
                for p, v in ev["facts"]:
                    self._user_fact(v, fact_types.get(p, "text"))
                if "turn" in ev:
                    for value, vtype in self._task.turn_facts[ev["turn"]]:  # type: ignore[union-attr]
                        self._user_fact(value, vtype)
                self._log.append(f"user: {ev['text']}")
            else:
                self._log.append(f"error [{ev['error']}]: {ev['message']}")
        if changed:
            self._candidates(episode)
        return self._obs(episode)

    # -- the plan of the todo calls ----------------------------------------------------
    def _plan(self, episode: "Episode") -> dict[str, _ToolPlan]:
        """Per tool with todo calls, its :class:`_ToolPlan`; kept per task state (the todo calls are a
        function of the turn and the satisfied calls)."""
        plans = self._task.plans  # type: ignore[union-attr]
        state = (episode.turn, tuple(episode.satisfied))
        hit = plans.get(state)
        if hit is not None:
            return hit
        c = episode.c
        facts: dict[tuple[str, str], set[str]] = {}
        sources: dict[tuple[str, str], set[tuple[str, str]]] = {}
        keys: dict[str, tuple[frozenset[str], ...]] = {}
        for cid in episode.todo():
            tool = c.call_tool[cid]
            keys[tool] = keys.get(tool, ()) + (c.keys[cid],)
            for p, v in c.facts[cid].items():
                facts.setdefault((tool, p), set()).add(value_key(v))
            for p, src, f in c.bound[cid]:
                sources.setdefault((tool, p), set()).add((c.call_tool[src], f))
        out = {tool: _ToolPlan(ks, tuple(tuple(facts.get((tool, p), ())) for p in self._names[tool]),
                               tuple(tuple(sources.get((tool, p), ())) for p in self._names[tool]))
               for tool, ks in keys.items()}
        if len(plans) >= STATE_CACHE:
            plans.clear()
        plans[state] = out
        return out

    # -- candidates and observation ----------------------------------------------------
    def _candidates(self, episode: "Episode") -> None:
        """The candidate actions at their positions, the mask, and their rows (as float32 bytes)."""
        task = episode.task
        wants_answer = task.answer is not None and episode.turn == len(task.turns) - 1 and not episode.answered
        scale = 1.0 / max(1, self._clock)
        ranked: list[tuple[tuple[Any, ...], tuple[Any, ...]]] = []  # (candidate, row) of reply values, then calls
        if wants_answer:
            self._reply_values(ranked, scale)
        n_values = len(ranked)
        self._calls(episode, ranked, scale)
        tables = self._task
        assert tables is not None
        position = tables.position
        cands, marks, block = list(tables.cands), bytearray(tables.marks), bytearray(tables.block)
        if self.turn_cues:  # the reply's row says whether it closes the user turn now
            at = _FLAGS_BYTES + position[1] * _ROW_BYTES
            block[at:at + _ROW_BYTES] = _REPLY_BYTES[(episode.turn < tables.last_turn,
                                                      tables.active[episode.turn] == len(episode.satisfied))]
        pack = _ROW.pack_into
        for j, (cand, row) in enumerate(ranked):
            pos = position[2 + j if j < n_values else FIRST_CALL + j - n_values]  # calls from FIRST_CALL on
            cands[pos], marks[pos] = cand, True
            pack(block, _FLAGS_BYTES + pos * _ROW_BYTES, *row)
        self._cands, self._marks, self._block = cands, bytes(marks), bytes(block)
        if self._mask_out is not None:
            self._mask_out[:] = marks
        self._n_cands = FIRST_CALL + len(ranked) - n_values

    def _obs(self, episode: "Episode") -> np.ndarray:
        tables = self._task
        assert tables is not None
        turn, error = episode.turn, episode.last_error
        last_turn = turn == tables.last_turn
        n_todo = tables.active[turn] - len(episode.satisfied)
        flags = _FLAGS.pack(tables.answer_source is not None and last_turn and not episode.answered,
                            bool(episode.pending), bool(episode.locked), error == "none", episode.progress, last_turn,
                            turn / tables.turn_scale, min(n_todo, 8) / 8, not n_todo, episode.steps / episode.max_steps,
                            len(self.slots) / N_SLOTS, self._n_cands / N_CANDIDATES)
        obs = bytearray(self._block)
        obs[:_FLAGS_BYTES] = flags + _ERROR_BYTES[error]
        if self._obs_out is not None:  # write_into(): the row of a batch
            self._obs_out[:] = obs
            return self._obs_row  # type: ignore[return-value]
        return np.frombuffer(obs, np.float32)

    def _reply_values(self, ranked: list[tuple[tuple[Any, ...], tuple[Any, ...]]], scale: float) -> None:
        source = self._task.answer_source  # type: ignore[union-attr]
        assert source is not None
        tool, field = source
        scored = [((m.tool == tool and m.field == field), m.field == field, m.first, m.clock, k)
                  for k, m in enumerate(self._meta) if m.tool is not None]
        scored.sort(reverse=True)
        for exact, same_field, first, clock, k in scored[:N_REPLY_VALUES]:
            row = [0.0] * CANDIDATE
            row[0] = row[REPLY_VALUE] = 1.0
            row[13], row[14], row[16] = 1.0, self._meta[k].progress, clock * scale
            row[17], row[18], row[19] = exact, same_field, first
            ranked.append(((None, k), row))

    def _matched(self, plan: _ToolPlan, i: int) -> set[int] | frozenset[int]:
        """The slots the plan names for parameter ``i``: a value the user stated for it (still a user
        fact), or the current output of the (tool, field) it comes from."""
        out: set[int] | frozenset[int] = _NOTHING
        facts, sources = plan.facts[i], plan.sources[i]
        if facts:
            index, meta = self.slots.index, self._meta
            for key in facts:
                k = index.get(key)
                if k is not None and meta[k].user:
                    out = set(out)
                    out.add(k)
        for source in sources:
            held = self._by_source.get(source)
            if held:
                out = out | held
        return out

    def _binding(self, tool: str, choice: tuple[int | None, ...]) -> tuple[tuple[Any, ...], bool, frozenset[str]]:
        """A binding's key in ``_made`` and the checker's cache (the tool and its values' keys), whether the
        checker accepts it, and its argument names; kept until the episode ends or a slot changes value."""
        hit = self._bound.get((tool, choice))
        if hit is None:
            names, meta = self._names[tool], self._meta
            check_key = (tool, *[None if k is None else meta[k].key for k in choice])
            ok = self._checked.get(check_key)
            if ok is None:
                if len(self._checked) >= CHECK_CACHE:
                    self._checked.clear()
                values = self.slots.values
                args = {names[i]: values[k] for i, k in enumerate(choice) if k is not None}
                ok = self._checked[check_key] = self._checkers[tool].check(args) is None
            hit = self._bound[(tool, choice)] = (check_key, ok, frozenset(names[i] for i, k in enumerate(choice)
                                                                           if k is not None))
        return hit

    def _calls(self, episode: "Episode", ranked: list[tuple[tuple[Any, ...], tuple[Any, ...]]], scale: float) -> None:
        """Per available tool up to ``PER_TOOL`` bindings of its parameters to slots of their types: the
        best-scored option per parameter (a plan-matched value first, then the most recent), then the
        bindings that take one parameter's second option; those the tool's checker accepts, by their rank
        key, the first ``N_CANDIDATES - FIRST_CALL``. A parameter's options in score order: its matched
        slots (score 2 + recency), the empty option when the parameter is optional and not planned (1.5),
        its other slots (recency, in (0, 1]), the empty option when optional and planned (0); recencies are
        distinct, so this order is the one a full sort gives. A tool with a required parameter whose type has
        no value has no option for it, so no candidate."""
        plan = self._plan(episode)
        meta, by_type, made, called = self._meta, self._by_type, self._made, self._called
        found = []
        for tool in episode.available_tools():
            for vtype in self._required_types[tool]:
                if not by_type.get(vtype):
                    break
            else:
                tool_plan = plan.get(tool)
                planned = _NOTHING if tool_plan is None else tool_plan.planned
                firsts: list[int | None] = []
                seconds: list[int | None] = []
                marks: list[Any] = []
                for i, (name, vtype, required) in enumerate(self._params[tool]):
                    mk = _NOTHING if tool_plan is None or not tool_plan.linked[i] else self._matched(tool_plan, i)
                    order = by_type.get(vtype, ())
                    if not mk:  # the common case, without a scan: the most recent slots, the empty option
                        n = len(order)
                        if required:
                            first, second = order[-1], (order[-2] if n > 1 else _NO_SECOND)
                        elif name in planned:
                            first, second = (order[-1], order[-2] if n > 1 else None) if n else (None, _NO_SECOND)
                        else:
                            first, second = None, (order[-1] if n else _NO_SECOND)
                    else:
                        two: list[int | None] = []
                        for k in reversed(order):
                            if k in mk:
                                two.append(k)
                                if len(two) == 2:
                                    break
                        if len(two) < 2 and not required and name not in planned:
                            two.append(None)
                        if len(two) < 2:
                            for k in reversed(order):
                                if k not in mk:
                                    two.append(k)
                                    if len(two) == 2:
                                        break
                        if len(two) < 2 and not required and name in planned:
                            two.append(None)
                        first, second = two[0], (two[1] if len(two) == 2 else _NO_SECOND)
                    firsts.append(first)
                    seconds.append(second)
                    marks.append(mk)
                best = tuple(firsts)
                bindings = [best]
                for i, second in enumerate(seconds):
                    if second != _NO_SECOND:
                        bindings.append(best[:i] + (second,) + best[i + 1:])
                        if len(bindings) == PER_TOOL:
                            break
                todo_keys = () if tool_plan is None else tool_plan.keys
                in_todo, was_called = bool(todo_keys), tool in called
                arity, names = self._arity[tool], self._names[tool]
                for choice in bindings:
                    check_key, ok, arg_names = self._binding(tool, choice)
                    if not ok:
                        continue
                    n_bound = n_matched = n_user = n_tool = n_progress = n_field = n_first = 0
                    clock = 0.0
                    i = -1
                    for k in choice:
                        i += 1
                        if k is None:
                            continue
                        m = meta[k]
                        n_bound += 1
                        n_matched += k in marks[i]
                        n_user += m.user
                        if m.tool is not None:
                            n_tool += 1
                            n_progress += m.progress
                            n_field += m.field == names[i]
                            n_first += m.first
                        clock += m.clock * scale
                    nb = 1.0 / max(1, n_bound)
                    was_made = check_key in made
                    keys_ok = arg_names in todo_keys
                    all_matched = n_matched == n_bound
                    matched_share, recency = n_matched * nb, clock * nb
                    row = (1.0, 0.0, 0.0, 0.0, 1.0, in_todo, was_called, was_made, arity, matched_share, all_matched,
                           keys_ok, n_user * nb, n_tool * nb, n_progress * nb, n_field * nb, recency, 0.0, 0.0,
                           n_first * nb)
                    found.append(((in_todo, all_matched and keys_ok, matched_share, not was_made, recency),
                                  tool, choice, row))
        found.sort(key=_score, reverse=True)
        for _, tool, choice, row in found[: N_CANDIDATES - FIRST_CALL]:
            ranked.append(((tool, choice), row))

    def _action(self, cand: Any) -> Action:
        """The action of a candidate (built from the slots, which do not change between an observation and
        the next action)."""
        if type(cand) is not tuple:
            return cand
        tool, choice = cand
        values = self.slots.values
        if tool is None:
            return Reply(format_value(values[choice]))
        names = self._names[tool]
        return ToolCall(tool, {names[i]: values[k] for i, k in enumerate(choice) if k is not None})

    # -- actions -----------------------------------------------------------------------
    def decode(self, action: Any) -> Action:
        a = int(action) if type(action) is int or type(action) is np.int64 else _as_index(action)
        if a is None or not 0 <= a < N_CANDIDATES:
            return Invalid("malformed", f"expected a candidate index in [0, {N_CANDIDATES}), got {str(action)[:80]}")
        chosen = self._action(self._cands[a])
        self._last_call = chosen if isinstance(chosen, ToolCall) else None
        return chosen

    def candidates(self) -> list[Action]:
        """The action at each of the ``N_CANDIDATES`` positions now (``EMPTY`` where the mask is off)."""
        return [self._action(c) for c in self._cands]

    def action_masks(self, episode: "Episode") -> np.ndarray:
        return np.frombuffer(bytearray(self._marks), bool)

    def share_caches(self, other: "FeaturesRenderer") -> None:
        """Use ``other``'s per-task tables and checker answers (pure functions of the task and the suite), as
        the sub-envs of one vector env do: a task's tables are then built once for all its episodes."""
        if (other.suite is not self.suite or other.candidate_order != self.candidate_order
                or other.turn_cues != self.turn_cues):
            raise ValueError("share_caches: the renderers must have the same suite, candidate order and turn cues")
        self._tables, self._checked = other._tables, other._checked

    def write_into(self, obs: np.ndarray | None, mask: np.ndarray | None) -> None:
        """Write each observation into ``obs`` (a C-contiguous float32 row of the observation's shape, returned
        by reset/step in place of a new array) and each mask into ``mask`` (a bool row of ``N_CANDIDATES``), as
        a batched vector env wants (:mod:`rods_gym.features_vector`); ``None`` undoes it."""
        if obs is not None and (obs.dtype != np.float32 or obs.shape != self.observation_space.shape
                                or not obs.flags.c_contiguous):
            raise ValueError(f"write_into: obs must be a C-contiguous float32 array of shape "
                             f"{self.observation_space.shape}, got {obs.dtype} {obs.shape}")
        if mask is not None and (mask.dtype != bool or mask.shape != (N_CANDIDATES,) or not mask.flags.c_contiguous):
            raise ValueError(f"write_into: mask must be a C-contiguous bool array of shape ({N_CANDIDATES},), got "
                             f"{mask.dtype} {mask.shape}")
        self._obs_row = obs
        self._obs_out = None if obs is None else memoryview(obs).cast("B")
        self._mask_out = None if mask is None else memoryview(mask).cast("B")
        if mask is not None:
            self._mask_out[:] = self._marks  # type: ignore[index]

    def encode(self, action: Action, episode: "Episode") -> int:
        """The position of the candidate that does what ``action`` does (a reply: with the answer's value
        when the answer is due and among the candidates, else the reply without a value)."""
        cands = self.candidates()
        if isinstance(action, Ask):
            return next(i for i, c in enumerate(cands) if isinstance(c, Ask))
        if isinstance(action, Reply):
            answer = episode.task.answer
            text = "done"
            if answer is not None and episode.turn == len(episode.task.turns) - 1 and not episode.answered:
                k = self.slots.find_answer(answer.value)
                if k is not None and any(isinstance(c, Reply) and c.text == format_value(self.slots.values[k])
                                         for c in cands):
                    text = format_value(self.slots.values[k])
            return next(i for i, c in enumerate(cands) if isinstance(c, Reply) and c.text == text)
        if isinstance(action, ToolCall):
            want = {p: value_key(v) for p, v in action.arguments.items()}
            for i, c in enumerate(cands):
                if isinstance(c, ToolCall) and c.name == action.name and \
                        {p: value_key(v) for p, v in c.arguments.items()} == want:
                    return i
            raise ValueError(f"call {action.name}({action.arguments}) is not among this step's candidates")
        raise ValueError(f"cannot encode {action!r}")

    def text(self) -> str:
        return "\n".join(line if type(line) is str else f"{line[0]} -> {line[1]}" for line in self._log)
