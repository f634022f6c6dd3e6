"""The terminal summary: a short human view of the report object.

``render(report)`` joins the sections below, each a function of the report object alone (the JSON
contract): identity, verdict, findings, inference, steps, ranks, cross-checks, absent sources, notes.
"""

from __future__ import annotations

from typing import Any

from msdiag import fmt
from msdiag.report.inference_text import render_lines as inference_lines
from msdiag.report.training_text import render_lines as training_lines

STEP_ROWS = 40  # step rows printed; --format json has them all


def _identity(report: dict[str, Any]) -> list[str]:
    cap = report["capture"]
    ident = ", ".join(
        str(x)
        for x in (
            cap.get("framework"),
            cap.get("framework_version"),
            cap.get("device"),
            f"{cap.get('ranks')} rank(s)",
            cap.get("profiler_level"),
        )
        if x
    )
    out = [f"msdiag {report['msdiag_version']}: {report['path']}", f"  {ident}"]
    if cap.get("parallel"):
        out.append("  parallel: " + ", ".join(f"{k}={v}" for k, v in cap["parallel"].items() if v is not None))
    return out


def _verdict(report: dict[str, Any]) -> list[str]:
    v = report.get("verdict") or {}
    if not v.get("bottleneck"):
        return []
    share = f" ({100 * v['share']:.0f}% of the step)" if v.get("share") is not None else ""
    out = [f"\nVerdict: {v['bottleneck'].upper()}{share}, confidence {v.get('confidence')}", f"  {v.get('sentence')}"]
    cause = v.get("cause")
    if cause and v.get("share") is not None:  # the headline names the cause (issue 14)
        out[0] = f"\nVerdict: {v['bottleneck'].upper()} {100 * v['share']:.0f}%: {cause['sentence']}"
        out.insert(1, f"  confidence {v.get('confidence')}; cause: {cause['id']}")
    if v.get("cause_unknown"):
        out.append(f"  cause: {v['cause_unknown']}")
    if v.get("causes"):
        out.append(f"  related findings: {', '.join(v['causes'])}")
    if v.get("runner_up"):
        ru = v["runner_up"]
        out.append(f"  runner-up: {ru['bottleneck']} ({100 * ru['share']:.0f}% of the step, {ru['rule_id']})")
    return out


def why_lines(report: dict[str, Any]) -> list[str]:
    """The "Why the device waits" section: the late captured arrivals and the host causes with their call sites."""
    out = [f"  {p}" for p in fmt.wait_phrases(report.get("metrics") or {})]
    for c in report.get("causes") or []:
        share = f", {100 * c['share_of_step']:.0f}% of the step" if c.get("share_of_step") is not None else ""
        out.append(f"  {c['id']}: {c['ms_per_step']:.1f} ms per step{share} (ranks {', '.join(map(str, c['ranks']))})")
        out.extend(f"      {s['ms_per_step']:.1f} ms at {s['stack']}" for s in c.get("call_sites") or [])
    return ["\nWhy the device waits:", *out] if out else []


def _findings(report: dict[str, Any]) -> list[str]:
    out = []
    findings = report.get("findings") or []
    if findings:
        out.append(f"\nFindings ({len(findings)}):")
        for f in findings:
            out.append(f"  [{f['severity']}] {f['rule_id']}: {f['message']}")
            for sg in f.get("suggestions") or []:
                out.append(f"      fix: {sg['action']}")
                if sg.get("api"):
                    out.append(f"           {sg['api']}")
    skipped = report.get("rules_skipped") or []
    if skipped:
        out.append(f"  ({len(skipped)} rule(s) skipped for missing data: " + "; ".join(f"{x['rule_id']}: {x['reason']}" for x in skipped[:4]) + (" ..." if len(skipped) > 4 else "") + ")")
    return out


