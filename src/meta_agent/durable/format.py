"""The durable-run format (durable/runs.py): what a run's DBOS record holds, and its version, which replicas give DBOS
as their `application_version`. DBOS hands a run only to a replica of the version it was recorded under, so the
replicas of two meta-agent releases of one format finish each other's runs (a rolling deploy), and a release whose
format changed leaves the older runs to the replicas of their format while any is left, then ends them as failed
(durable/runs.py says how).

A record is the run's `RunSpec` (the workflow's input), its `RunResult` (its output) and, step by step, the outcome
of each model turn (`ModelResponse`), tool call (`ToolOutcome`) and approval (`Verdict`), or the error it raised
(meta_agent.errors), all pickled; a replay meets each step by its number and name. So the format changes with any of:
which steps a run records, their order, their names, the classes pickled (their module, name and fields, down to
the last nested one) or the errors' classes. `shapes()` describes exactly those; `RECORD` is the step numbers and
names of one turn as steps.py draws them (tests/durable/test_run_format.py holds both to the code).

What bumps the format: a change in what `shapes()` says, whether or not an older record would still unpickle. Its
fingerprint then differs from the last of `FORMATS`, and a test says so with the new one, to be appended: that
append is the bump, and the only way to make it. A past entry is never edited.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import types
import typing
from typing import Any, Literal

from meta_agent import errors
from meta_agent.core.messages import ModelResponse
from meta_agent.core.result import RunResult
from meta_agent.core.run_spec import RunSpec
from meta_agent.core.tool_call import Verdict
from meta_agent.core.tools import ToolOutcome

# The steps a run records, (step number, name), for a turn of a conversation whose model asks for two calls, the
# first needing approval and the second not, then answers: the history the turn continues (a run that starts a
# conversation has none: its steps begin at the first model turn), each model turn, the approval and the tool call of
# each call, and the turn saved in its conversation. Each call draws two numbers, its approval's and its own, in the
# model's order, as soon as the answer is known (a call that needs no approval leaves the first unused); `{model}` is
# the provider's name, `{tool}` the tool's full name. A program of code mode (run_code) is no step; each call it makes,
# and its approval, is one, named as above and numbered on after the turn's drawn numbers.
RECORD = (
    (1, "history"),
    (2, "model {model}"),
    (3, "approval {tool}"),
    (4, "tool {tool}"),
    (6, "tool {tool}"),
    (7, "model {model}"),
    (8, "conversation"),
)
# What a record holds that is pickled: the workflow's input and output, and the outcome of each kind of step (the
# history's is a tuple of the messages RunResult's transcript holds; the conversation's, builtins).
RECORDED = (RunSpec, RunResult, ModelResponse, ToolOutcome, Verdict)

# The fingerprint of `shapes()` for each format, oldest first: format N is FORMATS[N - 1].
FORMATS = ("26f9a2c5452be739", "c6f1059b5afa4517")
# The durable-run format. Bumped (by appending to FORMATS) when, and only when, what a run records changes: which steps
# it records, their order or names (RECORD), the module, name or fields of a class a step's input or outcome pickles
# (ModelResponse, ToolOutcome, Verdict, RunSpec, RunResult and what they hold), or an error class a step may raise.
# Never for a release that changes none of these: its replicas and the older ones then resume each other's runs.
RUN_FORMAT = len(FORMATS)
# The version DBOS records each run under, and hands a run only to replicas of.
APPLICATION_VERSION = f"run-format-{RUN_FORMAT}"


def fingerprint() -> str:
    """The first 16 hex digits of the SHA-256 of `shapes()`."""
    return hashlib.sha256(shapes().encode()).hexdigest()[:16]


def shapes() -> str:
    """What a run's record depends on, one line each: the steps of `RECORD`, every class a record pickles (the
    `RECORDED` ones and those their fields hold, with their fields' resolved types), and the error classes a step may
    raise."""
    lines = [f"step {number}: {name}" for number, name in RECORD]
    seen: dict[str, type] = {}
    pending: list[type] = list(RECORDED)
    while pending:
        kind = pending.pop(0)
        if _name(kind) in seen:
            continue
        seen[_name(kind)] = kind
        found: list[type] = []
        lines.append(_shape(kind, found))
        pending.extend(found)
    raised = sorted(
        _name(kind) for kind in vars(errors).values() if isinstance(kind, type) and issubclass(kind, BaseException)
    )
    lines += [f"error {name}" for name in raised]
    return "\n".join(lines)


def _shape(kind: type, found: list[type]) -> str:
    """One class as pickled: its fields and their types (the classes among them added to `found`), or its members."""
    if issubclass(kind, enum.Enum):
        return f"{_name(kind)} = {', '.join(f'{member.name}={member.value!r}' for member in kind)}"
    if not dataclasses.is_dataclass(kind):
        raise TypeError(f"{_name(kind)}: a recorded shape must be a dataclass or an enum, for shapes() to follow it")
    hints = typing.get_type_hints(kind)
    fields = ", ".join(f"{f.name}: {_type(hints[f.name], found)}" for f in dataclasses.fields(kind))
    return f"{_name(kind)}({fields})"


def _type(hint: Any, found: list[type]) -> str:
    """A field's type in full (aliases resolved, Literal values spelled out), noting the classes of ours it holds."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return f"Literal[{', '.join(repr(arg) for arg in args)}]"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type(arg, found) for arg in args)
    if origin is not None:
        return f"{_name(origin)}[{', '.join(_type(arg, found) for arg in args)}]"
    if hint is Ellipsis:
        return "..."
    if hint is type(None):
        return "None"
    if isinstance(hint, type):
        if _followed(hint):
            found.append(hint)
        return _name(hint)
    return repr(hint)  # Any


def _followed(kind: type) -> bool:
    """Whether a class a field holds is a shape of its own: a dataclass or an enum, or any class of ours (which
    `_shape` refuses unless it is one of those)."""
    return dataclasses.is_dataclass(kind) or issubclass(kind, enum.Enum) or kind.__module__.startswith("meta_agent.")


def _name(kind: Any) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"
