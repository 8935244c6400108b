"""A throwaway PostgreSQL cluster for the tests, started once per session by examples/postgres/start-db (which also
loads the example's "shop" database), stopped and deleted by its stop-db; and a fresh database on it per test.

Where this machine has no PostgreSQL server binaries the tests that need one are skipped with start-db's one-line
reason, except under CI=true, where that is a failure: the CI run always exercises PostgreSQL.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit, urlunsplit

import pytest
from ulid import ULID

EXAMPLE = Path(__file__).parent.parent / "examples" / "postgres"
NO_BINARIES = 3  # start-db's exit status when this machine has no PostgreSQL server binaries


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """The running cluster: what start-db exported, and the superuser's URL of the shop database."""

    exported: dict[str, str]
    admin_url: str
    binaries: Path

    def database(self, name: str) -> str:
        """The superuser's URL of database `name` on this cluster."""
        return urlunsplit(urlsplit(self.admin_url)._replace(path=f"/{name}"))

    def psql(self, url: str, sql: str) -> str:
        """Run `sql` with psql (the test's own view of the data); its output, one value a line."""
        done = subprocess.run(
            [str(self.binaries / "psql"), "-X", "-At", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        return done.stdout.strip()

    def new_database(self) -> str:
        """A new empty database; its superuser URL."""
        name = f"t_{str(ULID()).lower()}"
        self.psql(self.admin_url, f"CREATE DATABASE {name}")
        return self.database(name)


def unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (PostgreSQL is required under CI=true)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    started = subprocess.run(
        ["bash", str(EXAMPLE / "start-db")], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    if started.returncode == NO_BINARIES:
        unavailable(started.stderr.strip())
    assert started.returncode == 0, started.stderr
    exported = dict(line.removeprefix("export ").replace("'", "").split("=", 1) for line in started.stdout.splitlines())
    directory = Path(exported["SHOP_DB_DIR"])
    try:
        yield Cluster(
            exported=exported,
            admin_url=(directory / "admin-url").read_text().strip(),
            binaries=Path((directory / ".meta-agent-example-db").read_text().strip()),  # the ones start-db used
        )
    finally:
        stopped = subprocess.run(["bash", str(EXAMPLE / "stop-db"), str(directory)], capture_output=True, timeout=60)
        assert stopped.returncode == 0, stopped.stderr
        assert not directory.exists()


@pytest.fixture
def database_url(pg_cluster: Cluster) -> str:
    """A fresh database of the session's cluster (left for the cluster's deletion at the end)."""
    return pg_cluster.new_database()
