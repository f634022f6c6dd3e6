"""Command line: parse arguments, call the pipeline, map errors to exit codes.

Exit codes: 0 ok, 1 findings at or above --fail-on, 2 usage or input error (and, with --strict, a
rank left out or a source that failed; and an environment that cannot import what msdiag needs), 3 an internal error (a bug in msdiag: one line, the traceback
with --debug), never 1, which --fail-on gives findings.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator

import click

from msdiag import __version__
from msdiag.errors import MsdiagError
from msdiag.units import US_PER_MS

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2
EXIT_INTERNAL = 3
_DEBUG = "msdiag_debug"  # ctx.meta key: --debug was given (shared by the group's and the command's contexts)

#: What this process set in its own environment for its own work (each only where the user set nothing): a job
#: ``msdiag capture`` runs gets the user's environment without them (:func:`_user_environ`).
_OWN_ENV: dict[str, str] = {}


def _own_env(key: str, value: str) -> None:
    if key not in os.environ:
        os.environ[key] = _OWN_ENV[key] = value


def _user_environ() -> dict[str, str]:
    """This process' environment less what msdiag set in it for itself (:data:`_OWN_ENV`)."""
    return {k: v for k, v in os.environ.items() if not (k in _OWN_ENV and v == _OWN_ENV[k])}


# The command's Arrow-backed string columns (pandas' "string") are allocated through the C library's
# malloc rather than pyarrow's default mimalloc pool, which hands freed pages back to the kernel and
# faults them in again for every large column: on a 200 MB trace that was about three times the
# system CPU time of the whole command. Read when pyarrow first allocates (pandas is imported later,
# by the commands); a value the user set is kept.
_own_env("ARROW_DEFAULT_MEMORY_POOL", "system")
# numpy asks the kernel for transparent huge pages (madvise) on every array of 4 MB or more; a fault then zeroes a
# whole 2 MB page, and the command's large arrays are short-lived (a column taken, a mask, a join): a 512-rank bench
# analysis spent 1.11 s of system CPU against 1.00 s without (3.23 -> 3.16 s, ten alternated pairs; 64 ranks and one
# 200 MB trace the same either way). Read by numpy when it is imported (pandas imports it later); a value the user
# set is kept.
_own_env("NUMPY_MADVISE_HUGEPAGE", "0")


def _parse_set(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for v in values:
        if "=" not in v or "." not in v.split("=", 1)[0]:
            raise click.BadParameter(f"{v!r}: expected RULE.PARAM=VALUE", param_hint="--set")
        k, val = v.split("=", 1)
        out[k.strip()] = val.strip()
    return out


_CONFIG_OPTIONS = (
    click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False), default=None,
                 help="Project config: msdiag.toml or a pyproject.toml with [tool.msdiag] (default: the first found "
                      "from the current folder upward)."),
    click.option("--no-config", is_flag=True, help="Ignore every project config file."),
)


