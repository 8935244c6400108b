"""`python -m meta_agent`."""

from meta_agent.cli.main import entry

entry()
