"""One small hierarchy of errors. Each names the file and what is wrong.

The CLI prints ``str(error)`` on one or two lines and exits with code 2.
"""

from __future__ import annotations

from pathlib import Path


class MsdiagError(Exception):
    """Base of every error msdiag reports to the user (exit code 2)."""


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


class RuleError(MsdiagError):
    """A rule file fails to load or validate."""

    def __init__(self, path: str | Path, problem: str, line: int | None = None):
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.path, self.problem, self.line))
