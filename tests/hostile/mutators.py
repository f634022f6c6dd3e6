"""Mutators: each damages a copy of a real capture (or writes a hostile side input) in one way.

The corpus is read in place and copied into the case's temp folder with ``copy_capture``; a mutator
then edits the copy only. Edits are textual where they can be, so that everything but the damage
stays byte-identical to the real profiler output (a CSV cell is rewritten on its own line; a JSON
file is re-serialised only when an event must be changed).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

APO = "ASCEND_PROFILER_OUTPUT"
_CHUNK = 1024 * 1024


def copy_capture(src: Path, dst: Path) -> Path:
    """Copy a corpus capture (file or folder) to ``dst`` and return the copy."""
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    return dst


# ---- files that are not what they claim ---------------------------------------------------------------------

def replace_with_fifo(path: Path) -> None:
    """``path`` becomes a named pipe nobody writes to: opening it for reading blocks forever."""
    path.unlink()
    os.mkfifo(path)


def replace_with_symlink(path: Path, target: Path | str) -> None:
    """``path`` becomes a symlink to ``target`` (a device, or a file outside the capture)."""
    if path.exists() or path.is_symlink():
        path.unlink()
    path.symlink_to(target)


def plant_secret(folder: Path, marker: str) -> Path:
    """A credentials file outside the capture whose every line carries ``marker``.

    One JSON object per line (like a token store): a JSON reader stops on the second line, so an
    error message that quotes the bytes around the fault would quote the secret.
    """
    folder.mkdir(parents=True, exist_ok=True)
    secret = folder / "credentials"
    secret.write_text("".join(f'{{"user": "u{i}", "password": "{marker}-{i}"}}\n' for i in range(4)))
    return secret


def add_self_links(folder: Path, n: int = 8) -> None:
    """``s1 .. sN -> .`` in ``folder``: a walk that follows links sees N^depth paths."""
    for i in range(1, n + 1):
        (folder / f"s{i}").symlink_to(".")


# ---- CSV ----------------------------------------------------------------------------------------------------

def widen_csv_header(path: Path, extra_columns: int) -> None:
    """Append ``extra_columns`` column names to the header line; the rows are left as they are."""
    lines = path.read_bytes().split(b"\n", 1)
    extra = b"".join(b",x%d" % i for i in range(extra_columns))
    path.write_bytes(lines[0].rstrip(b"\r") + extra + b"\n" + (lines[1] if len(lines) > 1 else b""))


def append_comma_line(path: Path, size_bytes: int) -> None:
    """Append one line made of ``size_bytes`` commas (written in chunks, never held in memory)."""
    with open(path, "ab") as f:
        left = size_bytes
        while left > 0:
            n = min(left, _CHUNK)
            f.write(b"," * n)
            left -= n
        f.write(b"\n")


def set_csv_cells(path: Path, column: str, values: dict[int, str]) -> None:
    """Set ``column`` of data rows ``{row index: value}`` (0 = first row after the header).

    Only the edited lines are re-serialised; the rest of the file (trailing tabs, quoting) is unchanged.
    """
    lines = path.read_text(encoding="utf-8").split("\n")
    header = next(csv.reader([lines[0]]))
    col = header.index(column)
    for row, value in values.items():
        fields = next(csv.reader([lines[row + 1]]))
        fields[col] = value
        buf = io.StringIO()
        csv.writer(buf, lineterminator="").writerow(fields)
        lines[row + 1] = buf.getvalue()
    path.write_text("\n".join(lines), encoding="utf-8")


def csv_column(path: Path, column: str) -> list[str]:
    """The values of one column (to pick the rows a case damages)."""
    with open(path, newline="", encoding="utf-8") as f:
        return [row[column] for row in csv.DictReader(f)]


# ---- JSON ---------------------------------------------------------------------------------------------------

def inject_non_utf8(path: Path) -> None:
    """Put a byte that is not UTF-8 (0xFF) inside the first event name of a JSON file."""
    data = path.read_bytes()
    at = data.index(b'"name": "') + len(b'"name": "')
    path.write_bytes(data[:at] + b"\xff" + data[at:])


def append_deep_event(path: Path, depth: int) -> None:
    """Add one complete event whose ``args`` hold a list nested ``depth`` deep to a trace_view.json array."""
    data = path.read_bytes().rstrip()
    assert data.endswith(b"]"), f"{path} is not a JSON array"
    deep = b"[" * depth + b"]" * depth
    event = b'{"ph": "X", "name": "deep", "pid": 1, "tid": 1, "ts": "1", "dur": 1, "cat": "x", "args": {"a": ' + deep + b"}}"
    path.write_bytes(data[:-1] + b", " + event + b"]")


def trace_events(path: Path) -> list[dict[str, Any]]:
    """The events of a trace_view.json (an array, or {"traceEvents": [...]})."""
    data = json.loads(path.read_text(encoding="utf-8"))
    events: list[dict[str, Any]] = data["traceEvents"] if isinstance(data, dict) else data
    return events


def edit_trace_events(path: Path, edit: Callable[[list[dict[str, Any]]], None]) -> None:
    """Load a trace_view.json, let ``edit`` change its events in place, write it back."""
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data["traceEvents"] if isinstance(data, dict) else data)
    path.write_text(json.dumps(data), encoding="utf-8")


def complete_events(events: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The duration events (``ph`` X) that have a ``dur``."""
    return (e for e in events if e.get("ph") == "X" and "dur" in e)


