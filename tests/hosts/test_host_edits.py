"""A host's file read as JSON (with comments where the host allows them) and meta-agent's entry set and removed in its
own text: every other byte stays, whatever the layout, and a round trip (install, then uninstall) gives the file back
as it was."""

from __future__ import annotations

import json
from typing import Any

import pytest

from meta_agent.hosts.edits import checked, fresh, with_entry, without_entry
from meta_agent.hosts.jsonc import JsonTextError, parse

pytestmark = pytest.mark.quick

ENTRY = {"command": "/opt/mé ta/bin/meta-agent", "args": ["serve"], "env": {"K": 'a "quoted"\nline'}}

# Files of every layout a user or a host writes: each keeps its bytes around the entry.
LAYOUTS = {
    "indented": '{\n  "mcpServers": {\n    "fs": {"command": "npx"}\n  },\n  "theme": "dark"\n}\n',
    "tabs": '{\n\t"mcpServers": {\n\t\t"fs": {\n\t\t\t"command": "npx"\n\t\t}\n\t}\n}',
    "crlf": '{\r\n    "mcpServers": {\r\n        "fs": {"command": "npx"}\r\n    }\r\n}\r\n',
    "one line": '{"mcpServers": {"fs": {"command": "npx"}}, "x": [1, {"y": null}]}',
    "empty map": '{\n  "mcpServers": {},\n  "globalShortcut": "Ctrl+Space"\n}\n',
    "no map": '{\n  "numStartups": 12,\n  "projects": {"/a": {"mcpServers": {}}}\n}\n',
    "empty object": "{}",
    "comments": (
        '{\n  // servers of mine\n  "mcpServers": {\n    "fs": {"command": "npx"}, // files\n'
        "    /* more to come */\n  },\n}\n"
    ),
    "trailing comma": '{\n  "mcpServers": {\n    "fs": {"command": "npx"},\n  },\n}\n',
    "comment in empty map": '{"mcpServers": { // none yet\n}}',
    "trailing commas inside": '{\n  "mcpServers": {\n    "fs": {"command": "npx", "args": ["a",],},\n  },\n}\n',
    "comment before a comma": '{"mcpServers": {"fs": {"command": "npx"} /* c */ , "b": {}}, "z": 1 // end\n}',
    "non-ascii": '{\n  "mcpServers": {\n    "données": {"command": "/home/José/bin/s"}\n  }\n}\n',
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_setting_then_removing_the_entry_gives_the_file_back_byte_for_byte(layout: str) -> None:
    text = LAYOUTS[layout]
    document = parse(text, comments=True)
    added = with_entry(document, "mcpServers", "meta-agent", ENTRY)
    value = parse(added, comments=True).value
    expected = json.loads(json.dumps(document.value))
    expected.setdefault("mcpServers", {})["meta-agent"] = ENTRY
    assert value == expected, added
    removed = without_entry(parse(added, comments=True), "mcpServers", "meta-agent")
    if layout in ("no map", "empty object"):  # the map it added stays, empty
        assert parse(removed, comments=True).value == {**document.value, "mcpServers": {}}
    elif layout == "comment in empty map":  # the comment stays, on a line of its own
        assert removed == '{"mcpServers": {\n   // none yet\n}}'
    else:
        assert removed == text


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_character_of_the_file_stays_in_its_order(layout: str) -> None:
    """The file's text is the new text less what was inserted: nothing of it is moved, rewritten or dropped."""
    text = LAYOUTS[layout]
    added = with_entry(parse(text, comments=True), "mcpServers", "meta-agent", ENTRY)
    left = iter(added)
    assert all(char in left for char in text), added  # `text` is a subsequence of `added`
    for comment in ("// servers of mine", "// files", "/* more to come */", "// none yet"):
        assert (comment in added) == (comment in text)


def test_a_second_set_replaces_the_value_in_place() -> None:
    text = '{\n  "mcpServers": {\n    "meta-agent": {"command": "old"},\n    "fs": {"command": "npx"}\n  }\n}\n'
    again = with_entry(parse(text, comments=False), "mcpServers", "meta-agent", {"command": "new"})
    assert (
        again
        == '{\n  "mcpServers": {\n    "meta-agent": {\n      "command": "new"\n    },\n    "fs": {"command": "npx"}\n  }\n}\n'
    )


def test_the_new_member_follows_the_files_indentation_and_line_breaks() -> None:
    added = with_entry(parse(LAYOUTS["crlf"], comments=False), "mcpServers", "m", {"a": [1]})
    assert '        "m": {\r\n            "a": [\r\n                1\r\n            ]\r\n        }\r\n    }' in added
    assert "\n" not in added.replace("\r\n", "")
    tabs = with_entry(parse(LAYOUTS["tabs"], comments=False), "mcpServers", "m", {"a": 1})
    assert '\t\t"m": {\n\t\t\t"a": 1\n\t\t}\n\t}' in tabs


def test_removing_the_last_member_takes_the_comma_before_it() -> None:
    text = '{\n  "mcpServers": {\n    "fs": {"command": "npx"}, // files\n    "meta-agent": {"command": "m"}\n  }\n}'
    removed = without_entry(parse(text, comments=True), "mcpServers", "meta-agent")
    assert removed == '{\n  "mcpServers": {\n    "fs": {"command": "npx"} // files\n  }\n}'


def test_strings_with_quotes_and_line_breaks_round_trip() -> None:
    added = fresh("servers", "meta-agent", ENTRY)
    assert parse(added, comments=False).value == {"servers": {"meta-agent": ENTRY}}
    assert "mé ta" in added  # written as it is, not escaped


@pytest.mark.parametrize(
    ("text", "comments", "problem"),
    [
        ('{"a": 1,}', False, "a trailing comma at line 1 column 8, which this file may not have"),
        ('{\n  // hi\n  "a": 1}', False, "a comment at line 2 column 3, which this file may not have"),
        ('{"a": 1} {"b": 2}', True, "Extra data at line 1 column 10"),
        ('{"a": tru}', True, "Expecting value at line 1 column 7"),
        ('{"a": 1, "a": 2}', True, "the key 'a' appears twice in one object (a host reads only one of them)"),
        ("[1, 2]", True, "expected a JSON object ({...}) as the whole file"),
        ('{"a": "no end}', True, "a string that does not end on its line, at line 1 column 7"),
        ('{"a": 1 /* open', True, "a comment that is never closed, at line 1 column 9"),
        ('{"a": {"b": 1}', True, "Expecting ',' delimiter at line 1 column 15"),
        ('{"a" 1}', True, "Expecting ':' delimiter at line 1 column 6"),
        ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", True, "nested too deeply"),
    ],
)
def test_what_is_not_json_is_one_line_saying_where(text: str, comments: bool, problem: str) -> None:
    with pytest.raises(JsonTextError) as caught:
        parse(text, comments=comments)
    assert str(caught.value) == problem


def test_a_change_that_would_alter_more_than_the_entry_is_refused() -> None:
    """The net under the edits: the text is parsed again and must hold exactly what was meant."""
    expected: dict[str, Any] = {"mcpServers": {"meta-agent": {"command": "m"}}}
    assert checked('{"mcpServers": {"meta-agent": {"command": "m"}}}', comments=False, expected=expected)
    with pytest.raises(JsonTextError, match="would alter more than meta-agent's entry"):
        checked('{"mcpServers": {"meta-agent": {"command": "m"}}, "x": 1}', comments=False, expected=expected)
    with pytest.raises(JsonTextError, match="would not be valid"):
        checked('{"mcpServers": {"meta-agent": {"command": "m"},}}', comments=False, expected=expected)
