"""The commands that start the children: `run`, `tools`, `check` and `trust`.

Imported only when one of them runs: the engine brings the MCP SDK and the providers with it.
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import structlog

from meta_agent.children.pool import ChildPool
from meta_agent.cli.asking import approver_for
from meta_agent.cli.terminal import (
    EXIT_FAILED,
    EXIT_USAGE,
    LiveView,
    check_line,
    fail,
    note,
    paint_for,
    print_models,
    print_toolbox,
    webhook_line,
)
from meta_agent.config.servers import ServerEntry, check_glob, webhooks_of
from meta_agent.config.settings import Settings
from meta_agent.core.tools import WEBHOOKS
from meta_agent.engine import Engine
from meta_agent.errors import ConfigError, MetaAgentError, ModelNotConfigured, PatternError, summary
from meta_agent.providers.model_check import ModelVerdict, check_models
from meta_agent.records.otel_setup import exported
from meta_agent.shared.text import plural
from meta_agent.store import trustfile
from meta_agent.toolbox.build import Toolbox, definition_of, may_name_server
from meta_agent.toolbox.missing import why_missing

log = structlog.get_logger(__name__)


@exported
async def run_task(args: argparse.Namespace, settings: Settings, servers: dict[str, ServerEntry]) -> int:
    try:
        allow = [check_glob(pattern) for pattern in args.allow or ()]
    except ValueError as exc:
        return fail(f"allow: {exc}", EXIT_USAGE)
    if args.code and args.mode == "ask":
        return fail("--code: ask mode is one model turn with no program to run; use --mode agent or plan", EXIT_USAGE)
    view = LiveView(sys.stderr)
    approver = approver_for(allow, view)
    try:
        async with Engine(settings, servers, os.environ, restart=False, trust_file=args.trust_file) as engine:
            await _check_allowed(engine, allow)
            result = await engine.run(
                args.task,
                mode=args.mode,
                patterns=args.tools,
                max_steps=args.max_steps,
                code=args.code,
                emit=view,
                approver=approver,
            )
    except (ConfigError, PatternError, ModelNotConfigured) as exc:
        return fail(str(exc), EXIT_USAGE)
    except MetaAgentError as exc:
        if view.result is None:  # no run started
            return fail(str(exc), EXIT_FAILED)
        if args.json:  # the failed run's result, stop reason error
            print(json.dumps(view.result.to_json(), indent=2))
        return fail(f"{exc} (run_id {view.result.run_id}; see meta-agent runs show {view.result.run_id})", EXIT_FAILED)
    except anyio.get_cancelled_exc_class():
        if args.json and view.result is not None:  # what was gathered before the cancel
            print(json.dumps(view.result.to_json(), indent=2))
        raise
    except BrokenPipeError:
        raise  # the reader of our output went away: `main` says nothing more
    except Exception as exc:  # a bug of ours: one line for the user, the traceback at debug level
        log.debug("run_crashed", exc_info=True)
        run = f" (run_id {view.result.run_id})" if view.result is not None else ""
        return fail(f"failed: {summary(exc)}{run}; --log-level debug shows where", EXIT_FAILED)
    for index, image in enumerate(result.images, 1):
        path = Path(f"meta-agent-{result.run_id}-{index}.{image.mime_type.split('/')[-1]}")
        await anyio.Path(path).write_bytes(base64.b64decode(image.data))
        note(f"wrote {path}")
    print(json.dumps(result.to_json(), indent=2) if args.json else result.answer)
    return 0


async def _check_allowed(engine: Engine, patterns: list[str]) -> None:
    """Each `--allow` pattern must match some tool, once the children it can name have started.

    Raises:
        PatternError: a pattern that matches no tool.
    """
    if not patterns:
        return
    named = [
        child.name
        for child in engine.pool
        if not child.entry.disabled and any(may_name_server(pattern, child.name) for pattern in patterns)
    ]
    await engine.pool.wait_settled(named)
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(spec.name, pattern) for spec in engine.toolbox().tools):
            await engine.pool.wait_settled(child.name for child in engine.pool if not child.entry.disabled)
            tools = engine.toolbox().tools  # every child's, for the line to name them
            why = why_missing(pattern, "agent", tools, (), [child.status for child in engine.pool])
            raise PatternError(f"allow: pattern {pattern!r} matches no tool{why}")


# -- tools and check -----------------------------------------------------------------------------------------------


async def list_tools(args: argparse.Namespace, settings: Settings, servers: dict[str, ServerEntry]) -> int:
    engine = Engine(
        settings, servers, os.environ, restart=False, start_timeout=args.start_timeout, trust_file=args.trust_file
    )
    toolbox = engine.toolbox
    async with engine:
        await engine.pool.wait_settled()
        if args.json:
            print(json.dumps(toolbox.describe(), indent=2))
        else:
            print_toolbox(toolbox(), engine.pool, sys.stdout, toolbox.withheld_specs())
    if toolbox.trust_problem:  # bad input, though the toolbox above shows the levels that apply meanwhile
        return fail(toolbox.trust_problem, EXIT_USAGE)
    return 0


async def check_servers(args: argparse.Namespace, settings: Settings, servers: dict[str, ServerEntry]) -> int:
    """Each child as it starts or fails, the webhooks, then the model, looked at while the children start (could a
    run start?); exit 1 when a child failed, or no model of META_AGENT_MODEL can be used."""
    out = sys.stdout
    paint = paint_for(out)
    webhooks = webhooks_of(servers)
    width = max((len(name) for name in servers), default=0)
    failed: list[str] = []
    also = f", {plural(len(webhooks), 'webhook')}" if webhooks else ""
    print(f"{args.config}: {plural(len(servers), 'server')}{also}", file=out, flush=True)
    models: list[ModelVerdict] = []
    pool = ChildPool(servers, restart=False, start_timeout=args.start_timeout)
    async with pool, anyio.create_task_group() as tg:
        tg.start_soon(_check_models, settings.model, models)  # while the children start
        for child in pool:  # in file order, each line as soon as its child has started or failed
            await child.settled.wait()
            status = child.status
            print(f"  {child.name.ljust(width)}  {check_line(status, paint)}", file=out, flush=True)
            if status.state == "failed":
                failed.append(child.name)
        # Checked when the file was read (url, headers, parameters schema); never called here: a call changes things.
        hook_width = max((len(f"{WEBHOOKS}.{name}") for name in webhooks), default=0)
        for name, entry in webhooks.items():
            print(f"  {f'{WEBHOOKS}.{name}'.ljust(hook_width)}  {webhook_line(entry, paint)}", file=out)
        problems = Toolbox.build([], pool, webhooks=pool.webhooks).problems
    for problem in problems:
        print(f"  problem: {problem}", file=out)
    print_models(settings.model, models, out)
    no_model = all(model.state == "failed" for model in models)
    if failed:
        print(f"{len(failed)} of {len(servers)} failed: {', '.join(failed)}", file=out)
    if no_model:
        print("no model of META_AGENT_MODEL can be used: see why above", file=out)
    return EXIT_FAILED if failed or no_model else 0


async def _check_models(setting: str | None, into: list[ModelVerdict]) -> None:
    into.extend(await check_models(setting, os.environ))


# -- trust ---------------------------------------------------------------------------------------------------------


async def record_trust(args: argparse.Namespace, settings: Settings, servers: dict[str, ServerEntry]) -> int:
    """Record a level for the tools a pattern matches, with their definitions' hashes; or list what is recorded."""
    path: Path = args.trust_file
    if args.level == "forget":
        return _forget(path, args.pattern)
    recorded = trustfile.load(path)
    # The tools as their servers define them now, without recorded levels in the way.
    engine = Engine(settings, servers, os.environ, restart=False, start_timeout=args.start_timeout)
    async with engine:
        await engine.pool.wait_settled()
        current = {spec.name: spec for spec in engine.toolbox().tools}
        statuses = {child.name: child.status for child in engine.pool}
    if args.pattern is None:
        _print_recorded(path, recorded, current, statuses)
        return 0
    chosen = [spec for name, spec in current.items() if fnmatch.fnmatchcase(name, args.pattern)]
    if not chosen:
        why = why_missing(args.pattern, "agent", list(current.values()), (), list(statuses.values()))
        return fail(f"trust: {args.pattern!r} matches no tool{why}", EXIT_USAGE)
    for spec in chosen:
        definition = definition_of(spec)
        recorded[spec.name] = trustfile.Recorded(level=args.level, definition=definition, recorded=trustfile.now())
    trustfile.save(path, recorded)
    print(f"{args.level}: {', '.join(spec.name for spec in chosen)} (recorded in {path})")
    return 0


