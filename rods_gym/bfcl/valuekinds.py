"""What kind of value each BFCL function parameter takes, and where a tier-0 variant finds others of that kind.

A tier-0 variant (:mod:`rods_gym.bfcl.resample`) swaps a value the user states for another. The **typed rule**: the
new value is the kind of value its parameter takes, drawn from where values of that kind live, never from another
parameter's values. Each parameter of BFCL's multi-turn functions gets one kind by three rules, in order:

1. :data:`KINDS`, a table of kind -> the ``function.parameter`` names that take it, read off BFCL's function docs and
   what each backend method does with the argument (looks it up in a map, creates it, searches it...);
2. a documented enum: ``[Enum]: a, b``, ``Options are: a, b``, ``(A/B)``, ``'x' for ...`` or, for an integer,
   ``from N to M`` in the parameter's description (or that of the same-named parameter of another function of the
   class: ``book_flight.travel_class`` has ``get_flight_cost.travel_class``'s enum) -> ``enum``;
3. a numeric type (``float``/``integer``) -> ``number``;

and anything else is :data:`FIXED`: never swapped (credentials and session values such as access tokens, passwords
and the user's own name, which have one valid value; free labels no pool holds, e.g. ``insurance_type``, which the
backend does not even read; values that come from earlier results, e.g. zip codes).

Where a kind's values come from (:func:`slots` computes them for each stated value at the first call that uses it,
on a backend replaying the parent's ground truth up to that call, so "where the call runs" is exact):

* the backend's state at the call: file-system names of the call's directory (an existing file -> another existing
  file with the same extension, an existing folder -> another existing folder; a name the call creates -> a name
  the directory does not hold, from the pool of BFCL's file and folder names), names under a ``find`` path, phrases
  of the file ``grep`` reads, stock tickers, order ids, user ids and names, tweet ids and authors, ticket ids,
  credit-card and booking ids, airports (``list_all_airports``), words of the messages or tweets a search reads;
* the function docs: enums, and cities (the documented locations of ``get_nearest_airport_by_city``);
* the backends' code: the sectors of ``get_available_stocks`` and the company names of ``get_symbol_by_name``;
* typed pools of BFCL's initial configs (test split excluded): texts of tweets and comments, of messages, of
  ticket titles and descriptions, file contents, file and folder names;
* generated: numbers redrawn at the same magnitude (x0.5-1.5, same type and decimals), dates in the same year.

The ids, tickers, airports, users, enums and existing files are **member kinds**: a stated value that is not itself
one (a receiver ``'travel_agent'`` that is no user id) is not swapped. A value used by several parameters is
swapped only if they all take the same kind and none is fixed.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
from functools import lru_cache
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .backend import Backend
from .data import FUNC_DOC_FILES, BFCLTask, func_docs, tasks_by_id

FIXED = "fixed"
KINDS: dict[str, tuple[str, ...]] = {
    # file system: what the name is in the call's directory is read from the state (see _fs_slot)
    "fs_name": ("cat.file_name", "cd.folder", "cp.source", "cp.destination", "diff.file_name1", "diff.file_name2",
                "echo.file_name", "find.path", "grep.file_name", "mkdir.dir_name", "mv.source", "mv.destination",
                "rm.file_name", "rmdir.dir_name", "sort.file_name", "tail.file_name", "touch.file_name",
                "wc.file_name"),
    "fs_name_part": ("find.name",),               # a name (or its stem) under the find path
    "file_phrase": ("grep.pattern",),             # a phrase of the file grep reads
    "file_text": ("echo.content",),
    "ticker": ("add_to_watchlist.stock", "get_stock_info.symbol", "place_order.symbol",
               "remove_stock_from_watchlist.symbol"),
    "order_id": ("cancel_order.order_id", "get_order_details.order_id"),
    "sector": ("get_available_stocks.sector",),
    "company": ("get_symbol_by_name.name",),
    "message_user_id": ("delete_message.receiver_id", "message_login.user_id", "send_message.receiver_id"),
    "message_user_name": ("add_contact.user_name", "get_user_id.user"),
    "message_word": ("search_messages.keyword",),
    "message_text": ("send_message.message",),
    "twitter_user": ("follow_user.username_to_follow", "unfollow_user.username_to_unfollow",
                     "get_user_stats.username", "get_user_tweets.username"),
    "tweet_id": ("comment.tweet_id", "get_tweet.tweet_id", "get_tweet_comments.tweet_id", "mention.tweet_id",
                 "retweet.tweet_id"),
    "tweet_word": ("search_tweets.keyword",),
    "post_text": ("post_tweet.content", "comment.comment_content"),
    "ticket_id": ("close_ticket.ticket_id", "edit_ticket.ticket_id", "get_ticket.ticket_id",
                  "resolve_ticket.ticket_id"),
    "ticket_title": ("create_ticket.title",),
    "ticket_text": ("create_ticket.description", "resolve_ticket.resolution"),
    "card_id": ("book_flight.card_id", "get_credit_card_balance.card_id", "purchase_insurance.card_id"),
    "booking_id": ("cancel_booking.booking_id", "contact_customer_support.booking_id",
                   "purchase_insurance.booking_id", "retrieve_invoice.booking_id"),
    "airport": ("book_flight.travel_from", "book_flight.travel_to", "get_flight_cost.travel_from",
                "get_flight_cost.travel_to"),
    "city": ("get_zipcode_based_on_city.city",),  # get_nearest_airport_by_city.location: by its documented enum
    "date": ("book_flight.travel_date", "get_flight_cost.travel_date", "get_transaction_history.start_date",
             "get_transaction_history.end_date"),
    FIXED: ("authenticate_travel.client_id", "authenticate_travel.client_secret", "authenticate_travel.refresh_token",
            "authenticate_travel.grant_type", "authenticate_travel.user_first_name",
            "authenticate_travel.user_last_name", "authenticate_twitter.username", "authenticate_twitter.password",
            "ticket_login.username", "ticket_login.password", "trading_login.username", "trading_login.password",
            "book_flight.access_token", "cancel_booking.access_token", "get_booking_history.access_token",
            "get_credit_card_balance.access_token", "purchase_insurance.access_token",
            "register_credit_card.access_token", "retrieve_invoice.access_token", "set_budget_limit.access_token",
            "verify_traveler_information.first_name", "verify_traveler_information.last_name",
            "purchase_insurance.insurance_type", "retrieve_invoice.insurance_id", "estimate_distance.cityA",
            "estimate_distance.cityB", "set_navigation.destination", "contact_customer_support.message",
            "register_credit_card.card_number", "register_credit_card.expiration_date",
            "register_credit_card.cardholder_name", "verify_traveler_information.date_of_birth",
            "verify_traveler_information.passport_number", "get_budget_fiscal_year.lastModifiedAfter",
            "get_budget_fiscal_year.includeRemoved", "get_user_tickets.status", "imperial_si_conversion.unit_in",
            "imperial_si_conversion.unit_out", "si_unit_conversion.unit_in", "si_unit_conversion.unit_out"),
}
# vocabularies written in the backends' code (no state or doc holds them)
SECTORS = ("Automobile", "Technology")  # TradingBot.get_available_stocks
COMPANIES = ("Alpha Tech", "Amazon", "Apple", "Google", "Gorilla", "Microsoft", "Neptune Systems", "Nvidia",
             "Omega Industries", "Quasar Ltd.", "Synex Solutions", "Tesla", "Zeta Corp")  # get_symbol_by_name
MEMBER_KINDS = frozenset({"file", "dir", "ticker", "order_id", "sector", "company", "message_user_id",
                          "message_user_name", "twitter_user", "tweet_id", "ticket_id", "card_id", "booking_id",
                          "airport", "city", "enum"})
GENERATED_KINDS = frozenset({"number", "date"})
EXT = re.compile(r"\.[A-Za-z0-9]{1,5}$")
WORD = re.compile(r"[A-Za-z][A-Za-z'-]{2,}")


def _ext(name: str) -> str:
    m = EXT.search(name)
    return m.group().lower() if m else ""


@lru_cache(maxsize=1)
def _docs() -> dict[str, tuple[str, dict[str, Any]]]:
    """Function name -> (its class, its parameter specs)."""
    return {d["name"]: (cls, d["parameters"].get("properties", {})) for cls in FUNC_DOC_FILES for d in func_docs(cls)}


def _parse_enum(spec: Mapping[str, Any]) -> tuple:
    """The members a parameter's description documents (see the module docstring, rule 2), or ()."""
    text = str(spec.get("description", ""))
    if "enum" in spec:
        return tuple(spec["enum"])
    m = re.search(r"\[Enum\]:\s*(\[[^\]]*\]|[^.\n]+)", text)
    if m:
        body = m.group(1).strip()
        members = json.loads(body) if body.startswith("[") else [s.strip() for s in body.split(",")]
        return tuple(s for s in members if s)
    m = re.search(r"Options are:\s*([^.\n]+)", text)
    if m:
        return tuple(s.strip() for s in m.group(1).split(",") if s.strip())
    m = re.search(r"\(([A-Za-z]+(?:/[A-Za-z]+)+)\)", text)
    if m:
        return tuple(m.group(1).split("/"))
    quoted = re.findall(r"'([^']+)' for ", text)
    if len(quoted) >= 2:
        return tuple(quoted)
    m = re.search(r"from (\d+) to (\d+)", text)
    if m and spec.get("type") == "integer":
        return tuple(range(int(m.group(1)), int(m.group(2)) + 1))
    return ()


