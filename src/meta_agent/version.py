"""The version of meta-agent: a plain string here, where hatch reads it ([tool.hatch.version]) and the server names it
without importlib.metadata (50 ms at every start)."""

__version__ = "0.1.0"
