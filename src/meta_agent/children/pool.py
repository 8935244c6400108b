"""Every configured child, supervised in one task group (`ChildPool`), and a new set of entries taken while it runs
(`reconcile`, for a servers.json reload). The webhooks of servers.json are held beside the children, as the one
virtual child `webhooks` (webhooks.py): whoever calls a server's tools by name finds them there too (`children`).

A pool can be `held`: its children start only once `release` is called, something waits for them (`wait_settled`),
or HOLD_AT_MOST seconds have passed. `serve` on stdio holds its children until its host has had its first answer,
so that the processes of many children starting do not compete with that answer for the CPU.

A child whose entry is gone or changed is retired: new calls are refused at once, calls in flight get up to their
timeout, then its connection is closed (its whole process group ended, children/stdio.py). A changed child is a new
`ChildServer` in the old one's place; an unchanged one keeps its connection and its calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio

from meta_agent.children.supervisor import SETTLE_GRACE, START_TIMEOUT, ChildServer
from meta_agent.children.webhooks import Webhooks
from meta_agent.config.servers import ServerEntry, webhooks_of


@dataclass(frozen=True)
class Reconciled:
    """What `ChildPool.reconcile` did: the names of the children started, stopped and restarted, and of the webhooks
    added, removed or changed."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    restarted: tuple[str, ...]
    webhooks: tuple[str, ...] = ()


HOLD_AT_MOST = 1.0  # seconds a held pool waits for its release before starting its children anyway


class ChildPool:
    """Every configured child, supervised in one task group; `async with` starts them (a `held` pool: once released,
    see the module's docstring), leaving stops them all (and closes the webhooks' connections). Iterating it gives the
    children; `webhooks` holds the webhooks of `servers` (config.webhooks_of)."""

    def __init__(
        self,
        servers: Mapping[str, ServerEntry],
        *,
        restart: bool = True,
        start_timeout: float = START_TIMEOUT,
        on_change: Callable[[ChildServer], None] | None = None,
        held: bool = False,
    ) -> None:
        self._released = anyio.Event()
        if not held:
            self._released.set()
        self._make = partial(ChildServer, restart=restart, start_timeout=start_timeout, on_change=on_change)
        # Changed in place by `reconcile`, as `webhooks` is.
        self._children = {name: self._make(name, entry) for name, entry in servers.items()}
        self.webhooks = Webhooks(webhooks_of(servers))
        # What a tool caller looks a server up in: whoever holds it sees the children and webhooks now in force.
        self.children: Mapping[str, ChildServer | Webhooks] = _Callees(self._children, self.webhooks)
        self._scopes: dict[ChildServer, anyio.CancelScope] = {}  # each running supervisor's, to stop it alone
        self._tg: anyio.abc.TaskGroup | None = None

    def __iter__(self) -> Iterator[ChildServer]:
        return iter(self._children.values())

    def __getitem__(self, name: str) -> ChildServer:
        return self._children[name]

    async def __aenter__(self) -> ChildPool:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        for child in self:
            self._launch(child)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        # Supervisors never raise, so there is nothing of theirs to report: leaving the group as if its body had
        # ended lets an exception of the body propagate as itself, not wrapped in an ExceptionGroup.
        try:
            await self._tg.__aexit__(None, None, None)
        finally:
            await self.webhooks.aclose()

    def reconcile(self, servers: Mapping[str, ServerEntry]) -> Reconciled:
        """Make the running children those of `servers`: start the added, stop the removed, restart the changed (a
        new child in the old one's place) and those failed for good (a command that did not exist may have been
        installed since), and leave the rest alone, their connections and calls untouched. A stopped child refuses new
        calls at once and is closed once its calls in flight are over (or out of time). The webhooks become those
        `servers` carries."""
        assert self._tg is not None, "reconcile a running pool"
        removed = [name for name in self._children if name not in servers]
        changed = [
            name
            for name, entry in servers.items()
            if name in self._children and (self[name].entry != entry or self[name].status.state == "failed")
        ]
        for name in removed:
            self._stop(self[name], "the server was removed from the configuration")
        for name in changed:
            self._stop(self[name], "the server's configuration changed; it is restarting")
        kept = {name: child for name, child in self._children.items() if name not in removed and name not in changed}
        self._children.clear()
        for name, entry in servers.items():  # in the file's order
            self._children[name] = kept.get(name) or self._launch(self._make(name, entry))
        added = tuple(name for name in servers if name not in kept and name not in changed)
        webhooks = self.webhooks.update(webhooks_of(servers))
        return Reconciled(added=added, removed=tuple(removed), restarted=tuple(changed), webhooks=webhooks)

    def _launch(self, child: ChildServer) -> ChildServer:
        assert self._tg is not None
        # Made now, so the child can be stopped before its supervisor's first step (a scope cancelled before it is
        # entered cancels what it wraps at once).
        self._scopes[child] = anyio.CancelScope()
        self._tg.start_soon(self._supervise, child, name=f"supervise {child.name}")
        return child

    def release(self) -> None:
        """Let the children of a held pool start (nothing if they may already)."""
        self._released.set()

    @property
    def released(self) -> bool:
        """Whether the children may start (always, unless the pool was made `held`)."""
        return self._released.is_set()

    async def _supervise(self, child: ChildServer) -> None:
        try:
            with self._scopes[child]:
                with anyio.move_on_after(HOLD_AT_MOST):
                    await self._released.wait()
                await child.supervise()
        finally:
            del self._scopes[child]

    def _stop(self, child: ChildServer, why: str) -> None:
        """Retire `child` now and close it once its calls in flight are over."""
        child.retire(why)

        async def close_when_drained() -> None:
            await child.drained()
            scope = self._scopes.get(child)
            if scope is not None:
                scope.cancel()

        assert self._tg is not None
        self._tg.start_soon(close_when_drained, name=f"retire {child.name}")

    async def wait_settled(self, names: Iterable[str] | None = None) -> None:
        """Wait until each child of `names` (default: every child) has connected or failed once: at most until the
        start deadline of its current attempt (its start timeout from when that attempt began), never forever. A held
        pool is released when any child is waited for: whoever waits for one needs it."""
        chosen = list(self) if names is None else [self._children[name] for name in names]
        if chosen:
            self.release()
        for child in chosen:
            deadline = child.start_deadline
            if deadline is None:  # its supervisor has not begun the first attempt yet: it does so at once
                deadline = anyio.current_time() + child.start_timeout
            with anyio.CancelScope(deadline=deadline + SETTLE_GRACE):
                await child.settled.wait()


class _Callees(Mapping[str, "ChildServer | Webhooks"]):
    """The children by name, and the webhooks under `webhooks` while there are any (servers.json never names a child
    so beside them): a live view, not a copy."""

    def __init__(self, children: Mapping[str, ChildServer], webhooks: Webhooks) -> None:
        self._children = children
        self._webhooks = webhooks

    def __getitem__(self, name: str) -> ChildServer | Webhooks:
        if name in self._children:
            return self._children[name]
        if name == self._webhooks.name and self._webhooks.entries:
            return self._webhooks
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        yield from self._children
        if self._webhooks.entries and self._webhooks.name not in self._children:
            yield self._webhooks.name

    def __len__(self) -> int:
        return sum(1 for _ in self)
