"""The neutral core: the transcript, the event stream, the tool types, the limits, a run's spec and the one loop.
Nothing here imports MCP or a vendor SDK (tests/core/test_neutral_core.py holds it to that)."""
