"""Where a ``seqrec tune`` study lives: Optuna's RDB storage (SQLite by default, any SQLAlchemy URL, PostgreSQL
for several machines) with heartbeats and retries, and the study-wide lock under which a worker counts the trials
and starts one."""

from __future__ import annotations

import contextlib
import logging
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger("seqrec.tune")

MAX_RETRY = 3  # a trial whose worker dies is run again at most this many times


def storage_url(url: str | None, folder: Path) -> str:
    """``url``, or the default SQLite file in the study's folder; ``postgresql://`` through psycopg 3 without psycopg2."""
    if url is None:
        return f"sqlite:///{(folder / 'study.db').resolve()}"
    if url.startswith("postgresql://"):
        try:
            import psycopg2  # noqa: F401
        except ImportError:
            url = "postgresql+psycopg://" + url[len("postgresql://"):]
    return url


def shown(url: str) -> str:
    """A storage URL without its password."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 (a URL that does not parse is shown as given)
        return url


def open_storage(url: str, heartbeat: int | None) -> Any:
    """Optuna's RDBStorage on ``url`` with heartbeats and retries; a one-line ValueError when it cannot be reached."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    engine: dict[str, Any] = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        engine["connect_args"] = {"timeout": 60}  # several workers on one file wait for each other's writes
    elif url.startswith("postgresql"):
        engine["connect_args"] = {"connect_timeout": 10}
    try:
        return optuna.storages.RDBStorage(
            url, engine_kwargs=engine, heartbeat_interval=heartbeat,
            heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                max_retry=MAX_RETRY, inherit_intermediate_values=True) if heartbeat else None,
        )
    except (SQLAlchemyError, ImportError, ValueError) as error:
        reason = " ".join(str(getattr(error, "orig", None) or error).split())[:300]
        raise ValueError(f"--storage {shown(url)}: cannot open it ({reason}); start the database or fix the URL "
                         "(any SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db or sqlite:///path/study.db)") from None


class StudyLock:
    """A lock held across workers while one counts the study's trials and starts one (so the budget is exact).

    SQLite: an ``fcntl`` lock on ``<db>.lock`` beside the file (its workers share a machine); PostgreSQL: a
    session advisory lock. Other databases (MySQL, ...) go without (a log line says so): two workers finishing at
    the same moment may then start one trial more than the budget. ``release()`` may come early (the trial
    releases it as soon as it exists) and is idempotent.
    """

    def __init__(self, url: str, study: str) -> None:
        self.url, self.key = url, zlib.crc32(f"seqrec.tune:{study}".encode())
        self.held = False
        self._file: Any = None
        self._connection: Any = None
        if url.startswith("postgresql"):
            import sqlalchemy

            self._connection = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool).connect()
        elif not url.startswith("sqlite"):
            log.info("no study-wide lock for %s: with several workers the study may end a trial over --trials", shown(url))

    def acquire(self) -> None:
        """Wait for the lock."""
        from sqlalchemy import text

        if self.url.startswith("sqlite"):
            import fcntl

            database = self.url.split("///", 1)[1] if "///" in self.url else ""
            if database and database != ":memory:":
                self._file = open(database + ".lock", "a+")  # noqa: SIM115 (held until release)
                fcntl.flock(self._file, fcntl.LOCK_EX)
        elif self._connection is not None:
            self._connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": self.key})
            self._connection.commit()
        self.held = True

    def release(self) -> None:
        """Let the next worker in (idempotent)."""
        if not self.held:
            return
        from sqlalchemy import text

        self.held = False
        if self._file is not None:
            self._file.close()  # closing the file releases its flock
            self._file = None
        elif self._connection is not None:
            self._connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": self.key})
            self._connection.commit()

    @contextlib.contextmanager
    def held_for(self) -> Iterator[StudyLock]:
        """``with lock.held_for():`` acquire, and release at the end unless released before."""
        self.acquire()
        try:
            yield self
        finally:
            self.release()

    def close(self) -> None:
        """Release and drop the database connection."""
        self.release()
        if self._connection is not None:
            self._connection.close()
