"""The apps' package data as files: self-contained documents that name no network place and stay small, whose code
puts data into the DOM only as text."""

from __future__ import annotations

import re

import pytest
from app_host import STATIC, VIEWS, assemble

pytestmark = pytest.mark.quick

# What would make a document reach the network: an absolute URL, or a scheme-relative one (`//host`). A `//` comment
# in the scripts is followed by a space.
NETWORK = re.compile(r"https?://|(?<![:\w])//[A-Za-z0-9\[]")
MAX_DOCUMENT = 1024 * 1024  # the contract's bound on one assembled document
AIM = 100 * 1024  # what the contract aims for
# What the scripts must never do with data: markup from strings, code from strings, handlers as attributes.
FORBIDDEN = re.compile(
    r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setAttribute\(\s*[\"']on"
)


SOURCES = sorted(path.name for path in STATIC.iterdir() if path.suffix in (".js", ".css", ".html"))
SCRIPTS = [name for name in SOURCES if name.endswith(".js")]


def test_the_sources_are_there() -> None:
    assert "page.html" in SOURCES and "app.css" in SOURCES and "base.js" in SCRIPTS


@pytest.mark.parametrize("name", SOURCES)
def test_no_file_names_a_network_place(name: str) -> None:
    text = (STATIC / name).read_text(encoding="utf-8")
    assert NETWORK.findall(text) == []


@pytest.mark.parametrize("view", VIEWS)
def test_each_document_is_whole_and_small(view: str) -> None:
    document = assemble(view)
    assert "/*INLINE:" not in document
    assert f'<body data-view="{view}">' in document
    assert len(document.encode()) <= AIM <= MAX_DOCUMENT
    assert NETWORK.findall(document) == []


def test_the_inlined_code_cannot_close_its_element_early() -> None:
    script = "".join((STATIC / name).read_text(encoding="utf-8") for name in SCRIPTS).lower()
    style = (STATIC / "app.css").read_text(encoding="utf-8").lower()
    assert "</script" not in script and "<!--" not in script
    assert "</style" not in style


def test_the_code_makes_no_markup_and_runs_no_strings() -> None:
    for name in SCRIPTS:
        assert FORBIDDEN.findall((STATIC / name).read_text(encoding="utf-8")) == [], name
