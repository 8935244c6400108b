"""The pages of meta-agent's face: the run view, the tool selector and the console's list of runs, each one
self-contained HTML document (its script and styles inline, nothing fetched from anywhere), served as MCP Apps
resources to hosts (`ui://meta-agent/run`, `ui://meta-agent/tools`) and as the web console's pages (`/ui`).

The sources are package data beside this module (`static/`): the scripts and one style sheet for every view, and one
small shell (`page.html`). A view's page is the shell naming the view in place of its `/*VIEW*/` markers (`<body
data-view=...>`, which the script reads), with the script and styles in place of its `/*INLINE:...*/` markers; the
script itself finds out where it runs (in a host's frame, or as a console page) and talks to the server accordingly.
"""

from __future__ import annotations

import base64
import hashlib
import re
from functools import cache
from importlib.resources import files
from typing import Literal

View = Literal["run", "tools", "runs"]
MIME_TYPE = "text/html;profile=mcp-app"  # what MCP Apps hosts render
_MARKER = re.compile(r"/\*INLINE:([a-z_]+\.(?:js|css))\*/")


@cache
def page(view: View) -> str:
    """The whole document of `view`."""
    static = files("meta_agent.apps") / "static"
    shell = (static / "page.html").read_text(encoding="utf-8").replace("/*VIEW*/", view)
    return _MARKER.sub(lambda match: (static / match.group(1)).read_text(encoding="utf-8"), shell)


@cache
def inline_hashes(view: View) -> tuple[str, str]:
    """The CSP source expressions (`'sha256-…'`) of `view`'s inline script and of its inline styles: a console page's
    Content-Security-Policy allows exactly these and nothing else inline."""
    document = page(view)
    return _hash(document, "script"), _hash(document, "style")


def _hash(document: str, tag: str) -> str:
    match = re.search(f"<{tag}>(.*?)</{tag}>", document, re.DOTALL)
    body = match.group(1) if match else ""
    digest = hashlib.sha256(body.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"