def grow_trace(src: Path, dst: Path, target_bytes: int) -> int:
    """Write a trace_view.json of about ``target_bytes`` by repeating ``src``'s duration events, each
    copy shifted after the previous one in time (a long capture of the same job); returns its size."""
    events = trace_events(src)
    meta = [e for e in events if e.get("ph") != "X"]
    ops = list(complete_events(events))
    ts = [float(e["ts"]) for e in ops]
    span = max(float(e["ts"]) + float(e["dur"]) for e in ops) - min(ts) + 1000.0
    written = 0
    with open(dst, "w", encoding="utf-8") as f:
        f.write("[" + ", ".join(json.dumps(e) for e in meta))
        k = 0
        while written < target_bytes:
            chunk = ", " + ", ".join(json.dumps({**e, "ts": f"{t + k * span:.3f}"}) for e, t in zip(ops, ts))
            f.write(chunk)
            written += len(chunk)
            k += 1
        f.write("]")
    return dst.stat().st_size


# ---- rule files (--rules DIR) ------------------------------------------------------------------------------

def write_rule_alias_bomb(folder: Path) -> Path:
    """A rule file that is a YAML alias bomb ("billion laughs": 9 levels of 9 aliases = 9^9 leaves)."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    lines += ["id: bomb", "name: bomb", "summary: *a8"]
    return _write_rule(folder, "bomb.yaml", "\n".join(lines) + "\n")


def write_rule_self_alias(folder: Path) -> Path:
    """A rule whose ``params`` is an anchor that contains an alias to itself."""
    return _write_rule(folder, "self-alias.yaml", "id: self-alias\nname: loop\nparams: &p\n  x: *p\n")


def write_rule_deep_nesting(folder: Path, depth: int = 5000) -> Path:
    """A rule whose ``condition`` is a flow list nested ``depth`` deep."""
    return _write_rule(folder, "deep.yaml", "id: deep\nname: deep\ncondition: " + "[" * depth + "]" * depth + "\n")


def write_rule_non_utf8(folder: Path, template: Path) -> Path:
    """A copy of a real rule with a Latin-1 byte (0xE9) in its summary."""
    data = template.read_bytes()
    at = data.index(b"summary:") + len(b"summary:")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / template.name
    path.write_bytes(data[:at] + b" caf\xe9" + data[at:])
    return path


def _write_rule(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


# ---- SQLite export ------------------------------------------------------------------------------------------

def sqlite_recursive_view(db: Path, table: str) -> None:
    """Replace ``table`` by a view of the same columns over an endless recursive CTE."""
    con = sqlite3.connect(db)
    try:
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
        select = ", ".join(f'n AS "{c}"' for c in cols)
        con.execute(f'DROP TABLE "{table}"')
        con.execute(f'CREATE VIEW "{table}" AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) '
                    f"SELECT {select} FROM r")
        con.commit()
    finally:
        con.close()


def sqlite_drop_table(db: Path, table: str) -> None:
    """Drop one table of a profiler database."""
    con = sqlite3.connect(db)
    try:
        con.execute(f'DROP TABLE "{table}"')
        con.commit()
        con.execute("VACUUM")
    finally:
        con.close()


# ---- the rank cache ------------------------------------------------------------------------------------------

def cache_entries(cache: Path) -> list[Path]:
    """The rank entries of a cache folder (msdiag-ranks-v*/<id[:2]>/<id>: each a name of its entry file)."""
    return sorted(p for p in cache.glob("msdiag-ranks-v*/*/*") if p.is_file() and not p.name.startswith("."))


def entry_rank(header: Any, name: str) -> int | None:
    """Which rank of an entry file's header (cache.read_entry_file) the entry ``name`` stands for, or None."""
    from msdiag.ingest.cache import entry_name

    return next((k for k, r in enumerate(header["ranks"]) if r["key"] is not None and entry_name(r["key"]) == name), None)


