"""The result cache: the report object of ``msdiag analyze`` kept whole, reused while nothing it came from changed.

The rank cache (ingest/cache.py) spares a re-analysis the parsing of each rank, but the run still
reads every rank's tables and computes every metric, rule and chart row. When the same command is
run again on the same files, all of that gives the same report object: this cache keeps it, so a
warm run costs the walk that fingerprints its inputs and one JSON file.

An entry is used only when all of its key is unchanged:

- every file under the capture folder (or the file given): relative path, size and mtime in ns,
  each real folder walked once (``fingerprint``); the walk covers every rank folder and anything
  else discovery may meet (a new rank, another run);
- every other input file: the request log, the training log, the model config, the project config,
  the text of every rule file of the built-in and the extra rules folders, the saved baseline's content;
- msdiag's version and a hash of all of msdiag's sources (the model's SCHEMA_VERSION among them);
- the resolved options (canonical JSON, all but the cache folder), ``--strict``, the path as given and
  as resolved (paths in the report are the ones this run names).

Any doubt and there is no result cache for the run (the run is analysed as without it): an input that
cannot be walked or stat'ed completely, a walk past ``_MAX_DEPTH`` or ``_MAX_FILES``, a cache folder
inside the capture, a report object that does not come back from JSON identical. The report object
holds nothing of the run itself beyond what is keyed (no timestamp, no cache statistics: Capture.ingest
is not part of it). The folder is trusted like the rank cache's (``cachedir.untrusted``, checked by the
CLI; each entry's folders checked when read). This module imports neither pandas nor the model: a hit
loads nothing but the report; entries are written to a temp file and renamed into
place; a damaged or foreign entry is ignored and rewritten, never an error.

Layout, beside the rank cache's entries::

    msdiag-results-v<RESULTS_FORMAT>/<id[:2]>/<id>.json    {"key": {...}, "report": {...}}

``id`` hashes the run without its fingerprints (path, options, command), so one entry per command is
rewritten when stale.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import msdiag
from msdiag.ingest.cachedir import PRIVATE, code_fingerprint, owner_problem
from msdiag.ingest.paths import capture_root, within
from msdiag.options import Options

#: Bumped whenever the layout or the key of an entry changes.
RESULTS_FORMAT = 1
_ROOT = f"msdiag-results-v{RESULTS_FORMAT}"
_MAX_DEPTH = 32  # folders under an input: deeper is a doubt (no result cache), never a partial fingerprint
_MAX_FILES = 2_000_000


class _Doubt(Exception):
    """An input that cannot be fingerprinted completely: the run is not result-cached."""


def fingerprint(path: str | Path) -> str:
    """A hash of the file at ``path``, or of every file under the folder at ``path`` (relative path,
    size, mtime in ns; symbolic links followed, each real folder entered once): _Doubt when any of
    it cannot be stat'ed or listed, or the walk is deeper than _MAX_DEPTH or longer than _MAX_FILES."""
    root = Path(path)
    try:
        st = os.stat(root)
    except OSError as err:
        raise _Doubt(f"{root}: {err.strerror or err}") from None
    h = hashlib.sha256()
    if not stat.S_ISDIR(st.st_mode):
        h.update(f"file\0{st.st_size}\0{st.st_mtime_ns}".encode())
        return h.hexdigest()
    seen = {(st.st_dev, st.st_ino)}
    stack = [(str(root), "", 0)]
    count = 0
    while stack:
        folder, rel, depth = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as err:
            raise _Doubt(f"{folder}: {err.strerror or err}") from None
        for entry in entries:
            try:
                est = entry.stat()  # follows symbolic links: a dangling one is a doubt
            except OSError as err:
                raise _Doubt(f"{entry.path}: {err.strerror or err}") from None
            name = f"{rel}/{entry.name}" if rel else entry.name
            if stat.S_ISDIR(est.st_mode):
                if depth >= _MAX_DEPTH:
                    raise _Doubt(f"{entry.path}: deeper than {_MAX_DEPTH} folders")
                if (est.st_dev, est.st_ino) not in seen:
                    seen.add((est.st_dev, est.st_ino))
                    h.update(f"dir\0{name}\0".encode())
                    stack.append((entry.path, name, depth + 1))
                continue
            count += 1
            if count > _MAX_FILES:
                raise _Doubt(f"{root}: more than {_MAX_FILES} files")
            h.update(f"file\0{name}\0{est.st_size}\0{est.st_mtime_ns}\0".encode())
    return h.hexdigest()


def as_stored(value: Any) -> bool:
    """Whether ``value`` (a part of a report) comes back from JSON as the renderers would read it (:func:`_as_stored`)."""
    return _as_stored(value)


def _as_stored(live: Any) -> bool:
    """Whether ``live``, once through JSON (``json.dumps`` with ``allow_nan=False`` took it), comes back as what the
    renderers would read in it: dict keys already strings, every value of JSON's own types, a float subclass (numpy's
    float64) read as its float and a tuple as its list; not an int or str subclass (an enum), which comes back as
    another type. One walk over the value, not a parse of the text and a comparison (a 512-rank report: 8 MB)."""
    kind = type(live)
    if kind is str or kind is int or kind is bool or live is None or isinstance(live, float):
        return True  # (a float that JSON cannot write, NaN or infinity, stopped json.dumps before)
    if isinstance(live, dict):
        return set(map(type, live)) <= _STR and _all_stored(live.values())
    if isinstance(live, (list, tuple)):
        return _all_stored(live)
    return False


_STR = frozenset({str})
#: The types whose values are stored as they are, exactly (a list of them is judged by its set of types, one pass).
_PLAIN = frozenset({str, int, bool, float, type(None)})