def config_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--config FILE / --no-config, for the commands that read the project config without analyzing."""
    for o in reversed(_CONFIG_OPTIONS):
        f = o(f)
    return f


def _remember_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    """--debug, kept where the group sees it too: an internal error then shows its traceback."""
    if value:
        ctx.meta[_DEBUG] = True
    return value


def _check_goals(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[tuple[str, float], ...]:
    """--goal NAME=VALUE (repeatable), checked when given: a bad one is a usage error naming it."""
    from msdiag.options import parse_goal

    try:
        return tuple(parse_goal(v) for v in value)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--goal") from None


def _goal_exit(report: dict[str, Any], fail_on_goal: bool) -> int:
    """1 with --fail-on-goal when a goal is not met now (reachable by the plan or not, or not measured)."""
    missed = [g for g in report.get("goals") or [] if g["status"] != "met"]
    return EXIT_FINDINGS if fail_on_goal and missed else EXIT_OK


def analysis_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The options every command that analyzes accepts (analyze, report, diff)."""
    opts = [
        click.option("--jobs", type=click.IntRange(min=1), default=None, help="Worker processes for reading ranks (default: all CPUs)."),
        click.option("--cache", "cache_dir", type=click.Path(file_okay=False), default=None,
                     help="Keep each rank's tables here (Arrow) and reuse them while its files are unchanged "
                          "(default: $MSDIAG_HOME/cache, else $XDG_CACHE_HOME/msdiag or ~/.cache/msdiag; never inside the capture)."),
        click.option("--no-cache", is_flag=True, help="Parse every rank; neither read nor write the cache."),
        click.option("--scheduler", default=None, metavar="tcp://HOST:PORT",
                     help="Read the ranks on this Dask cluster's workers (pip install 'msdiag[cluster]')."),
        click.option("--deep", type=click.Choice(["auto", "all"]), default=None,
                     help="How deep ranks are read: auto (default; a job of more than 8 ranks reads the Python frames of "
                          "trace_view.json only on the ranks the answer needs, and says which) or all (every rank in full)."),
        click.option("--peak-tflops", type=click.FloatRange(min=0, min_open=True), default=None, help="Peak dense TFLOP/s per device, for MFU."),
        click.option("--device", default=None, help="Device model for the peak FLOPs table (e.g. 910B2, A100, H100)."),
        click.option("--model-config", type=click.Path(exists=True, dir_okay=False), default=None, help="Model description YAML for analytic FLOPs."),
        click.option("--ranks-per-node", type=click.IntRange(min=1), default=None, help="Ranks per node (default 8 on Ascend)."),
        click.option("--device-memory-gb", type=click.FloatRange(min=0, min_open=True), default=None, help="Device memory capacity in GB (default: from --device)."),
        click.option("--host-cores", type=click.IntRange(min=1), default=None, help="CPU cores of each training host (for data-pipeline workers)."),
        click.option("--tokens-per-step", type=click.IntRange(min=1), default=None,
                     help="Tokens the whole job trains on per step (global batch x sequence length), for tokens/s."),
        click.option("--rules", "rules_dirs", multiple=True, type=click.Path(exists=True, file_okay=False), help="Extra rules folder (adds or overrides)."),
        click.option("--set", "overrides", multiple=True, help="Override a rule parameter: RULE.PARAM=VALUE."),
        click.option("--disable", "disable", multiple=True, metavar="RULE", help="Leave this rule out of the diagnosis (repeatable)."),
        click.option("--bandwidth-norm", "bandwidth_norms", multiple=True, metavar="TRANSPORT=GBPS",
                     help="Standard bandwidth of a transport (HCCS, RDMA, PCIE, SDMA, SIO) in GB/s, over CANN's chip V2 "
                          "figures (repeatable; e.g. HCCS=28 RDMA=25 on chip V4)."),
        *_CONFIG_OPTIONS,
        click.option("--requests", "requests_log", type=click.Path(), default=None, metavar="LOG",
                     help="Request timing log (msdiag JSONL/CSV or vLLM benchmark_serving JSON) analyzed with the capture."),
        click.option("--train-log", "train_log", type=click.Path(), default=None, metavar="TRAIN_LOG",
                     help="Training log (MindSpore / MindFormers / mindyolo / mindcv lines, msdiag CSV / JSONL, or a folder of "
                          "msrun worker_N.log) analyzed with the capture: loss spikes, overflow, checkpoint stalls."),
        click.option("--slo-ttft-ms", type=click.FloatRange(min=0, min_open=True), default=None, help="TTFT objective (ms) for goodput."),
        click.option("--slo-tpot-ms", type=click.FloatRange(min=0, min_open=True), default=None, help="TPOT objective (ms) for goodput."),
        click.option("--goal", "goals", multiple=True, metavar="NAME=VALUE", callback=_check_goals,
                     help="A goal the plan is checked against (repeatable): mfu=0.45, step-ms=850, tokens-per-s=N, "
                          "memory-share=0.85, ttft-p99-ms=N, tpot-p99-ms=N."),
        click.option("--fail-on-goal", is_flag=True, help="Exit 1 when the job misses a goal (--goal or the config's goal)."),
        click.option("--strict", is_flag=True,
                     help="Exit 2 when a rank is left out or a source failed (default: a note, and the rest is analysed)."),
        click.option("--debug", is_flag=True, callback=_remember_debug, expose_value=True, help="Show the traceback of an error."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _cache_dir(kw: dict[str, Any]) -> str | None:
    """--cache DIR, the user cache folder by default, None with --no-cache."""
    if kw.get("no_cache"):
        if kw.get("cache_dir"):
            raise click.UsageError("--cache and --no-cache exclude each other")
        return None
    from msdiag.ingest.cachedir import default_dir, untrusted

    folder = str(kw["cache_dir"]) if kw.get("cache_dir") else str(default_dir())
    why = untrusted(folder)
    if why is not None:  # trusted like code (as ssh trusts ~/.ssh): refused in one line, the run goes on uncached
        from msdiag.errors import one_line

        click.echo(one_line(f"msdiag: warning: cache folder {folder} {why}: not used, this run is not cached "
                            "(a cache folder must be yours and writable by you only: chmod go-w it, or give "
                            "--cache DIR or --no-cache)"), err=True)
        return None
    return folder


def _parse_norms(values: tuple[str, ...]) -> dict[str, float]:
    """--bandwidth-norm TRANSPORT=GBPS (repeatable) -> {transport: GB/s}."""
    from msdiag.options import parse_bandwidth_norms

    try:
        return parse_bandwidth_norms(",".join(values)) if values else {}
    except ValueError as e:
        raise click.BadParameter(str(e).removeprefix("bandwidth_norms: "), param_hint="--bandwidth-norm") from None


def _project_config(kw: dict[str, Any]) -> Any:
    """The project config: --config FILE, none with --no-config, else the first found upward."""
    from msdiag import config

    if kw.get("no_config"):
        if kw.get("config_file"):
            raise click.UsageError("--config and --no-config exclude each other")
        return None
    found = kw.get("config_file") or config.find_config()
    return config.load_config(found) if found else None


def _options(kw: dict[str, Any]) -> Any:
    """Options from the flags laid over the project config (command line over file over defaults)."""
    from msdiag.config import merged
    from msdiag.errors import InputError
    from msdiag.options import Options

    given = {
        "cache": _cache_dir(kw),
        "scheduler": kw.get("scheduler"),
        "jobs": kw["jobs"],
        "peak_tflops": kw["peak_tflops"],
        "device": kw["device"],
        "model_config": kw["model_config"],
        "ranks_per_node": kw["ranks_per_node"],
        "device_memory_gb": kw["device_memory_gb"],
        "host_cores": kw["host_cores"],
        "tokens_per_step": kw.get("tokens_per_step"),
        "rules_dirs": tuple(kw["rules_dirs"]),
        "overrides": _parse_set(tuple(kw["overrides"])),
        "disable": tuple(kw.get("disable") or ()),
        "bandwidth_norms": _parse_norms(tuple(kw.get("bandwidth_norms") or ())),
        "requests": kw.get("requests_log"),
        "train_log": kw.get("train_log"),
        "slo_ttft_ms": kw.get("slo_ttft_ms"),
        "slo_tpot_ms": kw.get("slo_tpot_ms"),
        "goals": tuple(kw.get("goals") or ()),
        **({"deep": kw["deep"]} if kw.get("deep") else {}),  # else the config's, else Options' default
    }
    values = merged(_project_config(kw), given)
    try:
        return Options(**values)
    except ValueError as e:  # the flags and the config are checked already: a safety net, still one line
        raise InputError(values.get("config") or "options", str(e)) from None


def _analyze(path: str | Path, opts: Any, strict: bool, early: Any = None) -> Any:
    """analysis.analyze; with ``--strict`` a rank left out or a source that failed stops it (exit 2). ``early``: as
    analyze takes it (contract.early_parts, where the report's JSON is written)."""
    from msdiag.analysis import analyze as run

    with _lean_gc():
        a = run(path, opts, early)
    if strict:
        _check_strict(a)
    return a


# A run allocates millions of small objects that live until it ends (rows, tables, the report), and the
# default young-generation threshold (700 allocations) collects them hundreds of times, each collection
# tracing what survived. Cycles are rare in them: collections this much rarer find the same garbage.
GC_THRESHOLDS = (20_000, 50, 100)


@contextlib.contextmanager
def _lean_gc() -> Iterator[None]:
    """During an analysis: what the imports allocated moved out of the collector's sight (``gc.freeze``; the
    forked workers then share those pages untouched) and young collections made rarer (GC_THRESHOLDS); both
    undone after it, so that a process running many analyses (a notebook, the tests) frees their cycles. The
    parent of a 64-rank job collected ~390 times (0.37 s) before, ~10 times (0.05 s) after."""
    from msdiag.forking import frozen

    before = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        with frozen():
            yield
    finally:
        gc.set_threshold(*before)


def _check_strict(a: Any) -> None:
    """--strict: raise an InputError naming the first rank left out, else the first failed source."""
    from msdiag.errors import InputError

    left = list(a.capture.ingest.get("left_out", []))
    failed = [s for r in a.capture.ranks for s in r.sources if s.status == "failed"]
    more = len(left) + len(failed) - 1
    also = f"; {more} more rank(s) left out / source(s) failed" if more > 0 else ""
    if left:
        first = left[0]
        raise InputError(first["path"], f"rank {first['rank']} left out: {first['problem']} (--strict{also})")
    if failed:
        src = failed[0]
        raise InputError(src.path or src.name, f"{src.name} of rank {src.rank} failed: {src.reason} (--strict{also})")


def _fail(e: Exception, debug: bool) -> None:
    if debug:
        raise e
    click.echo(f"msdiag: error: {e}", err=True)
    sys.exit(EXIT_ERROR)


class _EnvironmentProblem(Exception):
    """An ImportError as the CLI prints it: what this Python environment cannot import, with the known fix."""

    def __init__(self, e: ImportError) -> None:
        from msdiag.errors import one_line

        text = one_line(str(e))[:300]
        hint = ""
        if "pyarrow" in text and "NumPy 2" in text:  # pyarrow 26+ with numpy 1.x (MindSpore 2.10 needs numpy<2)
            hint = ": with numpy<2 install 'pyarrow<26' (pip install 'msdiag[capture]' pins a set that works together)"
        super().__init__(f"this Python environment cannot import what msdiag needs ({type(e).__name__}: {text}){hint}")


class _Main(click.Group):
    """The command group: an exception that is not an input problem is an internal error, exit 3."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except MsdiagError as e:  # an input problem a command did not catch itself
            _fail(e, bool(ctx.meta.get(_DEBUG)))
        except Exception as e:  # noqa: BLE001 - every bug ends in one line and its own exit code
            if ctx.meta.get(_DEBUG):
                raise
            if isinstance(e, ImportError) and (e.name or "").partition(".")[0] != "msdiag":
                _fail(_EnvironmentProblem(e), False)  # a broken environment, not a bug: what, and the fix
            from msdiag.errors import one_line

            text = one_line(str(e))[:300]
            click.echo(f"msdiag: internal error: {type(e).__name__}: {text} (a bug in msdiag {__version__}: "
                       "please report it; --debug shows the traceback)", err=True)
            sys.exit(EXIT_INTERNAL)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
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
@click.option("--baseline", "baseline_name", default=None, metavar="NAME", help="Compare with a saved baseline (msdiag baseline save).")
@click.option("--verbose", is_flag=True, help="Text: every rule that could not check and every metric not measured, by name.")
@analysis_options
def analyze(path: str, fmt: str, fail_on: str | None, baseline_name: str | None, verbose: bool, **kw: Any) -> None:
    """Analyze a profiler capture (a rank folder or a folder of ranks) or a request timing log: verdict, findings, figures."""
    try:
        saved = _load_baseline(baseline_name) if baseline_name else None  # a wrong name fails before any work
        opts = _options(kw)
        stored = _result_cache(path, opts, kw["strict"], saved)
        report = stored.get() if stored is not None else None
        compact = None  # the report's JSON text, where it was made for the result cache or the output (printed from it)
        if report is None:
            from msdiag.contract import build

            a = _analyze(path, opts, kw["strict"], _early if stored is not None or fmt == "json" else None)
            report = build(a)
            if saved is not None:
                report["baseline_diff"] = _against_baseline(saved, a, report, path)
            if stored is not None or fmt == "json":
                compact = _compact(report, a.early)
            if stored is not None:
                stored.put(report, compact, _early_exact(report, a.early))
    except MsdiagError as e:
        _fail(e, kw["debug"])
        return
    if fmt == "json":
        click.echo(_indented(report, compact))
    else:
        from msdiag.report.text import render

        click.echo(render(report, verbose), nl=False)
        if saved is not None:
            from msdiag.report.diff_text import render_section

            click.echo(render_section(report["baseline_diff"]), nl=False)
    sys.exit(max(_exit_for(report, fail_on), _goal_exit(report, kw["fail_on_goal"])))


def _indented(report: dict[str, Any], compact: str | None = None) -> str:
    """``json.dumps(report, indent=1, ensure_ascii=False)``, to the character: encoded by json's C encoder (an indent
    sends json to its Python one, ~3x slower on a 512-rank report) and indented by msgspec, which leaves every value's
    text as it is (tests/test_cli_analyze.py). ``compact``: the report's text from :func:`_compact`, where made.
    A report holding a float JSON has no number for (NaN, an infinity: none should) is written by json itself
    (``NaN``, ``Infinity``, as Python reads them), not refused by msgspec as an internal error."""
    import msgspec

    text = compact if compact is not None else json.dumps(report, ensure_ascii=False)
    try:
        return msgspec.json.format(text, indent=1)
    except msgspec.DecodeError:
        return json.dumps(report, indent=1, ensure_ascii=False)


def _early(cap: Any, checks: list[dict[str, Any]]) -> dict[str, Any]:
    """What the CLI has made of the capture and the cross-checks while a forked child computes metrics
    (``analysis.analyze(early=...)``): the report's parts that read no metric with their JSON texts
    (contract.early_parts), and which of them come back from JSON as they are (result_cache.as_stored: the result
    cache's check, not walked again when the report is stored)."""
    from msdiag import result_cache
    from msdiag.contract import early_parts

    parts = early_parts(cap, checks)
    parts["_exact"] = {k: made[0] for k, made in parts.items() if isinstance(made, tuple) and result_cache.as_stored(made[0])}
    return parts


def _early_exact(report: dict[str, Any], early: dict[str, Any]) -> frozenset[str]:
    """The report's keys whose values :func:`_early` found to come back from JSON as they are (still those values)."""
    return frozenset(k for k, v in early.get("_exact", {}).items() if report.get(k) is v)


def _compact(report: dict[str, Any], early: dict[str, Any] | None = None) -> str | None:
    """``json.dumps(report, ensure_ascii=False, allow_nan=False)`` (what the result cache stores and, with no NaN in
    it, the text JSON output indents), or None where it cannot be made so. ``early``: ``Analysis.early``, the texts of
    report values made while the metrics were computed (contract.early_parts): a value of the report that is one of
    them (the same object) is written as its text, the rest by json, the same text to the character (json writes a
    dict as its keys and values' texts, ", " and ": " between), as json writes it whole where a mark is not found once."""
    try:
        parts = {k: made[1] for k, made in (early or {}).items()
                 if isinstance(made, tuple) and made[1] is not None and report.get(k) is made[0]}
        if not parts:
            return json.dumps(report, ensure_ascii=False, allow_nan=False)
        marks = {k: f"\x00msdiag early {k}\x00" for k in parts}  # (json writes U+0000 as \u0000: in no text of a report)
        text = json.dumps({k: marks.get(k, v) for k, v in report.items()}, ensure_ascii=False, allow_nan=False)
        for k, mark in marks.items():
            quoted = json.dumps(mark)
            at = text.find(quoted)
            if at < 0 or text.find(quoted, at + 1) >= 0:
                return json.dumps(report, ensure_ascii=False, allow_nan=False)
            text = text[:at] + parts[k] + text[at + len(quoted):]
        return text
    except (TypeError, ValueError):
        return None


def _result_cache(path: str, opts: Any, strict: bool, saved: dict[str, Any] | None) -> Any:
    """The result cache entry of this `msdiag analyze` (msdiag/result_cache.py), or None: no cache folder
    (--no-cache, refused), or an input that cannot be fingerprinted. The saved baseline is keyed by its content."""
    if opts.cache is None:
        return None
    from msdiag import result_cache

    base = None if saved is None else result_cache.digest(saved)
    return result_cache.open_for(opts.cache, path, opts, {"command": "analyze", "strict": strict, "baseline": base})


def _check_output(output: str, folders: list[Path]) -> Path:
    """The report's path, refused inside a capture folder (msdiag never writes into one)."""
    from msdiag.errors import InputError
    from msdiag.ingest.paths import within

    out = Path(output)
    for f in folders:
        if f.is_dir() and within(out, f):
            raise InputError(output, f"is inside the capture folder {f}; msdiag never writes into a capture: choose a path outside it")
    if out.is_dir():
        raise InputError(output, "is a folder; give the report's file name (e.g. report.html)")
    if not out.resolve().parent.is_dir():
        raise InputError(output, f"its folder {out.resolve().parent} does not exist")
    return out


@main.command()
@click.argument("path", type=click.Path())
@click.option("-o", "--output", default=None, type=click.Path(dir_okay=False), help="The HTML file to write (outside the capture folder).")
@click.option("--trace", "trace_path", default=None, type=click.Path(dir_okay=False),
              help="Also (or only) write the timeline of the steps analysed, every rank, with msdiag's tracks, as a Chrome trace JSON (Perfetto UI, MindStudio Insight).")
@click.option("--fail-on", type=click.Choice(["warning", "critical"]), default=None, help="Exit 1 when a finding of this severity or worse exists.")
@click.option("--baseline", "baseline_name", default=None, metavar="NAME", help="Add the comparison with a saved baseline (msdiag baseline save).")
@analysis_options
def report(path: str, output: str | None, trace_path: str | None, fail_on: str | None, baseline_name: str | None, **kw: Any) -> None:
    """Write one self-contained HTML report of a capture (opens offline: inline CSS and SVG charts), and / or
    its timeline as a Chrome trace (--trace)."""
    from msdiag.contract import build
    from msdiag.errors import InputError

    written = []
    try:
        if output is None and trace_path is None:
            raise InputError(path, "nothing to write: give -o/--output REPORT.html, --trace TRACE.json, or both")
        outputs = _check_outputs(path, kw, [o for o in (output, trace_path) if o is not None])
        saved = _load_baseline(baseline_name) if baseline_name else None
        opts = _options(kw)
        if trace_path is not None:  # the trace shows every timeline row: the ranks are not reduced
            opts = replace(opts, whole_timeline=True)
        with _html_meanwhile(output is not None):
            a = _analyze(path, opts, kw["strict"])
        for o in outputs:
            _check_output(o, [Path(rd.path) for rd in a.capture.ranks])
        data = build(a)
        if saved is not None:
            data["baseline_diff"] = _against_baseline(saved, a, data, path)
        from msdiag.export import chrome_trace, write_trace

        trace = chrome_trace(a) if trace_path is not None else None  # refused (no timeline) before anything is written
        if output is not None:
            from msdiag.report.html import render

            page = render(a, data)
            try:
                Path(output).write_text(page, encoding="utf-8")
            except OSError as e:
                raise InputError(output, f"cannot write the report: {e.strerror or e}") from None
            written.append(Path(output))
        if trace is not None and trace_path is not None:
            write_trace(trace, Path(trace_path))
            written.append(Path(trace_path))
    except MsdiagError as e:
        _fail(e, kw["debug"])
        return
    for out in written:
        click.echo(f"msdiag: wrote {out.resolve()}", err=True)
    sys.exit(max(_exit_for(data, fail_on), _goal_exit(data, kw["fail_on_goal"])))


def _html_meanwhile(wanted: bool) -> contextlib.AbstractContextManager[None]:
    """The HTML renderer imported (matplotlib, jinja2) and its templates compiled while the rank pool reads, when a page
    is to be written."""
    if not wanted:
        return contextlib.nullcontext()
    from msdiag.ingest.parallel import meanwhile

    return meanwhile(_import_html)


def _import_html() -> None:
    from msdiag.report.html import compile_templates  # (imported for later: its modules are then loaded)

    compile_templates()


def _check_outputs(path: str, kw: dict[str, Any], outputs: list[str]) -> list[str]:
    """The files `msdiag report` writes, checked before any work: outside the capture, not an input file (the
    capture or request log given, --requests, --model-config), not one file twice."""
    from msdiag.errors import InputError

    p = Path(path)
    # a rank's ASCEND_PROFILER_OUTPUT/ belongs to the rank folder above it
    folders = [p, p.parent] if p.name == "ASCEND_PROFILER_OUTPUT" else [p]
    inputs = [Path(x) for x in (path, kw.get("requests_log"), kw.get("model_config")) if x]
    for o in outputs:
        _check_output(o, folders)
        if any(i.is_file() and Path(o).resolve() == i.resolve() for i in inputs):
            raise InputError(o, "is an input of this analysis; msdiag never overwrites an input: choose another path")
    if len(outputs) == 2 and Path(outputs[0]).resolve() == Path(outputs[1]).resolve():
        raise InputError(outputs[1], "is both the HTML report (-o) and the trace (--trace): give two files")
    return outputs


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Capture folder (default: ./msdiag_capture_<UTC timestamp>).")
@click.option("--skip", type=click.IntRange(min=0), default=2, show_default=True, help="Steps left out first (compilation, warm-up).")
@click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True, help="Profiler warm-up steps before recording.")
@click.option("--steps", type=click.IntRange(min=1), default=5, show_default=True, help="Steps recorded.")
@click.option("--stop-after", is_flag=True, help="Stop the job once the window is captured (exit 0).")
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True, help="Length of the time window used when nothing marks steps.")
@click.option("--wait-for-steps", type=click.FloatRange(min=0), default=30.0, show_default=True, help="Seconds after `import mindspore` without a step before the time-window fallback.")
@click.option("--no-memory", is_flag=True, help="Do not profile memory (profile_memory=False).")
@click.option("--no-minddata", is_flag=True, help="Do not profile the MindData pipeline.")
@click.option("--minddata-interval", type=click.IntRange(min=1), default=None, help="MindData queue sampling period in ms (default: MindSpore's, 1000; finer costs step time).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), default=None, help="Also write the HTML report to this file.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@analysis_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def capture(
    out: str | None, skip: int, warmup: int, steps: int, stop_after: bool, seconds: float, wait_for_steps: float,
    no_memory: bool, no_minddata: bool, minddata_interval: int | None, report_path: str | None, fmt: str, command: tuple[str, ...], **kw: Any,
) -> None:
    """Run COMMAND (your job, unchanged) under the MindSpore Profiler, capture a window of steps, analyze it.

    msdiag capture [options] -- python train.py ... | msrun --worker_num=2 ... train.py

    The job's output passes through; msdiag's exit code is the job's. With --format json the report
    is one line, the last of stdout.
    """
    from msdiag.capture import CaptureOptions, default_out, run_capture
    from msdiag.errors import InputError

    debug = kw["debug"]
    folder = Path(out) if out else default_out()
    try:
        opts = _options(kw)  # checked before the job runs
        from msdiag.analysis import _check_options, resolve_rules
        from msdiag.ingest.paths import within

        _check_options(opts)
        resolve_rules(opts)  # a bad --set / --disable fails before the job runs
        if report_path and within(report_path, folder):
            raise InputError(report_path, f"is inside the capture folder {folder}: choose a path outside it")
        res = run_capture(
            list(command),
            CaptureOptions(
                out=folder, skip=skip, warmup=warmup, steps=steps, stop_after=stop_after, seconds=seconds,
                wait_for_steps=wait_for_steps, profile_memory=not no_memory, minddata=not no_minddata,
                minddata_interval_ms=minddata_interval,
            ),
            env=_user_environ(),  # not the settings msdiag made for itself (ARROW_DEFAULT_MEMORY_POOL)
        )
    except MsdiagError as e:
        _fail(e, debug)
        return
    for line in res.messages():  # how the job ended (said as msdiag's exit code says it), notes, problems
        click.echo(f"msdiag: {line}", err=True)
    if not res.captured:
        sys.exit(res.exit_code)
    from msdiag.contract import build

    try:
        a = _analyze(folder, opts, kw["strict"])
        data = build(a)
    except MsdiagError as e:
        if debug:
            raise
        click.echo(f"msdiag: error: the capture could not be analyzed: {e}", err=True)
        sys.exit(res.exit_code)
    if fmt == "json":  # one line, the last of stdout (the job's own output comes before it)
        click.echo(json.dumps(data, ensure_ascii=False))
    else:
        from msdiag.report.text import render

        click.echo(render(data), nl=False)
    if report_path:
        _capture_report(a, data, report_path)
    sys.exit(res.exit_code)


def _capture_report(a: Any, data: dict[str, Any], report_path: str) -> None:
    """--report: the HTML report, when this msdiag has the HTML renderer."""
    try:
        from msdiag.report.html import render as render_html
    except ImportError:
        click.echo("msdiag: --report: this msdiag has no HTML report (msdiag.report.html): not written", err=True)
        return
    try:
        Path(report_path).write_text(render_html(a, data), encoding="utf-8")
    except OSError as e:
        click.echo(f"msdiag: --report: cannot write {report_path}: {e.strerror or e}", err=True)
        return
    click.echo(f"msdiag: wrote {Path(report_path).resolve()}", err=True)


@main.group()
def rules() -> None:
    """The diagnosis rules (rules/*.yaml)."""


def _rules_of_project(rules_dirs: tuple[str, ...], kw: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """The rules (built-in, the config's folders, then --rules) and the ids the config disables."""
    from msdiag.rules.loader import load_rules

    cfg = _project_config(kw)
    values = cfg.values if cfg is not None else {}
    dirs = tuple(dict.fromkeys((*values.get("rules_dirs", ()), *rules_dirs)))
    return load_rules(dirs), set(values.get("disable", ()))


@rules.command("list")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(exists=True, file_okay=False), help="Extra rules folder.")
@config_options
def rules_list(fmt: str, rules_dirs: tuple[str, ...], **kw: Any) -> None:
    """List every rule with its category, severity and parameters (the project config's rules and disabled ones too)."""
    try:
        rs, disabled = _rules_of_project(rules_dirs, kw)
    except MsdiagError as e:
        _fail(e, False)
        return
    if fmt == "json":
        out = [
            {
                "id": r.id, "name": r.name, "category": r.category, "severity": r.severity, "summary": r.summary,
                "params": {p.name: {"default": p.default, "unit": p.unit, "bounds": list(p.bounds), "doc": p.doc} for p in r.params.values()},
                "metrics": sorted(r.metrics()), "path": r.path, "disabled": r.id in disabled,
            }
            for r in rs.values()
        ]
        click.echo(json.dumps(out, indent=1))
        return
    for r in sorted(rs.values(), key=lambda r: (r.category, r.id)):
        params = ", ".join(f"{p.name}={p.default:g}" for p in r.params.values())
        off = "  (disabled by the project config)" if r.id in disabled else ""
        click.echo(f"{r.id:<28} {r.category:<14} {r.severity:<9} {r.summary}" + (f"  [{params}]" if params else "") + off)


@rules.command("explain")
@click.argument("rule_id")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(exists=True, file_okay=False), help="Extra rules folder.")
@config_options
def rules_explain(rule_id: str, rules_dirs: tuple[str, ...], **kw: Any) -> None:
    """Explain one rule: why it matters, how it is measured, its parameters and fixes."""
    try:
        rs, disabled = _rules_of_project(rules_dirs, kw)
    except MsdiagError as e:
        _fail(e, False)
        return
    if rule_id not in rs:
        click.echo(f"msdiag: error: no rule '{rule_id}' (see: msdiag rules list)", err=True)
        sys.exit(EXIT_ERROR)
    r = rs[rule_id]
    click.echo(f"{r.id}: {r.name} ({r.category}, {r.severity})" + (" [disabled by the project config]" if r.id in disabled else ""))
    click.echo(f"\n{r.summary}\n")
    click.echo(f"Why it matters: {r.docs['why']}\n\nHow it is measured: {r.docs['how']}\n\nFalse positives: {r.docs['false_positives']}\n")
    if r.params:
        click.echo("Parameters (override with --set RULE.PARAM=VALUE):")
        for p in r.params.values():
            click.echo(f"  {r.id}.{p.name} = {p.default:g} {p.unit} (bounds {p.bounds[0]:g}..{p.bounds[1]:g}): {p.doc}")
        click.echo("")
    click.echo("Fixes:")
    for s in r.suggestions:
        fw = s.get("framework", "any")
        click.echo(f"  - {'' if fw == 'any' else f'[{fw}] '}{s['action']}")
        if s.get("api"):
            click.echo(f"    API: {s['api']}")
        if s.get("snippet"):
            click.echo("    " + s["snippet"].rstrip().replace("\n", "\n    "))
        click.echo(f"    Effect: {s['effect']}")
    for ref in r.references:
        click.echo(f"Reference: {ref}")


