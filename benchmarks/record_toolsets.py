"""Record the tool definitions of real MCP servers from the registries into benchmarks/toolsets/ (one JSON a server).

Each server is started offline over stdio and asked for `tools/list` by the SDK's own client; the file keeps what it
answered (name, title, description, inputSchema, annotations) with the package and version it came from. The
installs are not kept: make them in a scratch directory first, then point this script at it.

    npm install --ignore-scripts @modelcontextprotocol/server-github @modelcontextprotocol/server-filesystem \\
        @modelcontextprotocol/server-memory @modelcontextprotocol/server-everything \\
        @modelcontextprotocol/server-slack @modelcontextprotocol/server-postgres \\
        @modelcontextprotocol/server-puppeteer @modelcontextprotocol/server-sequential-thinking \\
        @notionhq/notion-mcp-server @playwright/mcp
    python -m venv VENV && VENV/bin/pip install mcp-server-git mcp-server-fetch mcp-server-time
    python benchmarks/record_toolsets.py --npm NPM_DIR --venv VENV [--postgres-venv VENV2] [NAME...]

(`--ignore-scripts`: puppeteer's install step downloads a browser, which listing tools does not need.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

OUT = Path(__file__).parent / "toolsets"
KEPT = ("name", "title", "description", "inputSchema", "annotations")  # what a model's request is built from
DUMMY_PG = "postgresql://bench@127.0.0.1:1/bench"  # never reached: listing tools opens no connection


@dataclass
class Source:
    """One registry package and how to start it offline."""

    package: str
    registry: str  # npm | pypi
    bin: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


SOURCES = {
    "github": Source(
        "@modelcontextprotocol/server-github", "npm", "mcp-server-github", env={"GITHUB_PERSONAL_ACCESS_TOKEN": "x"}
    ),
    "filesystem": Source("@modelcontextprotocol/server-filesystem", "npm", "mcp-server-filesystem", ["{tmp}"]),
    "memory": Source(
        "@modelcontextprotocol/server-memory", "npm", "mcp-server-memory", env={"MEMORY_FILE_PATH": "{tmp}/m.json"}
    ),
    "everything": Source("@modelcontextprotocol/server-everything", "npm", "mcp-server-everything", ["stdio"]),
    "slack": Source(
        "@modelcontextprotocol/server-slack",
        "npm",
        "mcp-server-slack",
        env={"SLACK_BOT_TOKEN": "x", "SLACK_TEAM_ID": "x"},
    ),
    "postgres": Source("@modelcontextprotocol/server-postgres", "npm", "mcp-server-postgres", [DUMMY_PG]),
    "puppeteer": Source("@modelcontextprotocol/server-puppeteer", "npm", "mcp-server-puppeteer"),
    "thinking": Source("@modelcontextprotocol/server-sequential-thinking", "npm", "mcp-server-sequential-thinking"),
    "notion": Source("@notionhq/notion-mcp-server", "npm", "notion-mcp-server"),
    "playwright": Source("@playwright/mcp", "npm", "playwright-mcp"),
    "git": Source("mcp-server-git", "pypi", "mcp-server-git", ["--repository", "{tmp}"]),
    "fetch": Source("mcp-server-fetch", "pypi", "mcp-server-fetch"),
    "time": Source("mcp-server-time", "pypi", "mcp-server-time"),
    "pgmcp": Source("postgres-mcp", "pypi", "postgres-mcp", ["--access-mode", "restricted", DUMMY_PG]),
}


def package_version(source: Source, npm: Path, venv: Path) -> str:
    """The installed version, read where the package manager put it."""
    if source.registry == "npm":
        return json.loads((npm / "node_modules" / source.package / "package.json").read_text())["version"]
    code = f"import importlib.metadata as m; print(m.version({source.package!r}))"
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def launch(source: Source, npm: Path, venv: Path, tmp: str) -> StdioServerParameters:
    args = [a.replace("{tmp}", tmp) for a in source.args]
    env = {**os.environ, **{k: v.replace("{tmp}", tmp) for k, v in source.env.items()}}
    if source.registry == "npm":  # node on the script itself, not npx: no network, and the pid is the server's
        return StdioServerParameters(
            command="node", args=[str(npm / "node_modules" / ".bin" / source.bin), *args], env=env
        )
    return StdioServerParameters(command=str(venv / "bin" / source.bin), args=args, env=env)


async def list_tools(params: StdioServerParameters) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    with open(os.devnull, "w") as quiet, anyio.fail_after(60):  # noqa: ASYNC230 (opening /dev/null does not block)
        async with Client(stdio_client(params, errlog=quiet)) as client:
            cursor = None
            while True:
                page = await client.list_tools(cursor=cursor)
                tools += [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in page.tools]
                if not (cursor := page.next_cursor):
                    return [{k: t[k] for k in KEPT if k in t} for t in tools]


async def record(name: str, source: Source, npm: Path, venv: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        await anyio.run_process(["git", "init", "-q", tmp])  # mcp-server-git wants a repository
        tools = await list_tools(launch(source, npm, venv, tmp))
    entry = {
        "server": name,
        "package": source.package,
        "registry": source.registry,
        "version": package_version(source, npm, venv),
        "tools": tools,
    }
    (OUT / f"{name}.json").write_text(json.dumps(entry, indent=1, ensure_ascii=False) + "\n")
    print(f"{name}: {len(tools)} tools from {source.package} {entry['version']}")


async def main(args: argparse.Namespace) -> None:
    OUT.mkdir(exist_ok=True)
    for name in args.names or SOURCES:
        source = SOURCES[name]
        venv = args.postgres_venv if name == "pgmcp" else args.venv
        try:
            await record(name, source, args.npm, venv)
        except Exception as error:  # one server that will not start offline must not lose the others
            print(f"{name}: not recorded ({type(error).__name__}: {error})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--npm", type=Path, required=True, help="the directory npm installed the servers into")
    parser.add_argument("--venv", type=Path, required=True, help="the venv holding the Python servers")
    parser.add_argument("--postgres-venv", type=Path, default=Path(".venv-postgres-mcp"), help="postgres-mcp's venv")
    parser.add_argument("names", nargs="*", help=f"servers to record (default all: {', '.join(SOURCES)})")
    anyio.run(main, parser.parse_args())
