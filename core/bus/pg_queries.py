"""Every statement the PostgreSQL bus runs, by name (the tables are in `pg_schema.py`).

All values travel as parameters (`%s` or `%(name)s`), never in the text. Where a statement
takes an optional condition or an identifier, it is a `psycopg.sql.SQL` template and the
part is composed in with `.format()`; the parts are the fixed fragments below or
`sql.Identifier`. A statement that changes what a wait may be waiting on also calls
`pg_notify` on the bus's channel, with a payload naming what changed (`i:<inbox>/<sender>`
for an item that arrived or came back, `a:<agent>`, `w:<wait>`, `x:<wait>` for an interrupt; several keys in one payload are
separated by spaces).
"""

from __future__ import annotations

from typing import Final

from psycopg import sql

# ---------------------------------------------------------------- connections
SET_SEARCH_PATH: Final = sql.SQL("SET search_path TO {}")  # {}: the schema, an Identifier
SET_ASYNC_COMMIT: Final = "SET synchronous_commit TO off"
LISTEN: Final = sql.SQL("LISTEN {}")  # {}: the channel, an Identifier
PING: Final = "SELECT 1"
NOTIFY: Final = "SELECT pg_notify(%s, p) FROM unnest(%s::text[]) AS p"  # channel, payloads

# ---------------------------------------------------------------- schema versions (pg_schema.py)
LOCK_MIGRATIONS: Final = "SELECT pg_advisory_xact_lock(hashtext(%s))"
CREATE_SCHEMA: Final = sql.SQL("CREATE SCHEMA IF NOT EXISTS {}")
CREATE_VERSION_TABLE: Final = sql.SQL(
    "CREATE TABLE IF NOT EXISTS {}.schema_version ("
    "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
)
SCHEMA_VERSION_OF: Final = sql.SQL("SELECT coalesce(max(version), 0) FROM {}.schema_version")
SET_LOCAL_SEARCH_PATH: Final = sql.SQL("SET LOCAL search_path TO {}")
RECORD_VERSION: Final = "INSERT INTO schema_version (version) VALUES (%s)"
TABLE_EXISTS: Final = "SELECT to_regclass(%s)"

# ---------------------------------------------------------------- agents
PUT_AGENT: Final = (
    "WITH u AS (INSERT INTO agents (id, created_at, record) VALUES (%s, %s, %s::jsonb) "
    "ON CONFLICT (id) DO UPDATE SET record = excluded.record RETURNING id) "
    "SELECT pg_notify(%s, %s) FROM u"
)
GET_AGENT: Final = "SELECT record FROM agents WHERE id = %s"
GET_AGENTS: Final = "SELECT id, record FROM agents WHERE id = ANY(%s)"
LIST_AGENTS: Final = "SELECT record FROM agents ORDER BY created_at, id"
#: patch, id{, statuses}: {} is STATUS_GUARD or nothing. A lease renewal wakes nobody.
PATCH_AGENT_QUIETLY: Final = sql.SQL("UPDATE agents SET record = record || %s::jsonb WHERE id = %s{} RETURNING record")
#: patch, id{, statuses}, channel, payload
PATCH_AGENT: Final = sql.SQL(
    "WITH u AS (UPDATE agents SET record = record || %s::jsonb WHERE id = %s{} "
    "RETURNING record) SELECT record, pg_notify(%s, %s) FROM u"
)
STATUS_GUARD: Final = sql.SQL(" AND record->>'status' = ANY(%s)")

