"""The HTML report: one self-contained, deterministic file built from an Analysis.

``render(a)`` turns the report object (``contract.build``, the JSON contract) and the charts
(``report.charts``) into a page through jinja2 templates in ``reports/templates/`` (shipped as
``msdiag._templates``): autoescape on and StrictUndefined, so a kernel named ``Cast<float>`` shows
as text and a missing key is an error rather than a blank. The page carries inline CSS and inline
SVG only: no script, font, stylesheet or image is loaded from anywhere, so it opens on an
air-gapped cluster. Nothing in it depends on the clock, the host or a random number: the same
input gives the same bytes.

jinja2 and matplotlib are imported here and in ``charts`` only, off the analyze path.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, Callable

import jinja2
from markupsafe import Markup

from msdiag import fmt
from msdiag.analysis import Analysis
from msdiag.contract import build
from msdiag.report import charts as ch
from msdiag.report import diff_html, groups
from msdiag.report.partial import partial_lines
from msdiag.report.text import read_depth_line
from msdiag.resources import resource_dir

BASE_TEMPLATE = "report.html.j2"
PER_RANK_LIST_LIMIT = 8  # beyond this many ranks per-rank values collapse to min / median / max
SEVERITIES = ("critical", "warning", "info")

# How a bottleneck is named at the top of the page, and its accent colour (the charts' colours).
BOTTLENECK = {
    "communication": ("Communication", ch.COMM),
    "compute": ("Compute", ch.COMPUTE),
    "data": ("Data pipeline", ch.DATA),
    "memory": ("Memory", ch.MEMORY),
    "host": ("Host / free time", "#8C8C8C"),
    "bubble": ("Pipeline bubble", ch.BUBBLE),
    "balanced": ("Balanced", "#6B9E78"),
    # a request log's verdict (its share is of TTFT, or of TPOT for decode)
    "queueing": ("Queueing", ch.COMM),
    "batching": ("Static batching", ch.COMM),
    "prefill": ("Prefill", ch.COMPUTE),
    "decode": ("Decode", ch.COMPUTE),
    "stability": ("Training unstable", ch.ALERT),  # a training log alone (issue 18)
    "stable": ("Training stable", "#6B9E78"),
}
SHARE_OF = {"ttft": "of TTFT", "tpot": "of TPOT"}  # what an inference verdict's share is a share of


# ---- value formats -------------------------------------------------------------------------


# Units of metrics whose value is a label (a rank, a link, an op): their per-rank values are
# numbers of another kind (the metric's doc says which), shown without the label's unit.
LABEL_UNITS = ("rank", "link", "op", "transport", "text")


def _per_rank(per: dict[str, Any], unit: str | None) -> str:
    """Per-rank values: listed for a few ranks, min / median / max beyond that."""
    if len(per) <= 1:
        return ""
    if unit in LABEL_UNITS:
        unit = ""
    items = sorted(((int(r), v) for r, v in per.items()), key=lambda kv: kv[0])
    show: Callable[[Any], str] = fmt.plain if not unit else (lambda v: fmt.value(v, unit))
    if len(items) <= PER_RANK_LIST_LIMIT:
        return " · ".join(f"{r}: {show(v)}" for r, v in items)
    nums = [(r, float(v)) for r, v in items if fmt.finite(v)]
    if not nums:
        distinct = sorted({str(v) for _, v in items if v is not None})
        return f"{len(items)} ranks; values: {', '.join(distinct[:4])}" + (" …" if len(distinct) > 4 else "")
    nums.sort(key=lambda kv: (kv[1], kv[0]))
    lo, hi = nums[0], nums[-1]
    mid = nums[(len(nums) - 1) // 2][1]
    return f"min {show(lo[1])} (rank {lo[0]}) · median {show(mid)} · max {show(hi[1])} (rank {hi[0]}) over {len(nums)} ranks"


# ---- the page's parts ----------------------------------------------------------------------


def _verdict(report: dict[str, Any]) -> dict[str, Any]:
    v = report.get("verdict") or {}
    alone = bool(report.get("requests")) and not report["ranks"]  # a request log alone: no step-time verdict
    key = v.get("bottleneck") or ("request log" if alone else "balanced")
    label, colour = BOTTLENECK.get(key, (key.capitalize(), "#8C8C8C"))
    share = v.get("share")
    ru = v.get("runner_up") or None
    return {
        "key": key,
        "label": label,
        "colour": colour,
        "share": fmt.pct(share, 0) + " " + SHARE_OF.get(str(v.get("share_of")), "of step time") if fmt.finite(share) else "",
        "sentence": v.get("sentence") or (
            "No inference bottleneck passes its threshold (queueing, static batching, prefill, decode): "
            "the latencies below say how the requests fared."
            if alone else "No verdict: the rules did not run."
        ),
        "confidence": v.get("confidence") or "",
        "cause": ((v.get("cause") or {}).get("sentence") or ""),
        "causes": list(v.get("causes") or []),
        "runner_up": (
            f"{BOTTLENECK.get(ru['bottleneck'], (ru['bottleneck'],))[0]} "
            f"({fmt.pct(ru.get('share'), 0)} of the step, {ru.get('rule_id')})" if ru else ""
        ),
        "time_per_step": fmt.us(v["time_us_per_step"]) if fmt.finite(v.get("time_us_per_step")) else "",
        "stability": _stability(report, key),
    }


def _stability(report: dict[str, Any], key: str) -> str:
    """The training log's stability finding, shown beside a profiling verdict (empty when it is the verdict)."""
    s = (report.get("training_log") or {}).get("stability") or {}
    return "" if not s or key in ("stability", "stable") else str(s.get("sentence") or "")


