"""toolbox/missing.py: what a `tools` pattern that matches nothing is told: the real tools, the children's among them,
and the likeliest one meant. Table-driven over a toolbox of two internal tools and a `time` child."""

from __future__ import annotations

import pytest
from conftest import named_tool as spec

from meta_agent.children.supervisor import ChildStatus
from meta_agent.toolbox.missing import why_missing

pytestmark = pytest.mark.quick


INTERNAL = [spec("describe_image"), spec("read_result")]
TOOLS = [*INTERNAL, spec("time.get_current_time"), spec("time.convert_time")]
READY = [ChildStatus(name="time", transport="stdio", state="ready")]
LISTED = "the tools are: describe_image, read_result, time.get_current_time, time.convert_time"


@pytest.mark.parametrize(
    ("pattern", "told"),
    [
        ("tme.*", f" (did you mean 'time.*'? {LISTED})"),  # the case: the children's tools are named
        ("time.get_curent_time", f" (did you mean 'time.get_current_time'? {LISTED})"),
        ("tme.get_curent_*", f" (did you mean 'time.get_current_time'? {LISTED})"),
        ("nope.*", f" ({LISTED})"),  # nothing close: no guess, only the list
        ("read_reslt", f" (did you mean 'read_result'? {LISTED})"),  # an internal tool, misspelt
        ("time", " (a server's tools are named SERVER.TOOL, as `meta-agent tools` lists them: did you mean 'time.*'?)"),
        (
            "get_current_time",
            " (a server's tools are named SERVER.TOOL, as `meta-agent tools` lists them: did you mean"
            " 'time.get_current_time'?)",
        ),
        ("zzz", f" (a server's tools are named SERVER.TOOL, as `meta-agent tools` lists them; {LISTED})"),
        (
            "time__convert_time",
            " (tools are named SERVER.TOOL, as `meta-agent tools` lists them: did you mean 'time.convert_time'?)",
        ),
    ],
)
def test_the_line_names_the_real_tools_and_what_was_likely_meant(pattern: str, told: str) -> None:
    assert why_missing(pattern, "agent", TOOLS, INTERNAL[:1], READY) == told


def test_a_server_that_is_down_is_why() -> None:
    down = [ChildStatus(name="time", transport="stdio", state="failed", error="command not found: uvx")]
    told = why_missing("time.*", "agent", INTERNAL, INTERNAL[:1], down)
    assert told == " (server 'time' is failed: command not found: uvx)"


def test_ask_mode_names_its_internal_tools() -> None:
    told = why_missing("tme.*", "ask", TOOLS, INTERNAL[:1], READY)
    assert told == " of ask mode, which uses internal tools only (describe_image)"


def test_many_tools_are_listed_short() -> None:
    many = [spec(f"big.tool_{n:03}") for n in range(500)]
    servers = [ChildStatus(name="big", transport="stdio", state="ready")]
    told = why_missing("bg.tool_007", "agent", many, (), servers)
    assert told.startswith(" (did you mean 'big.tool_007'? the tools are: big.tool_000, big.tool_001,")
    assert told.endswith(", …)") and told.count("big.tool_") == 13  # the guess and twelve listed
