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

from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from ..episode import ERROR_CLASSES, Action, Ask, Invalid, Reply, ToolCall
from ..task import format_value
from .base import Renderer, SlotTable

if TYPE_CHECKING:
    from ..episode import Episode, StepOutcome
    from ..suite import Suite

N_SLOTS = 48


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
        self._err_index = {e: i for i, e in enumerate(ERROR_CLASSES)}
        self.slots = SlotTable(N_SLOTS, self._keep_types)
        self._called = np.zeros(n, np.int8)
        self._slot_type = np.zeros(k, np.int64)
        self._slot_from = np.zeros(k, np.int64)
        self._log: list[str] = []

    # -- observations ------------------------------------------------------------------
    def _add(self, value: Any, vtype: str, source: int) -> None:
        k = self.slots.add(value, vtype, "user" if source == 1 else str(source))
        if k is not None and self.slots.values[k] is value:
            self._slot_type[k] = self.suite.type_index.get(vtype, -1) + 1
            self._slot_from[k] = source

    def _add_facts(self, episode: "Episode", turn: int) -> None:
        withheld = set(episode.task.turns[turn].withheld)
        for cid, p, v in episode.task.facts(turn):
            if (cid, p) not in withheld:
                self._add(v, self.suite.tools[episode.task.call(cid).tool].param(p).type, 1)

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
            if ev["kind"] == "result":
                tool = self.suite.tools[ev["tool"]]
                idx = self.suite.tool_index[tool.name]
                self._called[idx] = 1
                content = ev["content"]
                records = content["results"] if "results" in content else [content]
                for rec in records:
                    for f, v in rec.items():
                        self._add(v, self.field_type(tool.name, f), idx + 2)
                self._log.append(f"{tool.name} -> {content}")
            elif ev["kind"] == "user":
                for p, v in ev["facts"]:
                    vtype = next((self.suite.tools[c.tool].param(p).type for c in episode.task.calls if p in c.args), "text")
                    self._add(v, vtype, 1)
                if "turn" in ev:
                    self._add_facts(episode, ev["turn"])
                self._log.append(f"user: {ev['text']}")
            else:
                self._log.append(f"error [{ev['error']}]: {ev['message']}")
        return self._obs(episode)

    def _obs(self, episode: "Episode") -> dict[str, Any]:
        n = self.n_tools
        index = self.suite.tool_index
        todo = np.zeros(n, np.int8)
        call_tool = episode.c.call_tool
        for cid in episode.todo():
            todo[index[call_tool[cid]]] = 1
        available = np.zeros(n, np.int8)
        for t in episode.available_tools():
            available[index[t]] = 1
        last_turn = episode.turn == len(episode.task.turns) - 1
        flags = np.array([episode.task.answer is not None and last_turn and not episode.answered,
                          bool(episode.pending), bool(episode.locked), episode.last_error == "none"], np.int8)
        return {
            "todo": todo,
            "available": available,
            "called": self._called.copy(),
            "slot_type": self._slot_type.copy(),
            "slot_from": self._slot_from.copy(),
            "flags": flags,
            "progress": np.array([episode.progress], np.float32),
            "last_error": self._err_index[episode.last_error],
        }

    # -- actions -----------------------------------------------------------------------
    def decode(self, action: Any) -> Action:
        a = self._as_ints(action)
        if a is None:
            return Invalid("malformed", f"expected {len(self._nvec)} integers within {self._nvec}, "
                           f"got {str(action)[:80]}")
        kind = int(a[0])
        if kind == 1:
            return Ask("?")
        if kind == 2:
            k = int(a[2]) - 1
            if k < 0:
                return Reply("done")
            if k >= len(self.slots):
                return Invalid("invalid_arguments", f"slot {k} is empty")
            return Reply(format_value(self.slots.values[k]))
        tool = self.suite.tools[self.suite.tool_names[int(a[1])]]
        args: dict[str, Any] = {}
        for pos, p in enumerate(tool.params):
            k = int(a[2 + pos]) - 1
            if k < 0:
                continue
            if k >= len(self.slots):
                return Invalid("invalid_arguments", f"slot {k} for {p.name!r} is empty")
            args[p.name] = self.slots.values[k]
        return ToolCall(tool.name, args)

    def _as_ints(self, action: Any) -> list[int] | None:
        """The action as a list of in-range ints, or None (never raises)."""
        try:
            if isinstance(action, np.ndarray):
                if action.ndim != 1 or action.dtype.kind not in "iu":
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
        if len(values) != len(self._nvec):
            return None
        for v, n in zip(values, self._nvec):
            if v < 0 or v >= n:
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
        return "\n".join(self._log)
