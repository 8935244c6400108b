"""What the loop does around one tool call: argument checks, trust and approval, and shaping the result for the
model. No I/O of its own; the approver is the caller's (the MCP front asks the host's user).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import anyio
import structlog

from meta_agent.core import patterns
from meta_agent.core.messages import (
    TOO_DEEP,
    TOO_LARGE,
    ImagePart,
    Message,
    ModelResponse,
    Part,
    TextPart,
    ToolMessage,
    too_deep,
    too_large,
)
from meta_agent.core.policy import decide
from meta_agent.core.result import ErrorKind, Mode
from meta_agent.core.tools import WEBHOOKS, ToolOutcome, ToolSpec
from meta_agent.errors import summary
from meta_agent.shared.text import one_line

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

log = structlog.get_logger(__name__)

# The line `image_label` writes, as `earlier_images` reads it back: the reference and its number.
_IMAGE_LABEL = re.compile(r"\[(image-([0-9]+)): ")

# The internal tool that reads a result the run kept whole (internal/read_result.py); a run that offers it keeps
# results longer than its inline limit, and gives the model their head and a handle.
READ_RESULT = "read_result"
# What the model gets of a kept result before it reads on (about 1,000 tokens): enough to see its shape (the keys of
# a JSON document, a page's headings, a table's first rows) and to answer from it when the answer comes first.
HEAD_CHARS = 4_000
RUN_TAG_CHARS = 6  # the characters of a run's id that a handle ends with
_PATH_PART_CHARS = 60  # of a property name an argument error names
_LOGGED_CHARS = 300  # of why a schema is unusable: it may quote a pattern thousands of characters long
ERRORS_WEIGHED = 20  # of an argument check's errors, the first this many are weighed for the one the model reads
# Arguments up to this size, against a schema quick to check, are checked on the event loop: a thread's hand-off would
# cost more than the check. Larger ones, which a schema may take long over (an error each), go to a worker thread.
INLINE_CHECK_CHARS = 10_000


@dataclass(frozen=True)
class Verdict:
    """The user's answer about one call; `answer` says it in words for the audit trail. `for_run`: the user allowed
    the tool for the rest of the run (which a durable run keeps across a resume)."""

    allowed: bool
    answer: str
    for_run: bool = False


class Approver(Protocol):
    """Asks the user whether an `ask`-level tool may run."""

    def remembered(self, spec: ToolSpec) -> str | None:
        """How long the user already allowed this tool for, if they did.

        Args:
            spec: the tool the model wants to call.

        Returns:
            "for this session", "for this conversation" or "for the rest of this run"; None: ask.
        """
        ...

    async def ask(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> Verdict:
        """Ask, and wait for the answer.

        Args:
            spec: the tool the model wants to call.
            arguments: the arguments it gave.

        Returns:
            The user's answer; a deny, decline or cancel is a Verdict too, never an exception.
        """
        ...


Asking = Callable[[], Awaitable[None]]


@runtime_checkable
class DecidingApprover(Approver, Protocol):
    """An approver that decides whether to ask at all inside a step of its own (a durable run's: a replay gets the
    recorded decision back, and must not report a question nobody asks): it calls `asking` just before it really asks
    the user, and only then, instead of the loop reporting the question before every `ask`."""

    async def decide(self, spec: ToolSpec, arguments: Mapping[str, Any], asking: Asking) -> Verdict:
        """Remembered, or asked (after `asking`); never raises for a refusal."""
        ...


def blocked(spec: ToolSpec, mode: Mode, approver: Approver | None) -> str | None:
    """Why the call may not run without asking anyone, or None (it runs, or the user is to be asked)."""
    decision = decide(mode, spec.trust)
    where = f'"trust": {{"{spec.tool}": ...}} of server "{spec.server}" in servers.json' if spec.server else ""
    if spec.server == WEBHOOKS:  # a webhook's own entry has one level, not a map of patterns
        where = f'"trust" of webhook "{spec.tool}" in servers.json'
    # A level recorded with `meta-agent trust` wins over servers.json: then only the command changes it.
    by_command = spec.trust_source.startswith("meta-agent trust") or not where

    if decision == "deny":
        fix = f"`meta-agent trust {spec.name} ask`" if by_command else where
        return f"{spec.name} is blocked (trust level never, from {spec.trust_source}); a user can allow it with {fix}"
    if decision == "ask" and approver is None:
        fix = f'set "always" in {where} or ' if not by_command else ""
        return (
            f"{spec.name} needs the user's approval and this caller cannot be asked; to run it without asking, "
            f"{fix}run `meta-agent trust {spec.name} always`"
        )
    return None


def needs_approval(spec: ToolSpec, mode: Mode) -> bool:
    return decide(mode, spec.trust) == "ask"


def refusal(spec: ToolSpec, verdict: Verdict) -> str:
    return f"the user did not allow {spec.name} ({verdict.answer}); do without it, or ask the user"


def bounded(response: ModelResponse) -> ModelResponse:
    """`response` with the arguments of each call nested too deep, or too large, dropped and the call marked invalid:
    the model is told, and nothing after this (schema checks, the transcript, the trace, the structured result, a
    child) ever holds them."""
    problems = [_argument_problem(call.arguments) for call in response.tool_calls]
    if not any(problems):
        return response
    calls = tuple(
        call if problem is None else replace(call, arguments={}, invalid_arguments=problem)
        for call, problem in zip(response.tool_calls, problems, strict=True)
    )
    return replace(response, tool_calls=calls)


def _argument_problem(arguments: Mapping[str, Any]) -> str | None:
    if too_deep(arguments):
        return TOO_DEEP
    return TOO_LARGE if too_large(arguments) else None


class ArgumentCheck:
    """Validates arguments against each tool's input schema; one validator per tool, built on first use and again
    when the tool's schema changes (a child restarted with a new version).

    A schema's regexes (`pattern`, `patternProperties`) are a child's, matched against the model's arguments: they
    are matched by core/patterns.py, at most patterns.BUDGET_SECONDS for one call's check, and `checked` runs such a
    check in a worker thread, so a catastrophic pattern costs the call a one-line error and never holds the loop."""

    def __init__(self) -> None:
        self._validators: dict[str, tuple[Mapping[str, Any], Validator | None]] = {}
        self._heavy: dict[str, tuple[Mapping[str, Any], bool]] = {}  # whether each tool's schema may be slow to check

    async def checked(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> str | None:
        """`problem`, in a worker thread when it may take long (up to its budget): the schema has a regex, a `$ref`
        (which may fan out) or `uniqueItems`, or is large itself, or the arguments are."""
        schema, heavy = self._heavy.get(spec.name, (None, False))
        if schema is not spec.input_schema and schema != spec.input_schema:
            heavy = patterns.slow_to_check(spec.input_schema)
            self._heavy[spec.name] = (spec.input_schema, heavy)
        if not heavy and not too_large(arguments, INLINE_CHECK_CHARS):
            return self.problem(spec, arguments)
        return await anyio.to_thread.run_sync(partial(self.problem, spec, arguments), abandon_on_cancel=True)

    def problem(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> str | None:
        """What is wrong with `arguments`, or None. A schema that cannot be used to check (a child's bug) checks
        nothing: the child sees the arguments and answers for itself."""
        schema, validator = self._validators.get(spec.name, (None, None))
        if schema is not spec.input_schema and schema != spec.input_schema:
            validator = _validator(spec)
            self._validators[spec.name] = (spec.input_schema, validator)
        if validator is None:
            return None
        from jsonschema.exceptions import best_match  # loaded with the validator: no cost after the first call

        try:
            with patterns.one_check() as budget:
                errors: list[ValidationError] = []
                for found in validator.iter_errors(dict(arguments)):
                    errors.append(found)
                    if budget.slow is not None or len(errors) >= ERRORS_WEIGHED:  # the rest would change nothing
                        break
                error = best_match(errors) if budget.slow is None else budget.slow
        except patterns.CheckTooSlow as exc:
            return str(exc)
        except Exception as exc:  # e.g. a bad regex in a pattern: the schema fails while checking
            log.warning("schema_unusable", tool=spec.name, error=one_line(summary(exc), _LOGGED_CHARS))
            self._validators[spec.name] = (spec.input_schema, None)
            return None
        if error is None:
            return None
        # A property's name is the model's, of any length: quoted short, as the messages quote values.
        where = "/".join(one_line(str(p), _PATH_PART_CHARS) for p in error.absolute_path)
        return f"{where}: {error.message}" if where else error.message


def _validator(spec: ToolSpec) -> Validator | None:
    import jsonschema  # here, not at the top: a server that never runs a tool never pays for the import

    try:
        if (why := patterns.unbounded(spec.input_schema)) is not None:
            raise ValueError(why)
        if outside := patterns.outside_references(spec.input_schema):
            raise ValueError(f"$ref {outside[0]!r} points outside the schema, and nothing is fetched for a schema")
        cls = jsonschema.validators.validator_for(spec.input_schema, default=jsonschema.Draft202012Validator)
        patterns.check_schema(cls, dict(spec.input_schema))
        registry = patterns.no_remote_references()
        bounded: Validator = patterns.bounded_class(cls)(spec.input_schema, registry=registry)
        return bounded
    except Exception as exc:  # jsonschema raises several kinds for a broken schema
        log.warning("schema_unusable", tool=spec.name, error=one_line(summary(exc), _LOGGED_CHARS))
        return None


def for_model(
    outcome: ToolOutcome,
    *,
    accepts_images: bool,
    max_chars: int,
    image_refs: Sequence[str] = (),
    handle: str | None = None,
) -> ToolOutcome:
    """Each image named by its reference (`image_refs`, in order: a line before it, or the placeholder of a model
    that cannot take images), so the model can point at it later; an image without one as it is, or as a placeholder.

    With a `handle` (the run keeps the result's whole text under it, see `kept_text`), the text parts become one: the
    text's head and a line giving its size, the handle and how to read the rest with read_result. Without one, text
    beyond `max_chars` is cut with a marker saying how much (a run that has no read_result to offer). The names of
    images never count against the limit, as they are what lets the model reach the images of a long result."""
    parts: list[Part] = []
    budget = max_chars
    refs = iter(image_refs)
    headed = False
    for part in outcome.parts:
        if isinstance(part, ImagePart):
            ref = next(refs, None)
            if not accepts_images:
                parts.append(TextPart(text=image_label(ref or "image", part, shown=False)))
            else:
                parts.extend((TextPart(text=image_label(ref, part)), part) if ref else (part,))
            continue
        if isinstance(part, TextPart) and handle is not None:
            if not headed:  # the whole text, once, where its first part was
                parts.append(TextPart(text=headed_text(kept_text(outcome), handle, min(max_chars, HEAD_CHARS))))
                headed = True
            continue
        if isinstance(part, TextPart):
            if len(part.text) > budget:
                cut = len(part.text) - budget
                part = TextPart(text=f"{part.text[:budget]}\n[... cut {cut:,} of {len(part.text):,} characters]")
            budget = max(0, budget - len(part.text))
        parts.append(part)
    return ToolOutcome(parts=tuple(parts), is_error=outcome.is_error, error_kind=outcome.error_kind)


def kept_text(outcome: ToolOutcome) -> str:
    """A result's whole text, as the run keeps it for read_result: its text parts, one line break between two."""
    return "\n".join(part.text for part in outcome.parts if isinstance(part, TextPart))


def result_handle(number: int, run_id: str) -> str:
    """The handle of the run's `number`th kept result, `result-3@7K2QZD`: the end of the run's id tells a handle of
    another run (an earlier turn of the conversation) from one of this run that does not exist."""
    return f"result-{number}@{run_tag(run_id)}"


def run_tag(run_id: str) -> str:
    return run_id[-RUN_TAG_CHARS:]


def headed_text(text: str, handle: str, head_chars: int) -> str:
    """The head of a kept result's `text`, then the line that says what the model did not get and how to read it."""
    count = text.count("\n") + 1
    lines = f"{count:,} line{'' if count == 1 else 's'}"
    shown = min(head_chars, len(text))
    return (
        f"{text[:shown]}\n[{handle}: {len(text):,} characters, {lines}; the first {shown:,} are above. Read on"
        f' with read_result(handle="{handle}", offset={shown}), or find lines with read_result(handle="{handle}",'
        ' pattern="a regex")]'
    )


def error(text: str, kind: ErrorKind = "tool") -> ToolOutcome:
    return ToolOutcome(parts=(TextPart(text=text),), is_error=True, error_kind=kind)


def image_label(ref: str, image: ImagePart, *, shown: bool = True) -> str:
    """The line that names an image of a tool result for the model, `[image-1: image/png, 68 bytes]`; for a model that
    cannot take images it stands in for the image: `[image-1: image/png, 68 bytes, not shown]`."""
    size = len(image.data) * 3 // 4 - image.data[-2:].count("=")  # base64's length, less its padding
    return f"[{ref}: {image.mime_type}, {size} bytes{'' if shown else ', not shown'}]"


def earlier_images(history: Sequence[Message]) -> tuple[dict[str, ImagePart], int]:
    """The images of the tool results in `history` (an earlier turn of the conversation) that the model saw, by the
    reference their line gave them, and the highest number any reference there had (0: none): a run counts on from
    it, so no reference in the transcript ever names two images. An image the model got as a placeholder has no data
    left in the transcript, and no entry."""
    images: dict[str, ImagePart] = {}
    highest = 0
    for message in history:
        if not isinstance(message, ToolMessage):
            continue
        for result in message.results:
            for part, after in zip(result.parts, (*result.parts[1:], None), strict=True):
                named = _IMAGE_LABEL.match(part.text) if isinstance(part, TextPart) else None
                if named is None:
                    continue
                highest = max(highest, int(named[2]))
                if isinstance(after, ImagePart):
                    images[named[1]] = after
    return images, highest