# ---- the metric registry (msdiag/metrics/registry.py) ----------------------------------------


@main.group()
def metrics() -> None:
    """The metrics msdiag computes (generated from the registry: id, unit, doc, source)."""


def _metric_uses() -> dict[str, list[str]]:
    """Metric id -> the ids of the built-in rules that read it."""
    from msdiag.rules.loader import load_rules

    uses: dict[str, list[str]] = {}
    for r in load_rules(()).values():
        for mid in sorted(r.metrics()):
            uses.setdefault(mid, []).append(r.id)
    return uses


@metrics.command("list")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def metrics_list(fmt: str) -> None:
    """List every metric with its unit and what it measures."""
    from msdiag.metrics.registry import all_metrics

    reg = all_metrics()
    if fmt == "json":
        uses = _metric_uses()
        out = [
            {"id": m.id, "unit": m.unit, "doc": m.doc, "source": m.source, "params": list(m.params), "rules": uses.get(m.id, [])}
            for m in sorted(reg.values(), key=lambda m: m.id)
        ]
        click.echo(json.dumps(out, indent=1))
        return
    for m in sorted(reg.values(), key=lambda m: m.id):
        click.echo(f"{m.id:<36} {m.unit:<10} {m.doc.split('; ')[0]}")


@metrics.command("explain")
@click.argument("metric_id")
def metrics_explain(metric_id: str) -> None:
    """Explain one metric: what it measures, its unit, where it comes from, the rules that read it."""
    from msdiag.metrics.registry import all_metrics

    reg = all_metrics()
    if metric_id not in reg:
        click.echo(f"msdiag: error: no metric '{metric_id}' (see: msdiag metrics list)", err=True)
        sys.exit(EXIT_ERROR)
    m = reg[metric_id]
    click.echo(f"{m.id} ({m.unit})\n\n{m.doc}\n\nSource: {m.source}")
    if m.reads.tables:
        click.echo(f"Reads the tables: {', '.join(m.reads.tables)}")
    if m.params:
        click.echo(f"Cuts at the rule parameters (--set): {', '.join(m.params)}")
    rules_of = _metric_uses().get(m.id)
    click.echo(f"Read by the rules: {', '.join(rules_of)}" if rules_of else "Read by no rule (reported only).")


