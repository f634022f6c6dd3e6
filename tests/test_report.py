"""`msdiag report`: one self-contained, deterministic HTML file, checked as text and in a real browser.

The browser tests render reports of a corpus capture and of the bundled sample in headless
Chromium (Debian's ``chromium`` package), take a screenshot and check that it is not blank, and
read back the DOM Chromium built to check the text a reader sees. Without chromium they are
skipped with that reason.
"""

from __future__ import annotations

import html as htmllib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import SAMPLE_TRACES

from msdiag.cli import main

SAMPLE = SAMPLE_TRACES / "train_small_cpu"
LEVEL1 = "ascend/torchnpu-2rank-level1"
MINDDATA = "mindspore-cpu/minddata_manual/md_parsed"
CHART_TITLES = (
    "Step time by rank and step",
    "Timeline of",
    "Top kernel types by time",
    "Communication ops: where the time goes",
    "Link bandwidth, rank by rank",
    "Device memory over time",
    "Data pipeline: queue usage per op",
    "Balance across ranks",
)


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def report(path: Path, out: Path, *extra: str) -> str:
    code, _, err = run("report", str(path), "-o", str(out), "--jobs", "1", *extra)
    assert code == 0, err
    assert err.strip() == f"msdiag: wrote {out.resolve()}"
    return out.read_text(encoding="utf-8")


def shared_json(analysed: Callable[[str], Any], name: str) -> dict:
    """The JSON report object of the session's shared analysis of a capture (tests/conftest.py)."""
    from msdiag.contract import build

    return json.loads(json.dumps(build(analysed(name)), ensure_ascii=False))


def analyze_json(path: Path) -> dict:
    code, out, err = run("analyze", str(path), "--format", "json", "--jobs", "1")
    assert code == 0, err
    return json.loads(out)


def figures(page: str) -> dict[str, str]:
    """Chart id -> the markup of its <figure>."""
    return dict(re.findall(r'<figure class="chart" id="([^"]+)">(.*?)</figure>', page, flags=re.DOTALL))


def assert_self_contained(page: str) -> None:
    """Nothing is loaded from anywhere: no script, stylesheet, image, font or frame, no remote URL in
    a loading attribute or in CSS. Plain <a href> links (references in findings) are allowed."""
    assert not re.search(r"<script\b|<link\b|<img\b|<iframe\b|<object\b|<embed\b|<video\b|<audio\b", page, re.I)
    assert not re.search(r"@import|@font-face|url\(\s*['\"]?(https?:)?//", page, re.I)
    for tag in re.findall(r"<[a-zA-Z][^>]*>", page):
        for attr, url in re.findall(r"\b([a-zA-Z:-]+)\s*=\s*\"([^\"]*)\"", tag):
            if re.match(r"\s*(https?:)?//", url):
                assert tag.lower().startswith("<a ") and attr == "href", f"remote resource: {tag[:200]}"
            if attr.lower() in ("src", "xlink:href", "href") and not tag.lower().startswith("<a "):
                # a fragment of the page, or an image inlined by matplotlib (imshow) as a data: URI
                assert url.startswith(("#", "data:image/png;base64,")), f"{attr} outside the page: {tag[:200]}"


def assert_unique_ids(page: str) -> None:
    ids = re.findall(r'\bid="([^"]+)"', page)
    dup = {i for i in ids if ids.count(i) > 1}
    assert not dup, f"duplicate ids: {sorted(dup)[:5]}"
    # every internal reference points at an id of the page
    for ref in set(re.findall(r'url\(#([^)]+)\)|href="#([^"]+)"', page)):
        target = ref[0] or ref[1]
        assert target in ids, f"dangling reference #{target}"


# ---- corpus and sample reports, as text ------------------------------------------------------