@lru_cache(maxsize=None)
def doc_enum(function: str, param: str) -> tuple:
    """The documented enum of ``function.param``, else of the same-named parameter of its class's other functions."""
    docs = _docs()
    if function not in docs:
        return ()
    cls, props = docs[function]
    own = _parse_enum(props.get(param, {}))
    if own or param not in props:
        return own
    for name, (other_cls, other) in sorted(docs.items()):
        if other_cls == cls and name != function and param in other:
            found = _parse_enum(other[param])
            if found:
                return found
    return ()


@lru_cache(maxsize=1)
def _table() -> dict[str, str]:
    out: dict[str, str] = {}
    for kind, names in KINDS.items():
        for name in names:
            if name in out:
                raise AssertionError(f"KINDS lists {name} twice ({out[name]} and {kind})")
            out[name] = kind
    return out


def param_kind(function: str, param: str) -> str:
    """The kind of value ``function.param`` takes (the module docstring's three rules; :data:`FIXED` otherwise)."""
    kind = _table().get(f"{function}.{param}")
    if kind is not None:
        return kind
    if doc_enum(function, param):
        return "enum"
    spec = _docs().get(function, ("", {}))[1].get(param, {})
    if spec.get("type") in ("float", "integer"):
        return "number"
    return FIXED


