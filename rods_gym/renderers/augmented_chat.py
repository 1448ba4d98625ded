"""The augmented chat view: the chat renderer of an episode under environment augmentation.

:class:`AugmentedChatRenderer` stands in for the env's :class:`~rods_gym.renderers.chat.ChatRenderer`
(:class:`rods_gym.augment.AugmentWrapper` installs it in chat mode). Per episode it draws an
:class:`EpisodeAugmentation`: other names for the task's tools and parameters, another parameter order,
reworded descriptions. It shows the episode in those names (schemas, tool messages, errors, unlock
messages), translates the agent's calls back to the suite's names (the original names of renamed tools and
parameters are then unknown, as an API that renamed them would say), and adds an actionable hint to error
messages (what was wrong and how to fix it, in the episode's names). ``encode`` writes the oracle's actions
in the episode's names, so ``rods_gym.solve(env)`` solves every augmented episode.

Only the chat view shows names and text, so only it has these perturbations: the compact and structured
views keep closed vocabularies and fixed spaces, and the features view never shows a tool's or a value's
identity (see ``docs/augmentation.md``).

The intensities and the generator come from the wrapper (:class:`Perturber`): every draw is made from its
generator at the time of the draw, so a ``reset(seed=...)`` that re-seeds the wrapper re-seeds this too.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping, Protocol

import numpy as np

from ..domain import ToolSpec
from ..episode import Action, ToolCall

MAX_ERROR_CHARS = 560  # the chat view cuts error observations at 600 characters (with its prefix)


class ChatIntensities(Protocol):
    """The chat-level intensities in [0, 1] (the fields of :class:`rods_gym.augment.AugmentConfig`)."""

    @property
    def error_hints(self) -> float: ...

    @property
    def rename_tools(self) -> float: ...

    @property
    def rename_params(self) -> float: ...

    @property
    def reorder_params(self) -> float: ...

    @property
    def paraphrase(self) -> float: ...


class Perturber(Protocol):
    """What the renderer reads from its wrapper: the intensities and the current generator."""

    @property
    def config(self) -> ChatIntensities: ...

    @property
    def rng(self) -> np.random.Generator: ...


# -- names and descriptions ---------------------------------------------------------------------
VERB_SYNONYMS = {
    "get": ("fetch", "retrieve", "read", "lookup"), "find": ("locate", "lookup", "resolve", "match"),
    "search": ("list", "query", "browse", "filter"), "count": ("tally", "number_of", "num"),
    "cancel": ("void", "revoke", "abort"), "transfer": ("move", "send", "wire"), "total": ("sum", "aggregate"),
    "update": ("modify", "edit", "set"), "book": ("reserve", "make"), "reschedule": ("move", "shift"),
    "open": ("read", "view", "show"), "schedule": ("plan", "create"), "invite": ("add", "include"),
    "share": ("grant", "give"), "rename": ("retitle", "relabel"), "trash": ("discard", "bin"),
    "send": ("dispatch", "post"), "delete": ("remove", "drop"), "place": ("submit", "create"),
    "add": ("create", "insert", "new"), "set": ("assign", "change"), "close": ("resolve", "finish"),
    "change": ("modify", "switch"),
}
DESCRIPTION_VERBS = {
    "Get": ("Retrieve", "Fetch", "Return", "Read"), "Find": ("Locate", "Look up", "Search for"),
    "List": ("Return", "Show", "Enumerate"), "Move": ("Shift", "Transfer"), "Count": ("Tally", "Compute the number of"),
    "Change": ("Modify", "Update", "Set"), "Cancel": ("Void", "Call off", "Revoke"), "Add": ("Create", "Insert"),
    "Book": ("Reserve",), "Open": ("Read", "View"), "Send": ("Dispatch",), "Close": ("Resolve",),
    "Sum": ("Add up", "Total"),
}
DESCRIPTION_FRAMES = ("{d}", "Use this to {l}", "This tool will {l}", "{d} Call it with the arguments below.",
                      "Purpose: {l}")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SENTINEL = re.compile(r"~(?=[A-Za-z_])")  # marks a name the agent wrote that this episode does not have


def _camel(name: str, upper: bool = False) -> str:
    parts = [p for p in name.split("_") if p]
    head = parts[0].capitalize() if upper else parts[0]
    return head + "".join(p.capitalize() for p in parts[1:])


def tool_aliases(tool: ToolSpec, rng: np.random.Generator) -> list[str]:
    """Candidate new names for a tool, in a random order."""
    verb, _, rest = tool.name.partition("_")
    options = [_camel(tool.name), f"{tool.domain}_{tool.name}", f"{tool.name}_v2", _camel(tool.name, upper=True)]
    for syn in VERB_SYNONYMS.get(verb, ()):
        if rest:
            options.append(f"{syn}_{rest}")
    return [options[int(j)] for j in rng.permutation(len(options))]


def param_aliases(name: str, rng: np.random.Generator) -> list[str]:
    """Candidate new names for a parameter, in a random order."""
    options = [_camel(name) if "_" in name else f"{name}_value", f"{name}_arg"]
    if name.endswith("_id"):
        options += [name[:-3] + "_ref", name[:-3] + "_key", _camel(name[:-3]) + "ID"]
    elif "_" not in name:
        options += [f"the_{name}", name.capitalize()]
    return [options[int(j)] for j in rng.permutation(len(options))]


def paraphrase(description: str, rng: np.random.Generator) -> str:
    """A reworded description with the same meaning (verb synonym and/or framing)."""
    first, _, rest = description.partition(" ")
    if first in DESCRIPTION_VERBS and rest:
        syns = DESCRIPTION_VERBS[first]
        description = f"{syns[int(rng.integers(0, len(syns)))]} {rest}"
    frame = DESCRIPTION_FRAMES[int(rng.integers(0, len(DESCRIPTION_FRAMES)))]
    lowered = description[:1].lower() + description[1:]
    return frame.format(d=description, l=lowered)


@dataclass(frozen=True)
class EpisodeAugmentation:
    """The chat-level changes drawn for one episode (original tool/param names -> shown ones)."""

    tool_alias: Mapping[str, str]
    param_alias: Mapping[str, Mapping[str, str]]
    param_order: Mapping[str, tuple[str, ...]]
    descriptions: Mapping[str, str]

    @classmethod
    def draw(cls, tools: list[ToolSpec], suite_names: frozenset[str], config: ChatIntensities,
             rng: np.random.Generator) -> "EpisodeAugmentation":
        """Each tool renamed with probability ``config.rename_tools`` (never to another tool's name), each
        parameter with ``rename_params``, each tool's parameters reordered with ``reorder_params`` and its
        description reworded with ``paraphrase``."""
        taken = set(suite_names)
        tool_alias: dict[str, str] = {}
        param_alias: dict[str, dict[str, str]] = {}
        order: dict[str, tuple[str, ...]] = {}
        descriptions: dict[str, str] = {}
        for tool in tools:
            alias = tool.name
            if rng.random() < config.rename_tools:
                alias = next((a for a in tool_aliases(tool, rng) if a not in taken), tool.name)
            taken.add(alias)
            tool_alias[tool.name] = alias
            names = tool.param_names
            params: dict[str, str] = {}
            for p in names:
                new = p
                if rng.random() < config.rename_params:
                    new = next((a for a in param_aliases(p, rng) if a not in names and a not in params.values()), p)
                params[p] = new
            param_alias[tool.name] = params
            listed = names
            if len(names) > 1 and rng.random() < config.reorder_params:
                listed = tuple(names[int(j)] for j in rng.permutation(len(names)))
            order[tool.name] = listed
            descriptions[tool.name] = paraphrase(tool.description, rng) if rng.random() < config.paraphrase \
                else tool.description
        return cls(tool_alias, param_alias, order, descriptions)

    def schema(self, tool: ToolSpec) -> dict[str, Any]:
        """The tool's chat-template schema as this episode shows it."""
        public = tool.public_schema()["function"]
        props = public["parameters"]["properties"]
        alias = self.param_alias[tool.name]
        required = set(public["parameters"]["required"])
        return {"type": "function", "function": {
            "name": self.tool_alias[tool.name],
            "description": self.descriptions[tool.name],
            "parameters": {"type": "object",
                           "properties": {alias[p]: props[p] for p in self.param_order[tool.name]},
                           "required": [alias[p] for p in self.param_order[tool.name] if p in required]},
        }}


# -- the translating chat renderer ---------------------------------------------------------------
class AugmentedChatRenderer:
    """Stands in for a ChatRenderer (``inner``): shows the episode's names and hints, translates actions back.
    ``source`` gives the intensities and the generator of every draw (the wrapper)."""

    def __init__(self, inner: Any, source: Perturber) -> None:
        self.inner, self.source = inner, source
        self.suite = inner.suite
        self.observation_space, self.action_space = inner.observation_space, inner.action_space
        self.plan: EpisodeAugmentation | None = None
        self._to_original: dict[str, str] = {}
        self._param_to_original: dict[str, dict[str, str]] = {}
        self._last_call: ToolCall | None = None
        self._rx: re.Pattern[str] | None = None

    # what ToolChainEnv reads from its renderer
    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.inner.messages

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self.inner.tools

    @property
    def new_messages(self) -> list[dict[str, Any]]:
        return self.inner.new_messages

    def text(self) -> str:
        return self.inner.text()

    def reset(self, episode: Any) -> Any:
        specs = [self.suite.tools[t] for t in episode.task.tools]
        self.plan = EpisodeAugmentation.draw(specs, frozenset(self.suite.tools), self.source.config, self.source.rng)
        self._to_original = {alias: name for name, alias in self.plan.tool_alias.items()}
        self._param_to_original = {t: {a: p for p, a in m.items()} for t, m in self.plan.param_alias.items()}
        self._last_call = None
        obs = self.inner.reset(episode)
        self.inner.tools = [self.plan.schema(s) for s in specs]
        return obs

    def decode(self, action: Any) -> Action:
        parsed = self.inner.decode(action)
        self._last_call = None
        if isinstance(parsed, ToolCall):
            parsed = self._original_call(parsed)
            self._last_call = parsed
        return parsed

    def _original_call(self, call: ToolCall) -> ToolCall:
        assert self.plan is not None
        name = call.name
        if name in self._to_original:
            original = self._to_original[name]
        elif name in self.plan.tool_alias:  # an original name this episode renamed: unknown here
            return ToolCall("~" + name, call.arguments)
        else:
            return call
        if not isinstance(call.arguments, dict):
            return ToolCall(original, call.arguments)
        back = self._param_to_original[original]
        shown = self.plan.param_alias[original]
        args = {}
        for key, value in call.arguments.items():
            if key in back:
                args[back[key]] = value
            elif key in shown and shown[key] != key:  # an original parameter name that was renamed
                args["~" + key] = value
            else:
                args[key] = value
        return ToolCall(original, args)

    def encode(self, action: Action, episode: Any) -> Any:
        assert self.plan is not None
        if isinstance(action, ToolCall) and action.name in self.plan.tool_alias:
            shown = self.plan.param_alias[action.name]
            args = {shown.get(k, k): v for k, v in action.arguments.items()}
            action = ToolCall(self.plan.tool_alias[action.name], args)
        return self.inner.encode(action, episode)

    def observe(self, episode: Any, outcome: Any) -> Any:
        events = []
        for ev in outcome.events:
            ev = dict(ev)
            if ev.get("tool"):
                ev["tool"] = self._shown_tool(ev["tool"])
            if ev["kind"] == "error":
                message = self._rename(ev["message"], self._last_call.name if self._last_call else None)
                if self.source.rng.random() < self.source.config.error_hints:
                    hint = self._hint(ev["error"], ev["message"], episode)
                    if hint:
                        room = MAX_ERROR_CHARS - len(hint) - 8
                        if len(message) > room:  # keep the hint: shorten the listing before it
                            message = message[: max(room - 3, 0)] + "..."
                        message = f"{message} Hint: {hint}"
                ev["message"] = message
            elif ev["kind"] == "user" and ev.get("unlocked"):
                ev["text"] = self._rename(ev["text"], None)
                ev["unlocked"] = [self._shown_tool(t) for t in ev["unlocked"]]
            events.append(ev)
        return self.inner.observe(episode, replace(outcome, events=events))

    # -- rewriting -------------------------------------------------------------------------------
    def _shown_tool(self, name: str) -> str:
        assert self.plan is not None
        if name.startswith("~"):
            return name[1:]
        return self.plan.tool_alias.get(name, name)

    def _rename(self, text: str, tool: str | None) -> str:
        """Original identifiers -> this episode's names (the call's tool's parameters too);
        ``~name`` (a name the agent wrote that this episode does not have) -> ``name``."""
        assert self.plan is not None
        mapping = dict(self.plan.tool_alias)
        if tool is not None and tool in self.plan.param_alias:
            mapping.update({p: a for p, a in self.plan.param_alias[tool].items() if p not in mapping})

        def sub(m: re.Match[str]) -> str:
            word = m.group(0)
            if m.start() > 0 and text[m.start() - 1] == "~":
                return word
            return mapping.get(word, word)

        return _SENTINEL.sub("", _IDENT.sub(sub, text))

    def _hint(self, error: str, message: str, episode: Any) -> str:
        """What was wrong and how to fix it, in this episode's names."""
        assert self.plan is not None
        available = [self.plan.tool_alias[t] for t in episode.available_tools()]
        call = self._last_call
        if error == "malformed":
            example = available[0] if available else "tool_name"
            return (f'write exactly one call as <tool_call>{{"name": "{example}", "arguments": {{...}}}}</tool_call>, '
                    "or plain text for the user.")
        if error == "too_long":
            return "send a shorter message: one tool call or a short reply."
        if error == "unknown_tool" and call is not None:
            wanted = call.name.lstrip("~")
            close = difflib.get_close_matches(wanted, available, n=1, cutoff=0.3)
            guess = f"did you mean {close[0]}? " if close else ""
            return f"{guess}Call only the tools listed as available, spelled exactly."
        if error == "unavailable_tool":
            return "this conversation has only the tools listed as available; pick the one that does what was asked."
        if error == "locked_tool" and call is not None:
            return f"reply to the user that you need {self._shown_tool(call.name)} enabled; they will enable it."
        if error == "invalid_arguments" and call is not None and call.name in self.suite.tools:
            return self._argument_hint(call)
        if error == "execution_error" and call is not None and call.name in self.suite.tools:
            return self._execution_hint(call, message, episode)
        if error == "episode_over":
            return "the conversation has ended; start a new episode with reset()."
        return ""

    def _argument_hint(self, call: ToolCall) -> str:
        assert self.plan is not None
        tool = self.suite.tools[call.name]
        alias = self.plan.param_alias[tool.name]
        shown = self.plan.tool_alias[tool.name]
        signature = ", ".join(f"{alias[p.name]}: {p.schema.get('type', 'any')}{'' if p.required else ' (optional)'}"
                              for p in tool.params)
        args = call.arguments if isinstance(call.arguments, dict) else {}
        missing = [alias[p.name] for p in tool.params if p.required and p.name not in args]
        unknown = [k.lstrip("~") for k in args if k not in alias]
        if unknown:
            close = difflib.get_close_matches(unknown[0], list(alias.values()), n=1, cutoff=0.3)
            guess = f" (did you mean {close[0]}?)" if close else ""
            return f"{unknown[0]} is not a parameter of {shown}{guess}; it takes {signature}."
        if missing:
            return f"add the required argument(s) {', '.join(missing)}; {shown} takes {signature}."
        return f"check each value's type and format; {shown} takes {signature}."

    def _execution_hint(self, call: ToolCall, message: str, episode: Any) -> str:
        assert self.plan is not None
        tool = self.suite.tools[call.name]
        code = message.split(":", 1)[0]
        if code == "not_found":
            alias = self.plan.param_alias[tool.name]
            for p in tool.params:
                if p.name in call.arguments and self.suite.types[p.type].role == "id":
                    makers = [self.plan.tool_alias[t] for t in episode.available_tools()
                              if any(vt == p.type for _, vt in self.suite.ports[t])]
                    source = f"get it from {' or '.join(makers)} first" if makers \
                        else "use a value an earlier result gave you"
                    return f"no record has that {alias[p.name]}; {source}, or ask the user for the right value."
            return "no record matches these values; check them against earlier results or ask the user."
        if code == "ambiguous":
            return "several records match; pass more identifying details."
        if code == "precondition_failed":
            return "the record's current state does not allow this; check its status first or ask the user."
        if code == "insufficient_funds":
            return "the source has too little balance; use a smaller amount or another source."
        if code == "invalid_request":
            return "check that the values are consistent (different accounts, a positive amount)."
        return "check the arguments against earlier results."
