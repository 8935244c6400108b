"""`meta-agent runs [show RUN_ID]`: recent runs, or one run told step by step, read from the trace files; with a
shared database (META_AGENT_DATABASE_URL) the list is the run index's, every replica's runs, and a run whose trace is
on another machine is told from its record there.

Runs are their callers' (meta_agent.front.auth.subjects). The command is run by whoever holds the database, as the local
user: over the database it lists, and tells from the index, the local user's runs (those made off HTTP: stdio,
`meta-agent run`, and rows from before runs had owners); `--owner SUBJECT` another subject's, `--all` everyone's,
each with its owner: whoever can connect to the database can read every row anyway, so these say outright what
psql would. A list of one subject's runs that is empty, or that left out other callers' runs `--all` would show,
says so on stderr, with `--all`. The trace files of this machine are the local user's files: read whoever's runs
they hold.

It starts no children: imported only by that command, it leaves the MCP SDK and the run records' models out of
every other command's start.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio

from meta_agent.cli.terminal import EXIT_USAGE, fail, note
from meta_agent.config.settings import Settings, load_settings
from meta_agent.core.events import (
    ApprovalAnswered,
    LimitReached,
    ModelResponded,
    ModelSwitched,
    RunFailed,
    RunFinished,
    RunStarted,
    ToolCallFinished,
)
from meta_agent.core.messages import TextPart
from meta_agent.core.result import unavailable_line
from meta_agent.errors import ConfigError
from meta_agent.records.run_history import Listing, Record, RunSummary, Trace, read, recent
from meta_agent.records.traces import default_trace_dir
from meta_agent.shared.text import first_line, one_line, plural, printable, some_of

if TYPE_CHECKING:
    from meta_agent.store.run_index import RunIndex, RunState

SHOWN = 300  # characters of a tool result or an answer shown in `runs show`
LISTED = 20  # runs in the `runs` listing of the run index
TASK_SHOWN = 60  # characters of a run's task in the `runs` listing
RUNS_NAMED = 3  # unreadable trace files named in `runs`; the count says how many more


def show_runs(args: argparse.Namespace) -> int:
    """Recent runs, or one run told step by step; read from the trace files (and the shared run index), no children
    started. What cannot be read is skipped and counted on stderr."""
    try:
        settings = load_settings()
        directory = settings.trace_dir or default_trace_dir()
        issuer = settings.auth_issuer or ""
        if args.show:
            if not args.run_id:
                return fail("runs show: give a RUN_ID (see `meta-agent runs`)", EXIT_USAGE)
            try:
                trace = read(directory, args.run_id)
            except ConfigError:
                url = settings.database_url
                if url and (state := _indexed(url, args.run_id, _owner(args, issuer))) is not None:
                    print("\n".join(printable(line) for line in indexed_account(state)))
                    return 0
                raise
            lines = account(trace)
            if settings.database_url and _unfinished(trace):  # it may have ended elsewhere since
                lines += _ended_elsewhere(settings.database_url, args.run_id, _owner(args, issuer))
            print("\n".join(printable(line) for line in lines))
            if trace.skipped:
                note(f"runs show: {plural(trace.skipped, 'unreadable record')} skipped in {args.run_id}.jsonl")
            return 0
        owners: list[str] = []
        left_out: int | None = None  # other callers' runs among the newest; None: nobody's were left out
        if settings.database_url:
            whose = _owner(args, issuer)
            where, listing, owners, left_out = _index_listing(settings.database_url, whose)
            where += f" ({whose or 'every subject'})"
        else:
            where, listing = str(directory), recent(directory)
    except ConfigError as exc:
        return fail(str(exc), EXIT_USAGE)
    print(f"{where}: {plural(len(listing.runs), 'recent run')}{_whose(settings)}")
    for index, run in enumerate(listing.runs):
        seconds = f"{run.seconds:.2f} s" if run.seconds is not None else "?"
        task = one_line(run.task, TASK_SHOWN)
        line = (
            f"  {run.run_id}  {run.started[:19]}  {run.mode:<5}  {run.stop_reason:<12}  "
            f"{plural(run.steps, 'step'):<8}  {run.tokens:>7} tokens  {seconds:>8}  {task}"
        )
        if args.all:
            line = f"{line}  [{owners[index]}]"
        print(printable(line))  # a trace's text cannot reach the terminal as control characters
        if run.error is not None:  # why it failed, on a line of its own: the columns have no room for it
            print(printable(f"    failed: {one_line(run.error, SHOWN)}"))
    if listing.skipped_files or listing.skipped_records:
        note(f"runs: {_skipped(listing)}")
    if left_out is not None and (left_out or not listing.runs):
        note(f"runs: {_others(left_out)}")
    return 0


def _whose(settings: Settings) -> str:
    """Which history the listing is, and how to read another: a trace directory is every run of this user's that
    wrote there, whichever checkout or host ran it."""
    if settings.database_url:
        return ""  # the run index names its subject instead; META_AGENT_DATABASE_URL chose it
    if settings.trace_dir:
        return " (the traces in META_AGENT_TRACE_DIR; unset, this user's)"
    return " (this user's, from every checkout and host; META_AGENT_TRACE_DIR=DIR reads the traces in DIR)"


def _others(left_out: int) -> str:
    """What `--all` would show beside the runs listed: the `left_out` runs of other callers among the newest."""
    if not left_out:
        return "`--all` shows other callers' runs"
    are = "is" if left_out == 1 else "are"
    return f"{left_out} of the {LISTED} newest runs {are} other callers'; `--all` shows them"


def _skipped(listing: Listing) -> str:
    """E.g. "2 unreadable traces and 1 unreadable record skipped (x.jsonl, y.jsonl)"."""
    files = listing.skipped_files
    counts = [plural(len(files), "unreadable trace")] if files else []
    counts += [plural(listing.skipped_records, "unreadable record")] if listing.skipped_records else []
    names = some_of(files, RUNS_NAMED)
    return f"{' and '.join(counts)} skipped" + (f" ({names})" if names else "")


def _owner(args: argparse.Namespace, issuer: str) -> str | None:
    """Whose runs the command reads over the database: `--owner`'s as the rows hold it (a verified token's subject,
    named as the identity provider names it, is digested as the server does; `issuer`, META_AGENT_AUTH_ISSUER, is
    the one its `sub` alone is of), everyone's (`--all`: None), else the local user's."""
    from meta_agent.front.auth.subjects import stored_subject
    from meta_agent.store.database import LOCAL_OWNER

    if getattr(args, "all", False):
        return None
    named = getattr(args, "owner", None)
    return stored_subject(named, issuer) if named else LOCAL_OWNER


def _index_listing(url: str, owner: str | None) -> tuple[str, Listing, list[str], int | None]:
    """`owner`'s newest runs (None: anyone's) of every replica, from the run index of the database at `url`; each
    one's owner; and how many runs of other callers the newest of anyone's hold (None for anyone's).

    Raises:
        ConfigError: the database cannot be read.
    """

    async def read(index: RunIndex) -> tuple[list[RunState], int | None]:
        states = await index.recent(LISTED, owner=owner)
        return states, None if owner is None else await index.others_among_newest(LISTED, owner=owner)

    with _index(url) as index:
        states, left_out = anyio.run(read, index)
    listing = Listing(runs=[_summary(state) for state in states])
    return index.database.label, listing, [s.owner for s in states], left_out


def _indexed(url: str, run_id: str, owner: str | None) -> RunState | None:
    with _index(url) as index:
        return anyio.run(partial(index.read, run_id, owner=owner))


@contextmanager
def _index(url: str) -> Iterator[RunIndex]:
    from meta_agent.store.database import PostgresDatabase
    from meta_agent.store.run_index import RunIndex

    database = PostgresDatabase(url)
    try:
        yield RunIndex(database, "meta-agent runs")
    except database.errors as exc:
        raise ConfigError(f"META_AGENT_DATABASE_URL: cannot read {database.label}: {first_line(str(exc))}") from None
    finally:
        database.close()


def _summary(state: RunState) -> RunSummary:
    result = state.result or {}
    usage = result.get("usage") or {}
    stop_reason = result.get("stop_reason") or ("error" if state.error else state.status)
    return RunSummary(
        run_id=state.run_id,
        started=state.started,
        mode=state.mode,
        task=state.task,
        status=state.status,
        stop_reason="cancelled" if state.error == "cancelled" else stop_reason,
        steps=len(result.get("steps") or ()),
        tokens=int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0)),
        seconds=usage["duration_ms"] / 1000 if "duration_ms" in usage else None,
        error=None if state.error == "cancelled" else state.error,
    )


def _unfinished(trace: Trace) -> bool:
    """Whether the run of a trace may have gone on elsewhere: it has no end, or ends cancelled, as a replica that
    stops leaves its runs for another (which resumes it, gives it up, or ends it after an upgrade)."""
    end = trace.end
    return end is None or (isinstance(end, RunFinished) and end.result.stop_reason == "cancelled")


def _ended_elsewhere(url: str, run_id: str, owner: str | None) -> list[str]:
    """How the run index says a run ended whose trace here has no end of its own (nothing, where it has not ended, or
    ended cancelled as the trace says, or the database cannot be read: the trace says what it can)."""
    try:
        state = _indexed(url, run_id, owner)
    except ConfigError:
        return []
    if state is None or state.status != "done" or state.error == "cancelled":
        return []
    return [f"then, says the run index: {line}" for line in _ending(state)]


def indexed_account(state: RunState) -> list[str]:
    """A run told from its record in the run index, where its trace is on another replica's machine: each step's
    tool calls, and how it ended."""
    lines = [
        f"run {state.run_id} · {state.mode} · {state.started} on {state.replica} (its trace is there)",
        f"task: {_short(state.task)}",
    ]
    result = state.result or {}
    for step in result.get("steps") or ():
        for call in step.get("tool_calls") or ():
            outcome = "ok" if call.get("ok") else f"error: {_short(call.get('error') or '')}"
            lines.append(f"step {step.get('index')} · {call.get('name')} {outcome} ({call.get('duration_ms')} ms)")
    return lines + _ending(state)


def _ending(state: RunState) -> list[str]:
    """How the run is, or how it ended, as the run index says."""
    result = state.result or {}
    if state.status != "done":
        return [f"{state.status} · since {state.updated}"]
    if state.error is not None:
        return [f"failed · {_short(state.error)}"]
    return [f"done · {result.get('stop_reason')}", f"answer: {_short(str(result.get('answer', '')))}"]


# -- one run told ----------------------------------------------------------------------------------------------------


def account(trace: Trace) -> list[str]:
    """A run step by step as a person reads it: what the model asked, what each tool returned, where time went."""
    lines: list[str] = []
    model_ms: list[int] = []
    tool_ms: dict[str, list[int]] = defaultdict(list)
    for record in trace.records:
        if isinstance(record.event, ModelResponded):
            model_ms.append(record.event.duration_ms)
        elif isinstance(record.event, ToolCallFinished):
            tool_ms[record.event.name].append(record.event.duration_ms)
        lines += _record_lines(record)
    if trace.end is None:
        lines.append(
            "running · a live process is still writing this trace"
            if trace.live
            else "interrupted · the process running it ended before the run did"
        )
    spent = [f"model {sum(model_ms)} ms ({plural(len(model_ms), 'call')})"]
    by_time = sorted(tool_ms.items(), key=lambda item: -sum(item[1]))
    spent += [f"{name} {sum(ms)} ms ({plural(len(ms), 'call')})" for name, ms in by_time]
    lines.append("where time went: " + ", ".join(spent))
    return lines


def _record_lines(record: Record) -> list[str]:
    """The lines of the account that one record of the trace gives; none for the kinds an account leaves out."""
    match event := record.event:
        case RunStarted():
            return _start_lines(record.ts, event)
        case ModelResponded():
            return _response_lines(event)
        case ApprovalAnswered():
            return [f"step {event.step} · {event.name}: {event.answer}"]
        case ToolCallFinished():
            text = " ".join(part.text if isinstance(part, TextPart) else f"[{part.kind}]" for part in event.result)
            state = "ok" if event.ok else "error"
            return [f"step {event.step} · {event.name} {state} ({event.duration_ms} ms)", f"  returned: {_short(text)}"]
        case LimitReached():
            return [f"step {event.step} · limit {event.limit}: last turn without tools"]
        case ModelSwitched():
            return [f"step {event.step} · {event.failed} failed ({_short(event.brief)}); went on with {event.next}"]
        case RunFinished():
            return [f"done · {event.result.stop_reason}{_spent(event)}", f"answer: {_short(event.result.answer)}"]
        case RunFailed():
            return [f"failed{_spent(event)} · {_short(event.error)}"]
    return []


def _start_lines(ts: str, started: RunStarted) -> list[str]:
    lines = [f"run {started.run_id} · {started.mode} with {started.model} · {ts}", f"task: {_short(started.task)}"]
    if started.unavailable_servers:  # the run went without their tools: a reader must not think it had them
        lines.append(f"not ready, tools left out: {_short(unavailable_line(started.unavailable_servers))}")
    return lines


def _spent(end: RunFinished | RunFailed) -> str:
    """What the run spent, as ` · 2 model calls, 1 tool call, 300 tokens`; empty for a failed run whose trace (of an
    older version) lacks what it had done."""
    if end.result is None:
        return ""
    usage = end.result.usage
    calls = f"{plural(usage.model_calls, 'model call')}, {plural(usage.tool_calls, 'tool call')}"
    return f" · {calls}, {usage.input_tokens + usage.output_tokens} tokens"


def _response_lines(responded: ModelResponded) -> list[str]:
    tokens = f"{responded.input_tokens} in / {responded.output_tokens} out tokens"
    lines = [f"step {responded.step} · model ({responded.duration_ms} ms, {tokens})"]
    response = responded.response
    thoughts = response.thinking if response is not None else ()
    asked = response.tool_calls if response is not None else ()
    lines += [f"  thought: {_short(thought.text)}" for thought in thoughts if thought.text]
    for call, name in zip(asked, responded.tool_calls, strict=False):
        lines.append(f"  asked for: {name} {_short(_json(call.arguments))}")
    if responded.text:
        lines.append(f"  said: {_short(responded.text)}")
    return lines


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (ValueError, RecursionError):  # nested about as deep as the parser allows, which the encoder may not
        return "[nested too deeply to show]"


def _short(text: str) -> str:
    return one_line(str(text), SHOWN)
