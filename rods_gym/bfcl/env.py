"""``rods/BFCL-MultiTurn-v0``: a BFCL-V3 multi-turn task per episode, in the suite's chat view.

The action is one text message, parsed as the suite's chat view parses it (:func:`rods_gym.renderers.chat.parse_chat_action`):
one ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (or bare/fenced JSON), or plain text. A tool
call runs on the episode's own backend (fresh from the task's initial config) and its result comes back as a
tool message; plain text (a reply or a question) ends the turn, as a message with no call ends a turn in BFCL's
inference loop, and the next scripted user turn follows (on the missing-function category's reveal turn,
BFCL's message, with the revealed function added to ``env.unwrapped.tools``). The last turn's end terminates
the episode. At most ``max_actions_per_turn`` other actions per turn (default 20, BFCL's step limit): one more
truncates the episode, which then fails, as BFCL fails a force-terminated entry.

Reward: the progress reward of :mod:`rods_gym.bfcl.scoring`, paid at each turn's end (returns sum to 1 exactly
on success). ``info``: ``progress``, ``success`` (BFCL's verdict on this transcript), ``turn``, ``step``,
``task_id``, ``category``, ``signature``, ``error`` (the parse error kind, or ``none``), ``new_messages``;
``turn_passed`` on the step that ends a turn. The conversation is ``env.unwrapped.messages``, the tools
``env.unwrapped.tools`` (chat-template form), the agent's executed calls per turn ``env.unwrapped.transcript``.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

import gymnasium as gym

from ..episode import Ask, Invalid, Reply, ToolCall
from ..renderers.chat import CHARSET, MAX_ACTION_CHARS, ChatRenderer, parse_chat_action, parse_tool_json, sanitize
from ..renderers.text_space import TranscriptText
from .backend import Backend
from ..task import TaskSpec
from .data import BFCLTask, Call, load_tasks, short_schema, task_docs, tasks_by_id, tool_schema
from .scoring import TurnScorer
from .taskmodel import task_signature

SYSTEM_PROMPT = (
    "You are an assistant that completes the user's requests with the tools provided. "
    "To call a tool, answer with exactly one tool call and nothing else: "
    '<tool_call>{"name": "<tool name>", "arguments": {<arguments>}}</tool_call>. '
    "Tool results come back as tool messages. Make as many calls as the request needs, one per message. "
    "When the request is done, or it cannot be done with the tools you have or lacks information, "
    "answer in plain text; the user's next request follows."
)
MAX_ACTIONS_PER_TURN = 20  # BFCL's MAXIMUM_STEP_LIMIT
# the long-context category's calls reach 6.7k characters and its results 31.7k: larger bounds than the suite's
BFCL_MAX_ACTION_CHARS = 16384
BFCL_MAX_OBS_CHARS = 40000
TAG_OPEN, TAG_CLOSE = "<tool_call>", "</tool_call>"


def parse_action(action: Any) -> Any:
    """The suite's chat parsing, with room for the long-context category's long calls: a message over the suite's
    4,096 characters (up to ``BFCL_MAX_ACTION_CHARS``) is read when it is one tagged tool call."""
    if isinstance(action, str) and MAX_ACTION_CHARS < len(action) <= BFCL_MAX_ACTION_CHARS:
        text = action.strip()
        if text.startswith(TAG_OPEN) and text.endswith(TAG_CLOSE) and text.count(TAG_OPEN) == 1:
            return parse_tool_json(text[len(TAG_OPEN):-len(TAG_CLOSE)].strip())
    if isinstance(action, str) and len(action) > BFCL_MAX_ACTION_CHARS:
        return Invalid("too_long", f"the message has {len(action)} characters; the limit is {BFCL_MAX_ACTION_CHARS}")
    return parse_chat_action(action)


def select_tasks(category: str | None, split: str | None) -> list[BFCLTask]:
    """The tasks of a category (or ``all``) in a split (``train``, ``test`` or ``all``)."""
    tasks = list(load_tasks(category))
    if split in (None, "all"):
        return tasks
    from .split import split_ids

    ids = set(split_ids(split))
    return [t for t in tasks if t.id in ids]


class BFCLMultiTurnEnv(gym.Env):
    """One BFCL-V3 multi-turn task per episode (chat view).

    Args:
        category: ``base``, ``miss_param``, ``miss_func``, ``long_context`` or ``all``.
        split: ``train`` or ``test`` (the 400/400 split of :mod:`rods_gym.bfcl.split`) or ``all``.
        tasks: explicit tasks (overrides category and split), e.g. resampled variants.
        tool_docs: ``full`` (BFCL's function docs) or ``short`` (each description cut to its "Tool description:"
            part and parameter descriptions dropped: about a third of the prompt, for small models).
        max_actions_per_turn: bound on calls and unparsable messages per turn; default (None): BFCL's step
            limit, 20, or the turn's ground-truth calls + 10 where that is more (BFCL's models may put parallel
            calls in one step; here a message holds one call, and a few ground-truth turns have 30).
        render_mode: ``ansi`` or ``human``.

    ``reset(options={"task": id_or_task})`` plays a given task (an id of any of the 800, or a ``BFCLTask``).
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 1}
    mode = "chat"  # the suite's chat view (the trainer reads it to render episodes with a chat template)

    def __init__(self, category: str = "all", split: str = "all", tasks: Sequence[BFCLTask] | None = None,
                 max_actions_per_turn: int | None = None, render_mode: str | None = None,
                 system_prompt: str = SYSTEM_PROMPT, tool_docs: str = "full") -> None:
        if tool_docs not in ("full", "short"):
            raise ValueError(f"unknown tool_docs {tool_docs!r}; choose full or short")
        self.tool_docs = tool_docs
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"unknown render_mode {render_mode!r}; choose one of {self.metadata['render_modes']} or None")
        if max_actions_per_turn is not None and (isinstance(max_actions_per_turn, bool)
                                                 or not isinstance(max_actions_per_turn, int) or max_actions_per_turn < 1):
            raise ValueError(f"max_actions_per_turn must be a positive int or None, got {max_actions_per_turn!r}")
        if split not in ("train", "test", "all"):
            raise ValueError(f"unknown split {split!r}; choose train, test or all")
        self.tasks = list(tasks) if tasks is not None else select_tasks(category, split)
        if not self.tasks:
            raise ValueError(f"no BFCL tasks for category={category!r}, split={split!r}")
        self.category, self.split = category, split
        self.max_actions_per_turn = max_actions_per_turn
        self.render_mode = render_mode
        self.system_prompt = system_prompt
        charset = "".join(sorted(CHARSET))
        self.observation_space = TranscriptText(max_length=BFCL_MAX_OBS_CHARS, min_length=0, charset=charset)
        self.action_space = gym.spaces.Text(max_length=BFCL_MAX_ACTION_CHARS, charset=charset)
        self.task: BFCLTask | None = None
        self.messages: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []
        self.new_messages: list[dict[str, Any]] = []
        self.transcript: list[list[Call]] = []
        self._shown = 0

    # -- gymnasium API -----------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        task = self._resolve(options)
        self.task = task
        self.backend = Backend(task)
        self.scorer = TurnScorer(task)
        self.turn = 0
        self.steps = 0
        self.turn_actions = 0
        self.results: list[str] = []
        self.transcript = [[]]
        self._signature = task_signature(task)
        self.tools = self._tools(task, 0)
        first = {"role": "user", "content": task.user_text(0)}
        self.messages = [{"role": "system", "content": self.system_prompt}, first]
        self.new_messages = [first]
        self._shown = 0
        self._show()
        return sanitize(ChatRenderer._text(self.new_messages), BFCL_MAX_OBS_CHARS), self._info("none")

    def _tools(self, task: BFCLTask, turn: int) -> list[dict[str, Any]]:
        return [short_schema(d["name"]) if self.tool_docs == "short" else tool_schema(d)
                for d in task_docs(task, revealed_through=turn)]

    def _resolve(self, options: Mapping[str, Any] | None) -> BFCLTask:
        options = options or {}
        if not isinstance(options, Mapping):
            raise TypeError(f"reset options must be a dict such as {{'task': 'multi_turn_base_0'}}, not {type(options).__name__}")
        unknown = set(options) - {"task"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; use 'task'")
        task = options.get("task")
        if task is None:
            return self.tasks[int(self.np_random.integers(0, len(self.tasks)))]
        if isinstance(task, BFCLTask):
            return task
        if isinstance(task, TaskSpec):  # the trainer's task model (rods_gym.bfcl.trainer): found by its BFCL id
            task = str(task.meta.get("bfcl_id", task.id))
        if isinstance(task, str):
            hit = next((t for t in self.tasks if t.id == task), None) or tasks_by_id().get(task)
            if hit is None:
                raise KeyError(f"no BFCL multi-turn task with id {task!r}")
            return hit
        raise TypeError(f"options['task'] must be a BFCLTask, a task id or its TaskSpec, not {type(task).__name__}")

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        task = self.task
        if task is None:
            raise RuntimeError("call reset() before step()")
        if self.turn >= task.n_turns or self.turn_actions > self.turn_limit():
            raise RuntimeError("the episode is over; call reset()")
        parsed = parse_action(action)
        if isinstance(action, str):
            self.messages.append({"role": "assistant", "content": action[:BFCL_MAX_ACTION_CHARS]})
        self.steps += 1
        reward, terminated, truncated, error = 0.0, False, False, "none"
        new: list[dict[str, Any]] = []
        extra: dict[str, Any] = {}
        if isinstance(parsed, (Ask, Reply)):
            reward = self.scorer.end_turn(self.backend, len(self.transcript[self.turn]), self.results)
            extra["turn_passed"] = self.scorer.passed[-1]
            self.turn += 1
            self.turn_actions = 0
            if self.turn == task.n_turns:
                terminated = True
            else:
                self.transcript.append([])
                if self.turn in task.missed_function:
                    self.tools = self._tools(task, self.turn)
                new.append({"role": "user", "content": task.user_text(self.turn)})
        else:
            self.turn_actions += 1
            if self.turn_actions > self.turn_limit():
                truncated = True  # BFCL's force-quit: the entry fails
                error = "turn_limit"
            elif isinstance(parsed, ToolCall) and isinstance(parsed.arguments, dict):
                call = Call(parsed.name, parsed.arguments)
                result = self.backend.execute(call.name, call.args)
                self.transcript[self.turn].append(call)
                self.results.append(result)
                new.append({"role": "tool", "name": call.name, "content": sanitize(result, BFCL_MAX_OBS_CHARS)})
            else:
                if isinstance(parsed, ToolCall):
                    parsed = Invalid("malformed", '"arguments" must be a JSON object')
                assert isinstance(parsed, Invalid)
                error = parsed.error
                new.append({"role": "tool", "name": "error",
                            "content": sanitize(f"Error [{parsed.error}]: {parsed.message}", 600)})
        self.messages.extend(new)
        self.new_messages = new
        info = self._info(error)
        info.update(extra)
        self._show()
        return sanitize(ChatRenderer._text(new), BFCL_MAX_OBS_CHARS), float(reward), terminated, truncated, info

    def turn_limit(self) -> int:
        """Calls and unparsable messages allowed in the current turn."""
        if self.max_actions_per_turn is not None:
            return self.max_actions_per_turn
        assert self.task is not None
        return max(MAX_ACTIONS_PER_TURN, len(self.task.ground_truth[self.turn]) + 10)

    def _info(self, error: str) -> dict[str, Any]:
        task = self.task
        assert task is not None
        return {"progress": self.scorer.progress, "success": self.scorer.success, "error": error,
                "turn": self.turn, "step": self.steps, "task_id": task.id, "category": task.category,
                "signature": self._signature, "new_messages": list(self.new_messages)}

    # -- helpers -----------------------------------------------------------------------
    def oracle_action(self) -> str:
        """The ground truth's next action: the turn's next call, else a reply that ends the turn."""
        task = self.task
        if task is None:
            raise RuntimeError("call reset() before oracle_action()")
        if self.turn >= task.n_turns:
            raise RuntimeError("the episode is over; call reset()")
        calls = task.ground_truth[self.turn]
        done = len(self.transcript[self.turn])
        if done < len(calls):
            return "<tool_call>" + json.dumps(calls[done].to_dict()) + "</tool_call>"
        return "Done."

    def text(self) -> str:
        """The conversation as the suite's chat view renders it (``ChatRenderer.text`` reads only ``messages``)."""
        return ChatRenderer.text(self)  # type: ignore[arg-type]

    def _show(self) -> None:
        if self.render_mode != "human":
            return
        text = self.text()
        new = text[self._shown:].lstrip("\n")
        self._shown = len(text)
        if new:
            print(new)

    def render(self) -> str | None:
        if self.task is None:
            return None
        if self.render_mode == "human":
            print(self.text())
            return None
        return self.text()
