"""Regexes from outside, matched so that none can hold the server: a model's `read_result` pattern,
and the `pattern` and `patternProperties` of a child's tool schema, which the model's arguments are checked against.

Python's `re` matches in one C call that holds the interpreter's lock: a catastrophic pattern ("(a+)+$" on a long
line of a's) stops every thread, the event loop and signal handlers included, for as long as it takes, which can be
hours. The `regex` module keeps `re`'s syntax, lets go of the lock while it matches (`concurrent=True`) and really
stops a match at its `timeout` (counted in the process's processor time: a starved process may take longer by the
clock). One check (a read_result call; the check of one call's arguments) gets BUDGET_SECONDS in all, by the clock,
across every match it makes; past it, PatternTooSlow. Compiling cannot be stopped, so a pattern's length is capped
instead (compiling takes about 5 µs a character).

The tool-argument check is jsonschema's own validator class, extended (`bounded_class`) so that every keyword that
matches a regex matches it here: `pattern`, `patternProperties` and `additionalProperties` (which looks at
patternProperties), and, for `check_schema`, the `regex` format of the schema's own patterns. jsonschema's
`unevaluatedProperties` matches patternProperties with `re` where no keyword can reach it: a schema with both is
refused by `unbounded` (the child then checks its arguments itself).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from meta_agent.shared.text import one_line

if TYPE_CHECKING:
    from jsonschema import FormatChecker
    from jsonschema.exceptions import ValidationError

BUDGET_SECONDS = 1.0  # one check's time for all its matches: far more than a sane pattern needs
MAX_PATTERN_CHARS = 10_000  # compiles in about 50 ms; no regex a model or a schema needs is longer
_COMPILED = 256  # patterns kept compiled: a schema's and a run's few, with room for many tools
_SHOWN = 80  # characters of a pattern or a value a one-line message quotes
# The schema keywords that hold a regex (the last one only together with patternProperties): a schema without any is
# checked on the event loop; with one, in a worker thread (tool_call.ArgumentCheck.checked).
REGEX_KEYWORDS = frozenset({"pattern", "patternProperties", "unevaluatedProperties"})


class Match(Protocol):
    def start(self) -> int: ...


class BadPattern(ValueError):
    """Not a regex, or one too long to compile; `str(error)` says why in one line, after the pattern's name: "is not
    a valid regex: missing ) at position 3"."""


class CheckTooSlow(Exception):
    """A check of a call's arguments spent its budget on the schema's other keywords (a quadratic `uniqueItems`,
    `$ref`s that fan out, an error for every item of a long list)."""

    def __init__(self) -> None:
        super().__init__(
            f"the tool's schema took too long to check these arguments (over {BUDGET_SECONDS:g} s); send fewer or"
            " simpler ones"
        )


class PatternTooSlow(Exception):
    """A check spent its budget; `pattern` is the one that was matching when it ran out."""

    def __init__(self, pattern: str) -> None:
        super().__init__(f"the pattern took too long (over {BUDGET_SECONDS:g} s)")
        self.pattern = pattern


@lru_cache(maxsize=_COMPILED)
def compiled(pattern: str, flags: int = 0) -> Any:
    """`pattern` compiled by the `regex` module (Python's `re` syntax).

    Raises:
        BadPattern: not a regex, or longer than MAX_PATTERN_CHARS.
    """
    if len(pattern) > MAX_PATTERN_CHARS:
        raise BadPattern(f"is too long ({len(pattern):,} characters; at most {MAX_PATTERN_CHARS:,})")
    import regex  # type: ignore[import-untyped]  # here, not at the top: most runs never match a regex from outside

    try:
        return regex.compile(pattern, flags)
    except regex.error as exc:
        raise BadPattern(f"is not a valid regex: {exc}") from None
    except (OverflowError, RecursionError, ValueError) as exc:  # e.g. a repeat count past the engine's limit
        raise BadPattern(f"is not a valid regex: {type(exc).__name__}: {exc}") from None