def _forget(path: Path, pattern: str) -> int:
    """`trust PATTERN forget`, which also repairs a trust file nothing else will read (trustfile.forget)."""
    try:
        forgotten = trustfile.forget(path, pattern)
    except ConfigError as exc:
        return fail(str(exc), EXIT_USAGE)
    if forgotten.set_aside is not None:
        print(f"forgot every level: {path} could not be read, and is kept as {forgotten.set_aside}")
        return 0
    print(f"forgot {', '.join(forgotten.names)}")
    if forgotten.still is not None:
        return fail(forgotten.still, EXIT_USAGE)
    return 0


def _print_recorded(path: Path, recorded: dict[str, Any], current: dict[str, Any], statuses: dict[str, Any]) -> None:
    print(f"{path}: {plural(len(recorded), 'recorded level')}")
    width = max((len(name) for name in recorded), default=0)
    for name, entry in sorted(recorded.items()):
        spec = current.get(name)
        if spec is None:
            server = statuses.get(name.split(".", 1)[0])
            why = f" (server {server.state}: {server.error})" if server is not None and server.error else ""
            state = f"not applied: no such tool now{why}"
        elif definition_of(spec) != entry.definition:
            state = "not applied: the tool changed since; record it again to trust it"
        else:
            state = "applies"
        print(f"  {name.ljust(width)}  {entry.level.ljust(6)}  {entry.recorded}  {state}")
