"""The rank cache: each rank's canonical tables kept as Parquet, so that a capture is parsed once.

Re-analysing a capture (another report, other rule parameters, a diff) then reads a few small
Parquet files per rank instead of parsing its traces. Layout under the cache folder::

    msdiag-ranks-v<CACHE_FORMAT>/<id[:2]>/<id>/
        key.json          what the entry was built from (below)
        rank.json         RankData's rank, family, path, info (RankInfo), meta, sources, notes, and its
                          tables' names
        <table>.parquet   one file per table (pyarrow; dtypes restored from the pandas metadata)

``id`` hashes the rank folder's absolute path, rank id, format family and the reduction applied,
so one rank folder has one entry (a re-capture in the same place replaces it). ``key.json`` holds
every file under the rank folder (relative path, size, mtime in ns), msdiag's version, the schema
version (model.SCHEMA_VERSION), CACHE_FORMAT and a hash of msdiag's own source files: an entry is
used only when all of it is unchanged, otherwise the rank is parsed again and the entry rewritten.
An entry that cannot be read (truncated, edited, another version) is ignored and rebuilt, never an
error; a rank whose tables or metadata would not come back identical is not cached.

The cache is never written inside a capture (checked by the loader). Entries are written to a
temporary folder and renamed into place, so a reader never sees half an entry. pyarrow is imported
only when a cache is used.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msdiag import __version__
from msdiag.ingest.paths import Seen
from msdiag.model import SCHEMA_VERSION, RankData, RankInfo, Source

#: Bumped whenever the layout or the encoding of an entry changes.
CACHE_FORMAT = 2  # 2: rank.json holds the rank's RankInfo
_ROOT = f"msdiag-ranks-v{CACHE_FORMAT}"
_MAX_DEPTH = 8  # folders walked under a rank folder for its fingerprint


def default_dir() -> Path:
    """The user's cache folder: ``$MSDIAG_HOME/cache``, else ``$XDG_CACHE_HOME/msdiag``, else ``~/.cache/msdiag``."""
    home = os.environ.get("MSDIAG_HOME")
    if home:
        return Path(home).expanduser() / "cache"
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base and os.path.isabs(base) else Path.home() / ".cache") / "msdiag"


#: msdiag's sources that decide what a rank read holds: the readers and what they build on. The
#: reduction applied to the stored tables is identified by its caller (``reduce_id``).
_CODE = ("__init__.py", "errors.py", "model.py", "units.py", "intervals.py", "ingest")


def code_fingerprint(parts: tuple[str, ...] = _CODE) -> str:
    """A hash of msdiag's sources ``parts`` (files or folders under msdiag/): by default those that
    build a rank's tables, so that a changed reader never meets an old entry."""
    pkg = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(__version__.encode())
    files = [p for c in parts for p in ([pkg / c] if c.endswith(".py") else (pkg / c).rglob("*.py"))]
    for p in sorted(files):
        try:
            data = p.read_bytes()
        except OSError:
            continue
        h.update(str(p.relative_to(pkg)).encode() + b"\0" + data + b"\0")
    return h.hexdigest()[:32]


