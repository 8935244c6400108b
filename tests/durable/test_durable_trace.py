"""A durable run keeps its trace: its replica killed in the middle of it, the replica that resumes it exports the
rest of the run (a new `invoke_agent` span, its model call and its tool call) in the trace of the host's request that
started it, which the run's spec kept; over OTLP/HTTP to the tests' own receiver."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import http_serving, without_otel
from fake_llm import FakeLLM, openai_reply
from opentelemetry import context as otel_context
from opentelemetry import propagate
from otlp_receiver import OtlpReceiver
from postgres_cluster import Cluster
from replicas import done_run, replica, replica_environ
from test_durable import run_until_killed, servers_json

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otel extra is not installed")
pytestmark = pytest.mark.anyio

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


async def test_a_resumed_run_goes_on_in_the_trace_that_started_it(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    changes = tmp_path / "changes.txt"
    config = servers_json(tmp_path)
    llm.reply(openai_reply(None, ("c1", "f__append", {"path": str(changes), "text": "changed"})))
    llm.reply(openai_reply(None, ("c2", "f__slow", {"seconds": 1.5, "steps": 3})))
    llm.reply(openai_reply("All done."))
    with OtlpReceiver() as receiver:
        environ = replica_environ(llm, database_url, tmp_path)
        base = without_otel(environ)
        common = {**base, "META_AGENT_LEASE_SECONDS": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
        doomed_env = {**common, "OTEL_SERVICE_NAME": "replica-doomed"}
        other_env = {**common, "OTEL_SERVICE_NAME": "replica-other"}
        # the host calls within its trace (its SDK's span of the call, sent in `_meta`, is in TRACE_ID's trace)
        host = otel_context.attach(propagate.extract({"traceparent": TRACEPARENT}))
        try:
            with replica(config, doomed_env) as (doomed, doomed_url, _), http_serving(config, other_env) as (other, _):
                await run_until_killed(doomed_url, "Change it, then wait.", "step 1 of 3", doomed)
                run_id = pg_cluster.psql(database_url, "select id from runs")
                run = await done_run(f"{other}/mcp", run_id)
                assert run["error"] is None and run["result"]["answer"] == "All done.", run
        finally:
            otel_context.detach(host)
        # the other replica stopped (SIGTERM): what it had was flushed on the way out
        resumed = [span for span in receiver.spans if span.service == "replica-other"]
    [agent] = [span for span in resumed if span.name == "invoke_agent meta-agent"]
    assert agent.attributes["meta_agent.run_id"] == run_id
    assert agent.trace_id == TRACE_ID and agent.parent_span_id  # under the doomed replica's span of the request
    # the resumed part of the run: the slow call made again and the last model call, within the resumed run's span
    [tool] = [span for span in resumed if span.name == "execute_tool f.slow"]
    chats = [span for span in resumed if span.name == "chat fake-model"]
    assert chats and all(span.trace_id == TRACE_ID and span.parent_span_id == agent.span_id for span in chats)
    assert tool.trace_id == TRACE_ID and tool.parent_span_id == agent.span_id
