"""Group commit for the PostgreSQL bus: requests of one kind that arrive while a statement of
that kind is running wait for it, then run together as one statement.

A request alone runs at once, as before. Under load (a server holding 200 waits that each
claim, then take, a message) the statements a second stop growing with the messages: each
one carries every request that queued while the last one ran, so the waiting process and
the server both spend their time per statement on many messages instead of one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Generic, TypeVar

import anyio

Q = TypeVar("Q")
R = TypeVar("R")

#: the most requests one statement carries
MOST = 100


class Batcher(Generic[Q, R]):
    """Run `one` for a request alone and `many` for several queued together.

    `key` says which requests may not share a statement (two fan-ins' claims of one sender's
    oldest item would pick the same row, and one of them would get nothing while a second
    item waits): a request whose key is already in the statement waits for the next one.
    `keys` is the same for a request with several (a fan-in's claim: one per sender).

    `inline`: a request that finds nothing running runs in its caller's task, not in a task
    of its own (which costs a task and a turn of the loop per call, a fifth of a lone
    enqueue's time); cancelling its caller cancels its statement, as a plain call's would.
    Only for statements whose caller needs nothing settled after a cancel (the task
    queue's: each a compare-and-set that a retry reads back), not for a wait's claims.
    """

    def __init__(
        self,
        one: Callable[[Q], Awaitable[R]],
        many: Callable[[list[Q]], Awaitable[list[R]]],
        key: Callable[[Q], Hashable] | None = None,
        *,
        keys: Callable[[Q], Iterable[Hashable]] | None = None,
        inline: bool = False,
    ) -> None:
        if (key is None) == (keys is None):
            raise TypeError("give key or keys")
        self._one, self._many = one, many
        self._keys: Callable[[Q], Iterable[Hashable]] = keys if keys is not None else (lambda r: (key(r),))  # type: ignore[misc]
        self._queue: list[tuple[Q, asyncio.Future[R]]] = []
        self._runner: asyncio.Task[None] | None = None
        self._inline = inline
        self._alone = False  # a request runs in its caller's task (inline)

    async def __call__(self, request: Q) -> R:
        if self._inline and not self._alone and not self._queue and (self._runner is None or self._runner.done()):
            return await self._run_alone(request)
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((request, future))
        if not self._alone and (self._runner is None or self._runner.done()):
            self._runner = asyncio.create_task(self._run(), name="wavewait-pg-batch")
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            # the statement may be running with this request in it: let it end, so what it
            # did (a claim) is settled before the caller's clean-up (a release) runs
            with anyio.CancelScope(shield=True):
                await asyncio.wait([future])
            if not future.cancelled():
                future.exception()  # retrieved: its error is the caller's no more
            raise

    async def _run_alone(self, request: Q) -> R:
        """A request that found nothing running, in its caller's task; what queued meanwhile
        runs after it, as one statement."""
        self._alone = True
        try:
            return await self._one(request)
        finally:
            self._alone = False
            if self._queue and (self._runner is None or self._runner.done()):
                self._runner = asyncio.create_task(self._run(), name="wavewait-pg-batch")

    async def _run(self) -> None:
        while self._queue:
            batch: list[tuple[Q, asyncio.Future[R]]] = []
            later: list[tuple[Q, asyncio.Future[R]]] = []
            keys: set[Hashable] = set()
            for request, future in self._queue:
                mine = set(self._keys(request))
                if len(batch) >= MOST or not keys.isdisjoint(mine):
                    later.append((request, future))
                else:
                    keys |= mine
                    batch.append((request, future))
            self._queue = later
            try:
                if len(batch) == 1:
                    results = [await self._one(batch[0][0])]
                else:
                    results = await self._many([request for request, _ in batch])
            except asyncio.CancelledError:  # the loop is closing: nothing queued will run
                for _, future in batch + self._queue:
                    future.cancel()
                self._queue = []
                raise
            except Exception as e:  # every request of the statement gets its error
                for _, future in batch:
                    if not future.done():
                        future.set_exception(e)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)
