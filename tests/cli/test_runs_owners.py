"""`meta-agent runs` over a shared database reads as the local user: the runs made off HTTP; `--owner SUBJECT` one
subject's, `--all` everyone's with their owners. A run of another subject is not told from the index without them."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from starlette.requests import Request

from meta_agent.cli.main import main
from meta_agent.front.auth.subjects import SCOPE_KEY, STATIC_TOKEN_SUBJECT, subject_of
from meta_agent.store.database import LOCAL_OWNER, PostgresDatabase
from meta_agent.store.run_index import RunIndex

ALICE = "sub:" + "a" * 32
HERS, MINE = "01RUNOFALICE0000000000000A", "01RUNOFTHELOCALUSER000000L"


def test_runs_over_the_database_are_the_local_users_unless_an_owner_is_named(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def made() -> None:
        index = RunIndex(PostgresDatabase(database_url), "elsewhere:1:ABCDEF")
        async with index.running(HERS, "agent", "her task", owner=ALICE):
            pass
        async with index.running(MINE, "plan", "my task", owner=LOCAL_OWNER):
            pass
        index.database.close()

    anyio.run(made)
    monkeypatch.setenv("META_AGENT_DATABASE_URL", database_url)
    monkeypatch.setenv("META_AGENT_TRACE_DIR", str(tmp_path))  # no trace here: every run is told from the index

    def runs(*args: str) -> tuple[int, list[str], str]:
        code = main(["runs", *args])
        out, err = capsys.readouterr()
        return code, out.splitlines(), err

    code, out, _ = runs()
    assert code == 0 and out[0].endswith("(local): 1 recent run"), out
    assert [line.split()[0] for line in out[1:]] == [MINE]
    code, out, _ = runs("--owner", ALICE)
    assert code == 0 and out[0].endswith(f"({ALICE}): 1 recent run") and out[1].split()[0] == HERS, out
    code, out, _ = runs("--all")
    assert code == 0 and out[0].endswith("(every subject): 2 recent runs"), out
    owners = {line.split()[0]: line.rsplit(" ", 1)[1] for line in out[1:]}
    assert owners == {HERS: f"[{ALICE}]", MINE: f"[{LOCAL_OWNER}]"}
    code, out, err = runs("show", HERS)
    assert code != 0 and out == [] and HERS in err, (code, out, err)
    code, out, _ = runs("show", HERS, "--owner", ALICE)
    assert code == 0 and out[1] == "task: her task", out


def _owner_of_a_request(verified: str) -> str:
    """What the server stores as the owner of an HTTP request whose auth layer verified `verified`."""
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": [], SCOPE_KEY: verified}
    return subject_of(Request(scope), LOCAL_OWNER)


@pytest.mark.parametrize(
    ("named", "verified", "issuer"),
    [
        ("https://idp.example/realms/a#alice", "https://idp.example/realms/a#alice", ""),
        ("alice", "https://idp.example/realms/a#alice", "https://idp.example/realms/a"),
        ("https://idp.example/realms/a#alice", "https://idp.example/realms/a#alice", "https://idp.example/realms/a"),
        ("token", STATIC_TOKEN_SUBJECT, ""),
    ],
)
def test_an_owner_is_named_as_the_identity_provider_names_them(
    named: str,
    verified: str,
    issuer: str,
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An operator knows a user by the token's issuer and `sub`, not by the digest the rows hold: `--owner` takes
    those, and finds the runs the server stored for that user."""
    owner = _owner_of_a_request(verified)
    run_id = "01RUNOFANAMEDUSER000000000"

    async def made() -> None:
        index = RunIndex(PostgresDatabase(database_url), "elsewhere:1:ABCDEF")
        async with index.running(run_id, "agent", "their task", owner=owner):
            pass
        index.database.close()

    anyio.run(made)
    monkeypatch.setenv("META_AGENT_DATABASE_URL", database_url)
    monkeypatch.setenv("META_AGENT_TRACE_DIR", str(tmp_path))
    if issuer:
        monkeypatch.setenv("META_AGENT_AUTH_ISSUER", issuer)
    assert main(["runs", "--owner", named]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(f"({owner}): 1 recent run") and out[1].split()[0] == run_id, out