class Budget:
    """The time one check may spend matching, across all its matches, and checking the arguments, across all the
    schema's keywords."""

    def __init__(self, seconds: float = BUDGET_SECONDS) -> None:
        self._deadline = time.monotonic() + seconds
        self.slow: ValidationError | None = None  # the argument check's error where the budget ran out (see below)

    def spent(self) -> bool:
        return time.monotonic() > self._deadline

    def search(self, pattern: str, text: str, pos: int = 0, endpos: int | None = None, flags: int = 0) -> Match | None:
        """The first match of `pattern` in `text[pos:endpos]`, or None; without the interpreter's lock meanwhile.

        Raises:
            BadPattern: `pattern` is not a regex this takes.
            PatternTooSlow: the budget ran out, before or during this match.
        """
        found = compiled(pattern, flags)
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise PatternTooSlow(pattern)
        try:
            match: Match | None = found.search(text, pos, endpos, concurrent=True, timeout=left)
        except TimeoutError:
            raise PatternTooSlow(pattern) from None
        return match


# -- the argument check's validator -----------------------------------------------------------------------------------

# The budget of the argument check running in this context; jsonschema's keyword functions have no other way in.
_CHECK: ContextVar[Budget | None] = ContextVar("meta_agent_pattern_budget", default=None)


@contextmanager
def one_check() -> Iterator[Budget]:
    """Inside, every match of a bounded validator (bounded_class) draws on one Budget; `budget.slow` then says whether
    it ran out, as the error that says so (an error inside `not` or `anyOf` is not always among those reported)."""
    budget = Budget()
    token = _CHECK.set(budget)
    try:
        yield budget
    finally:
        _CHECK.reset(token)


def unbounded(schema: Mapping[str, Any]) -> str | None:
    """Why `schema` cannot be checked with bounded regexes, or None."""
    used = regex_keywords(schema)
    if {"unevaluatedProperties", "patternProperties"} <= used:
        return "unevaluatedProperties beside patternProperties: jsonschema would match those regexes unbounded"
    return None


# Keywords whose check may take long with little input: `$ref`s may fan out exponentially, `uniqueItems` compares items.
SLOW_KEYWORDS = frozenset({"$ref", "$dynamicRef", "uniqueItems"})
LARGE_SCHEMA_NODES = 1_000  # a schema with more objects and lists than this is checked off the event loop


def slow_to_check(schema: Any) -> bool:
    """Whether checking arguments against `schema` may take long: it has a regex, a `$ref` or `uniqueItems`, or more
    than LARGE_SCHEMA_NODES objects and lists (a walk with a stack, stopping at the first sign)."""
    stack, nodes = [schema], 0
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            if not (REGEX_KEYWORDS | SLOW_KEYWORDS).isdisjoint(node):
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        else:
            continue
        nodes += 1
        if nodes > LARGE_SCHEMA_NODES:
            return True
    return False


def regex_keywords(schema: Any) -> frozenset[str]:
    """The REGEX_KEYWORDS used anywhere in `schema` (a key of any object in it: more than used, never less). A walk
    with a stack, not recursion: a child's schema may be nested deeper than Python recurses."""
    found: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            found.update(REGEX_KEYWORDS.intersection(node))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return frozenset(found)


_BOUNDED: dict[type[Any], type[Any]] = {}


def bounded_class(cls: type[Any]) -> type[Any]:
    """jsonschema's validator class `cls` with every keyword that matches a regex matching it here, `uniqueItems` in
    linear time, and every keyword looking at the budget of `one_check` before it runs (CheckTooSlow past it)."""
    if cls not in _BOUNDED:
        from jsonschema import validators

        extend: Callable[..., type[Any]] = validators.extend  # untyped in jsonschema's stubs
        ours = {
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional,
            "uniqueItems": _unique_items,
        }
        keywords = {name: ours.get(name, check) for name, check in cls.VALIDATORS.items()}
        _BOUNDED[cls] = extend(cls, {name: _budgeted(check) for name, check in keywords.items()})
    return _BOUNDED[cls]


def no_remote_references() -> Any:
    """A `referencing` registry that retrieves nothing: a `$ref` outside the schema (a URL, a file) is unresolvable,
    so a child's schema cannot make us fetch anything (jsonschema's default would, with urllib, without a timeout)."""
    from referencing import Registry

    return Registry()  # its default retrieval fails (NoSuchResource) for every URI