def _tile(report: dict[str, Any], mid: str, label: str, sub: str = "") -> dict[str, str]:
    m = report["metrics"].get(mid)
    det = report["metric_details"].get(mid) or {}
    if m is None:
        reason = det.get("reason") or "not computed"
        return {"label": label, "value": "unknown", "sub": fmt.shorten(reason, 90), "title": reason, "missing": "1"}
    return {"label": label, "value": fmt.value(m, det.get("unit")), "sub": sub, "title": det.get("doc") or "", "missing": ""}


def _tiles(report: dict[str, Any]) -> list[dict[str, str]]:
    m = report["metrics"]
    if report.get("requests") and not report["ranks"]:  # a request log alone: its latencies instead
        from msdiag.report.inference_charts import TILES

        tail = report["requests"].get("tail_note")  # P99 of a dozen requests is set by the two slowest: said on its tile
        return [_tile(report, mid, label, tail if tail and mid.endswith(("_p99_ms", "_p999_ms")) else sub) for mid, label, sub in TILES]
    if report.get("training_log") and not report["ranks"]:  # a training log alone: its stability figures
        from msdiag.report.training_charts import TILES as TRAIN_TILES

        return [_tile(report, mid, label, sub) for mid, label, sub in TRAIN_TILES]
    p90 = m.get("step_time_p90_us")
    return [
        _tile(report, "step_time_us", "Step time (median)", f"p90 {fmt.us(p90)}" if fmt.finite(p90) else ""),
        _tile(report, "mfu", "MFU", "model FLOPs / (step time x peak)"),
        _tile(report, "computing_share", "Computing", "share of step time"),
        _tile(report, "communication_exposed_share", "Exposed communication", "share of step time"),
        _tile(report, "free_share", "Free (device idle)", "share of step time"),
        _tile(report, "memory_peak_allocated_mb", "Peak memory allocated", "max over ranks"),
    ]


SPAN_RUNS = 8  # runs of ranks (or steps) named one by one; beyond, the first of them and the count


def _span(ids: list[int]) -> str:
    """Ranks or step ids as runs ("0-63", "1-40, 42-63", "3, 5"), as the causes print them; past SPAN_RUNS runs
    the first ones and how many ids in all."""
    if not ids:
        return ""
    runs = fmt.rank_ranges(ids).split(", ")
    if len(runs) <= SPAN_RUNS:
        return ", ".join(runs)
    return ", ".join(runs[: SPAN_RUNS - 2]) + f", … ({len(set(ids))} in all)"


