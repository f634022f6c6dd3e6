"""Advice for the framework that ran: keep the suggestions that apply to the capture's framework.

A suggestion says which framework it applies to (``framework:`` mindspore / torch_npu / any in the rule
YAML). A capture of a known framework gets its own suggestions and the framework-neutral ones; another
framework's suggestion is kept only when the rule has none of the capture's own (then the renderers label
it, e.g. "(MindSpore)", so a torch_npu user is never handed a MindSpore API as if it were theirs). A capture
whose framework is unknown (a request log, raw CANN output) keeps every suggestion, each labelled.
"""

from __future__ import annotations

from typing import Any

from msdiag.fmt import framework_key


def for_framework(findings: list[dict[str, Any]], framework: Any) -> list[dict[str, Any]]:
    """The findings with each one's suggestions chosen for ``framework`` (the capture's, as identified)."""
    fw = framework_key(framework)
    if fw is None:
        return findings
    for f in findings:
        sg = f.get("suggestions") or []
        own = any(s.get("framework") == fw for s in sg)
        f["suggestions"] = [s for s in sg if s.get("framework", "any") in ("any", fw) or not own]
    return findings
