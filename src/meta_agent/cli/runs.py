"""`meta-agent runs [show RUN_ID]`: recent runs, or one run told step by step, read from the trace files.

It starts no children: imported only by that command, it leaves the MCP SDK and the run records' models out of
every other command's start.
"""

from __future__ import annotations

import argparse

from meta_agent.cli.terminal import EXIT_USAGE, fail, note
from meta_agent.config import load_settings
from meta_agent.errors import ConfigError
from meta_agent.records.runs import Listing, account, read, recent
from meta_agent.records.tracing import default_trace_dir
from meta_agent.text import one_line, plural

TASK_SHOWN = 60  # characters of a run's task in the `runs` listing
RUNS_NAMED = 3  # unreadable trace files named in `runs`; the count says how many more


def show_runs(args: argparse.Namespace) -> int:
    """Recent runs, or one run told step by step; read from the trace files, no children started. What cannot be
    read is skipped and counted on stderr."""
    try:
        settings = load_settings()
        directory = settings.trace_dir or default_trace_dir()
        if args.show:
            if not args.run_id:
                return fail("runs show: give a RUN_ID (see `meta-agent runs`)", EXIT_USAGE)
            trace = read(directory, args.run_id)
            print("\n".join(account(trace)))
            if trace.skipped:
                note(f"runs show: {plural(trace.skipped, 'unreadable record')} skipped in {args.run_id}.jsonl")
            return 0
        listing = recent(directory)
    except ConfigError as exc:
        return fail(str(exc), EXIT_USAGE)
    print(f"{directory}: {plural(len(listing.runs), 'recent run')}")
    for run in listing.runs:
        seconds = f"{run.seconds:.2f} s" if run.seconds is not None else "?"
        task = one_line(run.task, TASK_SHOWN)
        print(
            f"  {run.run_id}  {run.started[:19]}  {run.mode:<5}  {run.stop_reason:<12}  "
            f"{plural(run.steps, 'step'):<8}  {run.tokens:>7} tokens  {seconds:>8}  {task}"
        )
    if listing.skipped_files or listing.skipped_records:
        note(f"runs: {_skipped(listing)}")
    return 0


def _skipped(listing: Listing) -> str:
    """E.g. "2 unreadable traces and 1 unreadable record skipped (x.jsonl, y.jsonl)"."""
    files = listing.skipped_files
    counts = [plural(len(files), "unreadable trace")] if files else []
    counts += [plural(listing.skipped_records, "unreadable record")] if listing.skipped_records else []
    names = ", ".join(files[:RUNS_NAMED]) + (", ..." if len(files) > RUNS_NAMED else "")
    return f"{' and '.join(counts)} skipped" + (f" ({names})" if names else "")
