"""The ``structured`` view: numeric spaces for classic RL agents (stable-baselines3).

Observation (``Dict``), sized by the suite so every task shares one space:

* ``todo``       MultiBinary(N): tools of the active turn's required calls not yet made
* ``available``  MultiBinary(N): tools the agent can call now
* ``called``     MultiBinary(N): tools called successfully this episode
* ``slot_type``  MultiDiscrete(K x (T+1)): value type of each value slot (0 = empty)
* ``slot_from``  MultiDiscrete(K x (N+2)): where it came from (0 empty, 1 user, 2+i tool i)
* ``flags``      MultiBinary(4): answer wanted, a fact is withheld, a tool is locked, last action ok
* ``progress``   Box(1): progress so far
* ``last_error`` Discrete(E): error class of the last action

Action ``MultiDiscrete([3, N, K+1, ..., K+1])``: action type (0 call, 1 ask, 2 reply), tool,
then one slot per parameter position of the tool (0 = omit, k = slot k-1); a reply sends the
value of its first slot. ``action_masks()`` gives the per-dimension masks MaskablePPO takes.
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from ..episode import ERROR_CLASSES, Action, Ask, CompiledTask, Invalid, Reply, ToolCall
from ..task import format_value
from .base import Renderer, SlotTable, value_key

if TYPE_CHECKING:
    from ..episode import Episode, StepOutcome
    from ..suite import Suite

N_SLOTS = 48
VIEW_CACHE = 4096  # per-task observation data kept (as the env's compiled-task cache)


class _TaskView:
    """What the observation needs from one compiled task, derived once and kept while the
    task is in use: the available-tools row, todo rows by progress, the user facts per turn
    with their value types, and the value type of each parameter name."""

    __slots__ = ("c", "available", "todo", "has_answer", "last_turn", "_facts", "_param_types", "_suite")

    def __init__(self, c: CompiledTask, suite: "Suite") -> None:
        self.c, self._suite = c, suite
        self.available = np.zeros(len(suite.tool_names), np.int8)
        self.available[[suite.tool_index[t] for t in c.tools]] = 1
        self.todo: dict[tuple[int, tuple[str, ...]], np.ndarray] = {}  # (turn, satisfied) -> todo row
        self.has_answer = c.task.answer is not None
        self.last_turn = len(c.task.turns) - 1
        self._facts: dict[int, list[tuple[Any, str]]] = {}
        self._param_types: dict[str, str] = {}

    def facts(self, turn: int) -> list[tuple[Any, str]]:
        """The facts the user states in ``turn`` (not the withheld ones), with their types."""
        out = self._facts.get(turn)
        if out is None:
            task, tools = self.c.task, self._suite.tools
            withheld = set(task.turns[turn].withheld)
            out = self._facts[turn] = [(v, tools[task.call(cid).tool].param(p).type)
                                       for cid, p, v in task.facts(turn) if (cid, p) not in withheld]
        return out

    def param_type(self, param: str) -> str:
        """The type of the first call parameter of this name (``text`` if none)."""
        out = self._param_types.get(param)
        if out is None:
            tools = self._suite.tools
            out = self._param_types[param] = next(
                (tools[c.tool].param(param).type for c in self.c.task.calls if param in c.args), "text")
        return out


class StructuredRenderer(Renderer):
    def __init__(self, suite: "Suite") -> None:
        super().__init__(suite)
        self._keep_types = frozenset(t for t, vt in suite.types.items() if vt.linkable)
        self.n_tools = len(suite.tool_names)
        self.n_types = len(suite.type_names)
        self.n_params = max(len(t.params) for t in suite.tools.values())
        n, k = self.n_tools, N_SLOTS
        self.observation_space = gym.spaces.Dict({
            "todo": gym.spaces.MultiBinary(n),
            "available": gym.spaces.MultiBinary(n),
            "called": gym.spaces.MultiBinary(n),
            "slot_type": gym.spaces.MultiDiscrete(np.full(k, self.n_types + 1)),
            "slot_from": gym.spaces.MultiDiscrete(np.full(k, n + 2)),
            "flags": gym.spaces.MultiBinary(4),
            "progress": gym.spaces.Box(0.0, 1.0, (1,), np.float32),
            "last_error": gym.spaces.Discrete(len(ERROR_CLASSES)),
        })
        self.action_space = gym.spaces.MultiDiscrete(np.array([3, n] + [k + 1] * self.n_params))
        self._nvec = [int(v) for v in self.action_space.nvec]
        self._tool_index = suite.tool_index
        self._n_dims = len(self._nvec)
        self._err_index = {e: i for i, e in enumerate(ERROR_CLASSES)}
        self.slots = SlotTable(N_SLOTS, self._keep_types)
        self._called = np.zeros(n, np.int8)
        self._slot_type = np.zeros(k, np.int64)
        self._slot_from = np.zeros(k, np.int64)
        self._log: list[str | tuple[str, Any]] = []  # lines, or (tool, result) formatted on demand
        # lookups used on every step, derived once
        self._source_names = ["0", "user"] + [str(i) for i in range(2, n + 2)]
        self._type_code = {t: i + 1 for t, i in suite.type_index.items()}
        self._flags = [np.array([(c >> 3) & 1, (c >> 2) & 1, (c >> 1) & 1, c & 1], np.int8) for c in range(16)]
        self._params = [(t, tuple(p.name for p in suite.tools[t].params)) for t in suite.tool_names]
        self._views: OrderedDict[CompiledTask, _TaskView] = OrderedDict()  # recent tasks' views
        self._view: _TaskView | None = None
        self._progress: dict[float, np.ndarray] = {}  # progress -> its (never returned) array

    # -- observations ------------------------------------------------------------------
    def _add(self, value: Any, vtype: str, source: int) -> None:
        slots = self.slots
        k = slots.add(value, vtype, self._source_names[source])
        if k is not None and slots.values[k] is value:
            self._slot_type[k] = self._type_code.get(vtype, 0)
            self._slot_from[k] = source

    def _add_facts(self, episode: "Episode", turn: int) -> None:
        for v, vtype in self._task_view(episode).facts(turn):
            self._add(v, vtype, 1)

    def _task_view(self, episode: "Episode") -> "_TaskView":
        view = self._view
        if view is None or view.c is not episode.c:
            view = self._views.get(episode.c)
            if view is None:
                view = self._views[episode.c] = _TaskView(episode.c, self.suite)
                if len(self._views) > VIEW_CACHE:
                    self._views.popitem(last=False)
            self._view = view
        return view

    def reset(self, episode: "Episode") -> dict[str, Any]:
        self.slots = SlotTable(N_SLOTS, self._keep_types)
        self._called[:] = 0
        self._slot_type[:] = 0
        self._slot_from[:] = 0
        self._add_facts(episode, 0)
        self._log = [episode.user_message(0)]
        return self._obs(episode)

    def observe(self, episode: "Episode", outcome: "StepOutcome") -> dict[str, Any]:
        for ev in outcome.events:
            kind = ev["kind"]
            if kind == "result":
                name = ev["tool"]
                idx = self._tool_index[name]
                self._called[idx] = 1
                content = ev["content"]
                records = content["results"] if "results" in content else (content,)
                source = idx + 2
                source_name = self._source_names[source]
                types = self._tool_field_types.get(name) or self.field_types(name)
                slots, type_code = self.slots, self._type_code
                batch = slots.new_batch()
                values, index, written = slots.values, slots.index, slots.written
                slot_type, slot_from = self._slot_type, self._slot_from
                for rec in records:
                    for f, v in rec.items():  # self._add, inlined: results carry most values
                        key = "s" + v if type(v) is str else value_key(v)
                        k = index.get(key)
                        if k is not None:
                            written[k] = batch  # the value is part of this result
                            if values[k] is not v:
                                continue  # an equal value already has a slot
                            vtype = types.get(f) or self.field_type(name, f)
                        else:
                            vtype = types.get(f) or self.field_type(name, f)
                            k = slots.add_new(key, v, vtype, source_name)
                            if k is None:
                                continue  # every slot holds a user fact
                        slot_type[k] = type_code.get(vtype, 0)
                        slot_from[k] = source
                self._log.append((name, content))  # formatted by text(): results are never mutated
            elif kind == "user":
                param_type = self._task_view(episode).param_type
                for p, v in ev["facts"]:
                    self._add(v, param_type(p), 1)
                if "turn" in ev:
                    self._add_facts(episode, ev["turn"])
                self._log.append(f"user: {ev['text']}")
            else:
                self._log.append(f"error [{ev['error']}]: {ev['message']}")
        return self._obs(episode)

    def _obs(self, episode: "Episode") -> dict[str, Any]:
        view = self._view
        if view is None or view.c is not episode.c:
            view = self._task_view(episode)
        satisfied, turn, locked = episode.satisfied, episode.turn, episode.locked
        todo = view.todo.get((turn, tuple(satisfied)))  # todo() is a function of these
        if todo is None:
            todo = self._todo_row(view, episode)
        available = self._available_row(episode) if locked else view.available
        done = len(satisfied) + episode.answered
        p = done / view.c.n_required  # episode.progress
        progress = self._progress.get(p)
        if progress is None:
            if len(self._progress) >= 1024:  # bounded (progress takes few values per task)
                self._progress.clear()
            progress = self._progress[p] = np.array([p], np.float32)
        last_error = episode.last_error
        flags = ((view.has_answer and turn == view.last_turn and not episode.answered) << 3
                 | bool(episode.pending) << 2 | bool(locked) << 1 | (last_error == "none"))
        return {  # copies: the env never changes an array it returned
            "todo": todo.copy(),
            "available": available.copy(),
            "called": self._called.copy(),
            "slot_type": self._slot_type.copy(),
            "slot_from": self._slot_from.copy(),
            "flags": self._flags[flags].copy(),
            "progress": progress.copy(),
            "last_error": self._err_index[last_error],
        }

    def _todo_row(self, view: "_TaskView", episode: "Episode") -> np.ndarray:
        """The ``todo`` row of the episode's turn and satisfied calls, kept in the task view."""
        if len(view.todo) >= 256:  # bounded (the orders a task's calls were satisfied in)
            view.todo.clear()
        todo = view.todo[(episode.turn, tuple(episode.satisfied))] = np.zeros(self.n_tools, np.int8)
        index, call_tool = self.suite.tool_index, episode.c.call_tool
        for cid in episode.todo():
            todo[index[call_tool[cid]]] = 1
        return todo

    def _available_row(self, episode: "Episode") -> np.ndarray:
        available = np.zeros(self.n_tools, np.int8)
        for t in episode.available_tools():
            available[self.suite.tool_index[t]] = 1
        return available

    # -- actions -----------------------------------------------------------------------
    def decode(self, action: Any) -> Action:
        if type(action) is np.ndarray and action.ndim == 1 and action.dtype.kind in "iu":  # the usual case
            a = action.tolist()
            if len(a) != self._n_dims or min(a) < 0 or any(map(operator.ge, a, self._nvec)):
                a = None
        else:
            a = self._as_ints(action)
        if a is None:
            return Invalid("malformed", f"expected {len(self._nvec)} integers within {self._nvec}, "
                           f"got {str(action)[:80]}")
        kind = a[0]
        if kind == 1:
            return Ask("?")
        if kind == 2:
            k = a[2] - 1
            if k < 0:
                return Reply("done")
            if k >= len(self.slots):
                return Invalid("invalid_arguments", f"slot {k} is empty")
            return Reply(format_value(self.slots.values[k]))
        name, params = self._params[a[1]]
        values = self.slots.values
        n_values = len(values)
        args: dict[str, Any] = {}
        for p, k in zip(params, a[2:]):  # slot k-1 per parameter position (0 = omitted)
            if k:
                if k > n_values:
                    return Invalid("invalid_arguments", f"slot {k - 1} for {p!r} is empty", tool=name)
                args[p] = values[k - 1]
        return ToolCall(name, args)

    def _as_ints(self, action: Any) -> list[int] | None:
        """The action as a list of in-range ints, or None (never raises)."""
        try:
            if isinstance(action, np.ndarray):
                if action.ndim == 1 and action.dtype.kind in "iu":
                    values = action.tolist()
                else:  # only whole floats of the right size pass
                    with np.errstate(invalid="ignore"):  # NaN/inf fail the integer test quietly
                        if action.size != len(self._nvec) or action.dtype.kind != "f" or not np.all(np.mod(action, 1) == 0):
                            return None
                    values = [int(v) for v in action.reshape(-1).tolist()]
            elif isinstance(action, (list, tuple)):
                if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in action):
                    return None
                values = [int(v) for v in action]
            else:
                return None
        except (TypeError, ValueError, OverflowError):
            return None
        if len(values) != len(self._nvec) or min(values) < 0 or any(map(operator.ge, values, self._nvec)):
            return None
        return values

    def action_masks(self, episode: "Episode") -> np.ndarray:
        kinds = np.ones(3, bool)
        tools = np.zeros(self.n_tools, bool)
        for t in episode.available_tools():
            tools[self.suite.tool_index[t]] = True
        slot = np.zeros(N_SLOTS + 1, bool)
        slot[0] = True
        slot[1 : len(self.slots) + 1] = True
        return np.concatenate([kinds, tools] + [slot] * self.n_params)

    def encode(self, action: Action, episode: "Episode") -> np.ndarray:
        a = np.zeros(len(self.action_space.nvec), np.int64)
        if isinstance(action, ToolCall):
            tool = self.suite.tools[action.name]
            a[1] = self.suite.tool_index[tool.name]
            for pos, p in enumerate(tool.params):
                if p.name in action.arguments:
                    k = self.slots.find(action.arguments[p.name])
                    if k is None:
                        raise ValueError(f"value {action.arguments[p.name]!r} has no slot")
                    a[2 + pos] = k + 1
        elif isinstance(action, Ask):
            a[0] = 1
        elif isinstance(action, Reply):
            a[0] = 2
            ans = episode.task.answer
            if ans is not None and episode.turn == len(episode.task.turns) - 1:
                k = self.slots.find_answer(ans.value)
                a[2] = 0 if k is None else k + 1
        else:
            raise ValueError(f"cannot encode {action!r}")
        return a

    def text(self) -> str:
        return "\n".join(line if type(line) is str else f"{line[0]} -> {line[1]}" for line in self._log)
