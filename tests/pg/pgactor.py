"""A process that acts on a PostgreSQL bus for the tests (its own connections, its own host).

pgactor.py consume INBOX N_BATCH MODE   claim until the inbox is empty; print the bodies (JSON)
                                        MODE: refs (pending + claim), next (claim_next)
                                        or take_next (claim and take in one statement)
pgactor.py hold INBOX SEQ,SEQ,...       register a wait, claim those items, print "held",
                                        then block until killed
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys

from wavewait.core.bus import open_bus
from wavewait.core.ids import new_id
from wavewait.core.model import WaitRecord
from wavewait.core.proc import hostname, me


async def register_wait(bus, inbox: str) -> str:
    """A wait of this process on `inbox`, so the claims it makes are owned by a live waiter."""
    wait_id = new_id()
    pid, start = me()
    await bus.register_wait(
        WaitRecord(id=wait_id, waiter=inbox, kind="next", tool="test", host=hostname(), pid=pid, pid_start=start)
    )
    return wait_id


async def consume(bus, inbox: str, batch: int, mode: str) -> list[str]:
    taken: list[str] = []
    wait_id = await register_wait(bus, inbox)
    rng = random.Random(os.getpid())
    while True:
        got = 0
        if mode == "take_next":
            if batch_taken := await bus.take_next(inbox, wait_id, inbox, limit=batch):
                assert [i.seq for i in batch_taken] == sorted(i.seq for i in batch_taken)
                taken += [i.body for i in batch_taken]
                continue
        elif mode == "next":
            got = len(await bus.claim_next(inbox, wait_id, limit=batch))
        else:
            refs = await bus.pending(inbox)
            if refs:  # start at a random place so racers do not all chase the head of the queue
                k = rng.randrange(len(refs))
                for ref in (refs[k:] + refs[:k])[: batch * 4]:
                    if await bus.claim(inbox, ref, wait_id) is not None:
                        got += 1
                        if got == batch:
                            break
        if got:
            taken += [i.body for i in await bus.take(inbox, wait_id, inbox)]
        elif not await bus.pending(inbox):
            break
    await bus.end_wait(wait_id)
    return taken


async def main(cmd: str, args: list[str]) -> int:
    bus = await open_bus()
    try:
        if cmd == "consume":
            print(json.dumps(await consume(bus, args[0], int(args[1]), args[2])))
        elif cmd == "hold":
            inbox, seqs = args[0], [int(s) for s in args[1].split(",")]
            wait_id = await register_wait(bus, inbox)
            refs = {r.seq: r for r in await bus.pending(inbox)}
            for s in seqs:
                assert await bus.claim(inbox, refs[s], wait_id) is not None
            print("held", wait_id, flush=True)
            await asyncio.Event().wait()
        else:
            print(f"unknown command {cmd}", file=sys.stderr)
            return 2
    finally:
        await bus.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2:])))