# ---------------------------------------------------------------- inbox items
DELIVER: Final = (
    "WITH ins AS (INSERT INTO items (id, inbox, type, sender, record) "
    "VALUES (%s, %s, %s, %s, %s::jsonb) ON CONFLICT (id) DO NOTHING RETURNING seq) "
    "SELECT seq, pg_notify(%s, %s) FROM ins"
)
#: the seq of an item already delivered (a retried delivery): id, id, inbox
DELIVERED_SEQ: Final = (
    "SELECT seq FROM items WHERE id = %s UNION ALL SELECT seq FROM history h "
    "WHERE h.record->>'id' = %s AND h.inbox = %s"
)
PENDING: Final = "SELECT seq, type, sender, id FROM items WHERE inbox = %s AND claimed_by IS NULL ORDER BY seq"
#: one index lookup per sender (items_pending_from): as `sender = ANY(...)` the planner read
#: the inbox's whole backlog and filtered it, 408 ms for 100 senders over 65,000 queued items
#: against 1.5 ms; the LIMIT keeps it from flattening the lateral into that scan
PENDING_FROM: Final = (
    "SELECT i.seq, i.type, i.sender, i.id FROM unnest(%s::text[]) AS s(sender) CROSS JOIN LATERAL "
    "(SELECT seq, type, sender, id FROM items WHERE inbox = %s AND claimed_by IS NULL "
    "AND items.sender = s.sender ORDER BY seq LIMIT 1000000) AS i ORDER BY i.seq"
)
PEEK: Final = "SELECT seq, record FROM items WHERE inbox = %s AND claimed_by IS NULL AND seq > %s ORDER BY seq"
CLAIM: Final = (
    "UPDATE items SET claimed_by = %(w)s WHERE seq = (SELECT seq FROM items "
    "WHERE seq = %(seq)s AND inbox = %(inbox)s AND (claimed_by IS NULL OR claimed_by = %(w)s) "
    "FOR UPDATE SKIP LOCKED) RETURNING seq, record"
)
#: many items by seq in one statement; rows other waits are claiming are skipped
CLAIM_MANY: Final = (
    "UPDATE items SET claimed_by = %(w)s WHERE seq IN (SELECT seq FROM items "
    "WHERE seq = ANY(%(seqs)s) AND inbox = %(inbox)s AND (claimed_by IS NULL OR claimed_by = %(w)s) "
    "FOR UPDATE SKIP LOCKED) RETURNING seq, record"
)
#: {} is TYPE_FILTER or nothing
#: The rows to claim are picked in a MATERIALIZED CTE, run once. Picked in `seq IN (SELECT ...
#: LIMIT n FOR UPDATE SKIP LOCKED)`, a claim took more than n rows under concurrent claims
#: once a VACUUM had changed the table's statistics (seen: a limit of 1 claiming 2-6 rows,
#: bench_scale.py's 200 next-message waits on one inbox): the subquery ran again.
#: x: the n oldest unclaimed rows of an inbox ({} is TYPE_FILTER or nothing), for CLAIM_NEXT,
#: TAKE_NEXT and REGISTER_WAIT
_OLDEST = (
    "x AS MATERIALIZED (SELECT seq FROM items WHERE inbox = %(inbox)s AND claimed_by IS NULL{} "
    "ORDER BY seq LIMIT %(n)s FOR UPDATE SKIP LOCKED)"
)
CLAIM_NEXT: Final = sql.SQL(
    "WITH " + _OLDEST + " "
    "UPDATE items SET claimed_by = %(w)s FROM x WHERE items.seq = x.seq RETURNING items.seq, items.record"
)
TYPE_FILTER: Final = sql.SQL(" AND type = ANY(%(types)s)")
#: what a wait holds: on a retried claim, what the attempt whose answer was lost claimed
HELD: Final = "SELECT seq, record FROM items WHERE inbox = %(inbox)s AND claimed_by = %(w)s ORDER BY seq"
HELD_MANY: Final = (
    "SELECT seq, record, claimed_by FROM items WHERE inbox = ANY(%(inboxes)s) AND claimed_by = ANY(%(ws)s)"
)
#: the oldest unclaimed rows of each inbox of `r` (waits: inbox, w, n, k its place), numbered
#: and shared out in the waits' order (the first wait the oldest n rows, the next the n
#: after them), so waits claiming from one inbox share a statement and never pick the same
#: row. {} is TYPE_FILTER or nothing
_SHARED_OUT = (
    "s AS (SELECT inbox, w, n, sum(n) OVER (PARTITION BY inbox ORDER BY k) - n AS lo FROM r), "
    "b AS (SELECT inbox, sum(n) AS total FROM r GROUP BY inbox HAVING sum(n) > 0), "
    "x AS MATERIALIZED (SELECT b.inbox, y.seq, row_number() OVER (PARTITION BY b.inbox ORDER BY y.seq) AS i "
    "FROM b CROSS JOIN LATERAL (SELECT seq FROM items WHERE inbox = b.inbox AND claimed_by IS NULL{} "
    "ORDER BY seq LIMIT b.total FOR UPDATE SKIP LOCKED) y), "
    "c AS (SELECT s.w, x.seq FROM x JOIN s ON s.inbox = x.inbox AND x.i > s.lo AND x.i <= s.lo + s.n) "
    "UPDATE items SET claimed_by = c.w FROM c WHERE items.seq = c.seq RETURNING items.seq, items.record, c.w"
)
#: CLAIM_NEXT for several waits at once (pg_batch.py), each with its own inbox (or sharing
#: one) and limit; a row comes back with the wait that claimed it
CLAIM_NEXT_MANY: Final = sql.SQL(
    "WITH r AS (SELECT * FROM unnest(%(inboxes)s::text[], %(ws)s::text[], %(ns)s::int[]) "
    "WITH ORDINALITY AS r(inbox, w, n, k)), " + _SHARED_OUT
)
#: the oldest unclaimed row of each (inbox, wait, sender) (fan-ins' claims, pg_batch.py: no
#: two in one statement share an inbox and sender), by items_pending_from; rows other waits
#: are claiming are skipped (that sender's next is taken). A row comes back with its wait.
#: {} is TYPE_FILTER or nothing
CLAIM_EACH: Final = sql.SQL(
    "WITH c AS MATERIALIZED (SELECT r.w, x.seq FROM unnest(%(inboxes)s::text[], %(ws)s::text[], %(senders)s::text[]) "
    "AS r(inbox, w, sender) CROSS JOIN LATERAL (SELECT seq FROM items WHERE inbox = r.inbox "
    "AND sender = r.sender AND claimed_by IS NULL{} ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED) x) "
    "UPDATE items SET claimed_by = c.w FROM c WHERE items.seq = c.seq RETURNING items.seq, items.record, c.w"
)
#: fencing: renew the wait's lease and count its claims; no row when the wait was ended
HOLDS: Final = (
    "WITH r AS (UPDATE waits SET lease_until = now() + make_interval(secs => %(lease)s) "
    "WHERE id = %(w)s RETURNING id) "
    "SELECT (SELECT count(*) FROM items WHERE inbox = %(inbox)s AND claimed_by = %(w)s) FROM r"
)
RELEASE: Final = "UPDATE items SET claimed_by = NULL WHERE inbox = %s AND claimed_by = %s RETURNING sender"

