"""The terminal summary: a short human view of the report object.

``render(report)`` joins the sections below, each a function of the report object alone (the JSON
contract): identity, verdict, findings, inference, steps, ranks, cross-checks, absent sources, notes.
"""

from __future__ import annotations

import textwrap
from typing import Any

from msdiag import fmt
from msdiag.report import groups
from msdiag.report.inference_text import render_lines as inference_lines
from msdiag.report.partial import partial_lines
from msdiag.report.training_text import render_lines as training_lines

STEP_ROWS = 40  # step rows printed; --format json has them all


def _log_alone(report: dict[str, Any]) -> bool:
    """A request log analysed alone: no ranks, no steps (the training-only parts are not shown)."""
    return bool(report.get("requests")) and not report["ranks"]


def _identity(report: dict[str, Any]) -> list[str]:
    cap = report["capture"]
    if _log_alone(report):
        r = report["requests"]
        return [f"msdiag {report['msdiag_version']}: {report['path']}",
                f"  request log ({r['format_label']}), {r['requests']} request(s)"]
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
    depth = read_depth_line(report)
    if depth:
        out.append(f"  {depth}")
    # what was left out is said before anything else (issue 19): a broken rank of 512 must not be missed
    out.extend(f"  PARTIAL: {line}" for line in partial_lines(report))
    return out


def read_depth_line(report: dict[str, Any]) -> str | None:
    """One line naming the ranks read deep and why, when some rank was read shallow (--deep auto); else None."""
    rd = report.get("read_depth")
    if not rd or not rd["shallow"]:
        return None
    why = "; ".join(f"rank {r}: {', '.join(v)}" for r, v in rd["why"].items() if int(r) in rd["deep"])
    n = len(rd["deep"]) + rd["shallow"]
    summary = int(rd.get("summary", 0))
    more = "--deep all reads every rank" if rd["mode"] == "auto" else "--deep all: every rank's files parsed, the answer alike"
    if not summary:
        return (f"read deep: {len(rd['deep'])} of {n} ranks ({why}); the other {rd['shallow']} without their Python frames "
                f"(host causes measured on every rank, call sites from the ranks read deep; {more})")
    frames = f"; {rd['shallow'] - summary} without their Python frames" if rd["shallow"] > summary else ""
    return (f"read deep: {len(rd['deep'])} of {n} ranks ({why}); {summary} without parsing trace_view.json{frames} "
            "(their device side from kernel_details.csv, collectives from communication.json; the host side: data waits, "
            f"host syncs and other causes, call sites, from the ranks read deep; {more})")


def _verdict(report: dict[str, Any]) -> list[str]:
    v = report.get("verdict") or {}
    if not v.get("bottleneck"):
        if _log_alone(report):  # a request log whose latencies pass every inference rule: said, not left blank
            return ["\nVerdict: none: no inference bottleneck passes its threshold (queueing, static batching, prefill, decode)"]
        return []
    of = {"ttft": "of TTFT", "tpot": "of TPOT"}.get(str(v.get("share_of")), "of the step")  # inference: of a latency
    share = f" ({100 * v['share']:.0f}% {of})" if v.get("share") is not None else ""
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
        ru_of = {"queueing": "of TTFT", "batching": "of TTFT", "prefill": "of TTFT", "decode": "of TPOT"}.get(ru["bottleneck"], "of the step")
        out.append(f"  runner-up: {ru['bottleneck']} ({100 * ru['share']:.0f}% {ru_of}, {ru['rule_id']})")
    return out


def _goal_line(g: dict[str, Any], details: dict[str, Any]) -> str:
    """One goal: the target, where the job is, the gap, and the plan prefix that reaches it (or the best)."""
    name = g["goal"]
    head = f"Goal {name} {'>=' if g['better'] == 'higher' else '<='} {fmt.goal_figure(name, g['target'])}"
    if g["status"] == "unknown":
        why = (details.get(g["metric"]) or {}).get("reason")
        return f"{head}: cannot tell, {g['metric']} is not measured" + (f" ({why})" if why else "")
    now = f"now {fmt.goal_figure(name, g['now'])}"
    if g["status"] == "met":
        return f"{head}: met ({now})"
    short = f"{now}, {fmt.goal_figure(name, g['gap'])} short"
    fixes = ", ".join(g["fixes"])
    if g["status"] == "reachable":
        return (f"{head}: {short}; reachable with the first {len(g['fixes'])} fix(es) of the plan: {fixes} "
                f"(projected {fmt.goal_figure(name, g['projected'])}, a bound)")
    if g["projected"] is None:
        return f"{head}: {short}; not reachable with the listed fixes (none of them changes {name})"
    return f"{head}: {short}; not reachable with the listed fixes; best projected: {fmt.goal_figure(name, g['projected'])} ({fixes})"


def goal_lines(report: dict[str, Any]) -> list[str]:
    """The goals (--goal / the config's goal), one line each: the report's first lines."""
    details = report.get("metric_details") or {}
    return [_goal_line(g, details) for g in report.get("goals") or []]