@pytest.fixture(scope="module")
def corpus_report(corpus: Path, analysed: Callable[[str], Any], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The corpus capture's report (written once for the module by the command) and its JSON report object
    (of the session's shared analysis, what ``analyze --format json --jobs 1`` prints)."""
    out = tmp_path_factory.mktemp("corpus-report") / "report.html"
    # with --fail-on critical (test_fail_on reads the exit code): the page is the same with or without it
    code, _, err = run("report", str(corpus / LEVEL1), "-o", str(out), "--jobs", "1", "--fail-on", "critical")
    assert code == 1, err  # comm-exposed is critical on this capture
    assert err.strip() == f"msdiag: wrote {out.resolve()}"
    return out, shared_json(analysed, LEVEL1)


def test_corpus_report(corpus_report: tuple[Path, dict]) -> None:
    page = corpus_report[0].read_text(encoding="utf-8")
    data = corpus_report[1]
    assert page.startswith("<!DOCTYPE html>")
    # the top of the page: the verdict sentence and its share, step time, MFU, identity, absent data
    assert htmllib.escape(data["verdict"]["sentence"], quote=False) in page
    assert "74% of step time" in page  # share 0.7386 (comm-exposed)
    assert "134.25 ms" in page and "p90 136.11 ms" in page  # step_time_us 134246.75, p90 136114.15
    # MFU without flags (issue 15): the peak is inferred from the capture, so the tile shows a value and its formula
    assert data["metrics"]["mfu"] is not None and "MFU" in page and "model FLOPs / (step time x peak)" in page
    assert "torch_npu" in page and "Level1" in page and "2 (0, 1)" in page
    assert "1 per rank (step 50)" in page
    assert "dataset.csv" in page and "torch_npu writes no dataset.csv" in page
    # every chart is there, drawn or replaced by one line saying why
    figs = figures(page)
    assert len(figs) == len(CHART_TITLES)
    for title in CHART_TITLES:
        assert title in page
    drawn = {k for k, v in figs.items() if "<svg" in v}
    assert drawn == {"c-steps", "c-timeline", "c-kernels", "c-comm", "c-links", "c-memory", "c-balance"}
    assert "Not drawn: no MindData pipeline profile: minddata_pipeline_raw_0.csv absent" in figs["c-data"]
    assert "<svg" not in figs["c-data"]
    # kernel types with FLOPs and achieved TFLOP/s where the type has a formula
    assert "MatMulV2" in figs["c-kernels"] and "TFLOP/s" in figs["c-kernels"]
    assert "hcom_allReduce__586_0_1" in figs["c-comm"]
    assert "no link below 0.8 x its standard bandwidth" in figs["c-links"]  # slow_link null: its reason
    # the chip inferred from the capture (24 cube cores x 1800 MHz: 910B2, issue 15) gives the capacity
    assert "Capacity line: 64 GB per device" in figs["c-memory"]
    # findings with evidence and the fix's snippet in <pre>; metrics with units and reasons
    from markupsafe import escape

    assert data["findings"], "comm-exposed fires on this capture"
    for f in data["findings"]:
        assert f'<span class="mono muted">{escape(f["rule_id"])}</span>' in page
        assert str(escape(f["message"])) in page
        for k in f["evidence"]:
            assert f'<span class="mono">{k}</span> = <strong>' in page
        for sg in f["suggestions"]:
            if sg.get("snippet"):
                assert f"<pre>{escape(sg['snippet'].rstrip(chr(10)))}</pre>" in page
    assert "communication_exposed_share</span> = <strong>73.9%</strong>" in page  # 0.7386 as a share
    assert "memory_peak_allocated_mb" in page and "1.23 GB" in page
    assert "10 / 10" in page  # step_trace_time.csv cross-check
    assert_self_contained(page)
    assert_unique_ids(page)


def test_sample_cpu_report(analysed: Callable[[str], Any], rendered: Callable[[str], str]) -> None:
    # the page of the session's analysis, rendered in process (tests/conftest.py): what `msdiag report` writes for
    # it (the command itself runs in corpus_report and the tests of its options and errors)
    page = rendered("sample")
    data = shared_json(analysed, "sample")  # the sample is re-captured now and then: figures come from its analysis
    figs = figures(page)
    drawn = {k for k, v in figs.items() if "<svg" in v}
    assert {"c-steps", "c-timeline", "c-kernels", "c-memory"} <= drawn
    # absent data: one line with the reason, never an empty axis
    assert not {"c-comm", "c-links", "c-balance"} & drawn
    assert "MindSpore on CPU writes no HCCL communication analysis" in figs["c-comm"]
    assert "communication_matrix.json absent" in figs["c-links"]
    assert "one rank in the capture (rank 0)" in figs["c-balance"]
    for k, v in figs.items():
        assert ("<svg" in v) != ("Not drawn: " in v), k
    assert "MatMul" in figs["c-kernels"]
    from msdiag import fmt

    assert f"peak allocated {fmt.mib(data['metrics']['memory_peak_allocated_mb'])} (rank 0)" in figs["c-memory"]
    from msdiag.report.html import _span

    ids = sorted({s["step"] for s in data["steps"]})
    assert f"{len(ids)} per rank (step {_span(ids)})" in page
    assert "1 (0)" in page
    absent = [s["name"] for s in data["sources"] if s["status"] != "present"]
    assert absent and all(n.replace("_0.", "_N.") in page or n in page for n in absent)
    assert_self_contained(page)
    assert_unique_ids(page)


@pytest.mark.slow
def test_deterministic_across_processes(tmp_path: Path) -> None:
    """Same input, same bytes: two separate processes with different hash seeds."""
    outs = []
    for seed in ("1", "2"):
        out = tmp_path / f"r{seed}.html"
        env = dict(os.environ, PYTHONHASHSEED=seed)
        r = subprocess.run([sys.executable, "-m", "msdiag.cli", "report", str(SAMPLE), "-o", str(out), "--jobs", "1"],
                           env=env, capture_output=True, text=True, check=False)
        assert r.returncode == 0, r.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


def _charts_by_pid(here: int, mark: Path, failing: bool) -> list[Callable[[Any], Any]]:
    """Eight chart functions whose SVG is the pid that drew them; with ``failing``, chart 5 is one JSON would not
    give back exactly and chart 6 raises in a child. This process waits, at its first chart, until a child has
    drawn one, so that the children get their share however fast this process takes charts."""
    from msdiag.report import charts

    def chart(i: int) -> Callable[[Any], charts.Chart]:
        def fn(a: Any) -> charts.Chart:
            if os.getpid() == here:
                for _ in range(6000):  # (never longer than a child takes to start)
                    if mark.exists():
                        break
                    time.sleep(0.01)
            c = charts.Chart(f"c{i}", f"chart {i}", svg=f"<svg>{os.getpid()}</svg>", table=[{"k": "v"}], table_columns=[("k", "K")])
            if failing and i == 5:
                c.table = [{"k": ("a", "tuple")}]  # JSON would give a list back: drawn again here
            if failing and i == 6 and os.getpid() != here:
                raise ValueError("boom in a child")  # the child fails: drawn again here, without error
            if os.getpid() != here:
                mark.touch()
            return c
        return fn

    return [chart(i) for i in range(8)]


def test_charts_drawn_by_forked_children(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """charts.drawn: the charts of the serial loop, in page order, shared with forked children (4 workers here),
    each taking the next chart as it comes free."""
    from msdiag.report import charts

    monkeypatch.setattr(charts, "_cpus", lambda: 4)
    here = os.getpid()
    got = charts.drawn(None, _charts_by_pid(here, tmp_path / "mark", failing=False))  # type: ignore[arg-type]
    assert [c.id for c in got] == [f"c{i}" for i in range(8)]
    assert all(c.table_columns == [("k", "K")] and c.table == [{"k": "v"}] for c in got)
    pids = [int(c.svg[5:-6]) for c in got if c.svg]
    assert any(p != here for p in pids)  # a child drew one chart at least: this process waited for it


def test_the_costliest_charts_are_handed_out_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """charts._queued: the charts of DRAWN_FIRST first (the memory chart, the step timeline, ...), then the others in
    page order; the charts still come back in page order, each drawn once (a chart marks its index where it is drawn)."""
    from msdiag.report import charts

    fns = [charts.step_breakdown, charts.kernel_types, charts.memory, charts.balance, charts.plan_waterfall,
           charts.step_timeline]
    assert charts._queued(fns) == [2, 5, 4, 0, 1, 3]
    assert charts._queued(fns[:2]) == [0, 1]  # none of them: page order
    monkeypatch.setattr(charts, "_cpus", lambda: 2)
    marks = tmp_path / "marks"
    marks.mkdir()

    def chart(i: int) -> Any:
        def fn(a: Any) -> charts.Chart:
            (marks / str(i)).write_text(str(os.getpid()))
            return charts.Chart(id=f"c{i}", title="t", caption="", svg=None, absent="a")
        return fn

    drawn = [chart(i) for i in range(6)]
    monkeypatch.setattr(charts, "DRAWN_FIRST", (drawn[4], drawn[1]))
    got = charts.drawn(None, drawn)  # type: ignore[arg-type]
    assert [c.id for c in got] == [f"c{i}" for i in range(6)] and sorted(p.name for p in marks.iterdir()) == list("012345")


def test_charts_of_a_failed_child_drawn_here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A child's chart that JSON would not give back exactly, or that raises, is drawn again by this process (with
    every other chart that child took), so a chart's error is raised here as the serial loop raises it."""
    from msdiag.report import charts

    monkeypatch.setattr(charts, "_cpus", lambda: 4)
    here = os.getpid()
    got = charts.drawn(None, _charts_by_pid(here, tmp_path / "mark", failing=True))  # type: ignore[arg-type]
    assert [c.id for c in got] == [f"c{i}" for i in range(8)]
    assert [c.svg for c in got][5:7] == [f"<svg>{here}</svg>"] * 2
    assert got[5].table == [{"k": ("a", "tuple")}]

    def fails(a: Any) -> charts.Chart:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        charts.drawn(None, [fails, fails, fails])  # type: ignore[arg-type]


def test_svg_cut_to_what_is_drawn() -> None:
    """charts.to_svg draws a figure once and sets the SVG's viewport to the drawn extent: the same size as
    matplotlib's own ``bbox_inches="tight"`` save (which draws twice), here for a figure whose tick labels
    stick out left of the figure and whose title is far above the axes; the picture's drawing is the same."""
    import io

    import matplotlib
    from matplotlib.figure import Figure

    from msdiag.report import charts

    def figure() -> Figure:
        with matplotlib.rc_context(charts._RC):  # type: ignore[arg-type]
            fig = Figure(figsize=(6, 2), dpi=72)
            fig.subplots_adjust(left=0.01, top=0.6)
            ax = fig.add_subplot()
            ax.barh(["a very long kernel type name", "b"], [3.0, 1.0])
            ax.set_title("a title")
        return fig

    ours = charts.to_svg(figure(), "c")
    buf = io.StringIO()
    with matplotlib.rc_context(charts._RC):  # type: ignore[arg-type]
        figure().savefig(buf, format="svg", bbox_inches="tight", pad_inches=charts.PAD_IN)
    tight = buf.getvalue()
    box = [float(v) for v in re.search(r'viewBox="([^"]+)"', ours).group(1).split()]  # type: ignore[union-attr]
    want = [float(v) for v in re.search(r'viewBox="([^"]+)"', tight).group(1).split()]  # type: ignore[union-attr]
    assert box[0] < 0  # the labels reach left of the figure: the viewport starts there
    assert box[2] == pytest.approx(want[2], abs=0.01) and box[3] == pytest.approx(want[3], abs=0.01)
    assert ours.count("<text") == tight.count("<text") and ours.count("<path") == tight.count("<path")


def test_autoescape(tmp_path: Path) -> None:
    """Kernel names such as Cast<float> and any text from a rule are text, never markup."""
    import jinja2

    from msdiag.analysis import analyze
    from msdiag.contract import build
    from msdiag.report import html

    env = html.environment()
    assert env.autoescape is True and env.undefined is jinja2.StrictUndefined
    a = analyze(SAMPLE, None)  # its own analysis, not the session's: the test renames kernels in place
    k = a.capture.ranks[0].tables["kernels"]
    top = k.loc[k["kind"] == "compute", "type"].value_counts().index[0]
    k.loc[k["type"] == top, "type"] = "Cast<float>"
    a.views.context.cache.clear()  # the charts read the analysis' kernel-type table: made again from the renamed kernels
    data = build(a)
    data["findings"] = [
        {"rule_id": "x<script>", "name": "<b>bold</b>", "category": "host", "severity": "warning",
         "message": "a <i>message</i> & more", "evidence": {"free_share": 0.5},
         "suggestions": [{"action": "do <this>", "api": "ms.f(<x>)", "snippet": "if a < b and c > d:\n    pass\n",
                          "effect": "e"}],
         "references": ["https://www.mindspore.cn/docs/en/master/index.html"], "bottleneck": "host"}
    ]
    page = html.render(a, data)
    assert "Cast&lt;float&gt;" in page and "Cast<float>" not in page
    assert "<b>bold</b>" not in page and "&lt;b&gt;bold&lt;/b&gt;" in page
    assert "<i>message</i>" not in page and "x<script>" not in page
    assert "<pre>if a &lt; b and c &gt; d:\n    pass</pre>" in page
    # a reference is a plain link to follow, not a resource the page loads
    assert '<a href="https://www.mindspore.cn/docs/en/master/index.html" rel="noreferrer">' in page
    assert_self_contained(page)
    (tmp_path / "escaped.html").write_text(page, encoding="utf-8")


@pytest.mark.slow
def test_report_imports_stay_off_the_analyze_path() -> None:
    code = (
        "import sys\n"
        "from msdiag.cli import main\n"
        "from msdiag.analysis import analyze\n"
        "from msdiag import contract\n"
        "from msdiag.report import text\n"
        f"text.render(contract.build(analyze({str(SAMPLE)!r})))\n"
        "print(sorted(m for m in ('matplotlib', 'jinja2') if m in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_strict_undefined_is_an_error() -> None:
    import jinja2

    from msdiag.report import html

    with pytest.raises(jinja2.UndefinedError):
        html.environment().get_template(html.BASE_TEMPLATE).render(title="x")


# ---- the command: errors and exit codes ------------------------------------------------------


def test_bad_path_exits_2(tmp_path: Path) -> None:
    code, out, err = run("report", str(tmp_path / "nope"), "-o", str(tmp_path / "r.html"))
    assert code == 2
    assert err.startswith("msdiag: error:") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.html").exists()


def test_output_required(tmp_path: Path) -> None:
    code, _, err = run("report", str(SAMPLE))
    assert code == 2 and "--output" in err


def test_output_folder_missing(tmp_path: Path) -> None:
    out = tmp_path / "no" / "such" / "r.html"
    code, _, err = run("report", str(SAMPLE), "-o", str(out))
    assert code == 2 and "does not exist" in err and len(err.strip().splitlines()) == 1


def test_refuses_output_inside_capture(tmp_path: Path) -> None:
    cap = tmp_path / "cap"
    shutil.copytree(SAMPLE, cap)
    before = sorted(p.relative_to(cap) for p in cap.rglob("*"))
    for path, out in (
        (cap, cap / "report.html"),
        (cap, cap / "ASCEND_PROFILER_OUTPUT" / "report.html"),
        (cap / "ASCEND_PROFILER_OUTPUT", cap / "report.html"),  # the rank folder above the given folder
        (cap, tmp_path / "cap" / ".." / "cap" / "r.html"),
    ):
        code, _, err = run("report", str(path), "-o", str(out), "--jobs", "1")
        assert code == 2, err
        assert "inside the capture folder" in err and "never writes into a capture" in err
        assert len(err.strip().splitlines()) == 1
    assert sorted(p.relative_to(cap) for p in cap.rglob("*")) == before


def test_fail_on(corpus_report: tuple[Path, dict]) -> None:
    """corpus_report ran ``report --fail-on critical``: exit 1 (asserted there), and the page is written all the same."""
    assert corpus_report[0].is_file() and corpus_report[0].read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert any(f["severity"] == "critical" for f in corpus_report[1]["findings"])


def test_analysis_options_reach_the_report(corpus: Path, tmp_path: Path) -> None:
    """--device gives a peak (MFU) and a capacity line (memory)."""
    page = report(corpus / LEVEL1, tmp_path / "r.html", "--device", "910B2")
    figs = figures(page)
    assert "Capacity line: 64 GB per device" in figs["c-memory"]
    assert "device capacity" in figs["c-memory"]
    assert "device=910B2" in page


# ---- scale: many ranks, and the data pipeline chart ------------------------------------------


def _link(src: Path, dst: Path) -> None:
    """A file of a synthetic capture: a hard link to the corpus file (a copy where the file system
    refuses one). Not a symbolic link: msdiag reads no link that leads out of the capture (issue 20)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _many_ranks(corpus: Path, dst: Path, n: int) -> Path:
    """``n`` ranks linked from the 2-rank corpus capture, renumbered, with MindData pipeline files."""
    srcs = sorted((corpus / LEVEL1).glob("rank*_ascend_pt"))
    md = corpus / MINDDATA
    for r in range(n):
        src, rd = srcs[r % len(srcs)], dst / f"rank{r}_ascend_pt"
        (rd / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
        for f in (src / "ASCEND_PROFILER_OUTPUT").iterdir():
            _link(f, rd / "ASCEND_PROFILER_OUTPUT" / f.name)
        _link(src / "profiler_metadata.json", rd / "profiler_metadata.json")
        info = json.loads(next(src.glob("profiler_info_*.json")).read_text())
        info["rank_id"] = r
        (rd / f"profiler_info_{r}.json").write_text(json.dumps(info))
        _link(md / "minddata_pipeline_raw_0.csv", rd / "ASCEND_PROFILER_OUTPUT" / f"minddata_pipeline_raw_{r}.csv")
        _link(md / "minddata_pipeline_summary_0.json", rd / "ASCEND_PROFILER_OUTPUT" / f"minddata_pipeline_summary_{r}.json")
    return dst


def _check_many_ranks(corpus: Path, tmp_path: Path, n: int) -> str:
    """The report of ``n`` ranks, more than the timeline draws as lanes and the page lists one by one."""
    cap = _many_ranks(corpus, tmp_path / "cap", n)
    page = report(cap, tmp_path / "r.html")
    figs = figures(page)
    assert f"{n} ranks: one row per rank" in figs["c-timeline"]  # a heatmap, not 3 lanes per rank
    assert f"rank {n - 1}  compute" not in figs["c-timeline"]
    assert "<svg" in figs["c-data"] and "Batch (id 1)" in figs["c-data"]
    assert f"({n} rank(s)" in figs["c-kernels"]
    assert f"over {n} ranks" in page  # per-rank metric values collapsed to min / median / max
    assert_self_contained(page)
    assert_unique_ids(page)
    return page


@pytest.mark.slow
def test_many_ranks(corpus: Path, tmp_path: Path) -> None:
    """At the real limits: 18 ranks, two more than the timeline's lanes (16)."""
    from msdiag.metrics import views

    n = views.LANE_RANK_LIMIT + 2
    assert f"{n} (0-{n - 1})" in _check_many_ranks(corpus, tmp_path, n)  # more than 6 ranks: their span


def test_many_ranks_at_lowered_limits(corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same checks at limits lowered to 2 ranks (lanes, per-rank lists, memory lines): 3 ranks take the
    many-ranks paths of every chart and table, at a sixth of the reading test_many_ranks does."""
    from msdiag.metrics import views
    from msdiag.report import charts, html

    for module, name in ((views, "LANE_RANK_LIMIT"), (html, "PER_RANK_LIST_LIMIT"), (charts, "MEMORY_LINE_LIMIT")):
        monkeypatch.setattr(module, name, 2)
    assert "3 (0-2)" in _check_many_ranks(corpus, tmp_path, 3)  # the ranks as runs


# ---- in a real browser -----------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (Debian: apt-get install -y chromium): the browser tests are skipped",
)


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium-profile'}", *args,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    return r


def _screenshot(tmp_path: Path, page: Path, png: Path) -> None:
    import matplotlib.image as mpimg
    import numpy as np

    _chromium(tmp_path, f"--screenshot={png}", "--window-size=1400,3000", page.resolve().as_uri())
    img = mpimg.imread(str(png))
    assert img.shape[0] == 3000 and img.shape[1] == 1400
    rgb = img[..., :3]
    assert float(rgb.std()) > 0.05, "the screenshot is blank"
    # the page header (dark) and drawn charts: a good part of the page is not background white
    assert float((rgb < 0.9).any(axis=2).mean()) > 0.05
    # the charts' colours made it to the screen (computing blue #4C78A8 somewhere)
    blue = np.all(np.abs(rgb - np.array([0x4C, 0x78, 0xA8]) / 255.0) < 0.03, axis=2)
    assert int(blue.sum()) > 500, "no chart drawn in the screenshot"


def _dom(tmp_path: Path, page: Path) -> str:
    return _chromium(tmp_path, "--dump-dom", page.resolve().as_uri()).stdout


@pytest.mark.slow
@needs_chromium
def test_browser_corpus(corpus_report: tuple[Path, dict], tmp_path: Path) -> None:
    page = corpus_report[0]
    _screenshot(tmp_path, page, tmp_path / "report.png")
    dom = _dom(tmp_path, page)
    sentence = corpus_report[1]["verdict"]["sentence"]
    assert htmllib.escape(sentence, quote=False) in dom
    for title in CHART_TITLES:
        assert title in dom
    # every chart but the data pipeline's (absent on torch_npu), and the plan's waterfall (level1 has fixes to project)
    assert dom.count("<svg") == 8
    assert "ForeachAddList" in dom and "hcom_allReduce__586_0_1" in dom


@pytest.mark.slow
@needs_chromium
def test_browser_sample_and_escaping(tmp_path: Path) -> None:
    page = tmp_path / "cpu.html"
    report(SAMPLE, page)
    _screenshot(tmp_path, page, tmp_path / "cpu.png")
    dom = _dom(tmp_path, page)
    assert htmllib.escape(analyze_json(SAMPLE)["verdict"]["sentence"], quote=False) in dom
    assert "Not drawn: " in dom
    # a kernel named Cast<float> reaches the reader as text: serialised back as &lt;, never an element
    test_autoescape(tmp_path)
    dom = _dom(tmp_path, tmp_path / "escaped.html")
    assert "Cast&lt;float&gt;" in dom and "<float>" not in dom.lower()
    assert "&lt;b&gt;bold&lt;/b&gt;" in dom


# ---- renderers only render: views, one formatting module, imports one way ----------------------


def test_report_imports_nothing_below_the_analysis() -> None:
    """report/ reads the Analysis and the report object only; diff.py does not import report/ (and
    report/ no module that builds): every import counts, inside functions and under TYPE_CHECKING."""
    import ast

    import msdiag

    pkg = Path(msdiag.__file__).parent

    def imported(path: Path) -> set[str]:
        out = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names}
        return out

    for f in sorted((pkg / "report").glob("*.py")):
        below = {m for m in imported(f) if m.startswith(("msdiag.metrics", "msdiag.inference", "msdiag.ingest"))}
        assert not below, f"{f.name} imports {sorted(below)}"
    assert not {m for m in imported(pkg / "diff.py") if m.startswith("msdiag.report")}
    assert {m.split(".")[1] for m in imported(pkg / "fmt.py") if m.startswith("msdiag.")} == {"units"}  # top level only


def test_number_formats() -> None:
    from msdiag import fmt

    # microseconds: 1.5e6 us = 1.50 s; 134246.75 us = 134.25 ms (the level1 step); below 1 ms in us
    assert (fmt.us(1.5e6), fmt.us(134246.75), fmt.us(999.94), fmt.us(None), fmt.us(float("nan"))) == (
        "1.50 s", "134.25 ms", "999.9 us", "-", "-")
    # MiB: 2048 MiB = 2.00 GB; 12.34 MiB stays MB
    assert (fmt.mib(2048), fmt.mib(12.34)) == ("2.00 GB", "12.3 MB")
    assert (fmt.pct(0.7386, 0), fmt.signed_pct(-0.05), fmt.signed_pct(None), fmt.pts(0.012)) == (
        "74%", "-5.0%", "n/a", "+1.2 pp")  # share changes in percentage points, "pp" everywhere (issue 19)
    assert (fmt.share(25.0, 200.0), fmt.share(1.0, 0.0)) == ("12.5%", "-")
    assert (fmt.flop(3.2e12), fmt.flop(512.0)) == ("3.20 TFLOP", "512 FLOP")
    # ms: below 10 ms two decimals, from 10 s in seconds
    assert (fmt.ms(4.321), fmt.ms(123.45), fmt.ms(12345.0)) == ("4.32 ms", "123.5 ms", "12.35 s")
    # the report's values by unit, and the diff's shorter style of the same figures
    assert (fmt.value(0.5, "ms"), fmt.value(0.25, "ratio"), fmt.value(3.0, "votes"), fmt.value(1.0, "flag")) == (
        "500.0 us", "25.0%", "3 votes", "yes")
    assert (fmt.value_short(2.0, "rank"), fmt.value_short(1.23456, "TFLOP/s"), fmt.value_short(0.5, "ms")) == (
        "2", "1.235 TFLOP/s", "500.0 us")


@pytest.fixture(scope="module")
def job8_analysis(job8: Path, analysed: Callable[[str], Any]) -> object:
    """bench/cluster.py's 8-rank job (rank 5 slow, link 2-3's transit stretched 2.5x; tests/conftest.py),
    the session's shared analysis of it: read only."""
    return analysed(str(job8))


def test_slow_link_reaches_the_heatmap_as_data(job8_analysis: object, tmp_path: Path) -> None:
    """The slow link is structured in the view (no parsing of the metric's text) and outlined in the heatmap."""
    from msdiag.report import charts

    a: Any = job8_analysis
    links = a.views.links
    # bench/cluster.py plants the slow link at 2 -> 3 of the one 8-rank group, on HCCS: transit 2.5x longer,
    # bandwidth / 2.5, well under 0.8 x HCCS's standard, so slow_link names it
    assert a.metrics["slow_link"].value == "2-3 HCCS"
    s = links.slow
    assert (s.src, s.dst, s.transport, s.name) == (2, 3, "HCCS", "2-3 HCCS")
    (m,) = links.matrices
    assert s.group == m.group and m.rows == list(range(8)) and m.cols == list(range(8))
    # 8 ranks x 7 peers; the diagonal (a rank to itself, on-chip LOCAL) is blank
    assert int(np.isfinite(m.mat).sum()) == 56 and all(np.isnan(m.mat[i, i]) for i in range(8))
    assert m.mat[2, 3] == np.nanmin(m.mat)  # the planted link is the slowest cell
    fig = charts.comm_links(a)
    assert "Outlined in red: the slow link 2-3 HCCS." in fig.caption
    assert charts.ALERT.lower() in fig.svg.lower()  # the outline, in the alert colour


@pytest.mark.slow
def test_slow_link_reaches_the_page(job8_analysis: object) -> None:
    """The caption above reaches the 8-rank page (the quick loop sees figure captions reach the page in
    test_corpus_report's c-links figure)."""
    from msdiag.contract import build
    from msdiag.report import html

    a: Any = job8_analysis
    assert "Outlined in red: the slow link 2-3 HCCS." in html.render(a, build(a))


def test_rank_ranges() -> None:
    from msdiag import fmt

    assert fmt.rank_ranges(list(range(64))) == "0-63"
    assert fmt.rank_ranges([9, 0, 1, 2, 3, 5, 7, 8, 3]) == "0-3, 5, 7-9"  # sorted, once each
    assert (fmt.rank_ranges([]), fmt.rank_ranges([4]), fmt.rank_ranges([1, 2])) == ("", "4", "1, 2")


def test_cause_ranks_as_runs(job8_analysis: object) -> None:
    """The causes' ranks are printed as runs (a 1,024-rank job lists "0-1023", not a thousand numbers); the JSON
    keeps the list. Every rank of the 8-rank job holds host syncs and data waits (each rank a copy of the same
    torch_npu rank), so each cause row names 0-7."""
    from msdiag.contract import build
    from msdiag.report import html, text

    a: Any = job8_analysis
    report = build(a)
    rows = report["causes"]
    assert rows and all(c["ranks"] == list(range(8)) for c in rows)
    out = text.render(report)
    assert all(f"{c['id']}: " in out for c in rows) and "(ranks 0-7)" in out and "0, 1, 2" not in out
    page = html.render(a, report)
    assert page.count("<td>0-7</td>") == len(rows)


def test_links_of_a_capture_without_groups(analysed: Callable[[str], Any]) -> None:
    """Raw msprof output names no communication group: its links are one matrix (this used to crash the
    report on an empty matrix), and the slow link is outlined there. The link chart of the session's analysis,
    drawn alone as the page draws it (the page's <figure> holds its title, caption and SVG)."""
    from msdiag.report import charts

    chart = charts.comm_links(analysed("cann-msprof/PROF_000001_20230818142704322_COJGGGCANRMICFBC"))
    fig = f"{chart.title}\n{chart.caption}\n{chart.svg or chart.absent}"
    assert chart.svg is not None and "no group recorded" in fig
    # link 0 -> 4 on PCIE moved 98.3 MB at 14.37 GB/s = 0.72 x PCIE's 20 GB/s standard, under 0.8: slow_link
    assert "Outlined in red: the slow link 0-4 PCIE." in fig


def test_per_rank_values_in_their_own_unit(analysed: Callable[[str], Any]) -> None:
    """An imbalance is a ratio, its per-rank values are times: the metrics table prints them as times.

    level1's compute_imbalance per rank is each rank's device computing time in us (metrics/balance.py); the
    row must show those as durations (fmt.us), never as percentages of a ratio."""
    from msdiag import fmt
    from msdiag.contract import build
    from msdiag.report.html import _metrics

    report = build(analysed("level1"))
    det = report["metric_details"]["compute_imbalance"]
    assert det["unit"] == "ratio" and det["per_rank_unit"] == "us"
    row = next(r for r in _metrics(report) if r["id"] == "compute_imbalance")
    per = sorted((int(r), v) for r, v in det["per_rank"].items())
    assert len(per) == 2 and all(v > 1000 for _, v in per)  # two ranks, milliseconds of compute each
    assert row["per_rank"] == " · ".join(f"{r}: {fmt.us(v)}" for r, v in per)
    assert "%" not in row["per_rank"] and row["value"].endswith("%")


def test_rank_lists_of_the_page_are_runs() -> None:
    """The capture box and the data-absent box name ranks as runs, as the causes do (64 ranks of which 0, 2 and 41
    were read deep: the other 61 skipped trace_view.json), and past eight runs the first six and the count."""
    from msdiag.report.html import _span

    skipped = [1, *range(3, 41), *range(42, 64)]
    assert _span(skipped) == "1, 3-40, 42-63"
    assert _span([3, 5]) == "3, 5"
    assert _span([0, 1, 2, 3]) == "0-3"
    evens = list(range(0, 200, 2))  # 100 runs of one rank each
    assert _span(evens) == "0, 2, 4, 6, 8, 10, … (100 in all)"


def test_the_templates_compiled_while_the_ranks_are_read_are_the_ones_rendered() -> None:
    """``msdiag report`` compiles every template while the rank pool reads (cli._import_html, run by parallel.meanwhile):
    the page's environment is one per process and keeps them, so rendering compiles none again."""
    import jinja2

    from msdiag.report import html

    html.compile_templates()
    env = html.environment()
    assert env is html.environment()
    names = env.list_templates(extensions=["j2"])
    assert html.BASE_TEMPLATE in names and len(names) >= 5
    compiled: list[str] = []
    real = env.loader.load  # type: ignore[union-attr]

    def counted(environment: jinja2.Environment, name: str, globals: Any = None) -> Any:  # noqa: A002 - jinja2's name
        compiled.append(name)  # (the loader reads and compiles a template the environment does not hold)
        return real(environment, name, globals)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(env.loader, "load", counted)
        for name in names:
            env.get_template(name)
    assert compiled == []  # every one was there


@pytest.mark.parametrize(("name", "table"), [("ascend/torchnpu-2rank-level1", "step_trace_time.csv"),
                                             ("mindspore-legacy/run_2", "step_trace_raw")])
def test_the_cross_check_names_the_profilers_table(rendered: Callable[[str], str], name: str, table: str) -> None:
    # the page names the profiler's table its figures were checked against (each check's `check`): a MindSpore 1.x
    # capture's step_trace_raw_1_detail_time.csv, not a step_trace_time.csv it does not have; run_2's free time of step
    # 1 is 0 there (iteration_interval 0) and 365 us in msdiag's timeline: its relative difference null, shown "-"
    page = rendered(name)
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))
    assert f"Cross-check with the profiler's own breakdown ({table}):" in text
    if table == "step_trace_raw":
        assert "step_trace_time.csv" not in text.split("Cross-check")[1][:80]
        assert re.search(r"rank 1 step 1 free_us: msdiag 365\.3 us vs profiler 0\.0 us \(-\)", text)


@pytest.mark.parametrize(("name", "why"), [
    ("level1", "profiler_metadata.json has no parallel layout"),  # the file read on both ranks, no layout in it
    ("p2p", "no rank has profiler_metadata.json"),  # the 2024 torch_npu capture: listed absent on both ranks
    ("mindspore-legacy/run_2", "this capture format writes no profiler_metadata.json"),  # MindSpore 1.x writes no such file
])
def test_the_page_says_why_no_parallel_layout_is_shown(rendered: Callable[[str], str], analysed: Callable[[str], Any],
                                                      name: str, why: str) -> None:
    # the header's "parallel" line says what the files say: the reason follows the report's sources (the status of
    # profiler_metadata.json per rank), not one sentence for every capture
    assert not analysed(name).identity.get("parallel")
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", rendered(name)))
    assert f"not recorded ({why})" in text
    others = {"profiler_metadata.json has no parallel layout", "no rank has profiler_metadata.json",
              "this capture format writes no profiler_metadata.json"} - {why}
    assert not any(o in text for o in others)


def test_a_damaged_profiler_metadata_is_not_said_to_hold_no_layout(corpus: Path, tmp_path: Path) -> None:
    # both ranks' profiler_metadata.json cut in the middle of a value (a copy of the corpus level0 capture): the files
    # were found but not read, and the page says so and points at the sources, which give the reason per file
    cap = tmp_path / "cap"
    shutil.copytree(corpus / "ascend" / "torchnpu-2rank-level0", cap)
    for meta in cap.glob("rank*_ascend_pt/profiler_metadata.json"):
        meta.chmod(0o644)
        meta.write_text('{"broken": ')
    out = tmp_path / "report.html"
    r = CliRunner().invoke(main, ["report", str(cap), "-o", str(out), "--no-cache", "--no-config"])
    assert r.exit_code == 0, r.output
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", out.read_text()))
    assert ("not recorded (profiler_metadata.json could not be read: its reason is under Data absent from this capture, "
            "or not read)") in text
    assert "profiler_metadata.json failed (all ranks) : the JSON is truncated" in text
    assert "has no parallel layout" not in text and "no rank has profiler_metadata.json" not in text


@pytest.mark.parametrize(("name", "shown"), [
    ("level0", "Level0 · AI Core metrics off"),  # profiler_info: _aic_metrics ACL_AICORE_NONE, the JSON's "None"
    ("level1", "Level1 · AI Core metrics PipeUtilization"),
    ("p2p", "AI Core metrics MemoryL0"),
])
def test_the_header_says_the_ai_core_metrics_as_set(rendered: Callable[[str], str], name: str, shown: str) -> None:
    # the JSON's capture.aic_metrics ("None" where the capture turned them off) said as a setting, not a bare "None"
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", htmllib.unescape(rendered(name))))
    assert shown in text and "· None" not in text