# ---- diff and baselines (msdiag/diff.py, msdiag/baseline.py) --------------------------------


def _load_baseline(name: str) -> dict[str, Any]:
    """A saved baseline by name (``baseline:NAME`` accepted too)."""
    from msdiag import baseline as store

    return store.load(store.check_name(name[len(store.PREFIX):] if name.startswith(store.PREFIX) else name))


def _baseline_label(snap: dict[str, Any]) -> str:
    return f"baseline {snap['name']}"


def _against_baseline(saved: dict[str, Any], a: Any, report: dict[str, Any], path: str) -> dict[str, Any]:
    """The diff of a fresh analysis against a saved baseline (`analyze --baseline`, `report --baseline`)."""
    from msdiag.diff import compare, snapshot

    return compare(saved, snapshot(a, report), _baseline_label(saved), path)


def _diff_side(arg: str, opts: Any, strict: bool = False) -> tuple[dict[str, Any], str, Any]:
    """(snapshot, label, Analysis or None): a saved baseline name stands where a path stands."""
    from msdiag import baseline as store
    from msdiag.diff import snapshot
    from msdiag.errors import InputError

    named = store.resolve(arg)
    if named:
        snap = store.load(named[1])
        return snap, _baseline_label(snap), None
    if store.exists(arg):
        click.echo(f"msdiag: note: '{arg}' is a path and a saved baseline: the path is used (write baseline:{arg} for the baseline)", err=True)
    elif not Path(arg).exists():
        raise InputError(arg, f"no such file or folder, and no saved baseline of that name in {store.store_dir()}")
    a = _analyze(arg, opts, strict)
    return snapshot(a), arg, a


