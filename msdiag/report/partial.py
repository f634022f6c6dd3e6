"""What the analysis could not use, said first: ranks left out, files that failed, other runs under the folder.

One wording for the text header and the HTML banner, read from the report object alone (the JSON contract's
``ranks_left_out``, ``runs_left_out`` and ``sources``). A user of a 512-rank job must not miss one broken rank,
nor read a report of two unrelated runs as one job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

LISTED = 3  # left-out ranks / failed files named one by one; the rest counted (the JSON lists them all)


def _short(path: str, root: str) -> str:
    """A file's path relative to the capture folder when it lies inside it."""
    try:
        return str(Path(path).relative_to(Path(root)))
    except ValueError:
        return path


def _ranks_line(report: dict[str, Any]) -> list[str]:
    left = report.get("ranks_left_out") or []
    if not left:
        return []
    done = len(report.get("ranks") or [])
    named = "; ".join(f"rank {x['rank']} left out: {_short(x['file'], report['path'])}: {x['reason']}" for x in left[:LISTED])
    more = f"; {len(left) - LISTED} more left out (--format json: ranks_left_out)" if len(left) > LISTED else ""
    return [f"{done} of {done + len(left)} ranks analysed ({named}{more})"]


def _failed_lines(report: dict[str, Any]) -> list[str]:
    failed = [s for s in report.get("sources") or [] if s.get("status") == "failed"]
    out = [
        f"rank {s['rank']} analysed without {_short(s.get('path') or s['name'], report['path'])}: {s.get('reason')}"
        for s in failed[:LISTED]
    ]
    if len(failed) > LISTED:
        out.append(f"{len(failed) - LISTED} more file(s) failed (see the sources)")
    return out


def _runs_lines(report: dict[str, Any]) -> list[str]:
    runs = report.get("runs_left_out") or []
    out = []
    for r in runs:
        ranks = ", ".join(str(x) for x in r.get("ranks") or [])
        out.append(
            f"another run under this folder was not analysed: {r.get('what')} (rank(s) {ranks}; {r.get('folder')}): "
            "give its folder to analyse it"
        )
    return out


def partial_lines(report: dict[str, Any]) -> list[str]:
    """Sentences saying what the analysis left out, most important first; empty when nothing was."""
    return _ranks_line(report) + _runs_lines(report) + _failed_lines(report)
