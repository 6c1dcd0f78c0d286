"""A separate process that acts on the bus named by WAVEWAIT_BUS (tests start it).

actor.py consume CALLER          take messages until none is left; print their bodies (JSON)
actor.py send TO SENDER COUNT    send COUNT messages through the core (bodies SENDER-i)
actor.py send-each TO S1,S2,.. N send N rounds of one message from each sender, in a burst
actor.py burst TO SENDER COUNT   deliver COUNT items as fast as the bus takes them
actor.py interrupt WAIT_ID       interrupt a wait through the bus
"""

from __future__ import annotations

import asyncio
import json
import sys

from wavewait.core import messages, wait
from wavewait.core.bus import open_bus
from wavewait.core.ids import new_id
from wavewait.core.model import Item


async def main(cmd: str, *args: str) -> int:
    bus = await open_bus()
    try:
        if cmd == "consume":
            taken = []
            while (r := await wait.wait_next(bus, args[0], 0)).status == "received":
                taken.append(r.message)
            print(json.dumps(taken))
        elif cmd == "send":
            to, sender, count = args[0], args[1], int(args[2])
            for i in range(count):
                await messages.send(bus, sender, to, f"{sender}-{i}")
        elif cmd == "send-each":
            to, senders, rounds = args[0], args[1].split(","), int(args[2])
            for i in range(rounds):
                for sender in senders:
                    await messages.send(bus, sender, to, f"{sender}-{i}")
        elif cmd == "burst":
            to, sender, count = args[0], args[1], int(args[2])
            for i in range(count):
                await bus.deliver(Item(id=new_id(), type="message", to=to, sender=sender, body=f"{sender}-{i}"))
        elif cmd == "interrupt":
            return 0 if await bus.interrupt(args[0]) else 1
        else:
            print(f"unknown command {cmd}", file=sys.stderr)
            return 2
    finally:
        await bus.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:])))