@main.command()
@click.argument("baseline_arg", metavar="BASELINE")
@click.argument("candidate_arg", metavar="CANDIDATE")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--report", "report_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the candidate's HTML report with the comparison (CANDIDATE must be a capture path).")
@click.option("--fail-on-regression", type=click.FloatRange(min=0), default=None, metavar="PCT",
              help="Exit 1 when step time (or each --metric) is worse by more than PCT percent and beyond noise.")
@click.option("--metric", "metric_ids", multiple=True, metavar="ID",
              help="Gate on this metric instead of step time (repeat, or comma-separated); needs --fail-on-regression.")
@click.option("--min-effect", type=click.FloatRange(min=0), default=2.0, show_default=True, metavar="PCT",
              help="Smallest relative change (percent) judged improved or regressed.")
@analysis_options
def diff(
    baseline_arg: str, candidate_arg: str, fmt: str, report_path: str | None, fail_on_regression: float | None,
    metric_ids: tuple[str, ...], min_effect: float, **kw: Any,
) -> None:
    """Compare CANDIDATE with BASELINE (capture paths or saved baseline names): what changed, beyond noise?

    Step time is judged over the per-step samples of all ranks (warm-up left out): a bootstrap
    interval of the relative change, a Mann-Whitney rank test and a minimum effect size.
    Exit 0 ok, 1 a regression beyond --fail-on-regression and beyond noise, 2 usage or input error
    (including captures that cannot be compared).
    """
    from msdiag.diff import check_gate_metrics, compare
    from msdiag.errors import InputError

    debug = kw["debug"]
    ids = tuple(x.strip() for m in metric_ids for x in m.split(",") if x.strip())
    try:
        if ids and fail_on_regression is None:
            raise InputError("--metric", "names what --fail-on-regression gates: give --fail-on-regression PCT too")
        if kw.get("requests_log"):
            raise InputError("--requests", "would pair one request log with both sides: give each side's request log as BASELINE / CANDIDATE")
        if kw.get("train_log"):
            raise InputError("--train-log", "would pair one training log with both sides: give each side's training log as BASELINE / CANDIDATE")
        check_gate_metrics(ids)
        opts = _options(kw)
        if report_path:
            from msdiag import baseline as store

            if store.resolve(candidate_arg):
                raise InputError("--report", "the HTML report is of the candidate capture: give CANDIDATE as a capture path, not a saved baseline")
            p = Path(candidate_arg)
            _check_output(report_path, [p, p.parent] if p.name == "ASCEND_PROFILER_OUTPUT" else [p])
        sb, lb, _ = _diff_side(baseline_arg, opts, kw["strict"])
        sc, lc, ac = _diff_side(candidate_arg, opts, kw["strict"])
        d = compare(sb, sc, lb, lc, min_effect=min_effect / 100.0, fail_on_regression=fail_on_regression, gate_metrics=ids)
        if opts.goals:  # the candidate against the goals (a saved baseline's plan is read back from its report)
            from msdiag.plan import evaluate_goals

            d["goals"] = evaluate_goals(opts.goals, sc["report"].get("metrics") or {}, sc["report"].get("plan") or {})
        if report_path:
            out = _check_output(report_path, [Path(r["path"]) for s in (sb, sc) for r in s["report"]["ranks"] if r.get("path")])
            from msdiag.report.html import render as render_html

            data = dict(sc["report"])
            data["baseline_diff"] = d
            try:
                out.write_text(render_html(ac, data), encoding="utf-8")
            except OSError as e:
                raise InputError(report_path, f"cannot write the report: {e.strerror or e}") from None
            click.echo(f"msdiag: wrote {out.resolve()}", err=True)
    except MsdiagError as e:
        _fail(e, debug)
        return
    if fmt == "json":
        click.echo(json.dumps(d, indent=1, ensure_ascii=False))
    else:
        from msdiag.report.diff_text import render

        click.echo(render(d), nl=False)
        from msdiag.report.text import goal_lines

        lines = goal_lines(d)
        if lines:
            click.echo("\n".join(["", "Candidate:", *lines]))
    gate = EXIT_FINDINGS if d["gate"] and d["gate"]["failed"] else EXIT_OK
    sys.exit(max(gate, _goal_exit(d, kw["fail_on_goal"])))


