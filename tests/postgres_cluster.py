"""A throwaway PostgreSQL cluster for the tests, started once per session by examples/postgres/start-db (which also
loads the example's "shop" database), stopped and deleted by its stop-db; and a fresh database on it per test.

Where this machine has no PostgreSQL server binaries the tests that need one are skipped with start-db's one-line
reason, except under CI=true, where that is a failure: the CI run always exercises PostgreSQL.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
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

    def stop(self) -> None:
        """Stop the server at once, as a crash would (its clients' connections die); `start` starts it again on the
        same port, with the same data."""
        self._pg_ctl("-m", "immediate", "-w", "stop")

    def start(self) -> None:
        directory = Path(self.exported["SHOP_DB_DIR"])
        self._pg_ctl("-l", str(directory / "postgres.log"), "-w", "-t", "60", "start")

    def _pg_ctl(self, *args: str) -> None:
        """pg_ctl on this cluster, as the user that owns it (start-db, run as root, gives it to `postgres`)."""
        data = Path(self.exported["SHOP_DB_DIR"]) / "data"
        command = [str(self.binaries / "pg_ctl"), "-D", str(data), *args]
        if os.getuid() == 0 and data.owner() != "root":
            runuser = shutil.which("runuser", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
            assert runuser is not None, "runuser (util-linux) is needed to run pg_ctl as the cluster's owner"
            command = [runuser, "-u", data.owner(), "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd="/", stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr


def unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (PostgreSQL is required under CI=true)")
    pytest.skip(reason)


@contextmanager
def started_cluster() -> Iterator[Cluster]:
    """A cluster of its own, started by start-db, stopped and deleted by stop-db when the block ends."""
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


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    with started_cluster() as cluster:
        yield cluster


@pytest.fixture
def database_url(pg_cluster: Cluster) -> str:
    """A fresh database of the session's cluster (left for the cluster's deletion at the end)."""
    return pg_cluster.new_database()