def plan_lines(report: dict[str, Any]) -> list[str]:
    """The plan under the verdict: each fix by saving with the cumulative step time (intervals removed once)."""
    plan = report.get("plan") or {}
    items, requests = plan.get("items") or [], plan.get("requests") or []
    if not items and not requests:
        return []
    out = []
    if items:
        out.append(f"\nPlan (the most each fix could win per median step; an instant two fixes remove counts once), "
                   f"from {fmt.us(plan.get('step_time_us'))}:")
        for i, it in enumerate(items, 1):
            mfu = f", MFU {fmt.pct(it['mfu_after'])}" if it.get("mfu_after") is not None else ""
            adds = it["adds_us_per_step"]
            gain = f"-{fmt.us(adds):>10}" if adds else f"{'nothing new':>11}"  # its intervals are removed already
            out.append(f"  {i}. {it['rule_id']:<24} {gain}  ->  {fmt.us(it['step_time_us_after']):>10}{mfu}")
    if requests:
        out.append("\nPlan for the requests (the latencies after each fix and the ones before it):")
    for r in requests:
        figs = [f"{c.upper()} p50 {fmt.ms(r[f'{c}_p50_ms_after'])}, p99 {fmt.ms(r[f'{c}_p99_ms_after'])}"
                for c in ("ttft", "tpot") if r.get(f"{c}_p99_ms_after") is not None]
        out.append(f"  {r['rule_id']}: " + ("; ".join(figs) or "cannot tell (see the finding's projection)"))
    return out


def _why_not(report: dict[str, Any], key: str) -> str:
    """A metric's reason for being unknown, in a few words: its first clause."""
    reason = ((report.get("metric_details") or {}).get(key) or {}).get("reason") or "not measured"
    for sep in (": ", "; ", " ("):
        reason = reason.split(sep, 1)[0]
    return reason


def _figure(report: dict[str, Any], key: str, unit: str) -> str:
    v = report["metrics"].get(key)
    if v is None:
        return f"unknown ({_why_not(report, key)})"
    return fmt.value(v, unit) if unit in ("ratio", "TFLOP/s") else f"{fmt.plain(v)} {unit}"


def _utilization(report: dict[str, Any]) -> str:
    m = report["metrics"]
    if m.get("mfu") is None and m.get("hfu") is None:
        return f"MFU, HFU unknown ({_why_not(report, 'mfu')})"
    return f"MFU {_figure(report, 'mfu', 'ratio')}, HFU {_figure(report, 'hfu', 'ratio')}"


def efficiency_lines(report: dict[str, Any]) -> list[str]:
    """The headline's MFU, HFU, achieved TFLOP/s against the peak, and the training throughput (issue 15)."""
    if not report.get("steps"):
        return []
    m = report["metrics"]
    peak = m.get("peak_tflops")
    chip = f" ({m['device_name']})" if m.get("device_name") else ""
    achieved = m.get("achieved_tflops")
    line = f"\n{_utilization(report)}"
    if achieved is not None:
        line += f"; {fmt.value(achieved, 'TFLOP/s')} per device" + (f" of {fmt.value(peak, 'TFLOP/s')} peak{chip}" if peak is not None else "")
    elif peak is not None:
        line += f"; peak {fmt.value(peak, 'TFLOP/s')}{chip}"
    out = [line]
    dev = [_figure(report, k, u) for k, u in (("samples_per_s_device", "samples/s"), ("tokens_per_s_device", "tokens/s")) if m.get(k) is not None]
    job = [_figure(report, k, u) for k, u in (("samples_per_s", "samples/s"), ("tokens_per_s", "tokens/s")) if m.get(k) is not None]
    if not dev and not job:
        out.append(f"Throughput unknown ({_why_not(report, 'samples_per_s_device')})")
    else:
        job_text = ", ".join(job) if job else f"unknown ({_why_not(report, 'samples_per_s')})"
        out.append(f"Throughput per device: {', '.join(dev) or 'unknown'}; for the job: {job_text}")
    return out


def why_lines(report: dict[str, Any]) -> list[str]:
    """The "Why the device waits" section: the late captured arrivals and the host causes with their call sites."""
    out = [f"  {p}" for p in fmt.wait_phrases(report.get("metrics") or {})]
    for c in report.get("causes") or []:
        share = f", {100 * c['share_of_step']:.0f}% of the step" if c.get("share_of_step") is not None else ""
        out.append(f"  {c['id']}: {c['ms_per_step']:.1f} ms per step{share} (ranks {fmt.rank_ranges(c['ranks'])})")
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
                out.append(f"      fix{fmt.framework_label(sg, report['capture'].get('framework'))}: {sg['action']}")
                if sg.get("api"):
                    out.append(f"           {sg['api']}")
    return out


