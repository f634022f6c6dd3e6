"""Named baselines: a local store of analysis snapshots to compare later captures with.

Where: ``$MSDIAG_HOME/baselines/``, else ``$XDG_DATA_HOME/msdiag/baselines/``, else
``~/.local/share/msdiag/baselines/``. Never inside a capture folder: the store keeps no raw
capture, only what a diff reads.

One file per baseline, ``NAME.json`` (UTF-8 JSON), store schema ``STORE_SCHEMA_VERSION``:

- ``msdiag_baseline``: the store schema version ("1"); a file of another version is refused with
  the reason (save the baseline again)
- ``name``, ``saved_at`` (UTC, ISO 8601), ``msdiag_version``, ``source_path`` (the capture analyzed)
- ``report``: the report object of the analysis (``contract.build``: the JSON contract of
  ``msdiag analyze --format json``, its own ``schema_version``); its ``steps`` rows (with
  ``warmup``) are the per-step samples the noise-aware judgement resamples
- ``kernel_types``: [{rank, type, kind, calls, total_us}] over the rank's timed steps
- ``kernel_windows``: [{rank, steps, by}] how many timed steps those totals cover, and how the
  kernels were assigned to steps (step ids, step spans, or the whole capture)
- ``comm``: [{rank, group, op_type, ops, elapse_us, transit_us, wait_us, sync_us, idle_us}] over
  the same steps (communication analysis only; empty when the capture has none)

Files are written whole to a temporary file and renamed, so a crash never leaves half a baseline.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
from pathlib import Path
from typing import Any

from msdiag import __version__
from msdiag.errors import InputError

STORE_SCHEMA_VERSION = "1"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
PREFIX = "baseline:"  # `msdiag diff baseline:NAME PATH` names a baseline even when a path NAME exists


def store_dir() -> Path:
    """The baseline store folder (not created here)."""
    home = os.environ.get("MSDIAG_HOME")
    if home:
        return Path(home).expanduser() / "baselines"
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "msdiag" / "baselines"


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise InputError(
            name, "is not a valid baseline name: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


def _file(name: str) -> Path:
    return store_dir() / f"{check_name(name)}.json"


def exists(name: str) -> bool:
    return bool(NAME_RE.match(name)) and _file(name).is_file()


def save(name: str, snap: dict[str, Any], source_path: str, force: bool = False) -> Path:
    """Write a snapshot (``msdiag.diff.snapshot``) under ``name``; refuses to overwrite unless force."""
    f = _file(name)
    if f.exists() and not force:
        raise InputError(name, f"a baseline of that name exists ({f}): use --force to replace it, or another name")
    for rank in snap["report"].get("ranks") or []:
        folder = Path(str(rank.get("path") or ""))
        if folder.is_dir() and _inside(f, folder):
            raise InputError(str(f), f"the baseline store lies inside the capture folder {folder}: set MSDIAG_HOME elsewhere")
    doc = {
        "msdiag_baseline": STORE_SCHEMA_VERSION,
        "name": name,
        "saved_at": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        "msdiag_version": __version__,
        "source_path": str(Path(source_path).resolve()),
        **snap,
    }
    try:
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_name(f".{f.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(doc, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
        os.replace(tmp, f)
    except OSError as e:
        raise InputError(str(f), f"cannot write the baseline: {e.strerror or e}") from None
    return f


def _inside(child: Path, folder: Path) -> bool:
    try:
        child.resolve().relative_to(folder.resolve())
    except (ValueError, OSError):
        return False
    return True


def load(name: str) -> dict[str, Any]:
    """The stored snapshot of ``name``, checked for its store schema version."""
    f = _file(name)
    if not f.is_file():
        known = ", ".join(b["name"] for b in list_baselines()[:10]) or "none"
        raise InputError(name, f"no saved baseline of that name in {store_dir()} (saved: {known})")
    try:
        doc = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(str(f), f"the baseline file is unreadable or not valid JSON ({e}): delete it and save it again") from None
    if not isinstance(doc, dict) or doc.get("msdiag_baseline") != STORE_SCHEMA_VERSION:
        got = doc.get("msdiag_baseline") if isinstance(doc, dict) else None
        raise InputError(
            str(f), f"baseline store schema {got!r}, this msdiag reads {STORE_SCHEMA_VERSION!r}: save the baseline again with this msdiag"
        )
    missing = [k for k in ("report", "kernel_types", "kernel_windows", "comm") if k not in doc]
    if missing:
        raise InputError(str(f), f"the baseline file lacks {', '.join(missing)}: save the baseline again")
    return doc


def list_baselines() -> list[dict[str, Any]]:
    """Every saved baseline: name, when, from where, and its step time (unreadable files say why)."""
    d = store_dir()
    out = []
    for f in sorted(d.glob("*.json")) if d.is_dir() else []:
        entry: dict[str, Any] = {"name": f.stem, "file": str(f)}
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
            rep = doc.get("report") or {}
            entry.update(
                {
                    "saved_at": doc.get("saved_at"),
                    "source_path": doc.get("source_path"),
                    "store_schema": doc.get("msdiag_baseline"),
                    "msdiag_version": doc.get("msdiag_version"),
                    "ranks": len(rep.get("ranks") or []),
                    "step_time_us": (rep.get("metrics") or {}).get("step_time_us"),
                    "step_count": (rep.get("metrics") or {}).get("step_count"),
                    "verdict": (rep.get("verdict") or {}).get("bottleneck"),
                }
            )
            if doc.get("msdiag_baseline") != STORE_SCHEMA_VERSION:
                entry["problem"] = f"store schema {doc.get('msdiag_baseline')!r}, this msdiag reads {STORE_SCHEMA_VERSION!r}"
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as e:
            entry["problem"] = f"unreadable: {e}"
        out.append(entry)
    return out


def delete(name: str) -> Path:
    f = _file(name)
    if not f.is_file():
        raise InputError(name, f"no saved baseline of that name in {store_dir()}")
    try:
        f.unlink()
    except OSError as e:
        raise InputError(str(f), f"cannot delete the baseline: {e.strerror or e}") from None
    return f


def resolve(arg: str) -> tuple[str, str] | None:
    """('baseline', name) when ``arg`` names a saved baseline rather than a path, else None.

    ``baseline:NAME`` always names a baseline; a bare NAME does when no file or folder of that
    path exists and a baseline of that name does.
    """
    if arg.startswith(PREFIX):
        return ("baseline", check_name(arg[len(PREFIX):]))
    if Path(arg).exists():
        return None
    if exists(arg):
        return ("baseline", arg)
    return None
