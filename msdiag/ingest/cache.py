"""The rank cache: each rank's canonical tables kept as Arrow, so that a capture is parsed once.

Re-analysing a capture (another report, other rule parameters, a diff) then reads one Arrow file
per pool task instead of parsing its ranks' traces. Layout under the cache folder::

    msdiag-ranks-v<CACHE_FORMAT>/<id[:2]>/<id>     a rank's entry: a name of the file of the ranks stored with it

An entry file holds the ranks one pool task read (one rank where a rank is read alone), and is linked under each
of their entry names (hard links: one file, not one per rank, to create; a copy where the file system has no
hard links). It is one line of JSON, then Arrow IPC streams (LZ4) one after the other:

    {"ranks": [{"key": .., "head": ..}, ...],      per rank of the file: its key (below) and its head: rank,
                                                   family, info (RankInfo), meta, sources, notes and its
                                                   tables' [[column, dtype], ...]; paths relative to the rank
                                                   folder (rooted again at the rank folder as the reading run
                                                   names it: nothing depends on the working folder); both
                                                   null for a rank that could not be stored
     "streams": [{"table": .., "ranks": [k, ...], "rows": [n, ...]}, ...]}
                                                   per stream: the table, the ranks (indexes above) whose rows
                                                   it holds, in order, and how many of each

Each table whose frames are alike in the ranks of the file is one stream of their rows laid end to end (a rank's
table is a row slice of it), any other a stream per rank; each stream's schema names its table (metadata
``msdiag.table``); dtypes are restored from the pandas metadata. Creating, writing and renaming many small files
cost a cold run more than encoding them: a file per table (CACHE_FORMAT 3), then per rank (4), now per task (5).

``id`` hashes the rank folder's absolute path, rank id, format family and the reduction applied,
so one rank folder has one entry (a re-capture in the same place replaces it). The key holds
every file under the rank folder (relative path, size, mtime in ns), msdiag's version, the schema
version (model.SCHEMA_VERSION), CACHE_FORMAT and a hash of msdiag's own source files: an entry is
used only when its file holds a rank of exactly that key, otherwise the rank is parsed again and the entry
rewritten (its name linked to a new file; the old file is freed with its last name).
An entry is validated whole before it is used (the file's header and every stream against it, the rank's head
field by field against the model's types and its key, each table's columns and dtypes against those stored,
canonical tables against the model): one that does not validate (truncated, edited, another version) is
ignored and rebuilt, never an error; a rank whose tables or metadata would not come back identical is not cached.

A cache folder is trusted like code, as ssh trusts ~/.ssh (``untrusted``): one owned by another user
or writable by others is not used. pyarrow>=14.0.1 (14.0.0 unpickles Parquet extension types:
CVE-2023-47248).

The cache is never written inside a capture (checked by the loader). An entry file is written under a
temporary name, linked under a temporary name beside each entry and renamed into place, so a reader never sees
half an entry. pyarrow is imported only when a cache is used.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import secrets
import shutil
import stat
import tempfile
import types
import typing
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msdiag import __version__
from msdiag.errors import InputError
from msdiag.ingest.cachedir import PRIVATE as _PRIVATE
from msdiag.ingest.cachedir import code_fingerprint, untrusted
from msdiag.ingest.cachedir import owner_problem as _owner_problem
from msdiag.ingest.paths import Seen
from msdiag.model import (
    ABSENT,
    FAILED,
    PRESENT,
    SCHEMA_VERSION,
    SKIPPED,
    TABLES,
    UNUSED,
    RankData,
    RankInfo,
    Source,
    concat_alike,
    entries,
    frame_of,
    held_rows,
    row_slices,
)

__all__ = ["CACHE_FORMAT", "CacheStats", "RankCache", "files_of"]

#: Bumped whenever the layout or the encoding of an entry changes.
CACHE_FORMAT = 5  # 2: rank.json holds the rank's RankInfo; 3: paths relative to the rank folder, tables' dtypes;
#                    4: the tables in one file of Arrow IPC streams (tables.arrow), not a Parquet file each;
#                    5: one file (a header line, then the streams) for the ranks of a pool task, linked per rank
_ROOT = f"msdiag-ranks-v{CACHE_FORMAT}"
_MAX_DEPTH = 8  # folders walked under a rank folder for its fingerprint
_TABLE_KEY = b"msdiag.table"  # the schema metadata naming a stream's table


def files_of(folder: Path) -> list[list[Any]]:
    """Every file under ``folder`` (symbolic links followed, each real folder entered once: links
    back to a parent do not multiply the walk): [relative path, size, mtime_ns], sorted."""
    out: list[list[Any]] = []
    seen = Seen()
    # (each entry's relative path built from its folder's, as os.path.relpath(entry, folder) gives it, not computed
    # by relpath: a bench rank's 14 files, 0.12 -> 0.07 ms)
    stack: list[tuple[str | Path, str, int]] = [(folder, "", 0)] if seen.first(folder) else []
    while stack:
        d, rel, depth = stack.pop()
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)  # the same folder wins each time
        except OSError:
            continue
        for e in entries:
            try:
                st = e.stat()  # follows symbolic links
                is_dir = e.is_dir()
            except OSError:
                continue
            if is_dir:
                if depth < _MAX_DEPTH and seen.first(e.path):
                    stack.append((e.path, rel + e.name + os.sep, depth + 1))
            else:
                out.append([rel + e.name, st.st_size, st.st_mtime_ns])
    out.sort()
    return out


@dataclass
class CacheStats:
    """What the cache did during one load (for tests and benchmarks; not part of the report)."""

    hits: int = 0
    misses: int = 0
    written: int = 0
    ignored: list[str] = field(default_factory=list)  # entries found but unusable, with why
    not_cached: list[str] = field(default_factory=list)  # ranks that could not be stored, with why

    def as_dict(self) -> dict[str, Any]:
        return {"hits": self.hits, "misses": self.misses, "written": self.written,
                "ignored": list(self.ignored), "not_cached": list(self.not_cached)}  # fmt: skip


@dataclass(frozen=True)
class RankCache:
    """A cache folder; picklable, so that pool workers write their own entries."""

    root: Path
    code: str  # code_fingerprint() of the process that created it
    reduce_id: str = "none"  # the reduction applied to the stored tables: an opaque id from the caller
    # what get_many converted whole, until the loader takes it (take_cut): (table, the ranks' rows
    # concatenated, each rank's frame: a row slice of it, in order); never pickled (the workers get none)
    _cut: list[tuple[str, Any, list[Any]]] = field(default_factory=list, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_cut": []}

    def take_cut(self) -> list[tuple[str, Any, list[Any]]]:
        """What :meth:`get_many` converted in one go since the last call, for ``Capture.join_tables``:
        (table, the ranks' rows concatenated, each rank's frame of that table, a row slice of it, in
        order); forgotten here once taken."""
        out = list(self._cut)
        self._cut.clear()
        return out

    @classmethod
    def open(cls, folder: str | Path, reduce_id: str = "none") -> RankCache:
        """The cache at ``folder`` for ranks reduced by the reduction ``reduce_id`` identifies (its
        caller's opaque string: it must change whenever the reduction's output may change). A folder
        that cannot be trusted (``untrusted``) is an InputError: the CLI checks first and runs uncached."""
        why = untrusted(folder)
        if why is not None:
            raise InputError(folder, f"cache folder {why}: not used (a cache folder is trusted like code)")
        return cls(Path(folder).expanduser().resolve(), code_fingerprint(), reduce_id)

    # ---- keys ------------------------------------------------------------------------------

    def key(self, rank: int, family: str, path: Path, rank_from: str, captured_ns: int | None) -> dict[str, Any]:
        """What an entry of this rank must have been built from to be used now."""
        return {
            "cache_format": CACHE_FORMAT,
            "schema_version": SCHEMA_VERSION,
            "msdiag_version": __version__,
            "code": self.code,
            "reduce": self.reduce_id,
            "rank": int(rank),
            "family": family,
            "path": str(Path(path).resolve()),
            "rank_from": rank_from,
            "captured_ns": captured_ns,
            "files": files_of(Path(path)),
        }

    def empty(self) -> bool:
        """Whether the cache holds no entry at all (its folder of entries absent, or holding no folder of entries): then
        there is nothing to look up, and a reader need not make the keys of the ranks before it reads them."""
        try:
            with os.scandir(self.root / _ROOT) as found:
                return not any(e.is_dir(follow_symlinks=False) for e in found)
        except OSError:
            return True

    def entry(self, key: dict[str, Any]) -> Path:
        """The entry file's name of ``key``'s rank."""
        ident = entry_name(key)
        return self.root / _ROOT / ident[:2] / ident

    # ---- reading ---------------------------------------------------------------------------

    def get(self, key: dict[str, Any], stats: CacheStats | None = None, path: str | Path | None = None) -> RankData | None:
        """The cached RankData for ``key``, or None (absent, stale or unreadable: then rebuilt); ``path``:
        the rank folder as this run names it (default: its absolute path), which the paths it holds
        are rooted at."""
        return self.get_many([key], stats, None if path is None else [path])[0]

    def get_many(self, keys: list[dict[str, Any]], stats: CacheStats | None = None,
                 paths: Sequence[str | Path] | None = None) -> list[RankData | None]:
        """``get`` for many ranks at once: each entry file is read once however many of the ranks asked for share it
        (the ranks of one pool task), each table of every rank is turned into pandas in one go, then cut back into
        ranks (a conversion per table, not per rank and table: the cost of a warm run of a thousand ranks). Every
        entry is validated whole (its rank's head field by field, each table's columns and dtypes as stored) before
        it is used: anything else is ignored, noted in ``stats`` and the rank parsed again."""
        given = [str(p) for p in paths] if paths is not None else [str(k["path"]) for k in keys]
        files: dict[tuple[int, int], Any] = {}  # (device, inode) -> the file read and checked, or why not
        # reading and LZ4 decoding release the GIL: a few threads read the entries faster
        with ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as pool:
            opened = list(pool.map(self._stat_entry, keys))
            todo: dict[tuple[int, int], Path] = {}  # each file once, by the first of its names asked for
            for key, (ident, _) in zip(keys, opened):
                if ident is not None:
                    todo.setdefault(ident, self.entry(key))
            for file_id, read in zip(todo, pool.map(_pack_file, todo.values())):
                files[file_id] = read
        got: list[tuple[dict[str, Any] | None, dict[str, Any]]] = []
        for key, (ident, why) in zip(keys, opened):
            found: tuple[dict[str, Any] | None, dict[str, Any]] = (None, {})
            try:
                if why is not None:  # not trusted, or not to be read
                    raise _Invalid(why)
                if ident is not None:  # (a file replaced since its stat: its ranks' keys still decide)
                    found = _rank_of(files[ident], key)
            except _Invalid as e:
                _note(stats, "ignored", f"{self.entry(key)}: {e}")
            got.append(found)
        files.clear()
        heads = [h for h, _ in got]
        frames, broken, dtypes, cut = _to_pandas([t for _, t in got])
        self._cut.extend(cut)
        del got
        out: list[RankData | None] = []
        for i, (key, head, tables) in enumerate(zip(keys, heads, frames)):
            rd = None
            if head is not None:
                try:
                    if i in broken:
                        raise _Invalid(broken[i])
                    rd = _restore(head, tables, given[i], dtypes[i])
                except _Invalid as e:
                    _note(stats, "ignored", f"{self.entry(key)}: {e}")
            out.append(rd)
        return out

    def _stat_entry(self, key: dict[str, Any]) -> tuple[tuple[int, int] | None, str | None]:
        """(the device and inode of ``key``'s entry file, None); (None, None) when there is none; (None, why) when it
        is not trusted or cannot be stat'ed."""
        d = self.entry(key)
        try:
            for folder in (d.parent.parent, d.parent, d):
                st = os.stat(folder)
                why = _owner_problem(st)
                if why is not None:
                    return None, f"{folder} {why}"
        except FileNotFoundError:
            return None, None  # absent: a miss, not a doubt
        except OSError as e:
            return None, f"{type(e).__name__}: {e}"
        if not stat.S_ISREG(st.st_mode):
            return None, f"{d} is not a file"
        return (st.st_dev, st.st_ino), None

    # ---- writing ---------------------------------------------------------------------------

    def put(self, key: dict[str, Any], rd: RankData) -> str | None:
        """Store ``rd`` under ``key``: None when stored, else why it could not be stored exactly."""
        return self.put_many([key], [rd])[0]

    def put_many(self, keys: Sequence[dict[str, Any] | None], ranks: list[RankData],
                 wholes: dict[str, Any] | None = None) -> list[str | None]:
        """Store each rank of ``ranks`` under its key (None: not stored) in one file, linked under each rank's entry
        name (a hard link; a copy where the file system has none): per rank, None when stored, else why it could not
        be stored exactly. ``wholes``: ``model.concat_alike(ranks)`` where already made."""
        # the columns and dtypes of a table joined for the file are its ranks' (row slices of it): named once
        joined = concat_alike(ranks) if wholes is None else wholes
        named = {name: _dtypes(whole) for name, whole in joined.items()}
        heads = [_rank_json(rd, named) if key is not None else None for key, rd in zip(keys, ranks)]
        out: list[str | None] = [
            None if key is None or h is not None else f"rank {rd.rank}: its metadata does not survive JSON unchanged"
            for key, rd, h in zip(keys, ranks, heads)
        ]
        stored = [k for k, h in enumerate(heads) if h is not None]
        if not stored:
            return out
        top = self.root / _ROOT
        try:
            top.mkdir(mode=_PRIVATE, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".pack.", dir=top)
        except OSError as e:
            for k in stored:
                out[k] = f"rank {ranks[k].rank}: cannot write in {self.root} ({e.strerror or e})"
            return out
        try:
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(memoryview(_pack_bytes(keys, ranks, heads, joined)))
            except Exception as e:  # noqa: BLE001 - ranks that cannot be stored are parsed next time
                for k in stored:
                    out[k] = f"rank {ranks[k].rank}: {type(e).__name__}: {e}"
                return out
            for k in stored:
                out[k] = self._link(tmp, keys[k], ranks[k].rank)  # type: ignore[arg-type]
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return out

    def _link(self, tmp: str, key: dict[str, Any], rank: int) -> str | None:
        """``tmp`` put in place as ``key``'s entry (replacing any): None, or why not."""
        d = self.entry(key)
        named = d.parent / f".{d.name}.{os.getpid()}.{secrets.token_hex(4)}"
        try:
            d.parent.mkdir(mode=_PRIVATE, exist_ok=True)
            try:
                os.link(tmp, named)
            except OSError:  # no hard links here (some file systems): a copy
                shutil.copyfile(tmp, named)
            os.replace(named, d)  # a reader sees the old entry or the new one, whole
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(named)
            return f"rank {rank}: cannot write in {self.root} ({e.strerror or e})"
        return None


def entry_name(key: dict[str, Any]) -> str:
    """The name of a rank's entry: a hash of its folder's absolute path, rank, family and reduction (one entry per rank
    folder and reduction, whatever its files hold)."""
    return hashlib.sha256(json.dumps([key["path"], key["rank"], key["family"], key["reduce"]]).encode()).hexdigest()[:40]


def _pack_bytes(keys: Sequence[dict[str, Any] | None], ranks: list[RankData], heads: list[str | None],
                joined: dict[str, Any]) -> Any:
    """The entry file of ``ranks`` (see the module's docstring): its header line, then each table's Arrow stream
    (``joined``: ``model.concat_alike(ranks)``)."""
    streams: list[tuple[dict[str, Any], Any]] = []
    for name, whole in joined.items():
        of = [k for k, r in enumerate(ranks) if name in r.tables]
        streams.append(({"table": name, "ranks": of, "rows": [held_rows(ranks[k], name) for k in of]}, whole))
    for k, r in enumerate(ranks):
        if heads[k] is not None:
            # (by name: a table of ``joined`` is not cut from its whole here, Frames.items would cut every one)
            streams.extend(({"table": n, "ranks": [k], "rows": [len(r.tables[n])]}, r.tables[n]) for n in r.tables
                           if n not in joined)
    entries = ",".join('{"key":null,"head":null}' if h is None else
                       '{"key":' + json.dumps(key, ensure_ascii=False) + ',"head":' + h + "}" for key, h in zip(keys, heads))
    header = '{"ranks":[' + entries + '],"streams":' + json.dumps([m for m, _ in streams], ensure_ascii=False) + "}\n"
    import pyarrow as pa

    sink = pa.BufferOutputStream()  # the file written in one call (a file sink takes a write per message and buffer)
    sink.write(header.encode("utf-8"))
    _write_streams(sink, [(m["table"], df) for m, df in streams])
    return sink.getvalue()


def _write_streams(sink: Any, tables: list[tuple[str, Any]]) -> None:
    """An Arrow IPC stream per (table name, DataFrame), one after the other, each schema naming its table
    (LZ4-compressed buffers: a fraction of the cost of Parquet's encoding)."""
    import pyarrow as pa

    options = pa.ipc.IpcWriteOptions(compression="lz4", use_threads=False)
    for name, df in tables:
        t = _arrow_table(df)
        t = t.replace_schema_metadata({**(t.schema.metadata or {}), _TABLE_KEY: name.encode()})
        with pa.ipc.new_stream(sink, t.schema, options=options) as w:
            w.write_table(t)


#: The schema (with pyarrow's pandas metadata) ``Table.from_pandas`` gave a frame, by what it depends on:
#: the columns' names, their dtypes and Arrow types (a frame without ``attrs``; see _arrow_table).
_SCHEMAS: dict[tuple[Any, ...], Any] = {}


def _arrow_table(df: Any) -> Any:
    """``pa.Table.from_pandas(df, preserve_index=False)``, the same table to the byte, at a fraction of
    its cost per column on the small frames of a rank.

    from_pandas converts each column with ``pa.array(values, from_pandas=True)`` and describes the
    frame in its schema's pandas metadata, which depends on nothing but the columns' names, dtypes
    and Arrow types (and ``df.attrs``, empty here). So the columns are converted from the frame's
    arrays directly and the schema is the one from_pandas gave the first frame of the same names,
    dtypes and types in this process (that first frame goes through from_pandas itself). Any other
    frame (an object column, attrs, names that are not distinct strings, another pandas) takes
    from_pandas."""
    import pyarrow as pa

    arrays = _column_arrays(df)
    if arrays is None:
        return pa.Table.from_pandas(df, preserve_index=False, nthreads=1)  # no thread pool per table
    values, converted = arrays
    key = (tuple(df.columns), tuple(v.dtype for v in values), tuple(a.type for a in converted))
    schema = _SCHEMAS.get(key)
    if schema is None:
        t = pa.Table.from_pandas(df, preserve_index=False, nthreads=1)
        if t.schema.types == list(key[2]):
            _SCHEMAS[key] = t.schema
        return t
    return pa.Table.from_arrays(converted, schema=schema)


def _column_arrays(df: Any) -> tuple[list[Any], list[Any]] | None:
    """(each column's values, the same as Arrow) of a frame whose columns convert by their values alone:
    numpy numbers and booleans, pandas' nullable numbers, booleans and strings; None for any other frame."""
    import numpy as np
    import pyarrow as pa
    from pandas.arrays import ArrowStringArray, BooleanArray, FloatingArray, IntegerArray, StringArray

    iget = getattr(getattr(df, "_mgr", None), "iget_values", None)  # a column's array, no Series built
    names = list(df.columns)
    if iget is None or df.attrs or not all(type(n) is str for n in names) or len(set(names)) != len(names):
        return None
    values = [iget(i) for i in range(len(names))]
    for v in values:
        if isinstance(v, np.ndarray) and v.dtype.kind in "biuf":
            continue
        if type(v) not in (IntegerArray, FloatingArray, BooleanArray, StringArray, ArrowStringArray):
            return None
    return values, [pa.array(v, from_pandas=True) for v in values]


def read_entry_file(data: bytes) -> tuple[Any, list[Any]]:
    """An entry file's header (parsed JSON, unchecked) and its Arrow streams' tables in order; _Invalid when it is
    not an entry file."""
    import pyarrow as pa

    line = data.find(b"\n")
    if line < 0:
        raise _Invalid("no header line")
    try:
        header = json.loads(data[:line].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise _Invalid(f"header: {type(e).__name__}: {e}") from None
    buf = pa.py_buffer(data)
    src = pa.BufferReader(buf)
    src.seek(line + 1)
    tables = []
    try:
        while src.tell() < buf.size:
            tables.append(pa.ipc.open_stream(src).read_all())
    except (pa.ArrowInvalid, OSError) as e:
        raise _Invalid(f"stream {len(tables) + 1}: {type(e).__name__}: {e}") from None
    return header, tables


def _pack_file(path: Path) -> tuple[list[Any], list[tuple[str, list[int], list[int], Any]]] | str:
    """:func:`_pack_read` of the file at ``path``, or why it cannot be read."""
    try:
        data = path.read_bytes()
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    return _pack_read(data)


def _pack_read(data: bytes) -> tuple[list[Any], list[tuple[str, list[int], list[int], Any]]] | str:
    """An entry file read and checked whole (its header's shape, each stream naming its table and holding the rows the
    header says, nothing after the last): (the ranks' {key, head}, [(table, ranks, rows, Arrow table), ...]), or why it
    is not usable."""
    try:
        header, tables = read_entry_file(data)
        if not isinstance(header, dict) or set(header) != {"ranks", "streams"}:
            raise _Invalid("the header is not {ranks, streams}")
        ranks, metas = header["ranks"], header["streams"]
        if not isinstance(ranks, list) or not all(isinstance(r, dict) and set(r) == {"key", "head"} for r in ranks):
            raise _Invalid("the header's ranks are malformed")
        if not isinstance(metas, list) or len(metas) != len(tables):
            raise _Invalid(f"{len(tables)} streams where the header lists {len(metas) if isinstance(metas, list) else 'none'}")
        streams = []
        for m, t in zip(metas, tables):
            if not (isinstance(m, dict) and set(m) == {"table", "ranks", "rows"} and isinstance(m["table"], str)
                    and _conforms(m["ranks"], list[int]) and _conforms(m["rows"], list[int])
                    and len(m["ranks"]) == len(m["rows"]) and all(0 <= k < len(ranks) for k in m["ranks"])
                    and m["ranks"] == sorted(set(m["ranks"])) and all(n >= 0 for n in m["rows"])):
                raise _Invalid("a stream of the header is malformed")
            named = (t.schema.metadata or {}).get(_TABLE_KEY)
            if named != m["table"].encode():
                raise _Invalid(f"the stream where {m['table']} is stored holds {named!r}")
            if sum(m["rows"]) != t.num_rows:
                raise _Invalid(f"{m['table']}: {t.num_rows} rows where the header says {sum(m['rows'])}")
            streams.append((m["table"], m["ranks"], m["rows"], t))
        return ranks, streams
    except _Invalid as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - any damage to an entry means: parse the rank again
        return f"{type(e).__name__}: {e}"


def _rank_of(got: Any, key: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(the head of ``key``'s rank checked against it, its tables as Arrow) in an entry file as _pack_read gave it;
    (None, {}) when the file holds no rank of that key (stale: a source file, msdiag or the reduction changed);
    _Invalid when the file or that rank's part of it does not validate."""
    if isinstance(got, str):
        raise _Invalid(got)
    ranks, streams = got
    k = next((k for k, r in enumerate(ranks) if r["key"] == key), None)
    if k is None:
        return None, {}
    head = _checked_head(ranks[k]["head"], key)
    tables = {}
    for name, of, rows, t in streams:
        if k not in of:
            continue
        if name in tables or name not in head["tables"]:
            raise _Invalid(f"{name} is stored {'twice' if name in tables else 'but not in the rank head'}")
        if t.schema.names != [c for c, _ in head["tables"][name]]:
            raise _Invalid(f"{name} holds columns {t.schema.names[:8]}, not the ones stored")
        j = of.index(k)
        tables[name] = t if len(of) == 1 else t.slice(sum(rows[:j]), rows[j])
    missing = [n for n in head["tables"] if n not in tables]
    if missing:
        raise _Invalid(f"{', '.join(missing)} not stored")
    return head, tables


def _note(stats: CacheStats | None, which: str, text: str) -> None:
    if stats is not None:
        getattr(stats, which).append(text)


# ---- a rank's head: written with paths relative to the rank folder, read back validated ---------------


class _Invalid(ValueError):
    """An entry that does not validate: ignored and rebuilt."""


_HEAD_KEYS = frozenset({"rank", "family", "info", "meta", "sources", "notes", "tables"})
_STATUSES = (PRESENT, ABSENT, FAILED, UNUSED, SKIPPED)


def _relative(path: str | None, rank_path: str) -> str | None:
    """``path`` relative to the rank folder when it lies under it (so an entry does not depend on the
    working folder of the run that wrote it), else absolute."""
    if path is None:
        return None
    rel = os.path.relpath(path, rank_path)
    return os.path.abspath(path) if rel == os.pardir or rel.startswith(os.pardir + os.sep) else rel


def _rooted(path: str | None, rank_path: str) -> str | None:
    """The inverse of ``_relative`` for this run: rooted at the rank folder as this run names it."""
    if path is None or os.path.isabs(path):
        return path
    return str(Path(rank_path) / path)


def _rank_json(rd: RankData, named: dict[str, list[list[str]]] | None = None) -> str | None:
    """The head of ``rd`` in an entry file (its JSON text), or None when its metadata would not come back from JSON
    unchanged. ``named``: tables' [[column, dtype], ...] known already (tables of which ``rd``'s frame is a row slice)."""
    info = rd.info.to_json()
    info["info_json"] = _relative(info.get("info_json"), rd.path)
    # a Source's fields as they are (asdict would copy them deeply, only for them to be written)
    fields, width = _SOURCE_FIELDS, len(_SOURCE_FIELDS)
    sources = [{**(vars(s) if len(vars(s)) == width else {f: getattr(s, f) for f in fields}), "path": _relative(s.path, rd.path)}
               for s in rd.sources]  # (a Source's __dict__ holds its fields in their order: no getattr per field)
    head = {
        "rank": rd.rank,
        "family": rd.family,
        "info": info,
        "meta": rd.meta,
        "sources": sources,
        "notes": list(rd.notes),
        "tables": {n: named[n] if named is not None and n in named else _dtypes(frame_of(x)) for n, x in entries(rd.tables)},
    }
    try:
        text = json.dumps(head, ensure_ascii=False)
    except (TypeError, ValueError):
        return None
    # (the tables' [[column, dtype], ...] are texts by construction, _dtypes: the rest walked, ~a third of a head's cost)
    return text if all(_json_exact(v) for k, v in head.items() if k != "tables") else None


#: A Source's field names, in order (dataclasses.fields per source cost a tenth of a rank's head).
_SOURCE_FIELDS = tuple(f.name for f in dataclasses.fields(Source))


def _json_exact(value: Any) -> bool:
    """Whether ``value`` comes back from JSON as it is: dicts with text keys, lists, texts, ints, floats (NaN and
    infinities too), booleans and None, each of exactly that type (a tuple comes back a list, a float or int
    subclass a float or int, a key that is not a text a text). One walk, not a parse of the text and a comparison."""
    kind = type(value)
    if kind in _JSON_SCALARS:
        return True
    if kind is dict:
        return set(map(type, value)) <= _STR and _all_exact(value.values())
    if kind is list:
        return _all_exact(value)
    return False


#: The types of JSON's scalars, exactly (a value of one comes back from JSON as it is).
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})
_STR = frozenset({str})


def _all_exact(values: Any) -> bool:
    """:func:`_json_exact` of every value: a list of scalars (a group's thousand ranks) in one pass over their types."""
    values = list(values)
    return set(map(type, values)) <= _JSON_SCALARS or all(_json_exact(v) for v in values)


def _checked_head(head: Any, key: dict[str, Any]) -> dict[str, Any]:
    """A rank's head as read, checked field by field against what ``put`` writes and against ``key``."""
    if not isinstance(head, dict) or set(head) != _HEAD_KEYS:
        raise _Invalid(f"the rank head's keys are {sorted(head) if isinstance(head, dict) else type(head).__name__}")
    if type(head["rank"]) is not int or head["rank"] != key["rank"] or head["family"] != key["family"]:
        raise _Invalid("the rank head names another rank or family than its key")
    if not _conforms(head["info"], RankInfo):
        raise _Invalid("the rank head's info is not a RankInfo")
    if not isinstance(head["meta"], dict) or not _conforms(head["notes"], list[str]):
        raise _Invalid("the rank head's meta / notes are malformed")
    srcs = head["sources"]
    if not isinstance(srcs, list) or not all(_conforms(x, Source) and x["status"] in _STATUSES for x in srcs):
        raise _Invalid("the rank head's sources are malformed")
    if any(x["path"] is not None and not _safe_relative(x["path"]) for x in srcs):
        raise _Invalid("the rank head has a source path outside the rank folder")
    tables = head["tables"]
    if not isinstance(tables, dict) or not all(_columns_ok(n, c) for n, c in tables.items()):
        raise _Invalid("the rank head's tables are malformed or differ from the canonical tables")
    return head


def _safe_relative(path: str) -> bool:
    """An absolute path, or a relative one that stays in the rank folder."""
    return os.path.isabs(path) or os.pardir not in Path(path).parts


def _columns_ok(name: Any, columns: Any) -> bool:
    """Stored columns of a table: [[column, dtype], ...]; a canonical table's are exactly its own."""
    if not isinstance(name, str) or not _conforms(columns, list[list[str]]) or any(len(c) != 2 for c in columns):
        return False
    spec = TABLES.get(name)
    return spec is None or [c for c, _ in columns] == list(spec.columns)


def _conforms(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a type hint of the model (str, int, float, bool, None, lists, dicts, unions,
    dataclasses as dicts with exactly their fields): :func:`_checker` of the hint, made once per hint."""
    return _checker(hint)(value)


@functools.lru_cache(maxsize=None)
def _checker(hint: Any) -> Callable[[Any], bool]:
    """The test :func:`_conforms` makes of a value against ``hint``, built once (the hint's origin, arguments and
    fields looked up then, not for every value: a warm read of 512 ranks checks about a million values)."""
    if dataclasses.is_dataclass(hint):
        fields = [(k, _checker(h)) for k, h in _hints(hint).items()]  # type: ignore[arg-type]
        names = {k for k, _ in fields}
        return lambda v: isinstance(v, dict) and set(v) == names and all(check(v[k]) for k, check in fields)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        either = [_checker(a) for a in args]
        return lambda v: any(check(v) for check in either)
    if origin is list:
        item = args[0]
        if item in (str, int, bool):  # the common case, without a call per item
            return lambda v: isinstance(v, list) and all(type(x) is item for x in v)
        each = _checker(item)
        return lambda v: isinstance(v, list) and all(each(x) for x in v)
    if origin is dict:
        key, val = _checker(args[0]), _checker(args[1])
        return lambda v: isinstance(v, dict) and all(key(k) and val(x) for k, x in v.items())
    if hint is type(None):
        return lambda v: v is None
    if hint is float:
        return lambda v: type(v) in (float, int)
    if hint in (str, int, bool):
        return lambda v: type(v) is hint
    return lambda v: False


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _dtypes(df: Any) -> list[list[str]]:
    """A frame's [[column, dtype], ...] as a rank's head stores them (each distinct dtype named once per process: a
    numpy dtype's name costs more than the rest)."""
    get = getattr(getattr(df, "_mgr", None), "get_dtypes", None)  # no Series of the dtypes built
    types = get() if get is not None else df.dtypes.tolist()
    named = _DTYPE_NAMES
    return [[str(c), named[t] if t in named else named.setdefault(t, str(t))] for c, t in zip(df.columns.tolist(), types)]


#: str() of each dtype met (_dtypes): a dtype's name never changes.
_DTYPE_NAMES: dict[Any, str] = {}


def _restore(head: dict[str, Any], tables: dict[str, Any], rank_path: str,
             dtypes: dict[str, list[list[str]]] | None = None) -> RankData:
    """The RankData of a checked head and its tables (each with the dtypes stored), its paths
    rooted at ``rank_path``; ``dtypes``: the tables' [[column, dtype], ...] where already known (the
    ranks' slices of one converted table share its dtypes: computed once, not per rank and table)."""
    known = dtypes or {}
    for name, columns in head["tables"].items():
        df = tables.get(name)
        if df is None or (known[name] if name in known else _dtypes(df)) != columns:
            raise _Invalid(f"{name} does not read back with the columns and dtypes stored")
    info = dict(head["info"])
    info["info_json"] = _rooted(info["info_json"], rank_path)
    try:
        rank_info = RankInfo.from_json(info)
    except (TypeError, ValueError) as e:
        raise _Invalid(f"the rank head's info: {e}") from None
    return RankData(
        rank=head["rank"],
        family=head["family"],
        path=rank_path,
        tables={n: tables[n] for n in head["tables"]},
        info=rank_info,
        meta=head["meta"],
        sources=[Source(**{**x, "path": _rooted(x["path"], rank_path)}) for x in head["sources"]],
        notes=list(head["notes"]),
    )


def _to_pandas(arrow: list[dict[str, Any]]) -> tuple[
    list[dict[str, Any]], dict[int, str], list[dict[str, list[list[str]]]], list[tuple[str, Any, list[Any]]]
]:
    """Each rank's Arrow tables as pandas, converted one table name at a time over all ranks; the
    ranks whose tables could not be converted (index -> why); the dtypes of the tables cut from
    one converted table (the same for every rank: index -> {table: [[column, dtype], ...]}); and
    each table converted whole: (name, the frame, each rank's frame of it in order).

    A rank's frame of a table converted whole is a row slice of that frame (a view; pandas'
    copy-on-write copies it before any write) with the index 0..n-1: no copy of its rows, and
    ``Capture.join_tables`` takes the whole frame as the table's concatenation when the ranks are
    these slices in this order."""
    import pandas as pd
    import pyarrow as pa

    frames: list[dict[str, Any]] = [{} for _ in arrow]
    broken: dict[int, str] = {}
    dtypes: list[dict[str, list[list[str]]]] = [{} for _ in arrow]
    cut: list[tuple[str, Any, list[Any]]] = []
    for name in sorted({n for t in arrow for n in t}):
        idx = [i for i, t in enumerate(arrow) if name in t]
        parts = [arrow[i].pop(name) for i in idx]  # held here only: freed once converted
        try:
            whole = pa.concat_tables(parts).to_pandas(use_threads=False) if len(parts) > 1 else None
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            whole = None  # the ranks' schemas differ: convert rank by rank
        if whole is None:
            for i, t in zip(idx, parts):
                try:
                    frames[i][name] = t.to_pandas(use_threads=False)
                except Exception as e:  # noqa: BLE001 - a table that does not convert: that rank is rebuilt
                    broken[i] = f"{name}: {type(e).__name__}: {e}"
            continue
        if not (isinstance(whole.index, pd.RangeIndex) and whole.index.start == 0 and whole.index.step == 1):
            whole.index = pd.RangeIndex(len(whole))  # the index each slice is given below, as one
        shared, sliced = _dtypes(whole), row_slices(whole, [t.num_rows for t in parts])
        for i, part in zip(idx, sliced):
            frames[i][name] = part
            dtypes[i][name] = shared
        cut.append((name, whole, sliced))
    return frames, broken, dtypes, cut
