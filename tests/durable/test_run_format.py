"""The durable-run format (durable/format.py) is held to the code: the shapes a run's record pickles must have the
fingerprint of the latest format, so that a change to them cannot ship without a new format; and a real run's DBOS
record has the steps, numbers and names that `RECORD` (part of those shapes) says."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import FAULT_SERVER, openai_env
from fake_llm import FakeLLM, openai_reply
from postgres_cluster import Cluster

from meta_agent.config.servers import ServerEntry
from meta_agent.config.settings import Settings
from meta_agent.core.tool_call import Verdict
from meta_agent.core.tools import ToolSpec
from meta_agent.durable import format as run_format
from meta_agent.engine import Engine


@pytest.mark.quick
def test_the_recorded_shapes_are_those_of_the_latest_format() -> None:
    found = run_format.fingerprint()
    assert found == run_format.FORMATS[-1], (
        "the shapes a durable run records changed (run_format.shapes()): runs recorded by the replicas of the last "
        f"release cannot be replayed by this code. Append {found!r} to FORMATS in durable/format.py (a new format), "
        "and say so in CHANGELOG.md"
    )
    assert len(set(run_format.FORMATS)) == len(run_format.FORMATS), "a format's fingerprint was given to another"
    assert len(run_format.FORMATS) == run_format.RUN_FORMAT
    assert f"run-format-{run_format.RUN_FORMAT}" == run_format.APPLICATION_VERSION


def recorded(*inner: tuple[str, type]) -> type:
    """A shape `Outer` whose field holds `Inner`s with the fields `inner`."""
    kind = dataclasses.make_dataclass("Inner", inner, frozen=True)
    return dataclasses.make_dataclass("Outer", [("inner", tuple[kind, ...])], frozen=True)  # type: ignore[valid-type]


@pytest.mark.quick
def test_the_fingerprint_follows_a_field_of_a_nested_shape_and_a_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """A field added one level down, or a step renamed, is a new fingerprint; the same shapes, the same one."""
    monkeypatch.setattr(run_format, "RECORDED", (recorded(("text", str)),))
    before = run_format.fingerprint()
    monkeypatch.setattr(run_format, "RECORDED", (recorded(("text", str)),))
    assert run_format.fingerprint() == before
    assert "Inner(text: builtins.str)" in run_format.shapes()
    monkeypatch.setattr(run_format, "RECORDED", (recorded(("text", str), ("more", int)),))
    widened = run_format.fingerprint()
    assert widened != before
    assert "Inner(text: builtins.str, more: builtins.int)" in run_format.shapes()
    monkeypatch.setattr(run_format, "RECORD", (*run_format.RECORD[:-1], (6, "last model {model}")))
    assert "step 6: last model {model}" in run_format.shapes()
    assert run_format.fingerprint() != widened


class Plain:
    pass


@dataclasses.dataclass(frozen=True)
class HoldsPlain:
    plain: Plain


@pytest.mark.quick
def test_a_recorded_class_the_fingerprint_cannot_follow_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A class of ours that is neither a dataclass nor an enum would be named without its fields: refused, not
    fingerprinted by half."""
    monkeypatch.setattr(Plain, "__module__", "meta_agent.elsewhere")
    monkeypatch.setattr(run_format, "RECORDED", (HoldsPlain,))
    with pytest.raises(TypeError, match=r"meta_agent\.elsewhere\.Plain: a recorded shape must be a dataclass"):
        run_format.fingerprint()


class Allowing:
    """The user allows every call they are asked about."""

    def remembered(self, spec: ToolSpec) -> str | None:
        return None

    async def ask(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> Verdict:
        return Verdict(True, "allowed once")


@pytest.mark.anyio
async def test_a_runs_record_has_the_steps_the_format_says(
    database_url: str, pg_cluster: Cluster, llm: FakeLLM, tmp_path: Path
) -> None:
    settings = Settings(model="openai:fake-model", database_url=database_url, trace_dir=tmp_path)
    servers = {"f": ServerEntry(command=sys.executable, args=[str(FAULT_SERVER)])}
    asks = ("c1", "f__delete_file", {"path": "/a"})  # destructive: asked about
    reads = ("c2", "f__echo", {"text": "hi"})  # read-only: allowed without asking
    llm.reply(openai_reply("Noted."))
    llm.reply(openai_reply(None, asks, reads))
    llm.reply(openai_reply("Done."))
    async with Engine(settings, servers, openai_env(llm)) as engine:
        with anyio.fail_after(60):
            first = await engine.run("Remember /a.", mode="agent")
            conversation = first.conversation_id
            result = await engine.run(
                "Delete it and say hi.", mode="agent", approver=Allowing(), conversation_id=conversation
            )
    assert result.answer == "Done." and result.conversation_id == conversation is not None
    [(model, _)] = result.usage.models.items()
    recorded = pg_cluster.psql(
        database_url,
        "select function_id, function_name from dbos.operation_outputs"
        f" where workflow_uuid = '{result.run_id}' order by function_id",
    )
    tools = iter(("f.delete_file", "f.delete_file", "f.echo"))
    expected = [
        f"{number}|{name.format(model=model, tool=next(tools)) if '{tool}' in name else name.format(model=model)}"
        for number, name in run_format.RECORD
    ]
    assert recorded.splitlines() == expected