def _log_identity(report: dict[str, Any]) -> list[tuple[str, str]]:
    """A request log alone: what the log is, none of the training-only rows (ranks, steps, parallel layout)."""
    r = report["requests"]
    out = [("request log", str(report["path"])), ("format", str(r["format_label"])),
           ("requests", f"{r['requests']} ({r['completed']} completed, {r['failed']} failed)")]
    if r.get("arrivals") == "modelled":
        out.append(("arrivals", f"modelled: {r.get('arrivals_how')}"))
    return out


def _identity(a: Analysis, report: dict[str, Any]) -> list[tuple[str, str]]:
    cap = report["capture"]
    if report.get("requests") and not report["ranks"]:
        return _log_identity(report)
    fw = " ".join(str(x) for x in (cap.get("framework"), cap.get("framework_version")) if x)
    out: list[tuple[str, str]] = [("capture", str(report["path"]))]
    if fw:
        out.append(("framework", fw))
    if cap.get("cann_version"):
        out.append(("CANN", str(cap["cann_version"])))
    if cap.get("device"):
        out.append(("device", str(cap["device"])))
    if cap.get("profiler_level") or cap.get("aic_metrics"):
        out.append(("profiler", " · ".join(x for x in (cap.get("profiler_level"), _aic_label(cap.get("aic_metrics"))) if x)))
    ranks = sorted(int(r["rank"]) for r in report["ranks"])
    out.append(("ranks", f"{len(ranks)} ({_span(ranks)})" if ranks else "0"))
    depth = read_depth_line(report)  # only when some rank was read without its Python frames (--deep auto)
    if depth:
        out.append(("read deep", depth.removeprefix("read deep: ")))
    sc = ch.views(a).step_counts
    if sc is not None:
        n = f"{sc.most} per rank" if sc.fewest == sc.most else f"{sc.fewest}-{sc.most} per rank"
        out.append(("steps", n + (f" (step {_span(sc.ids)})" if sc.ids else " (no step markers)")))
    else:
        out.append(("steps", "none found"))
    par = cap.get("parallel") or {}
    if par:
        out.append(("parallel", ", ".join(f"{k}={v}" for k, v in par.items() if v is not None) or "-"))
    else:
        out.append(("parallel", f"not recorded ({_why_no_layout(report)})"))
    fam = sorted({str(r["family"]) for r in report["ranks"]})
    if fam:
        out.append(("format", ", ".join(fam)))
    return out


def _aic_label(aic: Any) -> str | None:
    """The capture's AI Core metrics as the header says them: "None" (the JSON's MindSpore spelling of
    ACL_AICORE_NONE) is the metrics off, not a value missing."""
    if not aic:
        return None
    return "AI Core metrics off" if str(aic) == "None" else f"AI Core metrics {aic}"


METADATA_FILE = "profiler_metadata.json"  # where MindSpore 2.x / torch_npu write the parallel layout (a source's name)


def _why_no_layout(report: dict[str, Any]) -> str:
    """Why the capture names no parallel layout, from the sources the report lists: profiler_metadata.json read on a
    rank (it holds none), found but not read (damaged: the sources say why), absent on every rank, or not a file this
    capture's format writes."""
    status = {str(s["status"]) for s in report.get("sources", []) if s.get("name") == METADATA_FILE}
    if "present" in status:
        return f"{METADATA_FILE} has no parallel layout"
    if status == {"absent"}:
        return f"no rank has {METADATA_FILE}"
    if status:
        return f"{METADATA_FILE} could not be read: its reason is under Data absent from this capture, or not read"
    return f"this capture format writes no {METADATA_FILE}"


_RANK_SUFFIX = re.compile(r"_(\d+)(\.\w+)$")


