"""One small hierarchy of errors. Each names the file and what is wrong.

The CLI prints ``str(error)`` on one line and exits with code 2. The text is escaped here, once
for every command: paths and quoted input may hold control characters (a folder name with a
newline, a terminal escape sequence in a file), which must neither break the line nor forge a
second ``msdiag: error:`` line. Each such character is shown as a Python escape (``\\n``,
``\\x1b``, ``\\u2028``).
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# bidirectional overrides and isolates reorder how a line reads on a terminal (CVE-2021-42574)
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _escaped(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def one_line(text: str) -> str:
    """``text`` with every control character escaped (C0, DEL, C1, line and paragraph separators,
    bidirectional controls), so it prints as one line that says exactly what it holds."""
    if text.isprintable():  # the common case: nothing to escape
        return text
    return "".join(
        _escaped(ch) if unicodedata.category(ch) in ("Cc", "Zl", "Zp") or ch in _BIDI else ch for ch in text
    )


class MsdiagError(Exception):
    """Base of every error msdiag reports to the user (exit code 2); ``str()`` is one escaped line."""

    def __str__(self) -> str:
        return one_line(super().__str__())


class InputError(MsdiagError):
    """The path the user gave cannot be analyzed (missing, empty, not a capture, mixed ranks)."""

    def __init__(self, path: str | Path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # errors cross process boundaries when ranks are read by a pool
        return (type(self), (self.path, self.problem))


class ParseError(InputError):
    """A file exists but is truncated, empty or malformed."""


class LocatedError(MsdiagError):
    """A file msdiag reads for its own settings (a rule, a config) is wrong at a line."""

    def __init__(self, path: str | Path, problem: str, line: int | None = None):
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.path, self.problem, self.line))


class RuleError(LocatedError):
    """A rule file fails to load or validate."""
