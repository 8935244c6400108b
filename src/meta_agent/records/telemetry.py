"""OpenTelemetry spans for a run, each model call and each tool call, through the OpenTelemetry API.

An event sink like the others: spans start and end as the events come. The API is a no-op until the user installs
an SDK and configures an exporter, so this costs next to nothing by default.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from meta_agent.core import events as ev

TRACER = "meta-agent"


class Spans:
    """One run's spans: `meta_agent.run`, with `meta_agent.model` and `meta_agent.tool` children."""

    def __init__(self) -> None:
        self._tracer = trace.get_tracer(TRACER)
        self._run: Span | None = None
        self._model: Span | None = None
        self._tools: dict[str, Span] = {}

    async def __call__(self, event: ev.Event) -> None:
        match event:
            case ev.RunStarted(run_id=run_id, mode=mode, model=model):
                attributes = {"meta_agent.run_id": run_id, "meta_agent.mode": mode, "gen_ai.request.model": model}
                self._run = self._tracer.start_span("meta_agent.run", attributes=attributes)
            case ev.ModelTurnStarted(step=step, final=final):
                self._model = self._child("meta_agent.model", {"meta_agent.step": step, "meta_agent.final": final})
            case ev.LimitReached(limit=limit):  # a model turn the deadline cut has no response: its span ends here
                self._end_model(f"cut: {limit}")
            case ev.ModelResponded(input_tokens=tokens_in, output_tokens=tokens_out):
                if self._model is not None:
                    self._model.set_attribute("gen_ai.usage.input_tokens", tokens_in)
                    self._model.set_attribute("gen_ai.usage.output_tokens", tokens_out)
                    self._model.end()
                    self._model = None
            case ev.ToolCallStarted(step=step, call_id=call_id, name=name):
                self._tools[call_id] = self._child(
                    "meta_agent.tool", {"meta_agent.step": step, "meta_agent.tool": name}
                )
            case ev.ToolCallFinished(call_id=call_id, ok=ok, error=error):
                span = self._tools.pop(call_id, None)
                if span is not None:
                    span.set_attribute("meta_agent.ok", ok)
                    if not ok:
                        span.set_status(Status(StatusCode.ERROR, error or "tool error"))
                    span.end()
            case ev.RunFinished(result=result):
                self._end(result.stop_reason, None)
            case ev.RunFailed(error=error):
                self._end("error", error)

    def _child(self, name: str, attributes: dict[str, Any]) -> Span:
        context = trace.set_span_in_context(self._run) if self._run is not None else None
        return self._tracer.start_span(name, context=context, attributes=attributes)

    def _end_model(self, why: str) -> None:
        """End the model span that no response ended, as an error saying `why`."""
        if self._model is not None:
            self._model.set_status(Status(StatusCode.ERROR, why))
            self._model.end()
            self._model = None

    def _end(self, stop_reason: str, error: str | None) -> None:
        for span in self._tools.values():
            span.set_status(Status(StatusCode.ERROR, f"run ended: {stop_reason}"))
            span.end()
        self._tools.clear()
        self._end_model(f"run ended: {stop_reason}")
        if self._run is not None:
            self._run.set_attribute("meta_agent.stop_reason", stop_reason)
            if error is not None:
                self._run.set_status(Status(StatusCode.ERROR, error))
            self._run.end()
            self._run = None
