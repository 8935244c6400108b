"""The command line: `meta-agent serve|run|tools|check|trust|runs` and what they print.

Importing it first imports structlog without rich. structlog imports rich when it is installed (and rich imports
attrs and pygments), for the pretty tracebacks of its development renderer, which meta-agent never uses: a tenth of
a second of every command's start in an environment that has rich for something else. rich is hidden for that one
import only, so a program that imports it later still can.
"""

import sys

if "structlog" not in sys.modules and "rich" not in sys.modules:
    sys.modules["rich"] = None  # type: ignore[assignment]  # `import rich` raises ImportError meanwhile
    try:
        import structlog  # noqa: F401
    finally:
        del sys.modules["rich"]
