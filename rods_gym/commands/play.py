"""``rods play``: play one episode by hand in the terminal.

The task is shown as the agent sees it (the user's message and the tools with their
parameters). Type one action per line:

* chat mode: a tool call as JSON (``{"name": ..., "arguments": {...}}``, optionally inside
  ``<tool_call>...</tool_call>``), the shorthand ``tool_name key=value ...`` (values are
  converted to the parameter's JSON type; quote values with spaces), a question ending
  with ``?``, or any other text as your reply to the user;
* compact mode: a compact action (``call TOOL param $k ...``, ``ask``, ``reply``,
  ``reply $k``), or the shorthand ``tool_name param=$k ...``.

Meta commands: ``:tools`` (show the tools), ``:hint`` (the oracle's next action),
``:help`` (the action syntax, with an example of each kind of action on this task's tools), ``:quit``; any
other line starting with ``:`` is refused, not sent as a reply. In chat mode a line that looks like a tool name
followed by arguments that are neither ``key=value`` pairs nor JSON (``search_agent_tickets AGT-3830``) is not
sent either: the env would take it as the final reply and end the episode, so play shows the right forms
instead (the env's own rule, plain text is a reply, stays; this is the terminal front end's job). After
each action the observation, the reward and the progress are printed; the episode ends when the task is
done, on your final reply, or at the step limit.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from typing import Any, Callable

from ..env import ToolChainEnv
from ..sampler import DIFFICULTIES
from ..suite import Suite

SPLITS = ("train", "dev", "test", "ood")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
# a word shaped like a tool name: snake_case with at least one underscore (send_email, search_agent_tickets)
_TOOL_SHAPED = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+")
MAX_INPUT_LINES = 2000  # bounds the loop even when meta commands never end the episode
META_HELP = ":tools  show the tools   :hint  the oracle's next action   :help  how to type an action   :quit  stop"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("play", help="play an episode by hand: type tool calls, see observations and rewards")
    p.add_argument("--seed", type=int, default=0, help="episode seed (it picks the task), >= 0")
    p.add_argument("--mode", choices=("chat", "compact"), default="chat", help="the view to play in")
    p.add_argument("--difficulty", choices=sorted(DIFFICULTIES), default=None,
                   help="sampler preset (default easy; not with --split or --task)")
    p.add_argument("--split", choices=SPLITS, default=None, help="draw the task from a task set instead")
    p.add_argument("--task", default=None, metavar="ID", help="play this task of the checked-in sets (e.g. test-0189; "
                   "with --split, of that set)")
    p.add_argument("--max-steps", type=int, default=None, help="step limit (default: from the task's size)")
    p.set_defaults(func=run)


def _coerce(text: str, schema: dict[str, Any] | None) -> Any:
    """A typed value for ``key=value`` shorthand: the parameter's JSON type decides."""
    jtype = (schema or {}).get("type")
    try:
        if jtype == "integer":
            return int(text)
        if jtype == "number":
            return float(text) if any(c in text for c in ".eE") else int(text)
        if jtype == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
    except ValueError:
        pass  # leave it a string: the environment reports the type error, as it would to an agent
    return text


def parse_shorthand(line: str, suite: Suite, mode: str) -> str | None:
    """``tool key=value ...`` -> the mode's action text, or None when the line is not shorthand."""
    try:
        words = shlex.split(line)
    except ValueError:  # unbalanced quotes: plain text
        return None
    if not words or not all("=" in w for w in words[1:]):
        return None
    # a known tool, or a name with key=value arguments: a call (to a mistyped tool, the environment
    # answers unknown_tool), never a reply that would end the episode
    if words[0] not in suite.tools and not (len(words) > 1 and _IDENTIFIER.fullmatch(words[0])):
        return None
    name = words[0]
    pairs = [w.split("=", 1) for w in words[1:]]
    if mode == "compact":
        return " ".join(["call", name] + [x for k, v in pairs for x in (k, v)])
    props = suite.tools[name].parameters["properties"] if name in suite.tools else {}
    args = {k: _coerce(v, props.get(k)) for k, v in pairs}
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


def _placeholder(schema: dict[str, Any]) -> Any:
    """An example value of a parameter's JSON type, for the help text (never one of the task's own values)."""
    if "enum" in schema:
        return schema["enum"][0]
    return {"integer": 1, "number": 1.5, "boolean": True}.get(schema.get("type", ""), "...")