# ---------------------------------------------------------------- history
# Trims find the cutoff (the newest row beyond the kept ones) without locking, then lock and
# delete only the rows at or below it. (`... OFFSET n FOR UPDATE` would lock the n kept rows
# too: a write per kept row on every trim, and trims queueing on each other's locks.)
# SKIP LOCKED: a row another trim holds is left to it, so two trims never deadlock.
TRIM_HISTORY: Final = (
    "DELETE FROM history WHERE seq IN (SELECT seq FROM history WHERE inbox = %(inbox)s AND seq <= "
    "(SELECT seq FROM history WHERE inbox = %(inbox)s ORDER BY seq DESC OFFSET %(keep)s LIMIT 1) "
    "FOR UPDATE SKIP LOCKED)"
)
TRIM_EVENTS: Final = (
    "DELETE FROM items WHERE seq IN (SELECT seq FROM items WHERE inbox = %(inbox)s "
    "AND type = ANY(%(types)s) AND claimed_by IS NULL AND seq <= (SELECT seq FROM items "
    "WHERE inbox = %(inbox)s AND type = ANY(%(types)s) AND claimed_by IS NULL "
    "ORDER BY seq DESC OFFSET %(keep)s LIMIT 1) FOR UPDATE SKIP LOCKED)"
)
# the tail of TAKE and TAKE_NEXT: file the deleted rows `t` in history
_TO_HISTORY = (
    "INSERT INTO history (seq, inbox, record, taken_by, taken_at, wait_id) "
    "SELECT seq, inbox, record, %(taker)s, %(at)s, %(w)s FROM t ON CONFLICT (seq) DO NOTHING "
    "RETURNING seq, record, taken_by, taken_at"
)
TAKE: Final = (
    "WITH t AS (DELETE FROM items WHERE inbox = %(inbox)s AND claimed_by = %(w)s "
    "RETURNING seq, inbox, record) " + _TO_HISTORY
)
#: TAKE and END_WAIT in one statement (a wait that returned, or a delivery acknowledged):
#: a data-modifying CTE runs to completion even unread, its notification included
TAKE_AND_END: Final = (
    "WITH t AS (DELETE FROM items WHERE inbox = %(inbox)s AND claimed_by = %(w)s "
    "RETURNING seq, inbox, record), "
    "e AS (DELETE FROM waits WHERE id = %(w)s RETURNING pg_notify(%(channel)s, %(key)s)) " + _TO_HISTORY
)
#: TAKE_AND_END for several waits at once (pg_batch.py); a row comes back with its wait.
#: Statements that lock several wait rows lock them in id order (ORDER BY id FOR UPDATE),
#: so two of them (this and RENEW_LEASES) cannot deadlock
TAKE_AND_END_MANY: Final = (
    "WITH r AS (SELECT * FROM unnest(%(inboxes)s::text[], %(ws)s::text[], %(takers)s::text[]) "
    "AS r(inbox, w, taker)), "
    "t AS (DELETE FROM items USING r WHERE items.inbox = r.inbox AND items.claimed_by = r.w "
    "RETURNING items.seq, items.inbox, items.record, r.w, r.taker), "
    "e AS (DELETE FROM waits WHERE id IN (SELECT id FROM waits WHERE id IN (SELECT w FROM r) ORDER BY id FOR UPDATE) "
    "RETURNING pg_notify(%(channel)s, %(wait_prefix)s || id)) "
    "INSERT INTO history (seq, inbox, record, taken_by, taken_at, wait_id) "
    "SELECT seq, inbox, record, taker, %(at)s, w FROM t ON CONFLICT (seq) DO NOTHING "
    "RETURNING seq, record, taken_by, taken_at, wait_id"
)
TAKEN_BY_MANY: Final = (
    "SELECT seq, record, taken_by, taken_at, wait_id FROM history "
    "WHERE inbox = ANY(%(inboxes)s) AND wait_id = ANY(%(ws)s)"
)
#: {} is TYPE_FILTER or nothing
TAKE_NEXT: Final = sql.SQL(
    "WITH " + _OLDEST + ", "
    "t AS (DELETE FROM items USING x WHERE items.seq = x.seq RETURNING items.seq, items.inbox, items.record) "
    + _TO_HISTORY
)
TAKEN_BY: Final = "SELECT seq, record, taken_by, taken_at FROM history WHERE inbox = %(inbox)s AND wait_id = %(w)s"
HISTORY: Final = "SELECT seq, record, taken_by, taken_at FROM history WHERE inbox = %s ORDER BY seq DESC LIMIT %s"