def _all_stored(values: Any) -> bool:
    """:func:`_as_stored` of every value: a list of plain values (a rank's figures) by the set of their types."""
    values = list(values)
    return set(map(type, values)) <= _PLAIN or all(_as_stored(v) for v in values)


def digest(value: Any) -> str:
    """A hash of a JSON value (canonical: keys sorted), e.g. the saved baseline a run compares with."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _text_hash(paths: list[Path]) -> str:
    """A hash of the files' names and bytes (the rule texts)."""
    h = hashlib.sha256()
    for p in paths:
        try:
            h.update(str(p).encode() + b"\0" + p.read_bytes() + b"\0")
        except OSError as e:
            raise _Doubt(f"{p}: {e.strerror or e}") from None
    return h.hexdigest()


def _rule_files(opts: Options) -> list[Path]:
    """Every rule file the analysis may read: the built-in folder's and each --rules folder's."""
    from msdiag.resources import resource_dir  # rules.loader.default_rules_dir, without importing the rule loader

    out: list[Path] = []
    for d in [resource_dir("rules"), *map(Path, opts.rules_dirs)]:
        out.extend(sorted(Path(d).glob("*.yaml")) + sorted(Path(d).glob("*.yml")))
    return out


def canonical_options(opts: Options) -> dict[str, Any]:
    """The options as canonical JSON values (every field but the cache folder, which changes no figure)."""

    def plain(v: Any) -> Any:
        if isinstance(v, Mapping):
            return {str(k): plain(x) for k, x in sorted(v.items())}
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        return v

    return {f.name: plain(getattr(opts, f.name)) for f in fields(opts) if f.name != "cache"}


def _inputs(path: str | Path, opts: Options) -> dict[str, str | None]:
    """The fingerprint of every input of the run, by role (None: not given)."""
    given = Path(path)
    root = capture_root(given) if given.is_dir() else given
    files = {"capture": root, "requests": opts.requests, "train_log": opts.train_log,
             "model_config": opts.model_config, "config": opts.config}  # fmt: skip
    out: dict[str, str | None] = {k: None if v is None else fingerprint(v) for k, v in files.items()}
    out["rules"] = _text_hash(_rule_files(opts))
    return out


@dataclass(frozen=True)
class ResultCache:
    """One run's entry in the result cache: ``get`` the report object stored for this key, or ``put`` it."""

    file: Path
    key: dict[str, Any]

    def get(self) -> dict[str, Any] | None:
        """The report object stored under this run's key, or None (absent, stale, untrusted or damaged)."""
        for folder in (self.file.parent.parent, self.file.parent):
            try:
                if owner_problem(os.stat(folder)) is not None:
                    return None
            except OSError:
                return None
        try:
            st = os.stat(self.file)
            if owner_problem(st) is not None:
                return None
            stored = json.loads(self.file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # absent or damaged: analysed again, and rewritten
        if not isinstance(stored, dict) or set(stored) != {"key", "report"} or not isinstance(stored["report"], dict):
            return None
        return stored["report"] if stored["key"] == self.key else None

    def put(self, report: dict[str, Any], compact: str | None = None, exact: Collection[str] = ()) -> bool:
        """Store ``report`` (False when it would not come back from JSON identical, or cannot be written).
        ``compact``: ``json.dumps(report, ensure_ascii=False, allow_nan=False)`` where the caller made it already
        (the CLI prints it indented): the stored text is then made around it, the same text to the byte. ``exact``:
        keys of ``report`` whose values the caller found to come back as they are (:func:`as_stored`): not walked
        again."""
        try:
            if compact is None:
                text = json.dumps({"key": self.key, "report": report}, ensure_ascii=False, allow_nan=False)
            else:  # json.dumps of the dict writes exactly this around its two values
                text = f'{{"key": {json.dumps(self.key, ensure_ascii=False, allow_nan=False)}, "report": {compact}}}'
        except (TypeError, ValueError):
            return False
        if not (set(map(type, report)) <= _STR and all(k in exact or _as_stored(v) for k, v in report.items())):
            return False  # an int key, a str subclass, ...: a hit might not render the same
        try:
            self.file.parent.parent.parent.mkdir(mode=PRIVATE, parents=True, exist_ok=True)
            for d in (self.file.parent.parent, self.file.parent):
                d.mkdir(mode=PRIVATE, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.file.name}.", dir=self.file.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
                os.replace(tmp, self.file)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError:
            return False
        return True


def open_for(folder: str | Path, path: str | Path, opts: Options, run: Mapping[str, Any]) -> ResultCache | None:
    """The result cache entry of analysing ``path`` with ``opts`` (and ``run``: what else of the command
    decides the report, as JSON values), in the cache folder ``folder`` (trusted: the CLI checked it);
    None when the run cannot be fingerprinted completely or the folder lies inside the capture."""
    where = Path(folder).expanduser().resolve()
    given = Path(path)
    try:
        resolved = given.resolve()
        root = capture_root(resolved) if resolved.is_dir() else resolved
        if within(where, root):
            return None  # msdiag never writes into a capture (the loader says so)
        inputs = _inputs(given, opts)
    except (_Doubt, OSError):
        return None
    ident = {"path": str(path), "resolved": str(resolved), "options": canonical_options(opts), "run": dict(run)}
    key = {
        **ident,
        "results_format": RESULTS_FORMAT,
        "msdiag_version": msdiag.__version__,
        "code": code_fingerprint(("",)),
        "inputs": inputs,
    }
    try:
        text = json.dumps(ident, sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return None
    digest = hashlib.sha256(text.encode()).hexdigest()[:40]
    return ResultCache(where / _ROOT / digest[:2] / f"{digest}.json", json.loads(json.dumps(key)))
