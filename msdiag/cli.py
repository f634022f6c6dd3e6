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


@main.command()
@click.argument("path", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@analysis_options
def analyze(path: str, fmt: str, **kw: Any) -> None:
    """Analyze a profiler capture (a rank folder or a folder of ranks)."""
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
    sys.exit(EXIT_OK)


if __name__ == "__main__":
    main()
