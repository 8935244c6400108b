"""What the server tells a host about itself in `initialize` (and 2026-07-28's `server/discover`): its instructions,
which hosts show their user or give their model; and, while servers.json cannot be used, the one line saying why, so
that the person sees it in the host (a host started on a broken file would otherwise see a server without tools, or,
before, a bare disconnect)."""

from __future__ import annotations

INSTRUCTIONS = (
    "meta-agent is an agent. `agent` carries out a task with the tools of its child MCP servers; `plan` returns a "
    "numbered plan using read-only tools only; `ask` is one model turn; `image_gen`, where listed, makes images. Long"
    " calls report progress. The resource meta-agent://toolbox lists every tool it can use;"
    " meta-agent://runs/{run_id} tells how a run is, and its result when done."
)
# Leads the line of a servers.json that cannot be used, in the instructions and in each run's answer.
CONFIG_UNUSABLE = "servers.json cannot be used: "


def instructions(config_problem: str | None) -> str:
    """The instructions, with why servers.json cannot be used where it cannot (`config_problem`, one line)."""
    return INSTRUCTIONS if config_problem is None else f"{INSTRUCTIONS} {CONFIG_UNUSABLE}{config_problem}"
