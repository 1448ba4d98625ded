"""The ``chat`` view: Hugging Face chat messages and tool schemas; actions are text.

An action is either one tool call, written as JSON ``{"name": ..., "arguments": {...}}``
(bare, in a ```json fence, or inside ``<tool_call>...</tool_call>`` tags), or plain text to
the user: text ending in ``?`` is a question, anything else is the reply to the current
request. Text shaped like a tool call that does not parse (a truncated tag, a stray
``</tool_call>``, an object, a list of objects) is a ``malformed`` error unless it is one valid
call, never a reply; any other text, ``null``, ``42`` or ``[]`` (nothing found) included, is a
message to the user. The observation is the text of the messages the environment added (tool results,
errors, user turns); the whole conversation, the agent's own messages included, is
``env.unwrapped.messages`` and the tool schemas ``env.unwrapped.tools`` (both in chat-template
form); ``info["new_messages"]`` holds the environment's messages of the step.
"""

from __future__ import annotations

import json
import re
import string
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from ..episode import Action, Ask, Invalid, Reply, ToolCall
from .base import Renderer
from .text_space import TranscriptText

if TYPE_CHECKING:
    from ..episode import Episode, StepOutcome

CHARSET = frozenset(string.printable)
MAX_ACTION_CHARS = 4096
MAX_OBS_CHARS = 6000
SYSTEM_PROMPT = (
    "You are an assistant that completes the user's requests with the tools provided. "
    "To call a tool, answer with exactly one tool call and nothing else: "
    '<tool_call>{"name": "<tool name>", "arguments": {<arguments>}}</tool_call>. '
    "Tool results come back as tool messages. To ask the user for missing information, "
    "write a question ending with '?'. When a request is done (or you cannot do it with the "
    "tools you have), write your reply to the user in plain text; include any value they asked for."
)


_OUTSIDE = re.compile(r"[^\x20-\x7e\t\n\r\x0b\x0c]")