def write_entry_file(path: Path, header: Any, tables: list[Any]) -> None:
    """A rank cache entry file at ``path`` from a header and Arrow tables (each schema naming its table), in the layout
    ``RankCache.put_many`` writes (a line of JSON, then an Arrow IPC stream per table): how tests edit an entry."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    sink.write((json.dumps(header, ensure_ascii=False) + "\n").encode("utf-8"))
    for t in tables:
        with pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t)
    path.write_bytes(sink.getvalue().to_pybytes())


def _edit_entry(entry: Path, edit: Callable[[Any, int, list[Any]], list[Any]]) -> None:
    """Let ``edit`` change an entry file (its header, the index of the entry's own rank in it, its Arrow tables; it
    returns the tables) and put the result in place of this entry only (the file's other names keep it as it was)."""
    from msdiag.ingest import cache as C

    header, tables = C.read_entry_file(entry.read_bytes())
    k = entry_rank(header, entry.name)
    assert k is not None, f"{entry} names no rank of its file"
    tables = edit(header, k, tables)
    tmp = entry.with_name(entry.name + ".edit")
    write_entry_file(tmp, header, tables)
    os.replace(tmp, entry)


def edit_rank_json(entry: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Let ``edit`` change the head of an entry's rank (what was rank.json) in place."""
    def change(header: Any, k: int, tables: list[Any]) -> list[Any]:
        edit(header["ranks"][k]["head"])
        return tables

    _edit_entry(entry, change)


def edit_cache_tables(entry: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Let ``edit`` change an entry's tables (name -> Arrow table of the entry's rank: its stream's rows) and write them
    back, the rank alone in its file."""
    def change(header: Any, k: int, tables: list[Any]) -> list[Any]:
        mine: dict[str, Any] = {}
        for m, t in zip(header["streams"], tables):
            if k in m["ranks"]:
                j = m["ranks"].index(k)
                mine[m["table"]] = t.slice(sum(m["rows"][:j]), m["rows"][j])
        edit(mine)
        header["ranks"] = [header["ranks"][k]]
        header["streams"] = [{"table": n, "ranks": [0], "rows": [t.num_rows]} for n, t in mine.items()]
        return [t.replace_schema_metadata({**(t.schema.metadata or {}), b"msdiag.table": n.encode()}) for n, t in mine.items()]

    _edit_entry(entry, change)
