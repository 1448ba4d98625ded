"""The features view as it was before it was made incremental (rods_gym/renderers/features.py at 88d36dc,
verbatim but for the imports and the turn cues added since, ``turn_cues=True``: the reply row's columns 5, 17 and
18, and the ask and reply at fixed positions in shuffled order, ``reply_row``, ``shuffled_positions``): the oracle that tests/test_features_equivalence.py steps beside the
library's renderer, and the "before" row of benchmarks/env_throughput.py. Test code, never library code:
nothing in rods_gym imports it. Install it in a FeaturesEnv with ``env.renderer = FeaturesRenderer(env.suite,
candidate_order)``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from rods_gym.episode import ERROR_CLASSES, Action, Ask, Invalid, Reply, ToolCall
from rods_gym.task import format_value, task_generator
from rods_gym.renderers.base import Renderer, SlotTable, value_key
from rods_gym.renderers.features import reply_row, shuffled_positions

if TYPE_CHECKING:
    from rods_gym.episode import Episode, StepOutcome
    from rods_gym.suite import Suite

N_SLOTS = 48
N_CANDIDATES = 32
N_REPLY_VALUES = 3
PER_TOOL = 3  # bindings per tool: the best-scored one, then one-parameter changes
FIRST_CALL = 2 + N_REPLY_VALUES
GLOBAL = 12 + len(ERROR_CLASSES)
CANDIDATE = 20
CANDIDATE_ORDERS = ("ranked", "shuffled")
PLAN_CACHE = 4096
CHECK_CACHE = 1 << 16

ASK, REPLY, REPLY_VALUE, CALL = 1, 2, 3, 4  # candidate kinds (feature columns 1..4)
EMPTY = Invalid("invalid_arguments", "no candidate action at this position")
ASK_ROW = [1.0, 1.0] + [0.0] * (CANDIDATE - 2)
REPLY_ROW = [1.0, 0.0, 1.0] + [0.0] * (CANDIDATE - 3)


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
        self.candidate_order, self.turn_cues = candidate_order, turn_cues
        self._perm: np.ndarray | None = None
        self._perms: dict[tuple[str, int], np.ndarray] = {}  # (task id, world seed) -> its permutation
        self._keep_types = frozenset(t for t, vt in suite.types.items() if vt.linkable)
        self.n_params = max(len(t.params) for t in suite.tools.values())
        self.observation_space = gym.spaces.Box(0.0, 1.0, (GLOBAL + N_CANDIDATES * CANDIDATE,), np.float32)
        self.action_space = gym.spaces.Discrete(N_CANDIDATES)
        self._err_index = {e: i for i, e in enumerate(ERROR_CLASSES)}
        # per tool: (name, type, required) of its parameters
        self._params = {t.name: tuple((p.name, p.type, p.required) for p in t.params) for t in suite.tools.values()}
        self._checkers = suite.checkers
        self.slots = SlotTable(N_SLOTS, self._keep_types)
        self._meta: list[_Slot] = []
        self._clock = 0
        self._made: set[tuple[Any, ...]] = set()  # (tool, value key or None per parameter) of the calls executed
        self._by_type: dict[str, list[int]] = {}  # value type -> its slots
        self._by_source: dict[tuple[str, str], list[_Slot]] = {}  # (tool, field) -> slots it filled (maybe since moved on)
        self._called: set[str] = set()
        self._done = 0
        self._cands: list[Action] = []
        self._mask = np.zeros(N_CANDIDATES, bool)
        self._last_call: ToolCall | None = None
        self._plans: dict[tuple[Any, ...], Any] = {}  # task state -> _plan()
        self._checked: dict[tuple[Any, ...], bool] = {}  # (tool, value keys) -> the checker accepts
        self._log: list[str] = []

    # -- value slots -------------------------------------------------------------------
    def _slot(self, value: Any, vtype: str, user: bool) -> _Slot | None:
        """The slot of ``value`` (added when new: a new value, or one in an evicted slot, gets fresh facts)."""
        key = value_key(value)
        known = key in self.slots.index
        k = self.slots.add(value, vtype, "user" if user else "tool")
        if k is None:
            return None
        if not known:
            if k == len(self._meta):
                self._meta.append(_Slot(key))
            else:  # an evicted slot: its old value leaves the type index
                self._by_type[self._meta[k].vtype].remove(k)
                self._meta[k] = _Slot(key)
            self._meta[k].vtype = vtype
            self._by_type.setdefault(vtype, []).append(k)
        self._clock += 1
        m = self._meta[k]
        m.clock = self._clock
        return m

    def _user_fact(self, value: Any, vtype: str) -> None:
        m = self._slot(value, vtype, True)
        if m is not None:
            m.user = True

    def _tool_value(self, value: Any, vtype: str, tool: str, field: str, first: bool, progress: bool) -> None:
        m = self._slot(value, vtype, False)
        if m is not None:
            if m.tool != tool or m.field != field:
                self._by_source.setdefault((tool, field), []).append(m)
            m.tool, m.field = tool, field
            m.first = m.first or first
            m.progress = m.progress or progress

    # -- episode -----------------------------------------------------------------------
    def reset(self, episode: "Episode") -> np.ndarray:
        if self.candidate_order == "shuffled":
            task = episode.task
            perm = self._perms.get((task.id, task.world_seed))
            if perm is None:
                if len(self._perms) >= PLAN_CACHE:
                    self._perms.clear()
                perm = self._perms[(task.id, task.world_seed)] = np.array(shuffled_positions(task, self.turn_cues))
            self._perm = perm
        self.slots = SlotTable(N_SLOTS, self._keep_types)
        self._meta, self._clock, self._last_call = [], 0, None
        self._by_type, self._by_source = {}, {}
        self._made, self._called, self._done = set(), set(), 0
        self._add_turn_facts(episode, 0)
        self._log = [f"user: {episode.user_message(0)}"]
        return self._obs(episode)

    def _add_turn_facts(self, episode: "Episode", turn: int) -> None:
        task, tools = episode.task, self.suite.tools
        withheld = set(task.turns[turn].withheld)
        for cid, p, v in task.facts(turn):
            if (cid, p) not in withheld:
                self._user_fact(v, tools[task.call(cid).tool].param(p).type)

    def observe(self, episode: "Episode", outcome: "StepOutcome") -> np.ndarray:
        done = len(episode.satisfied) + episode.answered
        progress, self._done = done > self._done, done
        for ev in outcome.events:
            kind = ev["kind"]
            if kind == "result":
                name, content = ev["tool"], ev["content"]
                self._called.add(name)
                types = self.field_types(name)
                self.slots.new_batch()
                call = self._last_call
                if call is not None and call.name == name:
                    args = call.arguments  # the key _calls gives a binding: (tool, value key or None per parameter)
                    self._made.add((name,) + tuple(value_key(args[p]) if p in args else None
                                                   for p, _, _ in self._params[name]))
                if "results" in content:
                    for i, rec in enumerate(content["results"]):
                        for f, v in rec.items():
                            self._tool_value(v, types.get(f) or self.field_type(name, f), name, f, i == 0, progress)
                    if "total" in content:
                        self._tool_value(content["total"], types.get("total") or self.field_type(name, "total"),
                                         name, "total", True, progress)
                else:
                    for f, v in content.items():
                        self._tool_value(v, types.get(f) or self.field_type(name, f), name, f, True, progress)
                self._log.append(f"{name} -> {content}")
            elif kind == "user":
                task = episode.task
                for p, v in ev["facts"]:
                    vtype = next((self.suite.tools[c.tool].param(p).type for c in task.calls if p in c.args), "text")
                    self._user_fact(v, vtype)
                if "turn" in ev:
                    self._add_turn_facts(episode, ev["turn"])
                self._log.append(f"user: {ev['text']}")
            else:
                self._log.append(f"error [{ev['error']}]: {ev['message']}")
        return self._obs(episode)

    # -- the plan of the todo calls ----------------------------------------------------
    def _plan(self, episode: "Episode") -> tuple[dict[str, set[tuple[str, str]]],
                                                 dict[tuple[str, str], set[tuple[str, str]]],
                                                 dict[str, tuple[frozenset[str], ...]], dict[str, frozenset[str]]]:
        """For the todo calls: value key -> the (tool, param)s the user stated it for; (source tool,
        field) -> the (tool, param)s it feeds; tool -> the argument key sets of its todo calls, and their
        union. Kept per
        task state (the todo calls are a function of the turn and the satisfied calls)."""
        c = episode.c
        state = (c, episode.turn, tuple(episode.satisfied))
        hit = self._plans.get(state)
        if hit is not None:
            return hit
        facts: dict[str, set[tuple[str, str]]] = {}
        deps: dict[tuple[str, str], set[tuple[str, str]]] = {}
        keys: dict[str, tuple[frozenset[str], ...]] = {}
        for cid in episode.todo():
            tool = c.call_tool[cid]
            keys[tool] = keys.get(tool, ()) + (c.keys[cid],)
            for p, v in c.facts[cid].items():
                facts.setdefault(value_key(v), set()).add((tool, p))
            for p, src, f in c.bound[cid]:
                deps.setdefault((c.call_tool[src], f), set()).add((tool, p))
        if len(self._plans) >= PLAN_CACHE:
            self._plans.clear()
        planned = {tool: frozenset().union(*sets) for tool, sets in keys.items()}
        out = self._plans[state] = (facts, deps, keys, planned)
        return out

    # -- observation -------------------------------------------------------------------
    def _obs(self, episode: "Episode") -> np.ndarray:
        task = episode.task
        last_turn = episode.turn == len(task.turns) - 1
        wants_answer = task.answer is not None and last_turn and not episode.answered
        todo = episode.todo()
        cands: list[Action] = [Ask("?"), Reply("done")] + [EMPTY] * N_REPLY_VALUES
        rows: list[list[float]] = [ASK_ROW, reply_row(self.turn_cues and not last_turn, self.turn_cues and not todo)]
        ranked = [0, 1]  # the ranked positions of the candidates that exist (rows[j] is at ranked[j])
        if wants_answer:
            self._reply_values(episode, cands, rows, ranked)
        self._calls(episode, cands, rows, ranked)
        glob = [wants_answer, bool(episode.pending), bool(episode.locked), episode.last_error == "none",
                episode.progress, last_turn, episode.turn / max(1, len(task.turns) - 1), min(len(todo), 8) / 8,
                not todo, episode.steps / episode.max_steps, len(self.slots) / N_SLOTS, len(cands) / N_CANDIDATES]
        obs = np.zeros(self.observation_space.shape, np.float32)
        obs[: len(glob)] = glob
        obs[12 + self._err_index[episode.last_error]] = 1.0
        perm = self._perm
        positions = ranked if perm is None else perm[ranked]  # candidate i goes to position perm[i]
        obs[GLOBAL:].reshape(N_CANDIDATES, CANDIDATE)[positions] = rows
        mask = np.zeros(N_CANDIDATES, bool)
        mask[positions] = True
        if perm is not None:
            placed = [EMPTY] * N_CANDIDATES
            for i, c in enumerate(cands):
                placed[perm[i]] = c
            cands = placed
        self._cands, self._mask = cands, mask
        return obs

    def _reply_values(self, episode: "Episode", cands: list[Action], rows: list[list[float]],
                      ranked: list[int]) -> None:
        answer = episode.task.answer
        assert answer is not None
        src = (episode.c.call_tool[answer.call], answer.field)
        scored = []
        for k, m in enumerate(self._meta):
            if m.tool is not None:
                scored.append(((m.tool, m.field) == src, m.field == answer.field, m.first, m.clock, k))
        scored.sort(reverse=True)
        scale = 1.0 / max(1, self._clock)
        for i, (exact, same_field, first, clock, k) in enumerate(scored[:N_REPLY_VALUES]):
            cands[2 + i] = Reply(format_value(self.slots.values[k]))
            row = [0.0] * CANDIDATE
            row[0] = row[REPLY_VALUE] = 1.0
            row[13], row[14], row[16] = 1.0, self._meta[k].progress, clock * scale
            row[17], row[18], row[19] = exact, same_field, first
            rows.append(row)
            ranked.append(2 + i)

    def _calls(self, episode: "Episode", cands: list[Action], rows: list[list[float]], ranked: list[int]) -> None:
        facts, deps, keys, planned_of = self._plan(episode)
        meta, values, index = self._meta, self.slots.values, self.slots.index
        matched: dict[tuple[str, str], set[int]] = {}  # (tool, param) -> the slots the plan names for it
        for key, tps in facts.items():
            k = index.get(key)
            if k is not None and meta[k].user:
                for tp in tps:
                    matched.setdefault(tp, set()).add(k)
        by_source = self._by_source
        for (src, f), tps in deps.items():
            for m in by_source.get((src, f), ()):
                if m.tool == src and m.field == f:
                    k = index.get(m.key)
                    if k is not None and meta[k] is m:
                        for tp in tps:
                            matched.setdefault(tp, set()).add(k)
        by_type = self._by_type
        scale = 1.0 / max(1, self._clock)
        recency = [m.clock * scale for m in meta]
        checked, checkers, found = self._checked, self._checkers, []
        nothing: frozenset[int] = frozenset()
        for tool in episode.available_tools():
            params = self._params[tool]
            planned = planned_of.get(tool, nothing)
            options: list[list[tuple[float, int | None]]] = []
            marks = []
            for name, vtype, required in params:
                mk = matched.get((tool, name), nothing)
                marks.append(mk)
                opts = [(2.0 * (k in mk) + recency[k], k) for k in by_type.get(vtype, ())]
                if not required:
                    opts.append((0.0 if name in planned else 1.5, None))
                if not opts:
                    break
                if len(opts) > 1:
                    opts.sort(key=_score, reverse=True)
                options.append(opts)
            else:
                for choice in self._bindings(options):
                    check_key = (tool, *[None if k is None else meta[k].key for k in choice])
                    ok = checked.get(check_key)
                    args = {params[i][0]: values[k] for i, k in enumerate(choice) if k is not None}
                    if ok is None:
                        if len(checked) >= CHECK_CACHE:
                            checked.clear()
                        ok = checked[check_key] = checkers[tool].check(args) is None
                    if ok:
                        key, row = self._call_features(tool, params, choice, args, keys.get(tool, ()), marks,
                                                       check_key, recency)
                        found.append((key, tool, args, row))
        found.sort(key=_score, reverse=True)
        for key, tool, args, row in found[: N_CANDIDATES - FIRST_CALL]:
            ranked.append(len(cands))
            rows.append(row)
            cands.append(ToolCall(tool, args))

    @staticmethod
    def _bindings(options: list[list[tuple[float, int | None]]]) -> list[tuple[int | None, ...]]:
        """The best-scored binding, then those that take one parameter's next option, up to ``PER_TOOL``."""
        best = tuple(o[0][1] for o in options)
        out = [best]
        for i, opts in enumerate(options):
            if len(out) >= PER_TOOL:
                break
            if len(opts) > 1:
                out.append(best[:i] + (opts[1][1],) + best[i + 1:])
        return out

    def _call_features(self, tool: str, params: tuple[tuple[str, str, bool], ...], choice: tuple[int | None, ...],
                       args: dict[str, Any], todo_keys: tuple[frozenset[str], ...], marks: list[Any],
                       check_key: tuple[Any, ...], recency: list[float]) -> tuple[tuple[Any, ...], list[float]]:
        meta = self._meta
        n_bound = n_matched = n_user = n_tool = n_progress = n_field = n_first = 0
        clock = 0.0
        for i, k in enumerate(choice):
            if k is None:
                continue
            m = meta[k]
            n_bound += 1
            n_matched += k in marks[i]
            n_user += m.user
            if m.tool is not None:
                n_tool += 1
                n_progress += m.progress
                n_field += m.field == params[i][0]
                n_first += m.first
            clock += recency[k]
        nb = 1.0 / max(1, n_bound)
        made = check_key in self._made
        keys_ok = frozenset(args) in todo_keys
        all_matched = n_matched == n_bound
        row = [1.0, 0.0, 0.0, 0.0, 1.0, bool(todo_keys), tool in self._called, made, len(params) / self.n_params,
               n_matched * nb, all_matched, keys_ok, n_user * nb, n_tool * nb, n_progress * nb, n_field * nb,
               clock * nb, 0.0, 0.0, n_first * nb]
        return (bool(todo_keys), all_matched and keys_ok, n_matched * nb, not made, clock * nb), row

    # -- actions -----------------------------------------------------------------------
    def decode(self, action: Any) -> Action:
        a = _as_index(action)
        if a is None or not 0 <= a < N_CANDIDATES:
            return Invalid("malformed", f"expected a candidate index in [0, {N_CANDIDATES}), got {str(action)[:80]}")
        if a >= len(self._cands):
            return EMPTY
        chosen = self._cands[a]
        self._last_call = chosen if isinstance(chosen, ToolCall) else None
        return chosen

    def action_masks(self, episode: "Episode") -> np.ndarray:
        return self._mask.copy()

    def encode(self, action: Action, episode: "Episode") -> int:
        """The position of the candidate that does what ``action`` does (a reply: with the answer's value
        when the answer is due and among the candidates, else the reply without a value)."""
        cands = self._cands
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
        return "\n".join(self._log)
