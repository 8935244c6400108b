"""What the user writes: `servers.json` (servers.py) and the `META_AGENT_*` settings (settings.py)."""
