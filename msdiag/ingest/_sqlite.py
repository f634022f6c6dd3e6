"""Opening an SQLite database read-only without writing beside it, and querying it.

A database is opened read-only and immutable (``mode=ro&immutable=1``), which creates no -wal /
-shm / -journal file (plain ``mode=ro`` does create them beside a WAL database). When the profiler
left a non-empty -wal or -journal beside it, the database and that file are copied to a temporary
folder and opened there, so their content is read without touching the user's folder. Only
:func:`msdiag.ingest.engine.connect` calls :func:`open_db`.

A database is data, never code: only its ordinary tables are listed (a view or a virtual table is
not a profiler table), and an authorizer installed before the first query refuses to run any SQL the
file carries (a read through a view, a trigger) and any recursive query, at prepare time. A view
named like a profiler table (``TASK`` over an endless recursive CTE) therefore fails at once, as a
damaged database, instead of running without end.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import pandas as pd

from msdiag import model
from msdiag.errors import ParseError
from msdiag.ingest._csv import NA_VALUES

SQLITE_MAGIC = b"SQLite format 3\x00"
DB_NULLS = ("NULL", "N/A")  # text the exports write for a missing value (msprof writes NULL shapes)


class DbDamaged(ParseError):
    """A query failed: the database is truncated or corrupt (never a failed optional table)."""


def check_header(path: Path) -> None:
    """Raise ParseError when the file is empty, not SQLite, or shorter than its header says."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(100)
    except OSError as e:
        raise ParseError(path, f"cannot be read ({e.strerror or e})") from None
    if size == 0:
        raise ParseError(path, "the file is empty (0 bytes): expected an SQLite database")
    if not head.startswith(SQLITE_MAGIC):
        raise ParseError(path, "is not an SQLite database (its first bytes are not 'SQLite format 3')")
    if len(head) < 100:
        raise ParseError(path, f"is truncated: {size} bytes, shorter than the 100-byte SQLite header")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    valid = head[24:28] == head[92:96]  # the in-header size is trusted only when this matches
    if valid and pages and page_size * pages > size:
        raise ParseError(
            path,
            f"is truncated: its header counts {pages} pages of {page_size} bytes ({page_size * pages} bytes) "
            f"but the file holds {size} bytes",
        )


_NOT_AUTHORIZED = "not authorized"
_SQLITE_AUTH = 23  # sqlite3.h: "authorization denied" (the authorizer said no)
_MAX_NAME = 60  # characters of a table name quoted in an error


def _authorize(action: int, _arg1: str | None, _arg2: str | None, _db: str | None, inner: str | None) -> int:
    """SQLite authorizer: deny what would run SQL stored in the file (``inner`` names the view or
    trigger an access comes from) and recursive queries; msdiag's own queries need neither."""
    if inner is not None or action == sqlite3.SQLITE_RECURSIVE:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


class Db:
    """One open database: its tables and columns, STRING_IDS, and queries that name the file on error."""

    def __init__(self, path: Path, con: sqlite3.Connection):
        self.path = path
        self.con = con
        con.set_authorizer(_authorize)
        self.tables: dict[str, list[str]] = {}
        self.not_tables: list[str] = []  # views and virtual tables: listed in errors, never read
        rows = self.query("SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'view')")
        for kind, name, sql in rows:
            if kind == "table" and not str(sql or "").lstrip().upper().startswith("CREATE VIRTUAL"):
                self.tables[name] = [r[1] for r in self.query(f'PRAGMA table_info("{name}")')]
            else:
                self.not_tables.append(str(name))
        self._strings: pd.Series | None = None

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return self.con.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as e:
            if getattr(e, "sqlite_errorcode", None) == _SQLITE_AUTH or _NOT_AUTHORIZED in str(e):
                raise DbDamaged(self.path, self._refused()) from None
            raise DbDamaged(self.path, f"cannot be read as an SQLite database ({e}): the file is truncated or corrupt") from None

    def _refused(self) -> str:
        """Why a query was refused by the authorizer: the views / virtual tables the file holds."""
        names = ", ".join(repr(n[:_MAX_NAME]) for n in self.not_tables[:3]) or "none listed"
        return (f"a query would run SQL stored in the file (views / virtual tables: {names}): a profiler export "
                "holds only tables, and msdiag never runs a database's own SQL")

    def has(self, table: str, *cols: str) -> bool:
        have = self.tables.get(table)
        return have is not None and all(c in have for c in cols)

    def col(self, table: str, *alternatives: str) -> str | None:
        """The first of ``alternatives`` that ``table`` has, quoted for SQL; None when none."""
        have = self.tables.get(table, [])
        for c in alternatives:
            if c in have:
                return f'"{c}"'
        return None

    def require(self, table: str, *cols: str) -> None:
        if table in self.not_tables:
            raise ParseError(self.path, f"{table} is a view or a virtual table, not a table: a profiler export holds only "
                                        "tables, and msdiag never runs a database's own SQL")
        missing = [c for c in cols if c not in self.tables.get(table, [])]
        if missing:
            raise ParseError(self.path, f"table {table} lacks column(s) {', '.join(missing)}: not a profiler export msdiag reads")

    def count(self, table: str) -> int:
        return int(self.query(f'SELECT COUNT(*) FROM "{table}"')[0][0])

    def strings(self) -> pd.Series:
        """STRING_IDS as a Series id -> value (empty when the table is absent)."""
        if self._strings is None:
            if self.has("STRING_IDS", "id", "value"):
                rows = self.query("SELECT id, value FROM STRING_IDS")
                self._strings = pd.Series([r[1] for r in rows], index=[r[0] for r in rows], dtype=object)
            else:
                self._strings = pd.Series(dtype=object)
        return self._strings

    def names(self, codes: Sequence[Any] | pd.Series) -> pd.Series:
        """STRING_IDS values of integer ids; a value that is already text is kept (some exports inline it)."""
        s = pd.Series(list(codes), dtype=object)
        out = s.map(self.strings())
        text = s.map(lambda v: isinstance(v, str))
        out[text] = s[text]
        return clean_strings(out)

    def ids_of(self, values: Sequence[str]) -> dict[int, str]:
        strings = self.strings()
        want = set(values)
        return {int(i): v for i, v in strings.items() if v in want}


@contextmanager
def open_db(path: Path) -> Iterator[Db]:
    """Open a database without writing anything beside it (see the module doc)."""
    path = Path(path)
    check_header(path)
    sidecars = [path.with_name(path.name + s) for s in ("-wal", "-journal")]
    live = [s for s in sidecars if s.exists() and s.stat().st_size > 0]
    tmp: str | None = None
    con: sqlite3.Connection | None = None
    try:
        if live:
            # the file's latest content is partly in the sidecar: read a private copy of both
            tmp = tempfile.mkdtemp(prefix="msdiag-db-")
            target = Path(tmp) / path.name
            shutil.copyfile(path, target)
            for s in live:
                shutil.copyfile(s, Path(tmp) / s.name)
            uri = f"{target.resolve().as_uri()}?mode=rw"
        else:
            uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"
        try:
            con = sqlite3.connect(uri, uri=True)
        except sqlite3.Error as e:
            raise ParseError(path, f"cannot be opened as an SQLite database ({e})") from None
        yield Db(path, con)
    finally:
        if con is not None:
            con.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def clean_strings(s: pd.Series) -> pd.Series:
    out = pd.Series(s, dtype=object).map(lambda v: v.strip() if isinstance(v, str) else None)
    out = out.where(~(out.isin(NA_VALUES) | out.isin(DB_NULLS)), None)
    return out.astype(model.STR)