# ------------------------------------------------------------------ typed pools of BFCL's initial configs


@dataclasses.dataclass(frozen=True)
class ConfigPools:
    """Values of a kind across BFCL's initial configs (sorted tuples): what a user may newly state."""

    file_names: tuple[str, ...]
    dir_names: tuple[str, ...]
    texts: Mapping[str, tuple[str, ...]]  # kind -> texts (post_text, message_text, ticket_title, ticket_text, file_text)


TEXT_FIELDS = {  # kind -> (class, the config keys whose strings are of that kind)
    "post_text": ("TwitterAPI", ("content", "comment")),
    "message_text": ("MessageAPI", ("inbox",)),
    "ticket_title": ("TicketAPI", ("title", "subject")),
    "ticket_text": ("TicketAPI", ("description", "issue", "resolution")),
    "file_text": ("GorillaFileSystem", ("content",)),
}


def _strings_under(obj: Any, keys: tuple[str, ...], inside: bool, out: set[str]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _strings_under(v, keys, inside or k in keys, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _strings_under(v, keys, inside, out)
    elif inside and isinstance(obj, str) and 2 <= len(obj) <= 200 and "\n" not in obj:
        out.add(obj)


def _fs_names(node: Mapping[str, Any], files: set[str], dirs: set[str]) -> None:
    for name, item in node.items():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "directory":
            dirs.add(name)
            _fs_names(item.get("contents", {}), files, dirs)
        elif item.get("type") == "file":
            files.add(name)


@lru_cache(maxsize=4)
def config_pools(exclude: frozenset[str] = frozenset()) -> ConfigPools:
    """The pools of every BFCL task's initial config except the tasks ``exclude`` names (the test split)."""
    files: set[str] = set()
    dirs: set[str] = set()
    texts: dict[str, set[str]] = {k: set() for k in TEXT_FIELDS}
    for task in tasks_by_id().values():
        if task.id in exclude:
            continue
        fs = task.initial_config.get("GorillaFileSystem", {}).get("root", {})
        for top in fs.values():  # the root folder's own name is not a name a user works with
            if isinstance(top, dict):
                _fs_names(top.get("contents", {}), files, dirs)
        for kind, (cls, keys) in TEXT_FIELDS.items():
            _strings_under(task.initial_config.get(cls, {}), keys, False, texts[kind])
    ok = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\- ]*$")  # a plain name, no path or wildcard
    return ConfigPools(tuple(sorted(f for f in files if ok.match(f))), tuple(sorted(d for d in dirs if ok.match(d))),
                       {k: tuple(sorted(v)) for k, v in texts.items()})


# ------------------------------------------------------------------ slots: a stated value's kind where it is used


@dataclasses.dataclass(frozen=True)
class Slot:
    """A stated value at the first call that uses it: its kind there and the other values of that kind.

    ``kind`` is the parameter's kind, file-system names resolved against the call's directory (``file``, ``dir``,
    ``new_file``, ``new_dir``); ``options`` the other values of the kind there (sorted; empty for generated
    kinds, whose values :func:`draw` makes)."""

    value: Any
    function: str
    param: str
    kind: str
    options: tuple = ()


def _is_dir(item: Any) -> bool:
    return hasattr(item, "contents")


def _entries(directory: Any) -> dict[str, Any]:
    return dict(directory.contents)


def _walk_names(directory: Any) -> Iterable[str]:
    for name, item in directory.contents.items():
        yield name
        if _is_dir(item):
            yield from _walk_names(item)


def _phrases(content: str, n_words: int) -> list[str]:
    """Runs of ``n_words`` words of the file's lines, as they appear there (each a substring of a line)."""
    out: set[str] = set()
    for line in content.splitlines():
        words = line.split(" ")
        for i in range(len(words) - n_words + 1):
            phrase = " ".join(words[i:i + n_words]).strip(" .,;:!?\"'()")
            if len(phrase) >= 3 and phrase in line and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 _'\-]*", phrase):
                out.add(phrase)
    return sorted(out)


def _words(texts: Iterable[str]) -> list[str]:
    return sorted({w.lower() for t in texts for w in WORD.findall(t)})


def _state_options(kind: str, backend: Backend, call_args: Mapping[str, Any], value: Any,
                   pools: ConfigPools) -> tuple | None:
    """The values of a kind at the call (file-system names and enums aside: see :func:`slots`), or None if the
    kind has no source here (its class is not in the task)."""
    inst = backend.instances
    if kind == "ticker" and "TradingBot" in inst:
        return tuple(sorted(inst["TradingBot"].stocks))
    if kind == "order_id" and "TradingBot" in inst:
        return tuple(sorted(k for k in inst["TradingBot"].orders if isinstance(k, int)))
    if kind == "sector":
        return SECTORS
    if kind == "company":
        return COMPANIES
    if kind in ("message_user_id", "message_user_name") and "MessageAPI" in inst:
        users = inst["MessageAPI"].user_map
        return tuple(sorted(users.values() if kind == "message_user_id" else users))
    if kind == "message_word" and "MessageAPI" in inst:
        return tuple(_words(t for m in inst["MessageAPI"].inbox for t in m.values() if isinstance(t, str)))
    if kind == "twitter_user" and "TwitterAPI" in inst:
        tw = inst["TwitterAPI"]
        names = {tw.username, *tw.following_list, *(t["username"] for t in tw.tweets.values())}
        names |= {c["username"] for cs in tw.comments.values() for c in cs if isinstance(c, dict) and "username" in c}
        return tuple(sorted(n for n in names if isinstance(n, str)))
    if kind == "tweet_id" and "TwitterAPI" in inst:
        return tuple(sorted(k for k in inst["TwitterAPI"].tweets if isinstance(k, int)))
    if kind == "tweet_word" and "TwitterAPI" in inst:
        return tuple(_words(t["content"] for t in inst["TwitterAPI"].tweets.values()))
    if kind == "ticket_id" and "TicketAPI" in inst:
        return tuple(sorted(t["id"] for t in inst["TicketAPI"].ticket_queue if isinstance(t.get("id"), int)))
    if kind == "card_id" and "TravelAPI" in inst:
        return tuple(sorted(inst["TravelAPI"].credit_card_list))
    if kind == "booking_id" and "TravelAPI" in inst:
        return tuple(sorted(inst["TravelAPI"].booking_record))
    if kind == "airport" and "TravelAPI" in inst:
        return tuple(sorted(inst["TravelAPI"].list_all_airports()))
    if kind == "city":
        return tuple(sorted(doc_enum("get_nearest_airport_by_city", "location")))
    if kind in pools.texts:
        return pools.texts[kind]
    if kind == "fs_name_part" and "GorillaFileSystem" in inst:
        fs = inst["GorillaFileSystem"]
        start = fs._navigate_to_directory(call_args.get("path", ".")) if call_args.get("path", ".") != "." \
            else fs._current_dir
        if not _is_dir(start):
            return None
        names = set(_walk_names(start))
        names |= {EXT.sub("", n) for n in names}
        return tuple(sorted(n for n in names if len(n) >= 2 and (_ext(n) == "") == (_ext(str(value)) == "")))
    if kind == "file_phrase" and "GorillaFileSystem" in inst:
        item = inst["GorillaFileSystem"]._current_dir.contents.get(call_args.get("file_name"))
        if item is None or _is_dir(item):
            return None
        return tuple(_phrases(item.content, len(str(value).split())))
    return None


def _fs_slot(value: str, before: Any, after: Any, here: Mapping[str, Any], pools: ConfigPools) -> tuple[str, tuple]:
    """A file-system name's kind in the call's directory (``here``: its entries before the call) and its options."""
    if value in (".", "..", "/") or "/" in value:
        return FIXED, ()
    ext = _ext(value)
    if before is not None:
        if _is_dir(before):
            return "dir", tuple(sorted(n for n, it in here.items() if _is_dir(it)))
        return "file", tuple(sorted(n for n, it in here.items() if not _is_dir(it) and _ext(n) == ext))
    if after is None:
        return FIXED, ()
    if _is_dir(after):
        return "new_dir", tuple(d for d in pools.dir_names if d not in here and _ext(d) == ext)
    return "new_file", tuple(f for f in pools.file_names if f not in here and _ext(f) == ext)


def slots(task: BFCLTask, values: Sequence[Any], pools: ConfigPools) -> dict[Any, Slot]:
    """Each stated value's :class:`Slot` (values with no swappable kind left out), from one replay of the ground
    truth: each value's first call gives its kind and options, read from the backend just before (and, for a name
    the call creates, just after) that call."""
    wanted = set(values)
    backend = Backend(task)
    first: dict[Any, Slot] = {}
    table_kinds: dict[Any, set[str]] = {}
    for turn in task.ground_truth:
        for call in turn:
            fresh = [(p, v) for p, v in call.args.items()
                     if not isinstance(v, bool) and isinstance(v, (str, int, float)) and v in wanted]
            fs = backend.instances.get("GorillaFileSystem")
            here_dir = fs._current_dir if fs is not None else None
            here = _entries(here_dir) if here_dir is not None else {}
            pending = []
            for param, value in fresh:
                kind = param_kind(call.name, param)
                table_kinds.setdefault(value, set()).add(kind)
                if value in first or any(value == v for _, v, *_ in pending):
                    continue
                if kind == "fs_name" and isinstance(value, str) and here_dir is not None:
                    pending.append((param, value, here.get(value)))
                    continue
                if kind == "enum":
                    options: tuple | None = doc_enum(call.name, param)
                elif kind in GENERATED_KINDS or kind == FIXED:
                    options = ()
                else:
                    options = _state_options(kind, backend, call.args, value, pools)
                first[value] = Slot(value, call.name, param, kind if options is not None else FIXED,
                                    tuple(o for o in options or () if o != value))
                if kind in MEMBER_KINDS and value not in (options or ()):
                    first[value] = dataclasses.replace(first[value], kind=FIXED, options=())
            backend.execute(call.name, call.args)
            for param, value, before in pending:
                kind, options = _fs_slot(value, before, here_dir.contents.get(value), here, pools)
                first[value] = Slot(value, call.name, param, kind, tuple(o for o in options if o != value))
    return {v: s for v, s in first.items()
            if s.kind != FIXED and len(table_kinds[v]) == 1 and (s.options or s.kind in GENERATED_KINDS)}


# ------------------------------------------------------------------ drawing values of a slot's kind, and checking them


def _number_range(value: int | float) -> tuple[float, float]:
    if isinstance(value, int):
        return max(1, int(value * 0.5)), max(2, int(value * 1.5))
    return float(value) * 0.5, float(value) * 1.5


def _decimals(value: float) -> int:
    return len(str(value).split(".")[1]) if "." in str(value) else 0


def new_number(value: int | float, rng: np.random.Generator) -> int | float:
    """A number of the same type at the same magnitude (x0.5-1.5; a float keeps its decimals)."""
    lo, hi = _number_range(value)
    if isinstance(value, int):
        return int(rng.integers(int(lo), int(hi) + 1))
    return round(float(value) * float(rng.uniform(0.5, 1.5)), _decimals(value))


def new_date(value: str, rng: np.random.Generator) -> str:
    """Another day of the same year, written the same way (``YYYY-MM-DD``)."""
    year = datetime.date.fromisoformat(value).year
    start = datetime.date(year, 1, 1)
    days = (datetime.date(year + 1, 1, 1) - start).days
    return (start + datetime.timedelta(days=int(rng.integers(days)))).isoformat()


def draw(slot: Slot, k: int, rng: np.random.Generator, avoid_text: str = "") -> list[Any]:
    """Up to ``k`` distinct values of the slot's kind other than its own, none stated in ``avoid_text``
    (a value the question already mentions would make the rewritten question ambiguous)."""
    if slot.kind == "number":
        out: list[Any] = []
        for _ in range(4 * k):
            new = new_number(slot.value, rng)
            if new != slot.value and new not in out and str(new) not in avoid_text:
                out.append(new)
            if len(out) >= k:
                break
        return out
    if slot.kind == "date":
        try:
            candidates = {new_date(slot.value, rng) for _ in range(4 * k)}
        except (TypeError, ValueError):
            return []
        return [d for d in sorted(candidates) if d != slot.value and d not in avoid_text][:k]
    options = [o for o in slot.options if str(o) not in avoid_text]
    return [options[int(i)] for i in rng.permutation(len(options))[:k]]


def conforms(slot: Slot, new: Any) -> bool:
    """Whether ``new`` is a value of the slot's kind (what :func:`draw` may return for it, text aside)."""
    if new == slot.value or type(new) is not type(slot.value):
        return False
    if slot.kind == "number":
        lo, hi = _number_range(slot.value)
        return lo * (1 - 1e-9) <= new <= hi * (1 + 1e-9)
    if slot.kind == "date":
        try:
            return datetime.date.fromisoformat(new).year == datetime.date.fromisoformat(slot.value).year
        except ValueError:
            return False
    return new in slot.options
