"""The store's lease on PostgreSQL: a session advisory lock on a connection of its own.

The holder's session names it in its ``application_name`` (``envcheck:PID:SINCE:HOST``, at
most 63 bytes: a long host name is cut), which another daemon reads from ``pg_locks`` joined
with ``pg_stat_activity``: no table, no migration. The server drops the lock with the session:
at once when the holder's process dies (its socket closes), and within about 16 s when its
host vanishes (keepalives this connection asks of the server). The holder itself gives up on
a server that has not acknowledged it for 5 s, so a holder cut off from the database knows it
before the server lets anyone else take the lease.

Advisory locks are per database, and belong to a session: a pooler in transaction mode
between the daemon and PostgreSQL cannot hold one (the daemon would find it lost at every
check); point the daemon at PostgreSQL itself, or a session-mode pool.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import URL

from envcheck.core.errors import StoreError
from envcheck.store.database import open_failure, redact
from envcheck.store.holder import Holder
from envcheck.store.sql import PG_CONNECT_TIMEOUT_S

__all__ = ["KEY", "AdvisoryLock", "application_name", "holder_of"]

# Any constant will do, the same in every envcheck process ("envcleas"); not the migrations'.
KEY = 0x656E76636C656173
_CLASSID, _OBJID = KEY >> 32, KEY & 0xFFFFFFFF  # how pg_locks shows a bigint key
_PREFIX = "envcheck:"
# The server's side: a vanished client's session ends ~10 s + 3 x 2 s after it last spoke; a
# statement never hangs.
_SERVER = ("-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=2 -c tcp_keepalives_count=3 "
           "-c statement_timeout=5000")
# The client's side: a server that acknowledges nothing for 5 s is gone.
_CLIENT: dict[str, Any] = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 1,
                           "keepalives_count": 3, "tcp_user_timeout": 5000}

_TRY_SQL = "SELECT pg_try_advisory_lock(%s)"
_NAME_SQL = "SELECT set_config('application_name', %s, false)"
_HELD_SQL = """
SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()
  AND classid = %s AND objid = %s AND objsubid = 1
"""
_HOLDER_SQL = """
SELECT a.application_name, host(a.client_addr), a.pid, a.backend_start
FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s AND l.objid = %s
  AND l.objsubid = 1 AND l.database = (SELECT oid FROM pg_database
                                       WHERE datname = current_database())
"""


def application_name(holder: Holder) -> str:
    return f"{_PREFIX}{holder.pid}:{int(holder.since.timestamp())}:{holder.host}"[:63]


def holder_of(name: str, address: str | None, backend: int, started: datetime) -> Holder:
    """The holder its session's name says; another session holding the key, as it is seen."""
    pid, _, rest = name.removeprefix(_PREFIX).partition(":")
    since, _, host = rest.partition(":")
    if name.startswith(_PREFIX) and pid.isdigit() and since.isdigit():
        return Holder(host, int(pid), datetime.fromtimestamp(int(since), UTC))
    return Holder(f"{address or 'a local socket'} (session {name!r}, server pid {backend})",
                  backend, started)


class AdvisoryLock:
    def __init__(self, url: URL) -> None:
        self._url = url
        self.where = redact(url)
        self._conn: Any = None  # psycopg.Connection: the lock's session, or a standby's
        self._locked = False
        self.previous: Holder | None = None

    def _connect(self, me: Holder) -> Any:
        try:
            import psycopg
            from psycopg.conninfo import conninfo_to_dict
        except ImportError:
            raise StoreError("PostgreSQL needs its driver: pip install 'envcheck[postgres]'"
                             ) from None
        conninfo = self._url.set(drivername="postgresql").render_as_string(hide_password=False)
        given = conninfo_to_dict(conninfo)
        extra: dict[str, Any] = {**_CLIENT, "options": f"{given.get('options', '')} {_SERVER}"
                                 .strip(), "application_name": application_name(me)}
        if "connect_timeout" not in given:  # a URL's own ?connect_timeout= wins
            extra["connect_timeout"] = PG_CONNECT_TIMEOUT_S
        try:
            return psycopg.connect(conninfo, autocommit=True, **extra)
        except psycopg.Error as exc:
            raise open_failure(self._url, exc) from None

    def _run(self, me: Holder | None, sql: str, *params: Any) -> list[Any]:
        """Rows of ``sql`` on the lease's connection (made if need be); any failure drops
        it (and with it the lock): StoreError."""
        import psycopg

        if self._conn is None or self._conn.closed:
            self._locked = False
            self._conn = self._connect(me or Holder.me())
        try:
            return list(self._conn.execute(sql, params).fetchall())
        except psycopg.Error as exc:
            self.unlock()
            raise StoreError(f"the store's lease on {self.where}: {exc}") from None

    def try_lock(self, me: Holder) -> bool:
        if self._locked:
            self.unlock()  # a session of ours the watch found wanting
        [(got,)] = self._run(me, _TRY_SQL, KEY)
        if got:
            self._run(me, _NAME_SQL, application_name(me))  # since: now, not the connect
            self._locked = True
        return bool(got)

    def holder(self) -> Holder | None:
        rows = self._run(None, _HOLDER_SQL, _CLASSID, _OBJID)
        return holder_of(*rows[0]) if rows else None

    def held(self) -> bool:
        if not self._locked:
            return False
        try:
            [(count,)] = self._run(None, _HELD_SQL, _CLASSID, _OBJID)
        except StoreError:
            return False
        return bool(count == 1)

    def unlock(self) -> None:
        self._locked = False
        if self._conn is not None:
            with contextlib.suppress(Exception):  # the session's end drops the lock
                self._conn.close()
            self._conn = None
