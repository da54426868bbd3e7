"""The replication stream of the connector's slot: pgoutput messages from a WAL position on,
read without blocking, and the standby status updates that tell the server how far it
may recycle WAL (only positions a checkpoint holds: a change is never lost to the slot).

psycopg 3 has no replication API; its libpq layer (``pgconn``) speaks the COPY BOTH
sub-protocol that ``START_REPLICATION`` opens, which is all a logical stream needs.
"""

from __future__ import annotations

import contextlib
import logging
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
from psycopg import pq

from sluicegate.api.errors import SourceError

from .catalog import DatabaseUnreachable, connect
from .lsn import format_lsn
from .options import PostgresOptions
from .pgoutput import POSTGRES_EPOCH_MS, Begin, Commit, Message, decode

log = logging.getLogger("sluicegate.connectors.postgres")

STATUS_INTERVAL_S = 10.0
"""How often the server hears from the stream even when nothing is confirmed: well within
its ``wal_sender_timeout`` (60 s by default)."""


@dataclass(frozen=True, slots=True)
class StreamMessage:
    wal_start: int
    message: Message


class ReplicationStream:
    def __init__(self, options: PostgresOptions, start_lsn: int) -> None:
        self._options = options
        self._conn = connect(options, replication=True)
        self._pgconn = self._conn.pgconn
        self._confirmed = start_lsn
        self._in_transaction = False
        self._last_end = start_lsn
        """The end of the last commit received."""
        self._quiet: tuple[int, int] | None = None
        """The last keepalive between transactions: where the server had sent everything
        to, and the end of the last commit received before it."""
        self._last_status = 0.0
        self._start(start_lsn)

    def _start(self, lsn: int) -> None:
        command = (
            f"START_REPLICATION SLOT {self._options.slot} LOGICAL {format_lsn(lsn)} "
            f"(proto_version '1', publication_names '{self._options.publication}')"
        )
        self._pgconn.send_query(command.encode())
        result = self._pgconn.get_result()
        if result is None or result.status != pq.ExecStatus.COPY_BOTH:
            message = "" if result is None else (result.error_message or b"").decode(errors="replace").strip()
            if "is active for PID" in message:  # the walsender of a broken connection, not gone yet
                raise DatabaseUnreachable(f"slot {self._options.slot} is still held by a former stream: {message}")
            raise SourceError(
                f"cannot stream the changes of slot {self._options.slot} (`slot`): {message}"
                + (
                    " (the slot was dropped: it is never created again, which would skip changes)"
                    if "does not exist" in message
                    else ""
                )
            )
        self._pgconn.nonblocking = 1
        log.info("streaming changes of slot %s from %s", self._options.slot, format_lsn(lsn))

    def poll(self, limit: int) -> Iterator[StreamMessage]:
        """Up to ``limit`` messages that have arrived, without waiting for more."""
        self._pgconn.consume_input()
        for _ in range(limit):
            size, data = self._pgconn.get_copy_data(1)
            if size == 0:
                break
            if size < 0:
                self._raise_end()
            payload = bytes(data)
            if payload[:1] == b"w":
                (wal_start,) = struct.unpack_from(">Q", payload, 1)
                message = decode(payload[25:])
                self._note(message)
                yield StreamMessage(wal_start, message)
            elif payload[:1] == b"k":
                sent_to, _, reply = struct.unpack_from(">QQB", payload, 1)
                if not self._in_transaction:
                    self._quiet = (sent_to, self._last_end)
                if reply:
                    self._send_status()
        if time.monotonic() - self._last_status >= STATUS_INTERVAL_S:
            self._send_status()

    def _note(self, message: Message) -> None:
        if isinstance(message, Begin):
            self._in_transaction = True
        elif isinstance(message, Commit):
            self._in_transaction, self._last_end = False, message.end_lsn

    def confirm(self, lsn: int) -> None:
        """Everything before ``lsn`` is durably read: the server may drop the WAL before it.

        Past the last transaction, up to where the server said it had sent everything
        (a keepalive between transactions), there is nothing to read: once ``lsn`` covers
        every transaction received before that keepalive, the slot moves there too. Without
        it the slot stays at the last change of the source's tables while other tables are
        written (the WAL kept grows), and a server's fast shutdown waits for ever for the
        stream to confirm the shutdown's own checkpoint record."""
        target = lsn
        if self._quiet is not None and lsn >= self._quiet[1]:
            target = max(lsn, self._quiet[0])
        if target > self._confirmed:
            self._confirmed = target
            self._send_status()

    def _send_status(self) -> None:
        now_us = (int(time.time() * 1000) - POSTGRES_EPOCH_MS) * 1000
        confirmed = self._confirmed
        status = b"r" + struct.pack(">QQQqB", confirmed, confirmed, confirmed, now_us, 0)
        self._pgconn.put_copy_data(status)
        self._pgconn.flush()
        self._last_status = time.monotonic()

    def _raise_end(self) -> None:
        result = self._pgconn.get_result()
        message = "" if result is None else (result.error_message or b"").decode(errors="replace").strip()
        # The server ends the stream only when it goes away (a restart, a terminated backend):
        # one more lost connection, read on from where the stream was.
        raise DatabaseUnreachable(
            f"the server ended the change stream of slot {self._options.slot}: {message or 'closed'}"
        )

    def close(self) -> None:
        with contextlib.suppress(psycopg.Error):  # a broken connection: nothing left to release
            self._conn.close()
