"""Fast validation of tool arguments against the tools' JSON Schemas.

``jsonschema`` costs about 25 µs per call on these schemas, more than the whole step budget
of the chat env. Tool parameter schemas use a small, fixed subset of JSON Schema (type,
enum, pattern, min/max length, minimum/maximum, exclusiveMinimum, required,
additionalProperties: false), so each tool's schema is compiled once into a checker that
returns the first problem as a readable message. Anything outside that subset is rejected at
compile time. ``tests/test_argcheck.py`` checks with hypothesis that the checker accepts
exactly what ``jsonschema`` accepts.

Each property also gets a fused *accept test* (one call, no messages) for the common
shapes (strings with pattern/length/enum, bounded numbers). It only ever accepts values the
full check accepts; anything it does not accept goes through the full check, which gives the
result and the message, so results are the same with or without it.
"""

from __future__ import annotations

import math
import operator
import re
from typing import Any, Callable, Mapping

SUPPORTED = {"type", "enum", "pattern", "minLength", "maxLength", "minimum", "maximum",
             "exclusiveMinimum", "exclusiveMaximum", "description", "format", "title"}
_JSON_TYPE = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    # ints of any size are finite (math.isfinite would overflow on 10**400); NaN/inf are not JSON
    "number": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and math.isfinite(v)),
    "boolean": lambda v: isinstance(v, bool),
}
Check = Callable[[Any], "str | None"]
Accept = Callable[[Any], bool]
_STRING_KEYS = {"type", "pattern", "minLength", "maxLength", "enum", "description", "format", "title"}
_NUMBER_KEYS = {"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "description", "format", "title"}


def _short(value: Any, limit: int = 40) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's digit limit for str()
        return f"<{type(value).__name__} too large to show>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def compile_property(name: str, schema: Mapping[str, Any]) -> Check:
    keys = {k for k in schema if not k.startswith("x-")}
    unknown = keys - SUPPORTED
    if unknown:
        raise ValueError(f"parameter {name!r}: unsupported JSON Schema keywords {sorted(unknown)}")
    checks: list[Check] = []
    jtype = schema.get("type")
    if jtype is not None:
        if not isinstance(jtype, str) or jtype not in _JSON_TYPE:
            raise ValueError(f"parameter {name!r}: unsupported type {jtype!r}; use one of {sorted(_JSON_TYPE)}")
        is_type = _JSON_TYPE[jtype]
        checks.append(lambda v: None if is_type(v) else f"'{name}' must be {jtype}, got {type(v).__name__} {_short(v)}")
    if "enum" in schema:
        allowed = tuple(schema["enum"])
        # as in JSON Schema, true is not 1 and false is not 0
        checks.append(lambda v: None if any(a == v and isinstance(a, bool) == isinstance(v, bool) for a in allowed)
                      else f"'{name}' must be one of {list(allowed)}, got {_short(v)}")
    if "pattern" in schema:
        rx = re.compile(schema["pattern"])
        checks.append(lambda v: None if not isinstance(v, str) or rx.search(v)
                      else f"'{name}' has the wrong format {_short(v)} (expected pattern {rx.pattern})")
    if "minLength" in schema:
        lo = schema["minLength"]
        checks.append(lambda v: None if not isinstance(v, str) or len(v) >= lo else f"'{name}' is too short (min {lo} characters)")
    if "maxLength" in schema:
        hi = schema["maxLength"]
        checks.append(lambda v: None if not isinstance(v, str) or len(v) <= hi
                      else f"'{name}' is too long ({len(v)} characters, max {hi})")
    for key, op, word in (("minimum", operator.ge, ">="), ("maximum", operator.le, "<="),
                          ("exclusiveMinimum", operator.gt, ">"), ("exclusiveMaximum", operator.lt, "<")):
        if key in schema:
            bound = schema[key]
            # compare v itself: Python compares ints and floats exactly, float(10**400) would overflow
            checks.append(lambda v, bound=bound, op=op, word=word: None
                          if not _JSON_TYPE["number"](v) or op(v, bound)
                          else f"'{name}' must be {word} {bound:g}, got {_short(v)}")

    def check(value: Any) -> str | None:
        for c in checks:
            msg = c(value)
            if msg is not None:
                return msg
        return None

    return check


def compile_accept(schema: Mapping[str, Any]) -> Accept | None:
    """A one-call test that is True only for values :func:`compile_property` accepts (a
    sufficient condition: False means "run the full check"), or None for other shapes."""
    keys = {k for k in schema if not k.startswith("x-")}
    jtype = schema.get("type")
    if jtype == "string" and keys <= _STRING_KEYS:
        rx = re.compile(schema["pattern"]) if "pattern" in schema else None
        lo = schema.get("minLength", 0)
        hi = schema.get("maxLength", math.inf)
        if "enum" in schema:  # only its strings: 1 == True and the like stay with the full check
            members = frozenset(a for a in schema["enum"] if type(a) is str)
            return lambda v: (type(v) is str and v in members and lo <= len(v) <= hi
                              and (rx is None or rx.search(v) is not None))
        return lambda v: type(v) is str and lo <= len(v) <= hi and (rx is None or rx.search(v) is not None)
    if jtype in ("number", "integer") and keys <= _NUMBER_KEYS:
        bounds = [(schema[key], op) for key, op in (("minimum", operator.ge), ("maximum", operator.le),
                                                     ("exclusiveMinimum", operator.gt), ("exclusiveMaximum", operator.lt))
                  if key in schema]
        if not all(type(b) in (int, float) for b, _ in bounds):
            return None
        lo = max((b for b, op in bounds if op is operator.ge), default=-math.inf)
        hi = min((b for b, op in bounds if op is operator.le), default=math.inf)
        lo_x = max((b for b, op in bounds if op is operator.gt), default=-math.inf)
        hi_x = min((b for b, op in bounds if op is operator.lt), default=math.inf)
        if jtype == "integer":
            return lambda v: ((type(v) is int or (type(v) is float and v.is_integer()))
                              and lo <= v <= hi and lo_x < v < hi_x)
        return lambda v: ((type(v) is int or (type(v) is float and math.isfinite(v)))
                          and lo <= v <= hi and lo_x < v < hi_x)
    return None


class ArgChecker:
    """A compiled checker for one tool's ``parameters`` object schema."""

    def __init__(self, tool: str, parameters: Mapping[str, Any]) -> None:
        self.tool = tool
        self.props = {n: compile_property(n, s) for n, s in parameters["properties"].items()}
        self.required = tuple(parameters.get("required", ()))
        self.closed = parameters.get("additionalProperties", True) is False
        self._accept: dict[str, Accept] = {}
        for n, s in parameters["properties"].items():
            accept = compile_accept(s)
            self._accept[n] = accept if accept is not None else (lambda v, prop=self.props[n]: prop(v) is None)
        self._required = frozenset(self.required)

    def check(self, args: Any) -> str | None:
        """Return ``None`` when ``args`` is valid, else a message naming the problem."""
        if type(args) is dict and self._required <= args.keys():  # fast accept, else the full check
            accept = self._accept
            for key, value in args.items():
                test = accept.get(key)
                if test is None or not test(value):
                    return self._check(args)
            return None
        return self._check(args)

    def culprits(self, args: Any) -> tuple[str, ...]:
        """The parameters a rejected ``args`` gets wrong, in schema order: required ones that are
        missing and given ones whose value fails their check (unknown keys name no parameter)."""
        if not isinstance(args, dict):
            return ()
        return tuple(n for n, prop in self.props.items()
                     if (n in args and prop(args[n]) is not None) or (n not in args and n in self._required))

    def _check(self, args: Any) -> str | None:
        if not isinstance(args, dict):
            return f"arguments of {self.tool} must be a JSON object, got {type(args).__name__}"
        missing = [r for r in self.required if r not in args]
        if missing:
            return f"{self.tool} is missing required argument(s) {missing}"
        for key, value in args.items():
            prop = self.props.get(key)
            if prop is None:
                if self.closed:
                    return f"{self.tool} has no parameter {_short(key)}; it takes {sorted(self.props)}"
                continue
            msg = prop(value)
            if msg is not None:
                return msg
        return None