def call_forms(tool: str, args: dict[str, Any], mode: str) -> list[str]:
    """The ways to type a call of ``tool`` with ``args`` in ``mode``: the view's own syntax and the shorthand."""
    if mode == "compact":
        slots = [f"{k} ${i}" for i, k in enumerate(args)]
        return [" ".join(["call", tool, *slots]), " ".join([tool, *(f"{k}=${i}" for i, k in enumerate(args))])]
    shorthand = " ".join([tool, *(f"{k}={shlex.quote(v) if isinstance(v, str) else json.dumps(v)}"
                                  for k, v in args.items())])
    return [json.dumps({"name": tool, "arguments": args}), shorthand]


def action_help(env: ToolChainEnv) -> str:
    """How to type each kind of action (a tool call, a question, a reply) in the episode's view, with an
    example call of one of its tools, then the meta commands."""
    assert env.episode is not None
    available = env.episode.available_tools()
    name = available[0] if available else next(iter(env.suite.tools))
    tool = env.suite.tools[name]
    args = {p.name: _placeholder(p.schema) for p in tool.params if p.required}
    if env.mode == "compact":
        own, short = call_forms(name, {k: None for k in args}, "compact")
        lines = ["type one action per line (compact view; $k is a value slot, shown after each observation):",
                 f"  a tool call   {own}",
                 f"                or the shorthand  {short}",
                 "  a question    ask                  (asks the user for a withheld value)",
                 "  a reply       reply                (done; reply $k answers with the value in slot $k)"]
    else:
        own, short = call_forms(name, args, "chat")
        lines = ["type one action per line (chat view):",
                 f"  a tool call   {own}",
                 f"                or the shorthand  {short}   (key=value, quote values with spaces)",
                 "  a question    a line ending in '?', e.g.  Which account do you mean?",
                 "  a reply       any other text, e.g.  Done: your order is cancelled.   "
                 "(your answer to the user: it ends the current request)"]
    return "\n".join(lines + [META_HELP])


def malformed_call(line: str, suite: Suite) -> str | None:
    """In the chat view, a line shaped like a call that would be sent as a reply (and so end the episode): a tool
    name (a known one, or a snake_case word) followed by arguments that are neither ``key=value`` pairs nor JSON
    (``search_agent_tickets AGT-3830``, ``get_order(ORD-1)``). Returns what to print instead (the right forms,
    the values typed filled in where the tool is known), or None when the line is not shaped so."""
    match = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(\(.*\)|\s.*)\s*$", line, re.S)
    if match is None:
        return None
    name, rest = match.group(1), match.group(2).strip()
    if name not in suite.tools and not _TOOL_SHAPED.fullmatch(name):
        return None
    try:
        words = shlex.split(rest[1:-1].replace(",", " ") if rest.startswith("(") else rest)
    except ValueError:
        words = rest.split()
    head = f"not sent: {line.strip()[:80]!r} looks like a call to {name}, but its arguments are neither key=value nor JSON"
    if name not in suite.tools:
        return (f"{head}, and no tool is named {name} (:tools lists this task's tools). A call is typed as\n"
                f"  {name} key=value ...\n  " + json.dumps({"name": name, "arguments": {"key": "value"}}))
    params = {p.name: p for p in suite.tools[name].params}
    named, positional = {}, []
    pending: str | None = None  # "order_id ORD-1": a parameter's name, then its value
    for word in words:
        key, eq, value = word.partition("=")
        if eq and key in params:
            named[key] = value
        elif pending is not None:
            named[pending], pending = word, None
        elif word in params and word not in named:
            pending = word
        else:
            positional.append(word)
    values = iter(positional)  # the rest fill the parameters in order, required ones first
    order = sorted(params.values(), key=lambda p: not p.required)
    args = {}
    for p in order:
        value = named.get(p.name, next(values, None))
        if value is not None or p.required:
            args[p.name] = _placeholder(p.schema) if value is None else _coerce(value, p.schema)
    own, short = call_forms(name, args, "chat")
    signature = ", ".join(f"{p.name}{'*' if p.required else ''}: {p.schema.get('type', 'any')}" for p in params.values())
    return (f"{head}. Type it as\n  {short}\nor\n  {own}\n({name}({signature}); * = required. "
            "A reply to the user that starts with a tool name would end the episode: word it otherwise)")


