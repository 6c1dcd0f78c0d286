"""The PostgreSQL bus's tables, created and migrated on first use.

Every bus lives in one schema (default `wavewait`, or `?schema=NAME` in the URL), so
several buses can share a database. `schema_version` records which migrations ran; a
transaction-scoped advisory lock makes concurrent first uses take turns.

Rows, and why they look like this:
- `items`: the inbox. `seq` is the FIFO order and never changes; a claim is the
  `claimed_by` column set to the wait id, so a returned claim lands back in its place.
- `history`: taken items, bounded per inbox; never read by a wait.
- `waits`: waits in progress with a lease (`lease_until`, server clock) that the waiting
  process renews, so claims of a wait whose host vanished can be returned.
- `items_pending_from` (version 3): a fan-in's read of its senders' pending items goes
  straight to them, not through the inbox's whole backlog (200 fan-ins on one inbox).
- `wave_docs` (version 4): per-wave documents (`wave_docs.py`), one row per (wave, kind),
  changed under a transaction-scoped advisory lock on the pair.
- `mcp_tasks` (version 2): tasks of the MCP Tasks extension; `status` is a column so a
  change of status is one conditional UPDATE.
"""

from __future__ import annotations

from psycopg import AsyncConnection, sql

from ..errors import BusError
from . import pg_queries as q

SCHEMA_VERSION = 4

#: version -> statements; append new versions, never edit an applied one.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE agents (
            id text PRIMARY KEY,
            created_at double precision NOT NULL,
            record jsonb NOT NULL)""",
        """CREATE TABLE items (
            seq bigserial PRIMARY KEY,
            id text NOT NULL UNIQUE,
            inbox text NOT NULL,
            type text NOT NULL,
            sender text NOT NULL,
            claimed_by text,
            record jsonb NOT NULL)""",
        "CREATE INDEX items_pending ON items (inbox, seq) WHERE claimed_by IS NULL",
        "CREATE INDEX items_claimed ON items (claimed_by) WHERE claimed_by IS NOT NULL",
        """CREATE TABLE history (
            seq bigint PRIMARY KEY,
            inbox text NOT NULL,
            record jsonb NOT NULL,
            taken_by text NOT NULL,
            taken_at double precision NOT NULL,
            wait_id text NOT NULL)""",
        "CREATE INDEX history_inbox ON history (inbox, seq)",
        """CREATE TABLE waits (
            id text PRIMARY KEY,
            started_at double precision NOT NULL,
            host text,
            pid integer,
            pid_start text,
            interrupted boolean NOT NULL DEFAULT false,
            lease_until timestamptz NOT NULL,
            record jsonb NOT NULL)""",
        """CREATE TABLE resolutions (
            key text PRIMARY KEY,
            value jsonb NOT NULL)""",
    ),
    2: (
        """CREATE TABLE mcp_tasks (
            id text PRIMARY KEY,
            status text NOT NULL,
            updated_at double precision NOT NULL,
            record jsonb NOT NULL)""",
    ),
    3: ("CREATE INDEX items_pending_from ON items (inbox, sender, seq) WHERE claimed_by IS NULL",),
    4: (
        """CREATE TABLE wave_docs (
            wave text NOT NULL,
            kind text NOT NULL,
            updated_at double precision NOT NULL,
            doc jsonb NOT NULL,
            PRIMARY KEY (wave, kind))""",
    ),
}


async def migrate(conn: AsyncConnection, schema: str) -> int:
    """Bring `schema` to SCHEMA_VERSION; return the version found before. Safe to race."""
    ident = sql.Identifier(schema)
    async with conn.transaction():
        await conn.execute(q.LOCK_MIGRATIONS, [f"wavewait:{schema}"])
        await conn.execute(q.CREATE_SCHEMA.format(ident))
        await conn.execute(q.CREATE_VERSION_TABLE.format(ident))
        cur = await conn.execute(q.SCHEMA_VERSION_OF.format(ident))
        row = await cur.fetchone()
        found = int(row[0]) if row else 0
        if found > SCHEMA_VERSION:
            raise BusError(
                f"the bus schema {schema!r} is at version {found}, newer than this wavewait "
                f"understands ({SCHEMA_VERSION}); upgrade wavewait on this machine"
            )
        await conn.execute(q.SET_LOCAL_SEARCH_PATH.format(ident))
        for version in range(found + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version]:
                await conn.execute(statement)  # fixed text, no input
            await conn.execute(q.RECORD_VERSION, [version])
    return found


async def current_version(conn: AsyncConnection, schema: str) -> int | None:
    """The schema's version, or None when it has no version table yet (no lock taken)."""
    cur = await conn.execute(q.TABLE_EXISTS, [f"{sql.Identifier(schema).as_string(conn)}.schema_version"])
    row = await cur.fetchone()
    if not row or row[0] is None:
        return None
    cur = await conn.execute(q.SCHEMA_VERSION_OF.format(sql.Identifier(schema)))
    row = await cur.fetchone()
    return int(row[0]) if row else 0
