"""The project config: ``[tool.msdiag]`` in pyproject.toml, or an ``msdiag.toml``, found upward.

As ruff and sqlfluff do, msdiag looks from the current folder upward for the first folder with an
``msdiag.toml`` (options at its top level) or a ``pyproject.toml`` holding a ``[tool.msdiag]`` table;
``--config FILE`` names one, ``--no-config`` ignores them. The keys are the analysis options a
project fixes once (the device, its peak, the node layout, rule folders, parameter overrides,
disabled rules, bandwidth norms); the command line goes over the file, the file over the defaults.
Every key and type is checked here: an unknown key or a wrong type is a :class:`ConfigError` that
names the file and the line (the CLI prints it on one line and exits 2).

This module imports nothing from msdiag's packages; the CLI lays its values under its own flags.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from msdiag.errors import LocatedError
from msdiag.options import DEEP_MODES, parse_bandwidth_norms, parse_goal

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: The file names looked for in each folder, in order.
MSDIAG_TOML = "msdiag.toml"
PYPROJECT = "pyproject.toml"
#: The table of pyproject.toml that holds msdiag's options.
TOOL_TABLE = ("tool", "msdiag")


class ConfigError(LocatedError):
    """A config file is unreadable, not TOML, or has an unknown key or a value of the wrong type."""


@dataclass(frozen=True)
class ProjectConfig:
    """The options a config file sets, by Options field name, already checked (paths made absolute)."""

    path: str
    values: Mapping[str, Any] = field(default_factory=dict)


# ---- finding the file --------------------------------------------------------------------------


def find_config(start: str | Path | None = None) -> Path | None:
    """The first msdiag.toml, or pyproject.toml with a [tool.msdiag] table, from ``start`` (cwd) upward."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        own = folder / MSDIAG_TOML
        if own.is_file():
            return own
        pp = folder / PYPROJECT
        if pp.is_file() and _mentions_tool_table(pp):
            return pp
    return None


def _mentions_tool_table(pp: Path) -> bool:
    """A cheap look before parsing: another project's broken pyproject.toml is none of msdiag's business."""
    try:
        text = pp.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    if "msdiag" not in text:
        return False
    return _table_of(_parse(pp, text), pp) is not None


# ---- reading it ---------------------------------------------------------------------------------


def load_config(path: str | Path) -> ProjectConfig:
    """Read and check one config file (msdiag.toml, or pyproject.toml's [tool.msdiag])."""
    p = Path(path).resolve()
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(p, f"cannot be read ({getattr(e, 'strerror', None) or e})") from None
    doc = _parse(p, text)
    table = _table_of(doc, p)
    prefix: tuple[str, ...] = TOOL_TABLE if table is not None else ()
    if table is None:
        if p.name == PYPROJECT:
            raise ConfigError(p, "has no [tool.msdiag] table")
        table = doc
    lines = _key_lines(text)
    values = {}
    for key, raw in table.items():
        spec = KEYS.get(key)
        where = _Where(p, lines, (*prefix, key))
        if spec is None:
            raise ConfigError(p, f"unknown key '{key}' (known: {', '.join(sorted(KEYS))})", where.line())
        values[spec.field] = spec.check(raw, where)
    return ProjectConfig(path=str(p), values=values)


def _parse(p: Path, text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"at line (\d+)", str(e))
        raise ConfigError(p, f"not valid TOML: {e}", int(m.group(1)) if m else None) from None


def _table_of(doc: dict[str, Any], p: Path) -> dict[str, Any] | None:
    """pyproject.toml's [tool.msdiag] (or msdiag.toml's, when written that way), else None."""
    tool = doc.get(TOOL_TABLE[0])
    if not isinstance(tool, dict) or TOOL_TABLE[1] not in tool:
        return None
    table = tool[TOOL_TABLE[1]]
    if not isinstance(table, dict):
        raise ConfigError(p, "[tool.msdiag] must be a table", _key_lines(p.read_text(encoding="utf-8")).get(TOOL_TABLE))
    return table


# ---- line numbers (tomllib keeps none) ----------------------------------------------------------

