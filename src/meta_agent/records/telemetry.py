"""OpenTelemetry spans of a run, by the GenAI and MCP semantic conventions, through the OpenTelemetry API.

An event sink like the others: spans start and end as the events come. The run is `invoke_agent meta-agent`, each
model call `chat {model}` (a CLIENT span; a fallback chain's failed call is a span of its own, naming its model),
each tool call `execute_tool {tool}`. The run's parent is the trace context its caller had (the host's, from the
request), kept in the run's spec so that a run going on in another task, or resumed elsewhere, keeps its trace; each
tool call runs with its span current, so the MCP SDK's span of a child's call, and the `traceparent` it sends the
child in `_meta`, join the run's trace.

Message contents are recorded only where the user opts in (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`),
redacted as traces are; no attribute is longer than `MAX_ATTRIBUTE_CHARS`. The API is a no-op until an SDK is set
up, so this costs next to nothing by default.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from meta_agent.core import events as ev
from meta_agent.core.messages import (
    AssistantMessage,
    Message,
    ModelRequest,
    ModelResponse,
    Part,
    SystemMessage,
    TextPart,
    ToolMessage,
    UserMessage,
)
from meta_agent.core.provider import Provider, WrappedProvider
from meta_agent.core.tool_step import ToolRunner
from meta_agent.core.tools import ProgressFn, RunContext, ToolOutcome, ToolSpec

TRACER = "meta-agent"
AGENT = "meta-agent"  # gen_ai.agent.name
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"  # the conventions' opt-in to message contents
# No attribute longer: a backend keeps a span whole, and a message or a result of megabytes never leaves the process
# (the trace file keeps what it bounds itself).
MAX_ATTRIBUTE_CHARS = 4096
# Redacted this far past the cut, so a secret the cut splits is hidden whole: a long one too (a JWT, a private key in
# a server's env), as the trace files do (trace_values._MARGIN).
_REDACT_MARGIN = 4096
# gen_ai.provider.name by the META_AGENT_MODEL prefix: the conventions' well-known names, else the prefix as it is.
PROVIDER_NAMES = {"gemini": "gcp.gemini", "sampling": "mcp.sampling"}

Redact = Callable[[str], str]


def _same(text: str) -> str:
    return text


def capture_content(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the user opted in to message contents in spans."""
    return environ.get(CAPTURE_CONTENT, "").strip().lower() == "true"


def clip(text: str, redact: Redact = _same) -> str:
    """`text` redacted and cut to `MAX_ATTRIBUTE_CHARS`, a cut one ending in `…`; valid UTF-8 (half a character,
    which JSON can escape, is `?`): OTLP cannot encode it, and a span name it cannot encode sinks its whole batch."""
    if len(text) <= MAX_ATTRIBUTE_CHARS:
        return _utf8(redact(text))
    head = redact(text[: MAX_ATTRIBUTE_CHARS + _REDACT_MARGIN])
    return _utf8(head[: MAX_ATTRIBUTE_CHARS - 1]) + "…"


def _utf8(text: str) -> str:
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


def provider_and_model(name: str) -> tuple[str, str]:
    """`openai:gpt-5.5` as gen_ai.provider.name and the model: ("openai", "gpt-5.5")."""
    prefix, _, model = name.partition(":")
    if not model:
        return prefix, prefix
    return PROVIDER_NAMES.get(prefix, prefix), model


