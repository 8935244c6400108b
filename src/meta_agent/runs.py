"""Reading run traces back: the list of recent runs and a readable account of one (`meta-agent runs [show ID]`)."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from meta_agent.errors import ConfigError

SHOWN = 300  # characters of a tool result or an answer shown in an account
RUN_ID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")  # a ULID


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    run_id: str
    started: str
    mode: str
    task: str
    stop_reason: str
    steps: int
    tokens: int
    seconds: float | None


def recent(directory: Path, limit: int = 20) -> list[RunSummary]:
    """The newest runs first."""
    if not directory.is_dir():
        return []
    paths = sorted(directory.glob("*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)
    return [summary for path in paths[:limit] if (summary := _summary(_records(path))) is not None]


def records(directory: Path, run_id: str) -> list[dict[str, Any]]:
    """Raises:
    ConfigError: no trace of that run in `directory`.
    """
    path = directory / f"{run_id}.jsonl"
    if not RUN_ID.fullmatch(run_id) or not path.is_file():
        raise ConfigError(f"runs: no trace of run {run_id!r} in {directory} (see `meta-agent runs`)")
    return _records(path)


def _records(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a full disk or a crash
    return out


def _summary(trace: list[dict[str, Any]]) -> RunSummary | None:
    if not trace or trace[0].get("kind") != "run_started":
        return None
    first, last = trace[0], trace[-1]
    result = last.get("result") if last.get("kind") == "run_finished" else None
    usage = (result or {}).get("usage", {})
    return RunSummary(
        run_id=first["run_id"],
        started=first["ts"],
        mode=first.get("mode", "?"),
        task=first.get("task", ""),
        stop_reason=(result or {}).get("stop_reason") or ("error" if last.get("kind") == "run_failed" else "running"),
        steps=len((result or {}).get("steps", [])),
        tokens=usage.get("input_tokens", 0) + usage.get("output_tokens", 0),
        seconds=_seconds(first["ts"], last["ts"]),
    )


def _seconds(start: str, end: str) -> float | None:
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except ValueError:
        return None


def account(trace: list[dict[str, Any]]) -> list[str]:
    """A run step by step as a person reads it: what the model asked, what each tool returned, where time went."""
    lines: list[str] = []
    model_ms: list[int] = []
    tool_ms: dict[str, list[int]] = defaultdict(list)
    for record in trace:
        kind, step = record.get("kind"), record.get("step")
        if kind == "run_started":
            lines += [
                f"run {record['run_id']} · {record['mode']} with {record['model']} · {record['ts']}",
                f"task: {record['task']}",
            ]
        elif kind == "model_responded":
            model_ms.append(record["duration_ms"])
            tokens = f"{record['input_tokens']} in / {record['output_tokens']} out tokens"
            lines.append(f"step {step} · model ({record['duration_ms']} ms, {tokens})")
            response = record.get("response") or {}
            for thought in response.get("thinking", []):
                if thought.get("text"):
                    lines.append(f"  thought: {_short(thought['text'])}")
            for call, name in zip(response.get("tool_calls", []), record.get("tool_calls", []), strict=False):
                lines.append(f"  asked for: {name} {_short(json.dumps(call['arguments']))}")
            if record.get("text"):
                lines.append(f"  said: {_short(record['text'])}")
        elif kind == "approval_answered":
            lines.append(f"step {step} · {record['name']}: {record['answer']}")
        elif kind == "tool_call_finished":
            tool_ms[record["name"]].append(record["duration_ms"])
            state = "ok" if record["ok"] else "error"
            lines.append(f"step {step} · {record['name']} {state} ({record['duration_ms']} ms)")
            text = " ".join(p.get("text", f"[{p.get('kind')}]") for p in record.get("result", []))
            lines.append(f"  returned: {_short(text)}")
        elif kind == "limit_reached":
            lines.append(f"step {step} · limit {record['limit']}: last turn without tools")
        elif kind == "run_finished":
            result = record["result"]
            usage = result["usage"]
            lines.append(
                f"done · {result['stop_reason']} · {_count(usage['model_calls'], 'model call')}, "
                f"{_count(usage['tool_calls'], 'tool call')}, {usage['input_tokens'] + usage['output_tokens']} tokens"
            )
            lines.append(f"answer: {_short(result['answer'])}")
        elif kind == "run_failed":
            lines.append(f"failed · {record['error']}")
    spent = [f"model {sum(model_ms)} ms ({_count(len(model_ms), 'call')})"]
    by_time = sorted(tool_ms.items(), key=lambda item: -sum(item[1]))
    spent += [f"{name} {sum(ms)} ms ({_count(len(ms), 'call')})" for name, ms in by_time]
    lines.append("where time went: " + ", ".join(spent))
    return lines


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _short(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= SHOWN else line[: SHOWN - 1] + "…"