@main.group()
def baseline() -> None:
    """Named baselines kept in a local store ($MSDIAG_HOME/baselines, else ~/.local/share/msdiag/baselines)."""


@baseline.command("save")
@click.argument("name")
@click.argument("path", type=click.Path())
@click.option("--force", is_flag=True, help="Replace a baseline of the same name.")
@analysis_options
def baseline_save(name: str, path: str, force: bool, **kw: Any) -> None:
    """Analyze PATH and keep it as baseline NAME (the analysis, not the raw capture)."""
    from msdiag import baseline as store
    from msdiag.diff import snapshot

    try:
        store.check_name(name)
        if store.exists(name) and not force:
            raise MsdiagError(f"{name}: a baseline of that name exists: use --force to replace it, or another name")
        a = _analyze(path, _options(kw), kw["strict"])
        f = store.save(name, snapshot(a), path, force=force)
    except MsdiagError as e:
        _fail(e, kw["debug"])
        return
    m = a.metrics
    st = m["step_time_us"].value if "step_time_us" in m else None
    click.echo(
        f"msdiag: saved baseline {name} ({len(a.capture.ranks)} rank(s), median step "
        f"{'-' if st is None else f'{float(st) / US_PER_MS:.2f} ms'}) to {f}",
        err=True,
    )