def current_trace_context() -> dict[str, str]:
    """The current trace context as W3C `traceparent` and `tracestate` ("": none), to keep with a run."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return {"traceparent": carrier.get("traceparent", ""), "tracestate": carrier.get("tracestate", "")}


def parent_context(traceparent: str, tracestate: str = "") -> Context | None:
    """The context a kept `traceparent` names; None where there is none or it is malformed (the run then starts
    where it is: a new trace, or the current one)."""
    if not traceparent:
        return None
    carrier = {"traceparent": traceparent, **({"tracestate": tracestate} if tracestate else {})}
    try:
        context = propagate.extract(carrier)
    except (ValueError, TypeError):
        return None
    return context if trace.get_current_span(context).get_span_context().is_valid else None


class Spans:
    """One run's spans: `invoke_agent meta-agent`, with `chat {model}` and `execute_tool {tool}` children."""

    def __init__(
        self,
        *,
        conversation_id: str | None = None,
        parent: Context | None = None,
        redact: Redact = _same,
        capture: bool | None = None,
    ) -> None:
        """`parent`: the run's parent context (None: the current one); `capture`: record message contents (None:
        as `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` says)."""
        self._tracer = trace.get_tracer(TRACER)
        self._conversation_id = conversation_id
        self._parent = parent
        self._redact = redact
        self._capture = capture_content() if capture is None else capture
        self._run: Span | None = None
        self._model: Span | None = None
        self._model_name = ""  # the run's model as it is now: a fallback switches it
        self._turn: dict[str, Any] = {}  # the model turn's attributes, for the span of each model that tries it
        # the open tool spans by call id, each with its tool's name: a model may give two calls of a step one id
        self._tools: dict[str, list[tuple[str, Span]]] = {}

    async def __call__(self, event: ev.Event) -> None:
        match event:
            case ev.RunStarted():
                self._started(event)
            case ev.ModelTurnStarted(step=step, final=final):
                self._turn = {"meta_agent.step": step, "meta_agent.final": final}
                self._chat()
            case ev.ModelRequested(request=request):
                if self._capture:
                    content = self._request_content(request)
                    self._turn.update(content)  # a fallback's call of the turn is sent the same
                    if self._model is not None:
                        self._model.set_attributes(content)
            case ev.ModelSwitched(error=error, error_type=error_type, next=following):
                self._end_model(error_type or "provider_error", error)
                self._model_name = following
                self._chat()
            case ev.LimitReached(limit=limit):  # a model turn the deadline cut has no response: its span ends here
                self._end_model(str(limit), f"cut: {limit}")
            case ev.ModelResponded(response=response, input_tokens=tokens_in, output_tokens=tokens_out):
                if self._model is not None:
                    usage = {"gen_ai.usage.input_tokens": tokens_in, "gen_ai.usage.output_tokens": tokens_out}
                    self._model.set_attributes(usage)
                    if response is not None:
                        self._model.set_attributes(self._response(response))
                    self._model.end()
                    self._model = None
            case ev.ToolCallStarted():
                self._tool_started(event)
            case ev.ToolCallFinished():
                self._tool_finished(event)
            case ev.RunFinished(result=result):
                self._end(result.stop_reason, None, "")
            case ev.RunFailed(error=error, error_type=error_type):
                self._end("error", error, error_type)

    @contextmanager
    def current(self, call_id: str) -> Iterator[None]:
        """The tool call `call_id`'s span (else the run's) made current: what a child's call sends on."""
        opened = self._tools.get(call_id)
        span = opened[-1][1] if opened else self._run
        if span is None:
            yield
            return
        with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            yield

    @contextmanager
    def current_model(self) -> Iterator[None]:
        """The model call's span made current, where one is open (a tool's own model call, describe_image's, has
        none: it runs in the tool's span): an HTTP client's instrumentation of the call joins the run's trace."""
        span = self._model
        if span is None:
            yield
            return
        with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            yield

    def traced(self, runner: ToolRunner) -> ToolRunner:
        """`runner`, each call made with its span current."""
        return _TracedRunner(runner, self)

    def traced_model(self, provider: Provider) -> Provider:
        """`provider`, each call made with its `chat` span current."""
        return _TracedModel(provider, self)

    def _started(self, event: ev.RunStarted) -> None:
        self._model_name = event.model
        provider, model = provider_and_model(event.model)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT,
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "meta_agent.run_id": event.run_id,
            "meta_agent.mode": event.mode,
        }
        if self._conversation_id:
            attributes["gen_ai.conversation.id"] = self._conversation_id
        if event.fallbacks:
            attributes["meta_agent.fallbacks"] = list(event.fallbacks)
        if self._capture:
            attributes["gen_ai.input.messages"] = self._json([_message("user", [_text(event.task)])])
        self._run = self._tracer.start_span(
            f"invoke_agent {AGENT}", context=self._parent, kind=SpanKind.INTERNAL, attributes=attributes
        )

    def _chat(self) -> None:
        provider, model = provider_and_model(self._model_name)
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            **self._turn,
        }
        self._model = self._child(f"chat {model}", SpanKind.CLIENT, attributes)

    def _response(self, response: ModelResponse) -> dict[str, Any]:
        attributes: dict[str, Any] = {}
        if response.model:
            attributes["gen_ai.response.model"] = clip(response.model)
        if response.id:
            attributes["gen_ai.response.id"] = clip(response.id)
        if response.finish_reasons:
            attributes["gen_ai.response.finish_reasons"] = [clip(reason) for reason in response.finish_reasons]
        if self._capture:
            attributes["gen_ai.output.messages"] = self._json([_assistant(response.as_message())])
        return attributes

    def _request_content(self, request: ModelRequest) -> dict[str, Any]:
        return {
            "gen_ai.system_instructions": self._json([_text(request.system)]),
            "gen_ai.input.messages": self._json(_of(message) for message in request.messages),  # only what fits
        }

    def _tool_started(self, event: ev.ToolCallStarted) -> None:
        name = clip(event.name)  # a child's, or the model's for a tool there is none of: any length
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": clip(event.call_id),
            "gen_ai.tool.type": "function" if event.server is None else "extension",
            "meta_agent.step": event.step,
        }
        if event.server is not None:  # a child's tool: the MCP call it makes
            attributes["mcp.method.name"] = "tools/call"
            attributes["meta_agent.server"] = clip(event.server)
        if self._capture:
            attributes["gen_ai.tool.call.arguments"] = self._json(dict(event.arguments))
        program = self._tools.get(event.within) if event.within is not None else None  # a call of run_code's program
        span = self._child(f"execute_tool {name}", SpanKind.INTERNAL, attributes, program[-1][1] if program else None)
        self._tools.setdefault(event.call_id, []).append((event.name, span))

    def _tool_finished(self, event: ev.ToolCallFinished) -> None:
        opened = self._tools.get(event.call_id)
        if not opened:
            return
        # the call's of that name that started first (of one id and one name, which is which does not matter)
        at = next((index for index, (name, _) in enumerate(opened) if name == event.name), 0)
        span = opened.pop(at)[1]
        if not opened:
            del self._tools[event.call_id]
        span.set_attribute("meta_agent.ok", event.ok)
        if self._capture:
            span.set_attribute("gen_ai.tool.call.result", self._json(_part(part) for part in event.result))
        if not event.ok:
            span.set_attribute("error.type", "tool_error")
            span.set_status(Status(StatusCode.ERROR, clip(event.error or "tool error", self._redact)))
        span.end()

    def _child(self, name: str, kind: SpanKind, attributes: dict[str, Any], parent: Span | None = None) -> Span:
        """A span under `parent`, else under the run's."""
        parent = parent or self._run
        context = trace.set_span_in_context(parent) if parent is not None else self._parent
        return self._tracer.start_span(name, context=context, kind=kind, attributes=attributes)

    def _json(self, value: Any) -> str:
        """`value` as the JSON of a content attribute, redacted and bounded; cut before encoding, so a huge message
        or a long transcript costs no more than a short one."""
        budget = _Budget(MAX_ATTRIBUTE_CHARS + _REDACT_MARGIN)  # the encoding only adds: what is past it is cut anyway
        return clip(json.dumps(_cut(value, budget), ensure_ascii=False, default=str), self._redact)

    def _end_model(self, error_type: str, why: str) -> None:
        """End the model span that no response ended, as an error of `error_type` saying `why`."""
        if self._model is not None:
            self._model.set_attribute("error.type", error_type)
            self._model.set_status(Status(StatusCode.ERROR, clip(why, self._redact)))
            self._model.end()
            self._model = None

    def _end(self, stop_reason: str, error: str | None, error_type: str) -> None:
        for span in (span for opened in self._tools.values() for _, span in opened):
            span.set_status(Status(StatusCode.ERROR, f"run ended: {stop_reason}"))
            span.end()
        self._tools.clear()
        self._end_model(error_type or stop_reason, f"run ended: {stop_reason}")
        if self._run is not None:
            self._run.set_attribute("meta_agent.stop_reason", stop_reason)
            if error is not None:
                self._run.set_attribute("error.type", error_type or "error")
                self._run.set_status(Status(StatusCode.ERROR, clip(error, self._redact)))
            self._run.end()
            self._run = None


