"""`meta-agent serve` settles its heap once start-up is done, on either transport (meta_agent.shared.heap): the
collector's settings are the process's own, so this is seen from the process's log, with `--log-level debug`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import free_port

from meta_agent.shared.heap import THRESHOLDS

META_AGENT = [sys.executable, "-m", "meta_agent"]


def settled(lines: list[str]) -> dict:
    """The one `heap_settled` record of a serve's log."""
    records = [json.loads(line) for line in lines if '"heap_settled"' in line]
    assert len(records) == 1, lines
    return records[0]


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_serve_freezes_what_start_up_made_and_collects_less_often(tmp_path: Path, transport: str) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"mcpServers": {}}))
    command = [*META_AGENT, "serve", "--config", str(config), "--log-level", "debug"]
    if transport == "stdio":  # stdin closed at once: the host is gone, and serve ends
        done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, done.stderr
        lines = done.stderr.splitlines()
    else:
        command += ["--transport", "http", "--port", str(free_port())]
        serving = subprocess.Popen(command, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert serving.stderr is not None
        try:
            lines = []
            for line in serving.stderr:  # until it says it serves: the heap is settled before
                lines.append(line)
                if '"serving_http"' in line:
                    break
        finally:
            serving.terminate()
            serving.communicate(timeout=30)
    record = settled(lines)
    # the whole start-up: the MCP SDK, pydantic's schemas and meta-agent's modules are far more than this
    assert record["frozen"] > 20_000, record
    assert tuple(record["thresholds"]) == THRESHOLDS