@baseline.command("list")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def baseline_list(fmt: str) -> None:
    """List the saved baselines."""
    from msdiag import baseline as store

    items = store.list_baselines()
    if fmt == "json":
        click.echo(json.dumps({"store": str(store.store_dir()), "baselines": items}, indent=1, ensure_ascii=False))
        return
    if not items:
        click.echo(f"no saved baselines in {store.store_dir()}")
        return
    for b in items:
        if b.get("problem") and not b.get("saved_at"):
            click.echo(f"{b['name']:<24} {b['problem']}")
            continue
        st = b.get("step_time_us")
        click.echo(
            f"{b['name']:<24} {b.get('saved_at') or '-':<21} {b.get('ranks')} rank(s)  median step "
            f"{'-' if st is None else f'{st / US_PER_MS:.2f} ms'}  {b.get('verdict') or '-':<13} {b.get('source_path')}"
            + (f"  ({b['problem']})" if b.get("problem") else "")
        )


@baseline.command("delete")
@click.argument("name")
def baseline_delete(name: str) -> None:
    """Delete saved baseline NAME."""
    from msdiag import baseline as store

    try:
        f = store.delete(name)
    except MsdiagError as e:
        _fail(e, False)
        return
    click.echo(f"msdiag: deleted baseline {name} ({f})", err=True)