class _TracedRunner:
    """A tool runner whose calls run with their spans current: a child's call carries the run's trace."""

    def __init__(self, inner: ToolRunner, spans: Spans) -> None:
        self.inner = inner
        self.spans = spans

    async def call(
        self,
        spec: ToolSpec,
        arguments: Mapping[str, Any],
        on_progress: ProgressFn | None = None,
        *,
        context: RunContext,
    ) -> ToolOutcome:
        with self.spans.current(context.call_id):
            return await self.inner.call(spec, arguments, on_progress, context=context)


class _TracedModel(WrappedProvider):
    """A model whose calls run with their `chat` spans current."""

    def __init__(self, inner: Provider, spans: Spans) -> None:
        super().__init__(inner)
        self.spans = spans

    async def complete(self, request: ModelRequest) -> ModelResponse:
        with self.spans.current_model():
            return await self.inner.complete(request)


_END = object()


class _Budget:
    """Characters of content still to take into a content attribute."""

    def __init__(self, left: int) -> None:
        self.left = left

    def take(self, text: str) -> str:
        taken = text[: max(self.left, 0)]
        self.left -= max(len(taken), 1)  # each value costs at least one: an empty one too
        return taken


def _cut(value: Any, budget: _Budget) -> Any:
    """`value` with no more content than `budget` has: a string cut where the budget ends, a mapping or list ended
    there. What is past the attribute's bound is never walked, copied or encoded, however long the transcript, a
    message or an image's base64."""
    if isinstance(value, str):
        return budget.take(value)
    if isinstance(value, Mapping):
        cut: dict[str, Any] = {}
        for key, item in value.items():
            if budget.left <= 0:
                break
            cut[budget.take(str(key))] = _cut(item, budget)
        return cut
    if isinstance(value, list | tuple | Iterator):
        items, rest = [], iter(value)
        while budget.left > 0 and (item := next(rest, _END)) is not _END:  # none is taken past the budget
            items.append(_cut(item, budget))
        return items
    budget.left -= 1
    return value


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "content": text}


def _part(part: Part) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return _text(part.text)
    return {"type": "blob", "modality": "image", "mime_type": part.mime_type, "content": "(an image)"}


def _message(role: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"role": role, "parts": parts}


def _assistant(message: AssistantMessage) -> dict[str, Any]:
    parts = [_text(message.text)] if message.text else []
    parts += [
        {"type": "tool_call", "id": call.id, "name": call.name, "arguments": dict(call.arguments)}
        for call in message.tool_calls
    ]
    return _message("assistant", parts)


def _of(message: Message) -> dict[str, Any]:
    """A transcript message in the conventions' shape of input messages."""
    match message:
        case SystemMessage(text=text):
            return _message("system", [_text(text)])
        case UserMessage(parts=parts):
            return _message("user", [_part(part) for part in parts])
        case AssistantMessage():
            return _assistant(message)
        case ToolMessage(results=results):
            answers = [{"type": "tool_call_response", "id": r.call_id, "response": r.text} for r in results]
            return _message("tool", answers)
