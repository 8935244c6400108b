"""Optional imports of libraries that our start does without.

Some libraries import another one where it is installed, for a feature meta-agent never uses: structlog imports rich
(and rich imports attrs and pygments) for its development renderer's tracebacks, and greenlet for a deprecated
thread-local; the MCP SDK's server imports rich for a log handler that `logging.basicConfig` then drops, once our own
handler is in place. In an environment that has them for something else, that is tens of milliseconds of every start.
`hidden` makes them unimportable for one import only, so a program that imports them later still can.

The SDK's server also imports sse_starlette, which imports uvicorn where it is installed (it is: `serve --transport
http` runs on it) only to wrap uvicorn's signal handler; the server on stdio and the other commands run no HTTP server,
and ours over HTTP takes no signals (front/http/serve.py). `WITHOUT_HTTP_SERVER` is what those commands import the SDK
without: 30 to 50 ms of their start.

Standard library only: the command line imports this before anything else.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

WITHOUT_HTTP_SERVER = ("uvicorn",)


@contextmanager
def hidden(*names: str) -> Iterator[None]:
    """`import name` raises ImportError meanwhile, for each of `names` not imported yet (one already imported is
    left alone: hiding it would change nothing)."""
    hide = [name for name in names if name not in sys.modules]
    for name in hide:
        sys.modules[name] = None  # type: ignore[assignment]  # how the import system spells "cannot be imported"
    try:
        yield
    finally:
        for name in hide:
            if sys.modules.get(name, ...) is None:
                del sys.modules[name]