def _absent(report: dict[str, Any]) -> list[dict[str, str]]:
    """Sources not present, one line per (file, status, reason) with the ranks it concerns."""
    groups: dict[tuple[str, str, str], list[int]] = {}
    for s in report["sources"]:
        if s["status"] == "present":
            continue
        name = s["name"]
        m = _RANK_SUFFIX.search(name)
        if m and s["rank"] is not None and int(m.group(1)) == int(s["rank"]):
            name = _RANK_SUFFIX.sub(r"_N\2", name)
        key = (name, s["status"], s["reason"] or "")
        groups.setdefault(key, []).append(-1 if s["rank"] is None else int(s["rank"]))
    nranks = len(report["ranks"])
    out = []
    for (name, status, reason), ranks in groups.items():
        rs = sorted(set(r for r in ranks if r >= 0))
        where = "all ranks" if len(rs) == nranks and nranks > 1 else (f"rank {_span(rs)}" if rs else "")
        out.append({"name": name, "status": status, "reason": reason or "-", "ranks": where})
    return out


def _findings(report: dict[str, Any]) -> list[dict[str, Any]]:
    det = report["metric_details"]
    out = []
    for f in report.get("findings") or []:
        ev = []
        for k, v in (f.get("evidence") or {}).items():
            unit = (det.get(k) or {}).get("unit")
            ev.append({"metric": k, "value": fmt.value(v, unit)})
        sugg = [
            {
                "action": s.get("action") or "",
                "api": s.get("api") or "",
                "snippet": (s.get("snippet") or "").rstrip("\n"),
                "effect": s.get("effect") or "",
                "label": fmt.framework_label(s, report["capture"].get("framework")).strip(" ()"),
            }
            for s in f.get("suggestions") or []
        ]
        refs = [str(r) for r in f.get("references") or []]
        out.append(
            {
                "rule_id": f["rule_id"],
                "name": f.get("name") or f["rule_id"],
                "category": f.get("category") or "",
                "severity": f.get("severity") or "info",
                "message": f.get("message") or "",
                "evidence": ev,
                "suggestions": sugg,
                "references": [{"url": r, "is_link": r.startswith(("http://", "https://"))} for r in refs],
            }
        )
    return out


def _metrics(report: dict[str, Any]) -> list[dict[str, str]]:
    out = []
    for mid, v in report["metrics"].items():
        d = report["metric_details"].get(mid) or {}
        unit = d.get("unit") or ""
        value = fmt.value(v, unit) if v is not None else "-"
        detail = _per_rank(d.get("per_rank") or {}, d.get("per_rank_unit") or unit)
        if unit == "text" and isinstance(v, str) and ":" in v:
            # a long explanation ("kernel shapes: FLOPs of ..."): its head as the value, the rest beside it
            value, rest = v.split(":", 1)
            detail = rest.strip()
        out.append(
            {
                "id": mid,
                "value": value,
                "unit": unit,
                "per_rank": detail,
                "reason": (d.get("reason") or "") if v is None else "",
                "doc": d.get("doc") or "",
                "source": d.get("source") or "",
            }
        )
    return out


def _checks(report: dict[str, Any]) -> dict[str, Any]:
    cs = report.get("checks") or []
    bad = [c for c in cs if not c["ok"]]
    return {
        "n": len(cs),
        "ok": len(cs) - len(bad),
        "against": ", ".join(sorted({str(c["check"]) for c in cs})),  # the profiler's tables (step_trace_time.csv, ...)
        "bad": [
            f"rank {c['rank']} step {c['step']} {c['column']}: msdiag {fmt.us(c['msdiag'])} vs profiler "
            f"{fmt.us(c['profiler'])} ({fmt.pct(c['relative_difference'])})"
            for c in bad[:10]
        ],
        "more": max(0, len(bad) - 10),
    }


def _options(report: dict[str, Any]) -> str:
    o = report.get("options") or {}
    parts = []
    for k, v in o.items():
        if v in (None, [], {}, ()):
            continue
        parts.append(f"{k}={v}")
    return ", ".join(parts) or "defaults"


