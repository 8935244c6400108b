"""What each subject chose in the tool selector (the apps, the console): tools switched off, trust levels of its own,
and the mode its task box starts in. Kept per subject (meta_agent.front.subjects) in the database, so they survive a
restart and every replica applies them to that subject's later runs (toolbox/live.py `for_run`).

A subject's choices shape only its own runs, and never past the operator's: a tool the operator set to `never`
(servers.json `trust`, `meta-agent trust`) stays `never` whatever the subject chose.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import get_args

from meta_agent.core.policy import TrustLevel
from meta_agent.core.result import Mode
from meta_agent.store.database import Database, Sql

TRUST_LEVELS: tuple[TrustLevel, ...] = get_args(TrustLevel)
MODES: tuple[Mode, ...] = get_args(Mode)


@dataclass(frozen=True, kw_only=True)
class Preferences:
    """One subject's choices: the tools it switched off, its trust level per tool, the mode of its task box.
    `unreadable`: they could not be read (the database failed), so a run applies none and asks before every tool
    that would run without asking: what the subject switched off or set to `never` is then at least asked."""

    off: frozenset[str] = frozenset()
    trust: Mapping[str, TrustLevel] = field(default_factory=dict)
    mode: Mode | None = None
    unreadable: bool = False


NONE = Preferences()
UNREADABLE = Preferences(unreadable=True)


class PreferenceStore:
    def __init__(self, database: Database) -> None:
        self.database = database

    async def of(self, owner: str) -> Preferences:
        """`owner`'s choices (none made: `NONE`).

        Raises:
            self.database.errors: the database cannot be read.
        """
        return await self.database.call(_read, owner)

    async def set_tool(self, owner: str, tool: str, *, enabled: bool | None, trust: TrustLevel | None) -> None:
        """Switch `owner`'s `tool` on or off (`enabled`) and set its trust level (`trust`); None leaves either as is.

        Raises:
            self.database.errors: the database cannot be written.
        """
        await self.database.call(_set_tool, owner, tool, enabled, trust)

    async def set_mode(self, owner: str, mode: Mode) -> None:
        """Raises:
        self.database.errors: the database cannot be written."""
        await self.database.call(_set_mode, owner, mode)


def _read(sql: Sql, owner: str) -> Preferences:
    rows = sql.all("select tool, enabled, trust from tool_preferences where owner = ?", (owner,))
    mode = sql.one("select mode from owner_preferences where owner = ?", (owner,))
    return Preferences(
        off=frozenset(str(tool) for tool, enabled, _ in rows if enabled == 0),
        trust={str(tool): level for tool, _, level in rows if level in TRUST_LEVELS},
        mode=mode[0] if mode is not None and mode[0] in MODES else None,
    )


def _set_tool(sql: Sql, owner: str, tool: str, enabled: bool | None, trust: TrustLevel | None) -> None:
    sql.execute(
        "insert into tool_preferences (owner, tool, enabled, trust) values (?, ?, ?, ?) on conflict (owner, tool) do"
        " update set enabled = coalesce(excluded.enabled, tool_preferences.enabled),"
        " trust = coalesce(excluded.trust, tool_preferences.trust)",
        (owner, tool, None if enabled is None else int(enabled), trust),
    )


def _set_mode(sql: Sql, owner: str, mode: Mode) -> None:
    sql.execute(
        "insert into owner_preferences (owner, mode) values (?, ?) on conflict (owner) do update set mode = ?",
        (owner, mode, mode),
    )
