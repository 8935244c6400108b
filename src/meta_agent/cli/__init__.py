"""The command line: `meta-agent serve|run|tools|check|trust|runs` and what they print.

Importing it first imports structlog without the libraries it would import for features meta-agent never uses
(meta_agent.shared.unimported): rich and greenlet, a tenth of a second of every command's start in an environment that
has them for something else.
"""

from meta_agent.shared.unimported import hidden

with hidden("rich", "greenlet"):
    import structlog  # noqa: F401