def files_of(folder: Path) -> list[list[Any]]:
    """Every file under ``folder`` (symbolic links followed, each real folder entered once: links
    back to a parent do not multiply the walk): [relative path, size, mtime_ns], sorted."""
    out: list[list[Any]] = []
    seen = Seen()
    stack = [(folder, 0)] if seen.first(folder) else []
    while stack:
        d, depth = stack.pop()
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
                    stack.append((Path(e.path), depth + 1))
            else:
                out.append([os.path.relpath(e.path, folder), st.st_size, st.st_mtime_ns])
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

    @classmethod
    def open(cls, folder: str | Path, reduce_id: str = "none") -> RankCache:
        """The cache at ``folder`` for ranks reduced by the reduction ``reduce_id`` identifies (its
        caller's opaque string: it must change whenever the reduction's output may change)."""
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

    def entry(self, key: dict[str, Any]) -> Path:
        ident = hashlib.sha256(
            json.dumps([key["path"], key["rank"], key["family"], key["reduce"]]).encode()
        ).hexdigest()[:40]
        return self.root / _ROOT / ident[:2] / ident

    # ---- reading ---------------------------------------------------------------------------

    def get(self, key: dict[str, Any], stats: CacheStats | None = None) -> RankData | None:
        """The cached RankData for ``key``, or None (absent, stale or unreadable: then rebuilt)."""
        return self.get_many([key], stats)[0]

    def get_many(self, keys: list[dict[str, Any]], stats: CacheStats | None = None) -> list[RankData | None]:
        """``get`` for many ranks at once: each table's files of every rank are read as Arrow, joined
        and turned into pandas in one go, then cut back into ranks (a conversion per table, not per
        rank and table: the cost of a warm run of a thousand ranks)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        def read(key: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
            d = self.entry(key)
            try:
                stored = json.loads((d / "key.json").read_text(encoding="utf-8"))
                if stored != key:
                    return None, {}  # stale: a source file, msdiag or the reduction changed
                head = json.loads((d / "rank.json").read_text(encoding="utf-8"))
                head["info"] = RankInfo.from_json(head["info"])  # a damaged one raises: rebuilt
                return head, {n: pq.ParquetFile(d / f"{n}.parquet").read(use_threads=False) for n in head["tables"]}
            except FileNotFoundError as e:
                if (d / "key.json").exists():
                    _note(stats, "ignored", f"{d}: {type(e).__name__}: {e}")
            except Exception as e:  # noqa: BLE001 - any damage to an entry means: parse the rank again
                _note(stats, "ignored", f"{d}: {type(e).__name__}: {e}")
            return None, {}

        # Parquet decoding releases the GIL: a few threads read the entries about twice as fast
        with ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as pool:
            got = list(pool.map(read, keys))
        heads = [h for h, _ in got]
        arrow = [t for _, t in got]
        del got
        frames: list[dict[str, Any]] = [{} for _ in keys]
        names = sorted({n for t in arrow for n in t})
        for name in names:
            idx = [i for i, t in enumerate(arrow) if name in t]
            parts = [arrow[i].pop(name) for i in idx]  # held here only: freed once converted
            try:
                whole = pa.concat_tables(parts).to_pandas(use_threads=False) if len(parts) > 1 else None
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                whole = None  # the ranks' schemas differ: convert rank by rank
            if whole is None:
                for i, t in zip(idx, parts):
                    frames[i][name] = t.to_pandas(use_threads=False)
                continue
            lo = 0
            for i, t in zip(idx, parts):
                frames[i][name] = whole.iloc[lo : lo + t.num_rows].reset_index(drop=True)
                lo += t.num_rows
        out: list[RankData | None] = []
        for head, tables in zip(heads, frames):
            if head is None:
                out.append(None)
                continue
            out.append(
                RankData(
                    rank=int(head["rank"]),
                    family=str(head["family"]),
                    path=str(head["path"]),
                    tables={n: tables[n] for n in head["tables"]},
                    info=head["info"],
                    meta=head["meta"],
                    sources=[Source(**x) for x in head["sources"]],
                    notes=list(head["notes"]),
                )
            )
        return out

    # ---- writing ---------------------------------------------------------------------------

    def put(self, key: dict[str, Any], rd: RankData) -> str | None:
        """Store ``rd`` under ``key``: None when stored, else why it could not be stored exactly."""
        d = self.entry(key)
        head = _rank_json(rd)
        if head is None:
            return f"rank {rd.rank}: its metadata does not survive JSON unchanged"
        try:
            d.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{d.name}.", dir=d.parent))
        except OSError as e:
            return f"rank {rd.rank}: cannot write in {self.root} ({e.strerror or e})"
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq

            for name, df in rd.tables.items():
                pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp / f"{name}.parquet")
            (tmp / "rank.json").write_text(json.dumps(head, ensure_ascii=False), encoding="utf-8")
            # key.json last: an entry without it is never used
            (tmp / "key.json").write_text(json.dumps(key, ensure_ascii=False), encoding="utf-8")
            if d.exists():
                shutil.rmtree(d, ignore_errors=True)
            os.rename(tmp, d)
        except Exception as e:  # noqa: BLE001 - a rank that cannot be stored is parsed next time
            shutil.rmtree(tmp, ignore_errors=True)
            if (d / "key.json").exists():
                return None  # another msdiag stored it at the same moment
            return f"rank {rd.rank}: {type(e).__name__}: {e}"
        return None


def _note(stats: CacheStats | None, which: str, text: str) -> None:
    if stats is not None:
        getattr(stats, which).append(text)


def _rank_json(rd: RankData) -> dict[str, Any] | None:
    head = {
        "rank": rd.rank,
        "family": rd.family,
        "path": rd.path,
        "info": rd.info.to_json(),
        "meta": rd.meta,
        "sources": [s.to_dict() for s in rd.sources],
        "notes": list(rd.notes),
        "tables": list(rd.tables),
    }
    try:
        back = json.loads(json.dumps(head, ensure_ascii=False))
    except (TypeError, ValueError):
        return None
    return head if _same(back, head) else None


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same JSON types (NaN equals NaN; a tuple is not a list; 1 is not True)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)
