"""Call records on disk: one JSON line per ended call, one file per day (UTC).

``<records.directory>/calls-2026-12-03.jsonl`` gets the record (:meth:`Call.as_record`) of
every call that ended that day. The event loop only takes the record's snapshot; encoding
and writing run on one thread of their own, in the order calls ended, so a slow or full
disk never holds up a call.

A write that fails (full disk, a directory that vanished, permissions) is undone (the file
is cut back to where it was, so no half line is left), logged as an error naming the call,
the file and what to do, and counted (``voice_agent_errors_total{kind="call_record"}``);
the record is kept in memory and written before the next one, so a disk that fills up and
is freed again loses nothing. Beyond :data:`MAX_WAITING` records waiting, the oldest is
dropped with an error naming it. Each line is appended with one ``write`` on a file opened
``O_APPEND`` and synced, so a crash loses at most the line being written.

Files are created readable by the server's user only (``0600``): they hold what callers said.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from loguru import logger

from agent.calls import Call

MAX_WAITING = 1000
"""Records kept in memory while the disk refuses them; about 2-20 MB."""


class RecordDirectoryError(RuntimeError):
    """``records.directory`` cannot be used; the message says why and what to do."""


def record_file(directory: Path, ended_at: float) -> Path:
    """The day file a call that ended at ``ended_at`` (Unix time) goes to."""
    return directory / time.strftime("calls-%Y-%m-%d.jsonl", time.gmtime(ended_at))


class RecordSink:
    """Appends each ended call's record to its day's JSON Lines file, off the event loop.

    Register :meth:`write` with :meth:`CallRegistry.when_ended`; await :meth:`close` at
    shutdown, after the last call ended.

    Args:
        directory: Where the day files go; created (``0700``) if missing.
        on_error: Told of each failed write (e.g. a metrics counter); called on the writer
            thread.

    Raises:
        RecordDirectoryError: the directory cannot be created or written.
    """

    def __init__(self, directory: Path, *, on_error: Callable[[], None] | None = None) -> None:
        self.directory = directory
        check_directory(directory)
        self._on_error = on_error
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="call-records")
        self._waiting: deque[tuple[str, Path, dict[str, Any]]] = deque()  # writer thread only
        self._closed = False

    def write(self, call: Call) -> None:
        """Queue ``call``'s final record for its day file. Never raises, never blocks."""
        if self._closed:
            logger.error(f"call record of {call.id} not written: the record writer is closed")
            return
        try:
            record = call.as_record()
            path = record_file(self.directory, call.ended_at or time.time())
            self._executor.submit(self._append, call.id, path, record)
        except Exception:
            logger.exception(f"call record of {call.id} not written")

    async def close(self) -> None:
        """Write what is queued, then report any record the disk still refuses as lost."""
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._executor.shutdown, wait=True)
        if self._waiting:
            lost = ", ".join(call_id for call_id, _, _ in self._waiting)
            logger.error(
                f"{len(self._waiting)} call records could not be written to {self.directory} "
                f"and are lost: {lost}"
            )

    # ------------------------------------------------------------------ writer thread

    def _append(self, call_id: str, path: Path, record: dict[str, Any]) -> None:
        self._waiting.append((call_id, path, record))
        while self._waiting:
            waiting_id, waiting_path, waiting_record = self._waiting[0]
            try:
                _append_line(waiting_path, _encode(waiting_record))
            except (OSError, ValueError) as exc:
                self._failed(waiting_id, waiting_path, exc)
                break
            self._waiting.popleft()
        while len(self._waiting) > MAX_WAITING:
            dropped, _, _ = self._waiting.popleft()
            logger.error(
                f"call record of {dropped} LOST: more than {MAX_WAITING} records are waiting "
                f"for {self.directory} to take them"
            )

    def _failed(self, call_id: str, path: Path, exc: Exception) -> None:
        logger.error(
            f"call record of {call_id} not written to {path}: {exc}. It is kept in memory "
            f"({len(self._waiting)} waiting, at most {MAX_WAITING}) and written with the next "
            "record once the disk takes it: free space on that disk or fix records.directory"
        )
        if self._on_error is not None:
            with contextlib.suppress(Exception):
                self._on_error()


def _encode(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def _append_line(path: Path, line: bytes) -> None:
    """Append ``line`` in one write and sync it; on failure cut the file back to its size."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, line)
            if written != len(line):
                raise OSError(f"short write ({written} of {len(line)} bytes)")
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


def check_directory(directory: Path) -> None:
    """Create ``directory`` if missing and check it can be written.

    Raises:
        RecordDirectoryError: it cannot.
    """
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise RecordDirectoryError(
            f"records.directory {directory} cannot be created ({exc}); point "
            "VOICE_AGENT_RECORDS__DIRECTORY at a writable directory, or unset it to keep no "
            "call records on disk"
        ) from exc
    if not os.access(directory, os.W_OK | os.X_OK):
        raise RecordDirectoryError(
            f"records.directory {directory} is not writable by this user; fix its "
            "permissions or point VOICE_AGENT_RECORDS__DIRECTORY elsewhere"
        )