def run() -> None:
    """The console entry (``msdiag``, ``python -m msdiag.cli``): the command, then a quick exit.

    Python's own exit frees every object and module one by one; after a 64-rank report that took ~0.4 s,
    after the output was complete. So once the command has ended, its output is flushed and the exit
    handlers are run (``atexit``: what logging, multiprocessing or Dask registered), then the process ends
    with ``os._exit``. Where anything could still be running (a thread besides this one), or the output
    cannot be flushed (a closed pipe), it ends the usual way instead. ``main`` itself (click's tests,
    callers embedding the CLI) ends as any click command does.

    The whole command runs with the analysis' rarer collections (GC_THRESHOLDS), not only the analysis
    (``_lean_gc``): with the default thresholds back, building and printing the report collected the
    young objects the analysis left (a 512-rank job: one collection of 0.17 s, then 0.05 s more), and with
    malloc keeping the memory it frees for reuse (``forking.keep_freed``)."""
    from msdiag.forking import keep_freed

    gc.set_threshold(*GC_THRESHOLDS)
    keep_freed()
    try:
        main()
    except SystemExit as e:
        code = e.code
    else:
        code = EXIT_OK
    _leave(code)


def _leave(code: str | int | None) -> None:
    """End the process with ``code`` as ``sys.exit(code)`` would, without the interpreter's teardown when
    nothing is left to do."""
    import atexit
    import threading

    if threading.active_count() > 1:
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)  # the interpreter reports a closed stdout as it always did
    if code is None:
        status = EXIT_OK
    elif isinstance(code, int):
        status = code & 0xFF
    else:  # sys.exit("text"): the text on stderr, status 1
        print(code, file=sys.stderr, flush=True)
        status = 1
    atexit._run_exitfuncs()
    os._exit(status)


if __name__ == "__main__":
    run()