def _wrapped(head: str, items: list[str]) -> list[str]:
    """``head`` then the items comma-separated, wrapped at 100 columns under a 4-space indent."""
    return textwrap.wrap(head + ", ".join(items), 100, subsequent_indent="    ", break_on_hyphens=False)


def _capped(lines: list[str], hidden: int, verbose: bool) -> list[str]:
    """The first groups.TEXT_GROUPS lines, then "and N more: --verbose" (all of them with --verbose)."""
    if verbose or len(lines) <= groups.TEXT_GROUPS:
        return lines
    return [*lines[: groups.TEXT_GROUPS], f"  and {hidden} more: --verbose"]


def _named(ids: list[str], verbose: bool) -> str:
    """Rule ids of one reason: all of them, or the first few and how many (``--verbose`` names all)."""
    if verbose or len(ids) <= groups.TEXT_IDS:
        return ", ".join(ids)
    return f"{len(ids)} rules ({', '.join(ids[: groups.TEXT_IDS - 1])}, ...)"


def rules_status(report: dict[str, Any], verbose: bool = False) -> list[str]:
    """Rules that could not check (one line per missing input, naming the rules) apart from rules
    checked that found nothing (the negative results with what was found, then the quiet rules)."""
    out: list[str] = []
    skipped = groups.skipped_rules(report)
    if skipped:
        n = sum(len(ids) for _, ids in skipped)
        out.append(f"\nCould not check ({n} rule(s), a metric they need is missing):")
        lines = [f"  {_named(ids, verbose)}: {reason}" for reason, ids in skipped]
        out.extend(_capped(lines, sum(len(ids) for _, ids in skipped[groups.TEXT_GROUPS:]), verbose))
    quiet, told = groups.checked_rules(report)
    if quiet or told:
        out.append(f"\nChecked, nothing found ({len(quiet) + len(told)} rule(s)):")
        out.extend(f"  {rid}: {why}" for rid, why in told)
        if quiet:
            out.extend(_wrapped("  condition not met: ", quiet))
    return out


def not_measured(report: dict[str, Any], verbose: bool = False) -> list[str]:
    """Null metrics, one collapsed line per reason (their ids with --verbose; the JSON has each)."""
    absent = groups.absent_metrics(report)
    if not absent:
        return []
    n = sum(len(ids) for _, ids in absent)
    out = [f"\nNot measured ({n} of {len(report.get('metrics') or {})} metrics, by reason):"]
    lines: list[str] = []
    for reason, ids in absent:
        lines.append(f"  {len(ids):>3}: {reason}")
        if verbose:
            lines.extend(_wrapped("       ", ids))
    if verbose:
        return out + lines
    return out + _capped(lines, sum(len(ids) for _, ids in absent[groups.TEXT_GROUPS:]), verbose)


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
        out.extend(_device_memory(report, r["rank"]))
        for n in r["notes"]:
            out.append(f"  note: {n}")
    return out


def _device_memory(report: dict[str, Any], rank: int) -> list[str]:
    """The rank's device peak by component and the peak's largest holders (JSON memory_composition / _peak_holders)."""
    out = []
    comp = next((c for c in report.get("memory_composition", []) if c["rank"] == rank), None)
    if comp and comp.get("basis") == "npu_module_mem":
        parts = ", ".join(
            f"{label} {fmt.mib(comp[key])}" for key, label in
            (("framework_pool_mb", "framework pool"), ("hccl_mb", "HCCL"), ("runtime_mb", "runtime"), ("other_mb", "other"))
        )  # fmt: skip
        out.append(f"  device memory peak: {fmt.mib(comp['device_mb'])} ({parts})")
    held = next((h for h in report.get("memory_peak_holders", []) if h["rank"] == rank), None)
    if held and held.get("top"):
        top = "; ".join(f"{h['name']} {fmt.mib(h['mb'])} ({h['class'].replace('_', ' ')})" for h in held["top"][:3])
        out.append(f"  held at the allocated peak: {top}")
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
        out.append("\nAbsent, unreadable or not read:")
        seen: set[tuple[str, str, str]] = set()
        for s in absent:
            key = (s["name"], s["status"], s["reason"] or "")
            if key in seen:
                continue
            seen.add(key)
            ranks = sorted({str(x["rank"]) for x in absent if (x["name"], x["status"], x["reason"] or "") == key})
            out.append(f"  {s['name']} ({s['status']}, rank {','.join(ranks)}): {s['reason']}")
    return out


def render(report: dict[str, Any], verbose: bool = False) -> str:
    """The text view of a report object (``verbose``: every rule and metric group, with their ids)."""
    out: list[str] = []
    for section in (goal_lines, _identity, _verdict, efficiency_lines, plan_lines, why_lines, _findings, inference_lines, training_lines, _steps, _ranks, _checks, _absent):
        out.extend(section(report))
    out.extend(rules_status(report, verbose))
    out.extend(not_measured(report, verbose))
    for n in report.get("notes", []):
        out.append(f"note: {n}")
    return "\n".join(out) + "\n"
