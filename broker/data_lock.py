"""One broker per data directory: an exclusive lock on ``<dataDirectory>/LOCK``.

Two brokers writing one directory would each keep their own view of the ledgers and cursors
(messages produced through one are invisible to the other's subscriptions), so the second one
must refuse to start, as ZooKeeper and BookKeeper refuse with their lock files. The lock is
``flock`` on an open file held for the broker's life: the kernel drops it when the process
dies, even by kill -9, so a stale LOCK file never blocks a restart.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = "LOCK"


class DataDirectoryInUseError(Exception):
    """Another live broker holds the data directory (an operator error, not a client's)."""


class DataDirectoryLock:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`DataDirectoryInUseError` naming the holder."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise DataDirectoryInUseError(
                f"data directory {self.path.parent} is in use by another broker "
                f"(pid {holder}, lock {self.path}): stop it or use another data directory"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor drops the flock