def _escape(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def sanitize(text: str, limit: int = MAX_OBS_CHARS) -> str:
    """Keep observations inside the Text space: printable ASCII (other characters as Python escapes,
    ``\u00e9``, as the JSON of tool results shows them), bounded length."""
    text = _OUTSIDE.sub(_escape, text)
    if len(text) > limit:
        text = text[: limit - 15] + " ...[truncated]"
    return text


# deeper JSON is refused before parsing: where Python's own parser gives up (RecursionError) differs between
# versions (3.11 stops near 1,000 levels less the frames already on the stack, 3.12 parsed 3,000), and the
# error must not. Half of 3.11's limit leaves room for any caller's stack
MAX_JSON_DEPTH = 500


def too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``[``/``{`` nest deeper than ``limit`` in ``text`` (brackets in strings skipped; the text
    need not be valid JSON)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_tool_json(text: str) -> Action:
    if too_deep(text):
        return Invalid("malformed", f"the tool call JSON is nested too deeply (over {MAX_JSON_DEPTH} levels)")
    try:
        obj = json.loads(text, parse_constant=_no_constants)
    except RecursionError:
        return Invalid("malformed", "the tool call JSON is nested too deeply")
    except ValueError as exc:
        msg = str(exc).split(":")[0] if "Expecting" in str(exc) else str(exc)
        return Invalid("malformed", f"the tool call is not valid JSON ({msg[:80]}); expected "
                       '{"name": ..., "arguments": {...}}')
    if isinstance(obj, list):
        return Invalid("malformed", "make exactly one tool call per message, not a list")
    if not isinstance(obj, dict):
        return Invalid("malformed", f"a tool call must be a JSON object, got {type(obj).__name__}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return Invalid("malformed", 'the tool call needs a "name" string')
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        if too_deep(args):
            return Invalid("malformed", f'"arguments" is a string of JSON nested over {MAX_JSON_DEPTH} levels')
        try:
            args = json.loads(args, parse_constant=_no_constants) if args.strip() else {}
        except (ValueError, RecursionError):
            return Invalid("malformed", '"arguments" is a string that is not valid JSON')
    extra = set(obj) - {"name", "arguments", "parameters", "id", "type"}
    if extra:
        return Invalid("malformed", f"unexpected keys {sorted(extra)[:5]} in the tool call; use name and arguments")
    return ToolCall(name, args)


def _is_call_list(text: str) -> bool:
    """Whether ``text`` is a JSON list of objects: parallel tool calls, which get an error, not a reply."""
    if not text.startswith("[") or too_deep(text):
        return False
    try:
        obj = json.loads(text, parse_constant=_no_constants)
    except (ValueError, RecursionError):
        return False
    return isinstance(obj, list) and bool(obj) and all(isinstance(x, dict) for x in obj)


def parse_chat_action(action: Any) -> Action:
    """Parse one chat action. Never raises."""
    if not isinstance(action, str):
        return Invalid("malformed", f"an action must be a string, got {type(action).__name__}")
    if len(action) > MAX_ACTION_CHARS:
        return Invalid("too_long", f"the message has {len(action)} characters; the limit is {MAX_ACTION_CHARS}")
    text = action.strip()
    open_tag, close_tag = "<tool_call>", "</tool_call>"
    n_open = text.count(open_tag)
    if n_open:
        if n_open > 1:
            return Invalid("malformed", "make exactly one tool call per message")
        start = text.index(open_tag) + len(open_tag)
        end = text.find(close_tag, start)
        if end < 0:
            return Invalid("malformed", "the tool call is truncated: <tool_call> has no closing </tool_call>")
        return parse_tool_json(text[start:end].strip())
    if text.startswith("```"):
        body = text.strip("`").strip()
        if body.startswith("json"):
            body = body[4:]
        return parse_tool_json(body.strip())
    if close_tag in text:
        return Invalid("malformed", "</tool_call> without an opening <tool_call>")
    if text.startswith("{") or _is_call_list(text):
        return parse_tool_json(text)
    if not text:
        return Invalid("malformed", "the message is empty")
    if text.endswith("?"):
        return Ask(text)
    return Reply(text)


class ChatRenderer(Renderer):
    def __init__(self, suite: Any) -> None:
        super().__init__(suite)
        # min_length=0: the step that ends the episode (the final reply) adds no message
        self.observation_space = TranscriptText(max_length=MAX_OBS_CHARS, min_length=0, charset="".join(sorted(CHARSET)))
        self.action_space = gym.spaces.Text(max_length=MAX_ACTION_CHARS, charset="".join(sorted(CHARSET)))
        self.messages: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []
        self.new_messages: list[dict[str, Any]] = []

    def reset(self, episode: "Episode") -> str:
        self.tools = [self.suite.public_schemas[t] for t in episode.task.tools]
        first = {"role": "user", "content": episode.user_message(0)}
        self.messages = [{"role": "system", "content": SYSTEM_PROMPT}, first]
        self.new_messages = [first]
        return self._text(self.new_messages)

    def decode(self, action: Any) -> Action:
        parsed = parse_chat_action(action)
        if isinstance(action, str):
            self.messages.append({"role": "assistant", "content": action[:MAX_ACTION_CHARS]})
        return parsed

    def observe(self, episode: "Episode", outcome: "StepOutcome") -> str:
        new = []
        for ev in outcome.events:
            if ev["kind"] == "result":
                new.append({"role": "tool", "name": ev["tool"], "content": json.dumps(ev["content"])})
            elif ev["kind"] == "error":
                new.append({"role": "tool", "name": ev["tool"] or "error",
                            "content": sanitize(f"Error [{ev['error']}]: {ev['message']}", 600)})
            else:
                new.append({"role": "user", "content": ev["text"]})
        self.messages.extend(new)
        self.new_messages = new
        return self._text(new)

    @staticmethod
    def _text(messages: list[dict[str, Any]]) -> str:
        parts = []
        for m in messages:
            who = f"tool ({m['name']})" if m["role"] == "tool" else m["role"]
            parts.append(f"{who}: {m['content']}")
        return sanitize("\n".join(parts))

    def encode(self, action: Action, episode: "Episode") -> str:
        if isinstance(action, ToolCall):
            return "<tool_call>" + json.dumps({"name": action.name, "arguments": action.arguments}) + "</tool_call>"
        if isinstance(action, Ask):
            return action.text if action.text.endswith("?") else action.text + "?"
        if isinstance(action, Reply):
            text = action.text.rstrip("?") or "Done."
            return text
        raise ValueError(f"cannot encode {action!r}")

    def text(self) -> str:
        return "\n".join(f"[{m['role']}{' ' + m['name'] if m.get('name') else ''}] {m.get('content', '')}"
                         for m in self.messages)
