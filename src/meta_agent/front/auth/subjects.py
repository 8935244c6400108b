"""Who a request comes from: its subject, the owner of the conversations, runs, tasks, parked rounds and "allowed
for this session/conversation" grants it makes. Another subject presenting their ids is told what an unknown id gets.

- Over HTTP behind the resource-server check (meta_agent.front.auth.resource_server), the verified token's subject,
  which that layer puts in the ASGI scope under `SCOPE_KEY` as `ISSUER#SUB` (with the static META_AGENT_HTTP_TOKEN:
  `token`, its one holder).
- Over HTTP without it, the holder of the request's credentials: its Authorization header (none: everyone who
  reaches the server without one is one subject).
- Off HTTP (stdio, in memory), `local`, which the caller of `subject_of` chooses: for what lives as long as the
  connection (tasks, parked rounds, "allowed for this session"), the connection the server's lifespan serves
  (`Front.owner`); for the conversations and runs kept in the database, the local user (`LOCAL_OWNER`), who holds the
  database anyway, so that a conversation goes on after a restart as before, and `meta-agent run`'s runs are read
  alike.

A subject as stored is opaque and bounded (at most 40 characters): a kind, and the first 32 hex digits of a SHA-256
of what identifies it, so that no claim of a token, nor a credential, reaches the database.
"""

from __future__ import annotations

import hashlib
from typing import Any

from mcp.server.context import ServerRequestContext
from starlette.requests import Request

# The ASGI scope key where the HTTP front's auth layer puts the verified subject (a str).
SCOPE_KEY = "meta_agent.subject"
STATIC_TOKEN_SUBJECT = "token"  # the subject of META_AGENT_HTTP_TOKEN's holder: one, whoever holds it
DIGITS = 32


def subject_of(request: object, local: str) -> str:
    """The subject of `request` (the SDK hands handlers the HTTP request over HTTP, None on stdio or in memory):
    `sub:` and a digest of the verified subject the auth layer set; else, over HTTP, `http:` and a digest of the
    Authorization header; else `local`."""
    if not isinstance(request, Request):
        return local
    verified = request.scope.get(SCOPE_KEY)
    if isinstance(verified, str):
        return "sub:" + _digest(verified)
    return "http:" + _digest(request.headers.get("authorization", ""))


def stored_subject(named: str, issuer: str = "") -> str:
    """The owner the rows hold for a subject an operator `named`: a stored one (`sub:…`, `http:…`, `local`) as it
    is; else the subject of a verified token, `ISSUER#SUB` or, with `issuer` (META_AGENT_AUTH_ISSUER) set, its `sub`
    alone, or `token`, the static token's holder. (`http:` subjects are digests of credentials: only their stored
    form names them.)"""
    if named == "local" or named.startswith(("sub:", "http:")):
        return named
    if issuer and named != STATIC_TOKEN_SUBJECT and not named.startswith(f"{issuer}#"):
        named = f"{issuer}#{named}"
    return "sub:" + _digest(named)


def request_principal(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """What a 2026-07-28 round's sealed request state is bound to (the SDK's `bind_principal`): the subject of an
    HTTP caller, so that a request state leaked to another subject is refused as a forged one is; None off HTTP,
    where one connection is served."""
    return subject_of(ctx.request, "") if isinstance(ctx.request, Request) else None


def _digest(text: str) -> str:
    # surrogatepass: a subject with a lone surrogate (a JSON "\ud800" claim) still has a digest
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGITS]
