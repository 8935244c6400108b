"""`meta-agent runs` over a shared database reads as the local user: the runs made off HTTP; `--owner SUBJECT` one
subject's, `--all` everyone's with their owners. A run of another subject is not told from the index without them. A
list of one subject's runs that is empty, or that left out other callers' runs `--all` shows, says so on stderr."""

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

    left_out = "meta-agent: runs: 1 of the 20 newest runs is other callers'; `--all` shows them\n"
    code, out, err = runs()
    assert code == 0 and out[0].endswith("(local): 1 recent run"), out
    assert [line.split()[0] for line in out[1:]] == [MINE]
    assert err == left_out
    code, out, err = runs("--owner", ALICE)
    assert code == 0 and out[0].endswith(f"({ALICE}): 1 recent run") and out[1].split()[0] == HERS, out
    assert err == left_out
    code, out, err = runs("--all")
    assert code == 0 and out[0].endswith("(every subject): 2 recent runs"), out
    assert err == ""
    owners = {line.split()[0]: line.rsplit(" ", 1)[1] for line in out[1:]}
    assert owners == {HERS: f"[{ALICE}]", MINE: f"[{LOCAL_OWNER}]"}
    code, out, err = runs("show", HERS)
    assert code != 0 and out == [] and HERS in err, (code, out, err)
    code, out, _ = runs("show", HERS, "--owner", ALICE)
    assert code == 0 and out[1] == "task: her task", out


def test_runs_say_when_all_would_show_more(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Said on stderr, where the listing on stdout stays a listing: an empty list always; a list of some runs only
    when other callers' runs were left out of the newest, which `--all` would show."""
    monkeypatch.setenv("META_AGENT_DATABASE_URL", database_url)
    monkeypatch.setenv("META_AGENT_TRACE_DIR", str(tmp_path))

    def runs(*args: str) -> tuple[list[str], str]:
        assert main(["runs", *args]) == 0
        out, err = capsys.readouterr()
        return out.splitlines(), err

    out, err = runs()  # nobody's runs yet
    assert len(out) == 1 and out[0].endswith("(local): 0 recent runs"), out
    assert err == "meta-agent: runs: `--all` shows other callers' runs\n"
    mine = [f"01RUNOFTHELOCALUSER0000{n:03d}" for n in range(20)]

    async def made() -> None:
        index = RunIndex(PostgresDatabase(database_url), "elsewhere:1:ABCDEF")
        async with index.running(HERS, "agent", "her task", owner=ALICE):  # the oldest
            pass
        for run_id in mine:
            async with index.running(run_id, "ask", "my task", owner=LOCAL_OWNER):
                pass
        index.database.close()

    anyio.run(made)
    out, err = runs()  # the 20 newest are all mine: --all would show the same
    assert len(out) == 21 and HERS not in "".join(out) and err == ""
    out, err = runs("--owner", ALICE)
    assert [line.split()[0] for line in out[1:]] == [HERS]
    assert err == "meta-agent: runs: 20 of the 20 newest runs are other callers'; `--all` shows them\n"
    out, err = runs("--owner", "sub:" + "b" * 32)  # nobody's runs: all 20 newest are others'
    assert (
        len(out) == 1 and err == "meta-agent: runs: 20 of the 20 newest runs are other callers'; `--all` shows them\n"
    )
    out, err = runs("--all")
    assert len(out) == 21 and err == ""


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
