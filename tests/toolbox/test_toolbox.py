"""The toolbox: names, reversible collision-proof aliases, selection by pattern, conflicts reported."""

from __future__ import annotations

import re

import pytest
from conftest import everything_entry, fault_entry, time_entry

from meta_agent.children.pool import ChildPool
from meta_agent.config.servers import ToolFilter
from meta_agent.config.settings import Settings
from meta_agent.core.tools import ToolHints, ToolSpec
from meta_agent.engine import Engine
from meta_agent.errors import ChildDied, PatternError
from meta_agent.internal import LEFT_OUT
from meta_agent.internal.image_gen import IMAGE_GEN
from meta_agent.toolbox.build import ALIAS, Toolbox, alias_for, may_name_server, withheld_child_tools

pytestmark = pytest.mark.quick

LONG = "x" * 70


@pytest.mark.parametrize(
    ("name", "alias"),
    [
        ("image_gen", "image_gen"),
        ("time.get_current_time", "time__get_current_time"),
        ("every.get-tiny-image", "every__get-tiny-image"),
        ("my-server.do_it", "my-server__do_it"),
    ],
)
def test_plain_aliases(name: str, alias: str) -> None:
    assert alias_for(name) == alias


@pytest.mark.parametrize(
    "name",
    [
        "a.b__c",  # plain: reads back as server "a" (up to the first "__"), tool "b__c"
        "a__b.c",  # a server name with "__" is ambiguous, so it is hashed
        "a_.b",  # a server ending in "_" is ambiguous ("a___b")
        "s.tool.with.dots",  # characters LLM APIs refuse
        "s.tool/with/slashes",
        f"s.{LONG}",  # too long
        f"{LONG}.t",
        "x__y",  # an internal name with the separator
    ],
)
def test_every_alias_fits_the_llm_pattern(name: str) -> None:
    alias = alias_for(name)
    assert ALIAS.fullmatch(alias), alias
    assert alias_for(name) == alias  # stable


def test_ambiguous_names_get_distinct_aliases() -> None:
    # "a.b__c" and "a__b.c" would both be "a__b__c" as plain aliases.
    names = ["a.b__c", "a__b.c", "a_._b", "a._b", "s.t.x", "s.t_x", f"s.{LONG}1", f"s.{LONG}2"]
    aliases = [alias_for(name) for name in names]
    assert len(set(aliases)) == len(names), aliases
    assert alias_for("a__b.c").startswith("a__b__c_")
    assert alias_for("a.b__c") == "a__b__c"
    assert re.fullmatch(r"s__x{52}_[0-9a-f]{8}", alias_for(f"s.{LONG}1"))
    assert len(alias_for(f"s.{LONG}1")) == 64


def spec(name: str, *, alias: str | None = None, read_only: bool = False) -> ToolSpec:
    server, _, tool = name.rpartition(".")
    return ToolSpec(
        name=name,
        alias=alias or alias_for(name),
        server=server or None,
        tool=tool,
        description="",
        input_schema={"type": "object"},
        output_schema=None,
        hints=ToolHints(read_only_hint=read_only),
        trust="always" if read_only else "ask",
        trust_source="test",
    )


def test_a_repeated_name_is_reported_not_silently_dropped() -> None:
    box = Toolbox.of([spec("a.x"), spec("a.y"), spec("a.x")])
    assert [s.name for s in box.tools] == ["a.x", "a.y"]
    assert box.problems == ("a.x: listed twice by its server; the second one is left out",)


def test_an_alias_clash_is_reported() -> None:
    box = Toolbox.of([spec("a.x", alias="same"), spec("b.y", alias="same")])
    assert [s.name for s in box.tools] == ["a.x"]
    assert box.problems == ("b.y: model-facing name 'same' is taken by a.x; left out",)


def test_aliases_map_back_to_names() -> None:
    box = Toolbox.of([spec("a.b__c"), spec("a__b.c"), spec("image_gen")])
    assert not box.problems
    for tool in box.tools:
        assert box.by_alias[tool.alias] is tool
        assert box.by_name[tool.name] is tool


def test_selection_by_pattern_and_mode() -> None:
    box = Toolbox.of([spec("image_gen", read_only=True), spec("pg.query", read_only=True), spec("pg.drop")])
    names = lambda specs: [s.name for s in specs]  # noqa: E731
    assert names(box.select()) == ["image_gen", "pg.query", "pg.drop"]
    assert names(box.select(["pg.*"])) == ["pg.query", "pg.drop"]
    assert names(box.select(["pg.*"], mode="plan")) == ["pg.query"]
    assert names(box.select(mode="ask")) == ["image_gen"]
    assert names(box.select(["pg.drop", "image_*"])) == ["image_gen", "pg.drop"]
    assert box.select(["nothing.*"]) == []
    with pytest.raises(PatternError, match="bad pattern 'pg tools'"):
        box.select(["pg tools"])