# ---------------------------------------------------------------- waits
#: a wait's record, and in the same statement the claim of up to n of the oldest unclaimed
#: items of an inbox (as CLAIM_NEXT; n = 0 claims nothing): recovery sees the record and its
#: claims together or neither. {} is TYPE_FILTER or nothing
REGISTER_WAIT: Final = sql.SQL(
    "WITH u AS (INSERT INTO waits (id, started_at, host, pid, pid_start, lease_until, record) "
    "VALUES (%(w)s, %(started)s, %(host)s, %(pid)s, %(pid_start)s, now() + make_interval(secs => %(lease)s), "
    "%(record)s::jsonb) ON CONFLICT (id) DO UPDATE SET record = excluded.record, "
    "lease_until = excluded.lease_until RETURNING pg_notify(%(channel)s, %(key)s)), "
    + _OLDEST
    + ", c AS (UPDATE items SET claimed_by = %(w)s FROM x WHERE items.seq = x.seq "
    "RETURNING items.seq, items.record) SELECT seq, record FROM c"
)
#: REGISTER_WAIT for several waits at once (pg_batch.py), each with its own inbox (or
#: sharing one, its rows shared out) and claim limit; a claimed row comes back with its wait.
#: {} is TYPE_FILTER or nothing
REGISTER_WAITS: Final = sql.SQL(
    "WITH r AS (SELECT * FROM unnest(%(ws)s::text[], %(starteds)s::float8[], %(hosts)s::text[], "
    "%(pids)s::int[], %(pid_starts)s::text[], %(records)s::jsonb[], %(inboxes)s::text[], %(ns)s::int[]) "
    "WITH ORDINALITY AS r(w, started, host, pid, pid_start, record, inbox, n, k)), "
    "u AS (INSERT INTO waits (id, started_at, host, pid, pid_start, lease_until, record) "
    "SELECT w, started, host, pid, pid_start, now() + make_interval(secs => %(lease)s), record FROM r "
    "ON CONFLICT (id) DO UPDATE SET record = excluded.record, lease_until = excluded.lease_until "
    "RETURNING pg_notify(%(channel)s, %(wait_prefix)s || id)), " + _SHARED_OUT
)
RENEW_LEASES: Final = (
    "UPDATE waits SET lease_until = now() + make_interval(secs => %s) "
    "WHERE id IN (SELECT id FROM waits WHERE id = ANY(%s) ORDER BY id FOR UPDATE)"
)
UPDATE_WAIT: Final = (
    "WITH u AS (UPDATE waits SET record = jsonb_set(record, '{progress}', to_jsonb(%s::text)), "
    "lease_until = now() + make_interval(secs => %s) "
    "WHERE id = %s AND record->>'progress' IS DISTINCT FROM %s RETURNING id) "
    "SELECT pg_notify(%s, %s) FROM u"
)
END_WAIT: Final = "WITH d AS (DELETE FROM waits WHERE id = %s RETURNING id) SELECT pg_notify(%s, %s) FROM d"
LIST_WAITS: Final = "SELECT record, lease_until > now() FROM waits ORDER BY started_at, id"
INTERRUPT: Final = (
    "WITH u AS (UPDATE waits SET interrupted = true WHERE id = %s RETURNING id) SELECT pg_notify(%s, %s) FROM u"
)
INTERRUPTED: Final = "SELECT interrupted FROM waits WHERE id = %s"
GET_RESOLUTION: Final = "SELECT value FROM resolutions WHERE key = %s"
PUT_RESOLUTION: Final = (
    "INSERT INTO resolutions (key, value) VALUES (%s, %s::jsonb) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)

# ---------------------------------------------------------------- wave documents
GET_WAVE_DOC: Final = "SELECT doc FROM wave_docs WHERE wave = %s AND kind = %s"
#: taken first in an update's transaction: updates of one document take turns, also the first
LOCK_WAVE_DOC: Final = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
PUT_WAVE_DOC: Final = (
    "INSERT INTO wave_docs (wave, kind, updated_at, doc) VALUES (%s, %s, %s, %s::jsonb) "
    "ON CONFLICT (wave, kind) DO UPDATE SET updated_at = excluded.updated_at, doc = excluded.doc"
)

# ---------------------------------------------------------------- MCP tasks
PUT_MCP_TASK: Final = (
    "INSERT INTO mcp_tasks (id, status, updated_at, record) VALUES (%s, %s, %s, %s::jsonb) "
    "ON CONFLICT (id) DO UPDATE SET status = excluded.status, updated_at = excluded.updated_at, "
    "record = excluded.record"
)
GET_MCP_TASK: Final = "SELECT record FROM mcp_tasks WHERE id = %s"
#: status and changes only from one of the given statuses: one statement, so racing
#: processes (a cancel and the wait's end) cannot both win
TRANSITION_MCP_TASK: Final = (
    "UPDATE mcp_tasks SET status = %s, updated_at = %s, record = record || %s::jsonb "
    "WHERE id = %s AND status = ANY(%s) RETURNING record"
)
DELETE_MCP_TASK: Final = "DELETE FROM mcp_tasks WHERE id = %s"

# ---------------------------------------------------------------- upkeep
#: one process at a time vacuums, or analyzes, a bus (a session lock per kind, released
#: before the connection goes back to the pool); the others skip their turn
TRY_UPKEEP_LOCK: Final = "SELECT pg_try_advisory_lock(hashtext(%s))"
UPKEEP_UNLOCK: Final = "SELECT pg_advisory_unlock(hashtext(%s))"
#: the tables every message and every wait turns over (a row inserted, updated, deleted)
VACUUM_CHURN: Final = "VACUUM (ANALYZE) items, waits, history"
#: what a send needs: the planner's figures of a growing backlog (a send leaves no dead row)
ANALYZE_ITEMS: Final = "ANALYZE items"

# ---------------------------------------------------------------- recovery
#: the waits that hold claims: whether their record exists, where they run, their lease.
#: Distinct claimers first, then the join, and never the record itself: a fan-in over
#: 10,000 flights holds 10,000 claims under one record of half a megabyte. {} is IN_INBOX
#: or nothing
CLAIMING_WAITS: Final = sql.SQL(
    "SELECT c.claimed_by, w.id IS NOT NULL, w.host, w.pid, w.pid_start, w.lease_until > now() "
    "FROM (SELECT DISTINCT claimed_by FROM items WHERE claimed_by IS NOT NULL{}) c "
    "LEFT JOIN waits w ON w.id = c.claimed_by"
)
IN_INBOX: Final = sql.SQL(" AND inbox = %s")
RETURN_CLAIMS: Final = "UPDATE items SET claimed_by = NULL WHERE claimed_by = %s RETURNING inbox, sender"