def outside_references(schema: Any) -> list[str]:
    """The `$ref`s and `$dynamicRef`s of `schema` that point outside it (anything not starting with `#`)."""
    found: list[str] = []
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            found.extend(
                ref
                for key in ("$ref", "$dynamicRef")
                if isinstance(ref := node.get(key), str) and not ref.startswith("#")
            )
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _budgeted(check: Callable[..., Any]) -> Callable[..., Any]:
    """`check`, a keyword's function, refusing to start once the check's budget is spent."""

    def budgeted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        budget = _CHECK.get()
        if budget is not None and budget.spent():
            raise CheckTooSlow
        return check(validator, value, instance, schema)

    return budgeted


def _unique_items(validator: Any, unique: Any, instance: Any, _schema: Any) -> Iterator[ValidationError]:
    """jsonschema's `uniqueItems` in linear time (its own compares every pair of objects), with JSON's equality:
    1 and 1.0 are the same, true and 1 are not, the order of an object's keys does not count."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[str] = set()
    for item in instance:
        key = json.dumps(_canonical(item), sort_keys=True)
        if key in seen:
            from jsonschema.exceptions import ValidationError

            yield ValidationError(f"{_quoted(json.dumps(item))} appears more than once, and items must be unique")
            return
        seen.add(key)


def _canonical(value: Any) -> Any:
    """`value` with each whole float as the integer it equals (JSON does not tell 1.0 from 1)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(key): _canonical(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    return value


def check_schema(cls: type[Any], schema: Mapping[str, Any]) -> None:
    """`cls.check_schema`, with the schema's own regexes (format `regex`) compiled here, not by `re`.

    Raises:
        jsonschema.SchemaError: `schema` is not a valid schema of its draft.
    """
    cls.check_schema(schema, format_checker=_formats(cls))


def _formats(cls: type[Any]) -> FormatChecker:
    from jsonschema import FormatChecker

    checker = FormatChecker(formats=())
    checker.checkers = {**cls.FORMAT_CHECKER.checkers, "regex": (_compiles, BadPattern)}
    return checker


def _compiles(instance: object) -> bool:
    if isinstance(instance, str):
        compiled(instance)
    return True


def _matches(pattern: str, text: str) -> bool:
    """Raises: BadPattern, PatternTooSlow (see Budget.search)."""
    return (_CHECK.get() or Budget()).search(pattern, text) is not None


def _too_slow(exc: PatternTooSlow, what: str, path: tuple[str, ...] = ()) -> ValidationError:
    from jsonschema.exceptions import ValidationError

    error = ValidationError(
        f"the tool's schema pattern {_quoted(exc.pattern)} took too long to check this {what}"
        f" (over {BUDGET_SECONDS:g} s); send a shorter or simpler one",
        path=path,
        cause=exc,
    )
    budget = _CHECK.get()
    if budget is not None and budget.slow is None:
        budget.slow = error
    return error


def _quoted(text: str) -> str:
    return one_line(repr(text), _SHOWN)


def _pattern(validator: Any, pattern: str, instance: Any, _schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    try:
        hit = _matches(pattern, instance)
    except PatternTooSlow as exc:
        yield _too_slow(exc, "value")
        return
    if not hit:
        from jsonschema.exceptions import ValidationError

        yield ValidationError(f"{_quoted(instance)} does not match {_quoted(pattern)}")


def _pattern_properties(validator: Any, patterns: Mapping[str, Any], instance: Any, _schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for name, value in instance.items():
            try:
                hit = _matches(pattern, name)
            except PatternTooSlow as exc:
                yield _too_slow(exc, "property name", (name,))
                return
            if hit:
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _additional(validator: Any, allowed: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[Any]:
    """jsonschema's `additionalProperties`, its regexes matched here."""
    if not validator.is_type(instance, "object"):
        return
    from jsonschema.exceptions import ValidationError

    properties, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extras: list[str] = []
    for name in instance:
        try:
            if name not in properties and not any(_matches(pattern, name) for pattern in patterns):
                extras.append(name)
        except PatternTooSlow as exc:
            yield _too_slow(exc, "property name", (name,))
            return
    if validator.is_type(allowed, "object"):
        for name in extras:
            yield from validator.descend(instance[name], allowed, path=name)
    elif not allowed and extras:
        names = ", ".join(_quoted(name) for name in sorted(extras))
        if patterns:
            regexes = ", ".join(_quoted(pattern) for pattern in sorted(patterns))
            verb = "does" if len(extras) == 1 else "do"
            yield ValidationError(f"{names} {verb} not match any of the regexes: {regexes}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({names} {verb} unexpected)")
