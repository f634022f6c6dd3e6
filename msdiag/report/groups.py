"""What the report does not measure, grouped so that one reason is said once (issue 19, "no noise").

A training report has dozens of null metrics and skipped rules sharing a handful of reasons ("no
request log" alone covers about thirty metrics). The text and HTML renderers show one collapsed line
per reason instead of one row per metric or rule. These helpers only group what the report object
(the JSON contract) already says: they compute nothing.
"""

from __future__ import annotations

from typing import Any

#: Reason groups shown before "and N more: --verbose" in the text view.
TEXT_GROUPS = 5
#: rule ids named on one text line before the rest is counted
TEXT_IDS = 6


#: the one reason of every capture metric when the input is a request log alone
NO_CAPTURE = "no profiler capture: a request log alone (msdiag analyze CAPTURE --requests LOG adds the capture)"


def _why(report: dict[str, Any], metric: str | None, own: str) -> str:
    """A null metric's reason as the report says it once: for a request log alone, every metric that is not
    read from the log (its source) lacks the same thing, the capture, whatever its own reason names."""
    alone = not report.get("ranks") and (report.get("capture") or {}).get("family") == "request_log"
    source = str(((report.get("metric_details") or {}).get(metric or "") or {}).get("source") or "")
    return NO_CAPTURE if alone and metric and not source.startswith("request log") else own


def absent_metrics(report: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """Null metrics grouped by their reason: [(reason, [metric ids])], the largest group first."""
    groups: dict[str, list[str]] = {}
    details = report.get("metric_details") or {}
    for mid, v in (report.get("metrics") or {}).items():
        if v is None:
            reason = _why(report, mid, (details.get(mid) or {}).get("reason") or "not computed")
            groups.setdefault(reason, []).append(mid)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def skipped_rules(report: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """Rules that could not check, grouped by why their metric is missing: [(reason, [rule ids])].

    The reason is the missing metric's own (``metric_details``), so rules blocked by the same absent
    input (e.g. no request log) share one line; without it, the rule's skip reason.
    """
    groups: dict[str, list[str]] = {}
    details = report.get("metric_details") or {}
    for s in report.get("rules_skipped") or []:
        metric = s.get("metric")
        why = (details.get(metric) or {}).get("reason") if metric else None
        reason = _why(report, metric, why or s.get("reason") or "skipped")
        groups.setdefault(reason, []).append(s["rule_id"])
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def checked_rules(report: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    """Rules checked that found nothing: (ids whose condition was not met, [(id, negative result)])."""
    quiet = [c["rule_id"] for c in report.get("rules_checked") or [] if not c.get("reason")]
    told = [(c["rule_id"], c["reason"]) for c in report.get("rules_checked") or [] if c.get("reason")]
    return quiet, told
