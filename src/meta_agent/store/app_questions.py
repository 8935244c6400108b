"""Approvals a run's views may answer (the run view in a host, the console): each question a run asks its user is a
row until it is answered, so the view on any replica shows it and its Approve or Deny reaches the run on whichever
replica runs it.

The first answer wins, whoever gives it: the view's, or the host's own question (elicitation) where the caller has
one too. An answer is taken only by the update that finds the question still open (`settle`), in one transaction, so
two answers given at once cannot both be taken; the one that loses learns the winner's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from meta_agent.store.database import Database, Sql


@dataclass(frozen=True, kw_only=True)
class Question:
    key: str
    step: int
    name: str
    arguments: Any


@dataclass(frozen=True, kw_only=True)
class Settled:
    """The answer a question has: `allowed`, and what the user said (`answer`, as ApprovalAnswered says it)."""

    allowed: bool
    answer: str


class AppQuestions:
    def __init__(self, database: Database) -> None:
        self.database = database

    async def ask(self, run_id: str, key: str, owner: str, step: int, name: str, arguments: Any) -> None:
        """Keep an open question; `arguments` as a view shows them (records/run_feed.py `shown_arguments`: bounded).

        Raises:
            self.database.errors: the database cannot be written."""
        body = json.dumps(arguments, ensure_ascii=False, default=str)
        await self.database.call(_ask, run_id, key, owner, step, name, body)

    async def settle(self, run_id: str, key: str, owner: str | None, answer: Settled) -> tuple[Settled, bool] | None:
        """Answer `owner`'s (None: whoever's) open question `key` of `run_id` with `answer`: the answer it has now,
        and whether it is this one (else an earlier one won); None: there is no such question of `owner`'s.

        Raises:
            self.database.errors: the database cannot be reached.
        """
        return await self.database.call(_settle, run_id, key, owner, answer)

    async def answer_of(self, run_id: str, key: str) -> Settled | None:
        """The question's answer, None while it is open.

        Raises:
            self.database.errors: the database cannot be read.
        """
        return await self.database.call(_answer_of, run_id, key)

    async def pending(self, run_id: str) -> list[Question]:
        """The run's open questions, oldest first.

        Raises:
            self.database.errors: the database cannot be read.
        """
        return await self.database.call(_pending, run_id)


def _ask(sql: Sql, run_id: str, key: str, owner: str, step: int, name: str, body: str) -> None:
    sql.execute(
        "insert into app_questions (run_id, key, owner, step, name, arguments) values (?, ?, ?, ?, ?, ?)"
        " on conflict (run_id, key) do nothing",
        (run_id, key, owner, step, name, body),
    )


def _settle(sql: Sql, run_id: str, key: str, owner: str | None, answer: Settled) -> tuple[Settled, bool] | None:
    mine, args = ("", ()) if owner is None else (" and owner = ?", (owner,))
    taken = sql.execute(
        f"update app_questions set answer = ?, allowed = ? where run_id = ? and key = ?{mine} and answer is null",
        (answer.answer, int(answer.allowed), run_id, key, *args),
    )
    row = sql.one(f"select answer, allowed from app_questions where run_id = ? and key = ?{mine}", (run_id, key, *args))
    if row is None or row[0] is None:
        return None
    return Settled(allowed=bool(row[1]), answer=str(row[0])), taken == 1


def _answer_of(sql: Sql, run_id: str, key: str) -> Settled | None:
    row = sql.one("select answer, allowed from app_questions where run_id = ? and key = ?", (run_id, key))
    return None if row is None or row[0] is None else Settled(allowed=bool(row[1]), answer=str(row[0]))


def _pending(sql: Sql, run_id: str) -> list[Question]:
    rows = sql.all(
        "select key, step, name, arguments from app_questions where run_id = ? and answer is null order by key",
        (run_id,),
    )
    return [Question(key=str(k), step=int(s), name=str(n), arguments=json.loads(a)) for k, s, n, a in rows]