_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(?:#.*)?$")
_KEY = re.compile(r"""^\s*((?:"(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+)(?:\s*\.\s*(?:"(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+))*)\s*=""")
_PART = re.compile(r""""((?:[^"\\]|\\.)*)"|'([^']*)'|([A-Za-z0-9_-]+)""")


def _split_key(dotted: str) -> tuple[str, ...]:
    return tuple(a or b or c for a, b, c in _PART.findall(dotted))


def _key_lines(text: str) -> dict[tuple[str, ...], int]:
    """The line (1-based) where each table header and key is first written, by its full key path."""
    out: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for i, line in enumerate(text.splitlines(), 1):
        h = _HEADER.match(line)
        if h:
            table = _split_key(h.group(1))
            out.setdefault(table, i)
            continue
        k = _KEY.match(line)
        if k:
            out.setdefault((*table, *_split_key(k.group(1))), i)
    return out


@dataclass(frozen=True)
class _Where:
    """A key's place in the file: for error messages with the file and the line."""

    path: Path
    lines: Mapping[tuple[str, ...], int]
    key: tuple[str, ...]

    def line(self) -> int | None:
        for n in range(len(self.key), 0, -1):  # an inline table's entries share the line of its key
            if self.key[:n] in self.lines:
                return self.lines[self.key[:n]]
        return None

    def sub(self, name: str) -> _Where:
        return _Where(self.path, self.lines, (*self.key, name))

    def fail(self, problem: str) -> ConfigError:
        name = ".".join(self.key[len(TOOL_TABLE):] if self.key[: len(TOOL_TABLE)] == TOOL_TABLE else self.key)
        return ConfigError(self.path, f"{name}: {problem}", self.line())


# ---- the keys ---------------------------------------------------------------------------------------


def _number(raw: Any, w: _Where, integer: bool = False) -> Any:
    kind = "a positive integer" if integer else "a positive number"
    ok = isinstance(raw, int) if integer else isinstance(raw, (int, float))
    if isinstance(raw, bool) or not ok or not raw > 0:
        raise w.fail(f"should be {kind}, found {raw!r}")
    return raw


def _text(raw: Any, w: _Where) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise w.fail(f"should be non-empty text, found {raw!r}")
    return raw


def _deep(raw: Any, w: _Where) -> str:
    """deep = "auto" | "all" (as --deep)."""
    if raw not in DEEP_MODES:
        raise w.fail(f"should be one of {', '.join(repr(m) for m in DEEP_MODES)}, found {raw!r}")
    return str(raw)


def _texts(raw: Any, w: _Where) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(x, str) and x.strip() for x in raw):
        raise w.fail(f"should be a list of text, found {raw!r}")
    return tuple(raw)


def _path(raw: Any, w: _Where, folder: bool) -> str:
    """A path relative to the config file's folder, which must exist."""
    p = (w.path.parent / _text(raw, w)).resolve()
    if not (p.is_dir() if folder else p.is_file()):
        raise w.fail(f"{p} is not {'a folder' if folder else 'a file'}")
    return str(p)


def _folders(raw: Any, w: _Where) -> tuple[str, ...]:
    return tuple(_path(d, w, folder=True) for d in _texts(raw, w))


def _overrides(raw: Any, w: _Where) -> dict[str, str]:
    """set = {"rule.param" = number}: checked against the rules (ids, bounds) by the analysis."""
    if not isinstance(raw, dict):
        raise w.fail(f'should be a table of "RULE.PARAM" = number, found {raw!r}')
    out = {}
    for k, v in raw.items():
        if "." not in k:
            raise w.sub(k).fail("expected a key RULE.PARAM (quote it: \"rule-id.param\" = value)")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise w.sub(k).fail(f"should be a number, found {v!r}")
        out[k] = repr(v) if isinstance(v, float) else str(v)
    return out


def _norms(raw: Any, w: _Where) -> dict[str, float]:
    if not isinstance(raw, dict):
        raise w.fail(f"should be a table of TRANSPORT = GB/s, found {raw!r}")
    for k, v in raw.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise w.sub(k).fail(f"should be a number of GB/s, found {v!r}")
    try:
        return parse_bandwidth_norms(raw)
    except ValueError as e:
        raise w.fail(str(e).removeprefix("bandwidth_norms: ")) from None


def _goals(raw: Any, w: _Where) -> tuple[tuple[str, float], ...]:
    """goal = ["mfu=0.45", "step-ms=850"]: each checked as --goal is (options.parse_goal)."""
    try:
        return tuple(parse_goal(g) for g in _texts(raw, w))
    except ValueError as e:
        raise w.fail(str(e)) from None


@dataclass(frozen=True)
class _Key:
    field: str  # the Options field it sets
    check: Callable[[Any, _Where], Any]


#: Every key a config may hold: name -> (Options field, checker).
KEYS: dict[str, _Key] = {
    "device": _Key("device", _text),
    "peak_tflops": _Key("peak_tflops", _number),
    "ranks_per_node": _Key("ranks_per_node", lambda v, w: _number(v, w, integer=True)),
    "device_memory_gb": _Key("device_memory_gb", _number),
    "host_cores": _Key("host_cores", lambda v, w: _number(v, w, integer=True)),
    "tokens_per_step": _Key("tokens_per_step", lambda v, w: _number(v, w, integer=True)),
    "model_config": _Key("model_config", lambda v, w: _path(v, w, folder=False)),
    "slo_ttft_ms": _Key("slo_ttft_ms", _number),
    "slo_tpot_ms": _Key("slo_tpot_ms", _number),
    "rules": _Key("rules_dirs", _folders),
    "set": _Key("overrides", _overrides),
    "disable": _Key("disable", _texts),
    "bandwidth_norms": _Key("bandwidth_norms", _norms),
    "goal": _Key("goals", _goals),
    "deep": _Key("deep", _deep),
}


def merged(config: ProjectConfig | None, given: Mapping[str, Any]) -> dict[str, Any]:
    """Options field values: the command line's over the file's over the defaults.

    ``given`` holds what the command line set (None / empty when not given). Tables (``set``,
    ``bandwidth_norms``) merge key by key, the command line's entries winning; lists (``rules``,
    ``disable``) are the file's followed by the command line's.
    """
    out = dict(given)
    if config is None:
        return out
    for name, value in config.values.items():
        mine = given.get(name)
        if isinstance(value, Mapping):
            out[name] = {**value, **(mine or {})}
        elif isinstance(value, tuple):
            out[name] = tuple(dict.fromkeys((*value, *(mine or ()))))
        elif mine is None:
            out[name] = value
    out["config"] = config.path
    return out