def describe_tools(env: ToolChainEnv) -> str:
    """The tools the agent can call now, with typed parameters (* = required)."""
    assert env.episode is not None
    lines = []
    for name in env.episode.available_tools():
        tool = env.suite.tools[name]
        params = ", ".join(f"{p.name}{'*' if p.required else ''}: {p.schema.get('type', 'any')}"
                           + (f" {list(p.schema['enum'])}" if "enum" in p.schema else "")
                           for p in tool.params)
        lines.append(f"  {name}({params})  {tool.description}")
    locked = sorted(env.episode.locked)
    if locked:
        lines.append(f"  (not enabled yet: {', '.join(locked)})")
    return "\n".join(lines)


def describe_slots(env: ToolChainEnv) -> str:
    slots = getattr(env.renderer, "slots", None)
    if slots is None or not len(slots):
        return ""
    token = getattr(env.renderer, "slot_token", lambda k: f"${k}")  # the compact view may shuffle its ids
    return "slots   " + "  ".join(f"{token(k)}={v!r}" for k, v in enumerate(slots.values))


def play(env: ToolChainEnv, seed: int, read: Callable[[str], str] = input,
         write: Callable[[str], None] = print, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run one hand-played episode (``options``: the env's reset options, e.g. a task id); return a
    summary (return, progress, success, steps)."""
    obs, info = env.reset(seed=seed, options=options)
    task = env.task
    assert task is not None and env.episode is not None
    write(f"task {task.id}  ({len(task.calls)} required calls, {len(task.turns)} user turn(s), "
          f"mode {env.mode}; type :help for help)")
    write("tools\n" + describe_tools(env))
    write(obs)
    if env.mode == "compact":
        write(describe_slots(env))
    total, steps, done = 0.0, 0, False
    tools_shown = env.episode.available_tools()
    for _ in range(MAX_INPUT_LINES):
        try:
            line = read("> ").strip()
        except EOFError:  # Ctrl-D, the end of piped input
            break
        except KeyboardInterrupt:  # Ctrl-C: stop too, and show how the episode stood
            write("")
            break
        if not line:
            continue
        if line in (":q", ":quit", ":exit"):
            break
        if line == ":help":
            write(action_help(env))
            continue
        if line == ":tools":
            write("tools\n" + describe_tools(env))
            continue
        if line == ":hint":
            write(f"hint    {env.oracle_action()}")
            continue
        if line.startswith(":"):
            write(f"unknown command {line.split()[0]}; {META_HELP}")
            continue
        action = parse_shorthand(line, env.suite, env.mode)
        refused = malformed_call(line, env.suite) if action is None and env.mode == "chat" else None
        if refused is not None:
            write(refused)
            continue
        action = action or line
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        steps += 1
        write(obs)
        if env.mode == "compact":
            write(describe_slots(env))
        write(f"reward {reward:+.3f} | progress {info['progress']:.2f} | error {info['error']}")
        if env.episode.available_tools() != tools_shown and not (terminated or truncated):
            tools_shown = env.episode.available_tools()
            write("tools\n" + describe_tools(env))
        if terminated or truncated:
            done = True
            break
    ep = env.episode
    summary = {"return": total, "progress": ep.progress, "success": ep.success, "steps": steps, "finished": done}
    end = "episode over" if done else "stopped"
    write(f"{end}: return {total:.3f} | progress {ep.progress:.2f} | success {'yes' if ep.success else 'no'} "
          f"| {steps} steps")
    return summary


def run(args: argparse.Namespace) -> int:
    mistakes = [m for bad, m in ((args.seed < 0, f"--seed must be >= 0, got {args.seed}"),
                                 (args.max_steps is not None and args.max_steps < 1,
                                  f"--max-steps must be >= 1, got {args.max_steps}"),
                                 (args.difficulty is not None and (args.split or args.task),
                                  "--difficulty picks sampled tasks; it does not apply with --split or --task"))
                if bad]
    if mistakes:
        print(f"rods play: error: {mistakes[0]}", file=sys.stderr)
        return 2
    options = {"task": args.task, **({"split": args.split} if args.split else {})} if args.task else None
    try:
        env = ToolChainEnv(mode=args.mode, difficulty=args.difficulty or "easy",
                           task_set=None if args.task else args.split, max_steps=args.max_steps)
        if options is not None:
            env.reset(options=options)  # an unknown id fails here, before the episode is shown
    except (FileNotFoundError, KeyError) as exc:  # a task set that was not built, a task id that is not there
        print(f"rods play: error: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 2
    play(env, args.seed, options=options)
    return 0