@pytest.mark.processes
@pytest.mark.anyio
async def test_a_toolbox_of_real_children() -> None:
    servers = {
        "time": time_entry(),
        "every": everything_entry(trust={"echo": "never", "toggle-*": "always"}),
        "f": fault_entry(tools=ToolFilter(deny=("extra_*", "crash", "hang", "write_stderr", "lying", "confirm"))),
    }
    async with ChildPool(servers) as pool:
        await pool.wait_settled()
        box = Toolbox.build([IMAGE_GEN], pool)
    assert not box.problems
    assert box.tools[0].name == "image_gen" and box.tools[0].internal
    time_tool = box.by_name["time.get_current_time"]
    assert (time_tool.alias, time_tool.server, time_tool.tool) == ("time__get_current_time", "time", "get_current_time")
    assert time_tool.hints.read_only and time_tool.hints.idempotent_hint
    assert (time_tool.trust, time_tool.trust_source) == ("always", "read-only")
    assert "timezone" in time_tool.input_schema["properties"]
    assert box.by_name["every.echo"].trust == "never"
    assert box.by_name["every.toggle-simulated-logging"].trust_source == "trust 'toggle-*'"
    destructive = box.by_name["f.delete_file"]
    assert destructive.hints.destructive_hint and (destructive.trust, destructive.trust_source) == (
        "ask",
        "not read-only",
    )
    assert {s.name for s in box.tools if s.server == "f"} == {
        "f.echo",
        "f.pid",
        "f.slow",
        "f.wait_for_file",
        "f.huge",
        "f.delete_file",
        "f.append",
        "f.mutate",
        "f.grow",
        "f.peak",
        "f.image",
    }
    assert all(ALIAS.fullmatch(s.alias) for s in box.tools)


@pytest.mark.processes
@pytest.mark.anyio
async def test_tools_that_allow_and_deny_filter_out_are_known_with_why() -> None:
    rules = ToolFilter(allow=("e*", "pid", "delete_*", "hang"), deny=("delete_*", "h?ng"))
    async with ChildPool({"f": fault_entry(trust={"hang": "never"}, tools=rules)}) as pool:
        await pool.wait_settled()
        box = Toolbox.build([], pool)
        withheld = withheld_child_tools(pool)
        why = {spec.name: reason for spec, reason in withheld}
    assert [spec.name for spec in box.tools] == ["f.echo", "f.pid"]
    assert why["f.delete_file"] == "denied by tools.deny pattern 'delete_*'"
    assert why["f.hang"] == "denied by tools.deny pattern 'h?ng'"
    assert why["f.slow"] == why["f.crash"] == "not in tools.allow"
    assert set(why) == {f"f.{tool.name}" for tool in pool["f"].listed} - {"f.echo", "f.pid"}
    # described as the toolbox would describe them, never callable through it
    hang = next(spec for spec, _ in withheld if spec.name == "f.hang")
    assert (hang.alias, hang.server, hang.tool, hang.trust) == ("f__hang", "f", "hang", "never")
    assert hang.hints.read_only and "f.hang" not in box.by_name and "f__hang" not in box.by_alias


@pytest.mark.processes
@pytest.mark.anyio
async def test_a_child_that_went_down_keeps_what_it_listed_as_withheld() -> None:
    """A failed child's tools stay known, withheld saying why; a disabled child or one never ready has none."""
    servers = {
        "f": fault_entry(tools=ToolFilter(deny=("hang",))),
        "off": fault_entry(disabled=True),
        "never": fault_entry("--exit-at-start"),
    }
    async with Engine(Settings(internal_tools=""), servers, {}, restart=False) as engine:
        await engine.pool.wait_settled()
        ready = {tool["name"]: tool["enabled"] for tool in engine.toolbox.describe()["tools"]}
        with pytest.raises(ChildDied):
            await engine.pool["f"].call("crash", {})
        box = engine.toolbox.describe()
        assert engine.toolbox().select() == []  # the loop sees none of them
    assert ready["f.echo"] is True and ready["f.hang"] is False
    assert {s["name"]: s["status"] for s in box["servers"]} == {"f": "failed", "off": "disabled", "never": "failed"}
    tools = {tool["name"]: tool for tool in box["tools"]}
    internal = {"image_gen", "describe_image", "read_result"}
    assert set(tools) == set(ready) == internal | {f"f.{tool.name}" for tool in engine.pool["f"].listed}
    assert all(tool["enabled"] is False for tool in tools.values())
    assert tools["image_gen"]["withheld"] == tools["describe_image"]["withheld"] == LEFT_OUT
    assert tools["f.hang"]["withheld"] == "denied by tools.deny pattern 'hang'"
    # Why it failed is the child's own status error (its words depend on whether the crash or the closed stderr was
    # seen first); the tool's row repeats it.
    [f_status] = [s for s in box["servers"] if s["name"] == "f"]
    assert f_status["error"]
    assert tools["f.echo"]["withheld"] == f"server 'f' is failed: {f_status['error']}"
    assert tools["f.echo"]["annotations"]["readOnlyHint"] is True and tools["f.echo"]["alias"] == "f__echo"


@pytest.mark.parametrize(
    ("pattern", "server", "named"),
    [
        ("time.*", "time", True),
        ("time.get_current_time", "time", True),
        ("time.*", "timer", False),
        ("time.*", "tim", False),
        ("t*", "time", True),  # a star crosses the dot
        ("*", "pg", True),
        ("*.query", "pg", True),
        ("*time*", "pg", True),  # pg.get_time would match
        ("t?me.*", "time", True),
        ("ti[lm]e.*", "time", True),
        ("ti[!m]e.*", "time", False),
        ("[]a]*", "a", True),
        ("image_gen", "image", False),  # an internal tool's name
        ("time", "time", False),
        ("time.", "time", False),  # a tool's own name is never empty
        ("pg.*", "time", False),
    ],
)
def test_which_servers_a_pattern_can_name(pattern: str, server: str, named: bool) -> None:
    """A run waits only for the children whose tools its patterns can match, whatever tools they turn out to have."""
    assert may_name_server(pattern, server) is named