def _steps(report: dict[str, Any]) -> list[str]:
    out = []
    m = report["metrics"]
    steps = report["steps"]
    if steps or not (report.get("requests") or report.get("training_log")):  # a log alone has no steps
        out.append(
            f"\nStep time: median {fmt.us(m.get('step_time_us'))}, p90 {fmt.us(m.get('step_time_p90_us'))} "
            f"over {m.get('step_count') or 0} rank-step(s)"
        )
        out.append("\nPer rank and step (share of the step):")
        out.append(f"  {'rank':>4} {'step':>6} {'total':>10} {'computing':>10} {'comm':>10} {'exposed':>10} {'free':>10}  source")
    for s in steps[:STEP_ROWS]:
        t = s["total_us"]
        out.append(
            f"  {s['rank']:>4} {('-' if s['step'] is None else s['step']):>6} {fmt.us(t):>10} "
            f"{fmt.share(s['computing_us'], t):>10} {fmt.share(s['communication_us'], t):>10} "
            f"{fmt.share(s['communication_exposed_us'], t):>10} {fmt.share(s['free_us'], t):>10}  {s['source']}"
        )
    if len(steps) > STEP_ROWS:
        out.append(f"  ... {len(steps) - STEP_ROWS} more rows (--format json has them all)")
    return out


def _ranks(report: dict[str, Any]) -> list[str]:
    out = []
    for r in report["ranks"]:
        out.append(f"\nRank {r['rank']} ({r['family']}, {r['kernels']} kernels from {r['kernels_from'] or '-'})")
        if r.get("steps_from"):
            out.append(f"  steps found by: {r['steps_from']}")
        tk = r["top_kernels"][:5]
        if tk:
            out.append("  top kernel types: " + "; ".join(f"{k['type']} {fmt.us(k['total_us'])} ({100 * k['share']:.0f}%, {k['count']}x)" for k in tk))
        c = r.get("communication")
        if c:
            extra = ""
            if "transit_us" in c:
                extra = f", transit {fmt.us(c['transit_us'])}, wait {fmt.us(c['wait_us'])}, sync {fmt.us(c['sync_us'])}, idle {fmt.us(c['idle_us'])}"
            out.append(f"  communication: {c['ops']} ops, elapse {fmt.us(c['elapse_us'])}{extra} ({c['source']})")
        out.append(f"  memory peak allocated: {fmt.mib(r['memory_peak_allocated_mb'])}")
        for n in r["notes"]:
            out.append(f"  note: {n}")
    return out


def _checks(report: dict[str, Any]) -> list[str]:
    out = []
    bad = [c for c in report.get("checks", []) if not c["ok"]]
    if report.get("checks"):
        n_ok = sum(1 for c in report["checks"] if c["ok"])
        against = ", ".join(sorted({c["check"] for c in report["checks"]}))
        out.append(f"\nCross-check with the profiler's own breakdown ({against}): {n_ok}/{len(report['checks'])} figures agree within 1%")
        for c in bad[:5]:
            out.append(f"  rank {c['rank']} step {c['step']} {c['column']}: msdiag {c['msdiag']:.1f} vs profiler {c['profiler']:.1f}")
    return out


def _absent(report: dict[str, Any]) -> list[str]:
    out = []
    absent = [s for s in report["sources"] if s["status"] != "present"]
    if absent:
        out.append("\nAbsent or unreadable:")
        seen: set[tuple[str, str, str]] = set()
        for s in absent:
            key = (s["name"], s["status"], s["reason"] or "")
            if key in seen:
                continue
            seen.add(key)
            ranks = sorted({str(x["rank"]) for x in absent if (x["name"], x["status"], x["reason"] or "") == key})
            out.append(f"  {s['name']} ({s['status']}, rank {','.join(ranks)}): {s['reason']}")
    return out


def render(report: dict[str, Any]) -> str:
    """The text view of a report object."""
    out: list[str] = []
    for section in (_identity, _verdict, why_lines, _findings, inference_lines, training_lines, _steps, _ranks, _checks, _absent):
        out.extend(section(report))
    for n in report.get("notes", []):
        out.append(f"note: {n}")
    return "\n".join(out) + "\n"
