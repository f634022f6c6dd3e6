"""Command line: parse arguments, call the pipeline, map errors to exit codes.

Exit codes: 0 ok, 1 findings at or above --fail-on, 2 usage or input error.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

import click

from msdiag import __version__
from msdiag.errors import MsdiagError

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2


def _parse_set(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for v in values:
        if "=" not in v or "." not in v.split("=", 1)[0]:
            raise click.BadParameter(f"{v!r}: expected RULE.PARAM=VALUE", param_hint="--set")
        k, val = v.split("=", 1)
        out[k.strip()] = val.strip()
    return out


def analysis_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The options every command that analyzes accepts (analyze, report, diff)."""
    opts = [
        click.option("--jobs", type=click.IntRange(min=1), default=None, help="Worker processes for reading ranks (default: all CPUs)."),
        click.option("--peak-tflops", type=click.FloatRange(min=0, min_open=True), default=None, help="Peak dense TFLOP/s per device, for MFU."),
        click.option("--device", default=None, help="Device model for the peak FLOPs table (e.g. 910B2, A100, H100)."),
        click.option("--model-config", type=click.Path(exists=True, dir_okay=False), default=None, help="Model description YAML for analytic FLOPs."),
        click.option("--ranks-per-node", type=click.IntRange(min=1), default=None, help="Ranks per node (default 8 on Ascend)."),
        click.option("--device-memory-gb", type=click.FloatRange(min=0, min_open=True), default=None, help="Device memory capacity in GB (default: from --device)."),
        click.option("--host-cores", type=click.IntRange(min=1), default=None, help="CPU cores of each training host (for data-pipeline workers)."),
        click.option("--rules", "rules_dirs", multiple=True, type=click.Path(exists=True, file_okay=False), help="Extra rules folder (adds or overrides)."),
        click.option("--set", "overrides", multiple=True, help="Override a rule parameter: RULE.PARAM=VALUE."),
        click.option("--debug", is_flag=True, help="Show the traceback of an error."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _options(kw: dict[str, Any]) -> Any:
    from msdiag.analysis import Options

    return Options(
        jobs=kw["jobs"],
        peak_tflops=kw["peak_tflops"],
        device=kw["device"],
        model_config=kw["model_config"],
        ranks_per_node=kw["ranks_per_node"],
        device_memory_gb=kw["device_memory_gb"],
        host_cores=kw["host_cores"],
        rules_dirs=tuple(kw["rules_dirs"]),
        overrides=_parse_set(tuple(kw["overrides"])),
    )


def _fail(e: Exception, debug: bool) -> None:
    if debug:
        raise e
    click.echo(f"msdiag: error: {e}", err=True)
    sys.exit(EXIT_ERROR)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="msdiag")
def main() -> None:
    """msdiag: find the one bottleneck of a MindSpore training or inference job."""


def _exit_for(report: dict[str, Any], fail_on: str | None) -> int:
    """1 when a finding is at or above --fail-on (for CI gates), else 0."""
    if not fail_on:
        return EXIT_OK
    order = {"info": 0, "warning": 1, "critical": 2}
    worst = max((order[f["severity"]] for f in report.get("findings", [])), default=-1)
    return EXIT_FINDINGS if worst >= order[fail_on] else EXIT_OK


@main.command()
@click.argument("path", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--fail-on", type=click.Choice(["warning", "critical"]), default=None, help="Exit 1 when a finding of this severity or worse exists.")
@analysis_options
def analyze(path: str, fmt: str, fail_on: str | None, **kw: Any) -> None:
    """Analyze a profiler capture (a rank folder or a folder of ranks): verdict, findings, figures."""
    from msdiag.analysis import analyze as run
    from msdiag.report.data import build

    try:
        a = run(path, _options(kw))
        report = build(a)
    except MsdiagError as e:
        _fail(e, kw["debug"])
        return
    if fmt == "json":
        click.echo(json.dumps(report, indent=1, ensure_ascii=False))
    else:
        from msdiag.report.text import render

        click.echo(render(report), nl=False)
    sys.exit(_exit_for(report, fail_on))


@main.group()
def rules() -> None:
    """The diagnosis rules (rules/*.yaml)."""


@rules.command("list")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(exists=True, file_okay=False), help="Extra rules folder.")
def rules_list(fmt: str, rules_dirs: tuple[str, ...]) -> None:
    """List every rule with its category, severity and parameters."""
    from msdiag.rules.loader import load_rules

    try:
        rs = load_rules(rules_dirs)
    except MsdiagError as e:
        _fail(e, False)
        return
    if fmt == "json":
        out = [
            {
                "id": r.id, "name": r.name, "category": r.category, "severity": r.severity, "summary": r.summary,
                "params": {p.name: {"default": p.default, "unit": p.unit, "bounds": list(p.bounds), "doc": p.doc} for p in r.params.values()},
                "metrics": sorted(r.metrics()), "path": r.path,
            }
            for r in rs.values()
        ]
        click.echo(json.dumps(out, indent=1))
        return
    for r in sorted(rs.values(), key=lambda r: (r.category, r.id)):
        params = ", ".join(f"{p.name}={p.default:g}" for p in r.params.values())
        click.echo(f"{r.id:<28} {r.category:<14} {r.severity:<9} {r.summary}" + (f"  [{params}]" if params else ""))


@rules.command("explain")
@click.argument("rule_id")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(exists=True, file_okay=False), help="Extra rules folder.")
def rules_explain(rule_id: str, rules_dirs: tuple[str, ...]) -> None:
    """Explain one rule: why it matters, how it is measured, its parameters and fixes."""
    from msdiag.rules.loader import load_rules

    try:
        rs = load_rules(rules_dirs)
    except MsdiagError as e:
        _fail(e, False)
        return
    if rule_id not in rs:
        click.echo(f"msdiag: error: no rule '{rule_id}' (see: msdiag rules list)", err=True)
        sys.exit(EXIT_ERROR)
    r = rs[rule_id]
    click.echo(f"{r.id}: {r.name} ({r.category}, {r.severity})\n\n{r.summary}\n")
    click.echo(f"Why it matters: {r.docs['why']}\n\nHow it is measured: {r.docs['how']}\n\nFalse positives: {r.docs['false_positives']}\n")
    if r.params:
        click.echo("Parameters (override with --set RULE.PARAM=VALUE):")
        for p in r.params.values():
            click.echo(f"  {r.id}.{p.name} = {p.default:g} {p.unit} (bounds {p.bounds[0]:g}..{p.bounds[1]:g}): {p.doc}")
        click.echo("")
    click.echo("Fixes:")
    for s in r.suggestions:
        click.echo(f"  - {s['action']}")
        if s.get("api"):
            click.echo(f"    API: {s['api']}")
        if s.get("snippet"):
            click.echo("    " + s["snippet"].rstrip().replace("\n", "\n    "))
        click.echo(f"    Effect: {s['effect']}")
    for ref in r.references:
        click.echo(f"Reference: {ref}")


if __name__ == "__main__":
    main()