# ---- rendering -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The templates' environment: autoescape on, StrictUndefined, loaded from the shipped folder; one per process, its
    compiled templates kept (a template whose file changed since is compiled again: jinja2's auto_reload)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_dir("templates"))),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def _plan(c: ch.Chart, r: dict[str, Any]) -> dict[str, Any] | None:
    """The plan's waterfall ``c`` and the goals' lines (the text report's wording), or None without either."""
    from msdiag.report.text import goal_lines

    goals = goal_lines(r)
    if c.svg is None and not goals:
        return None
    return {"title": c.title, "caption": c.caption, "svg": Markup(c.svg) if c.svg else None, "absent": c.absent, "goals": goals}


def context(a: Analysis, report: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything the templates read, already formatted."""
    r = report if report is not None else build(a)
    from msdiag.report import inference_charts, training_charts

    # a request log alone has no capture: only the inference charts apply; a training log adds its own
    # the plan's waterfall and the three families drawn together: shared by this process and the forked children
    plan, *charts = ch.drawn(a, (ch.plan_waterfall, *ch.chart_functions(a), *inference_charts.chart_functions(a),
                                 *training_charts.chart_functions(a)))
    findings = _findings(r)
    by_sev = [(sev, [f for f in findings if f["severity"] == sev]) for sev in SEVERITIES]
    others = [f for f in findings if f["severity"] not in SEVERITIES]
    if others:
        by_sev.append(("other", others))
    name = Path(str(r["path"]).rstrip("/")).name or str(r["path"])
    return {
        "title": f"msdiag report: {name}",
        "path": str(r["path"]),
        "msdiag_version": r["msdiag_version"],
        "schema_version": r["schema_version"],
        "verdict": _verdict(r),
        "partial": partial_lines(r),  # ranks / runs / files left out: the banner says them first (issue 19)
        "log_alone": bool(r.get("requests")) and not r["ranks"],  # no training-only boxes (colour legend)
        "tiles": _tiles(r),
        "why": _why(r),  # the "Why the device waits" section (issue 14)
        "identity": _identity(a, r),
        "absent": _absent(r),
        "charts": [
            {
                "id": c.id,
                "title": c.title,
                "caption": c.caption,
                "svg": Markup(c.svg) if c.svg else None,  # matplotlib escapes its text itself
                "absent": c.absent,
                "table": c.table,
                "columns": c.table_columns,
            }
            for c in charts
        ],
        "plan": _plan(plan, r),  # the waterfall at the top (issue 16), None without a plan
        "findings": [(sev, fs) for sev, fs in by_sev if fs],
        "finding_count": len(findings),
        # could not check (one row per missing input) apart from checked, nothing found (issue 19)
        "skipped": [{"rules": ids, "reason": reason} for reason, ids in groups.skipped_rules(r)],
        "checked": dict(zip(("quiet", "told"), groups.checked_rules(r))),
        "metrics": [m for m in _metrics(r) if r["metrics"][m["id"]] is not None],
        "metrics_absent": [{"reason": reason, "ids": ids} for reason, ids in groups.absent_metrics(r)],
        "checks": _checks(r),
        "notes": [str(n) for n in r.get("notes") or []]
        + [f"rank {x['rank']}: {n}" for x in r["ranks"] for n in x.get("notes") or []],
        "options": _options(r),
        "colours": {"compute": ch.COMPUTE, "comm": ch.COMM, "free": ch.FREE, "bubble": ch.BUBBLE},
        # the comparison with a baseline (`report --baseline NAME`, `diff --report`): None without one
        "baseline_diff": diff_html.context(r.get("baseline_diff")),
    }


def _why(r: dict[str, Any]) -> dict[str, Any]:
    """The "Why the device waits" section: the verdict's cause, the collectives' late and uncaptured waits, the host causes."""
    waits = [p[0].upper() + p[1:] + "." for p in fmt.wait_phrases(r.get("metrics") or {})]
    cause = (r.get("verdict") or {}).get("cause")
    causes = [dict(c, ranks_text=fmt.rank_ranges(c.get("ranks") or [])) for c in r.get("causes") or []]
    return {"cause": cause["sentence"] if cause else None, "waits": waits, "causes": causes}


def compile_templates() -> None:
    """Every template of the page compiled now (``msdiag report`` does it while the rank pool reads: ~0.15 s of a
    64-rank report otherwise spent after the analysis)."""
    env = environment()
    for name in env.list_templates(extensions=["j2"]):
        env.get_template(name)


def render(a: Analysis, report: dict[str, Any] | None = None) -> str:
    """The report page of an analysis, as one HTML string."""
    return environment().get_template(BASE_TEMPLATE).render(**context(a, report))
