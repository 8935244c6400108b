"""A hostile child's tool schema, beyond its regexes (core/patterns.py, core/tool_call.py ArgumentCheck): a `$ref`
outside the schema is never fetched, and a check that would take long (`$ref`s that fan out exponentially, a
quadratic `uniqueItems`, an error for each of 300,000 items) ends within its budget, off the event loop, as a
one-line problem the model reads."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import tool_spec

from meta_agent.core.patterns import CheckTooSlow
from meta_agent.core.tool_call import ArgumentCheck
from meta_agent.core.tools import ToolSpec

pytestmark = [pytest.mark.anyio, pytest.mark.quick]

TOO_SLOW = str(CheckTooSlow())


def spec(schema: dict[str, Any]) -> ToolSpec:
    return tool_spec({"type": "object", **schema})


@contextmanager
def counting_listener() -> Iterator[tuple[int, list[int]]]:
    """A TCP listener on 127.0.0.1 that counts the connections it accepts (and answers none)."""
    accepted: list[int] = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.05)
        stop = threading.Event()

        def accept() -> None:
            while not stop.is_set():
                try:
                    connection, _ = listener.accept()
                except TimeoutError:
                    continue
                accepted.append(1)
                connection.close()

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        try:
            yield listener.getsockname()[1], accepted
        finally:
            stop.set()
            thread.join()


@pytest.mark.parametrize("where", ["http", "file", "relative"])
async def test_a_ref_outside_the_schema_is_never_fetched(where: str, tmp_path: Path) -> None:
    local = tmp_path / "schema.json"
    local.write_text('{"type": "integer"}')
    with counting_listener() as (port, accepted):
        ref = {
            "http": f"http://127.0.0.1:{port}/latest/meta-data/iam/security-credentials/admin",
            "file": local.as_uri(),
            "relative": "schema.json",
        }[where]
        check = ArgumentCheck()
        problem = await check.checked(spec({"properties": {"q": {"$ref": ref}}}), {"q": "hello"})
    assert problem is None  # the schema cannot be used to check: the child checks its own arguments
    assert accepted == []


async def test_a_ref_inside_the_schema_still_checks() -> None:
    schema = {"$defs": {"n": {"type": "integer"}}, "properties": {"q": {"$ref": "#/$defs/n"}}}
    assert await ArgumentCheck().checked(spec(schema), {"q": "hello"}) == "q: 'hello' is not of type 'integer'"
    assert await ArgumentCheck().checked(spec(schema), {"q": 3}) is None


async def test_refs_that_fan_out_exponentially_end_within_the_budget_off_the_event_loop() -> None:
    """Each of 40 definitions refers twice to the next: 2**40 checks of "x" (days), cut at the budget."""
    defs = {f"d{n}": {"allOf": [{"$ref": f"#/$defs/d{n + 1}"}, {"$ref": f"#/$defs/d{n + 1}"}]} for n in range(40)}
    defs["d40"] = {"type": "string"}
    schema = {"$defs": defs, "properties": {"q": {"$ref": "#/$defs/d0"}}}
    turns = 0

    async def turn() -> None:
        nonlocal turns
        while True:
            await anyio.sleep(0.01)
            turns += 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn)
        with anyio.fail_after(60):
            problem = await ArgumentCheck().checked(spec(schema), {"q": "x"})
        tg.cancel_scope.cancel()
    assert problem == TOO_SLOW
    assert turns >= 10, f"the event loop turned {turns} times in the check's second"


async def test_an_error_for_each_of_300_000_items_is_not_collected() -> None:
    schema = {"properties": {"tags": {"type": "array", "items": {"type": "string"}}}}
    with anyio.fail_after(60):
        problem = await ArgumentCheck().checked(spec(schema), {"tags": [0] * 300_000})
    assert problem is not None and re.fullmatch(r"tags/1?[0-9]: 0 is not of type 'string'", problem), problem


async def test_unique_items_of_thousands_of_objects_is_checked_whole() -> None:
    schema = {"properties": {"tags": {"type": "array", "uniqueItems": True}}}
    tags: list[Any] = [{"name": f"t{n}", "n": n} for n in range(20_000)]
    with anyio.fail_after(60):
        assert await ArgumentCheck().checked(spec(schema), {"tags": tags}) is None
        tags.append({"n": 7, "name": "t7"})  # the same object as the eighth, its keys in another order
        problem = await ArgumentCheck().checked(spec(schema), {"tags": tags})
    assert problem == """tags: '{"n": 7, "name": "t7"}' appears more than once, and items must be unique"""


@pytest.mark.parametrize(
    ("items", "unique"),
    [([1, 1.0], False), ([True, 1], True), ([0, False], True), ([[1, 2], [1, 2]], False), ([[1, 2], [2, 1]], True)],
)
def test_unique_items_is_json_equality(items: list[Any], unique: bool) -> None:
    schema = {"properties": {"tags": {"type": "array", "uniqueItems": True}}}
    assert (ArgumentCheck().problem(spec(schema), {"tags": items}) is None) == unique
