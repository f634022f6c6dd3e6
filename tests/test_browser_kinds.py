"""Every kind of HTML report in headless Chromium: training, cluster, request log, diff.

Each page is rendered by Chromium (Debian's ``chromium``), screenshotted to tmp_path, and checked as a reader sees
it: the page logs nothing to the console (no script error), the DOM Chromium built holds the verdict banner with its
label, and the banner's colour (the badge's background, read from the page) is painted near the top of the
screenshot, which is not blank. Slow: each starts a browser.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES
from test_report import _chromium, needs_chromium, run

SAMPLE = SAMPLE_TRACES / "train_small_cpu"
REQUEST_LOG = SAMPLE_TRACES / "serve_load" / "requests_rate50.jsonl"
PYNATIVE = "mindspore-cpu/legacy_Profiler_pynative_mem"
GRAPH = "mindspore-cpu/legacy_Profiler_graph_mem"
WIDTH, HEIGHT = 1400, 2000
#: The banner is the first thing under the page header: its colour is looked for in this many rows from the top.
BANNER_ROWS = 900

pytestmark = [pytest.mark.slow, needs_chromium]


def _write(kind: str, corpus: Path, job8: Path, out: Path) -> None:
    """The report of one kind, written by the command a user types."""
    args = {
        "training": ["report", str(SAMPLE), "-o", str(out)],
        "cluster": ["report", str(job8), "-o", str(out)],
        "request log": ["report", str(REQUEST_LOG), "-o", str(out)],
        "diff": ["diff", str(corpus / PYNATIVE), str(corpus / GRAPH), "--report", str(out)],
    }[kind]
    code, _, err = run(*args, "--jobs", "1", "--no-cache")
    assert code == 0, err
    assert out.is_file()


def _badge(page: str) -> tuple[str, tuple[float, float, float]]:
    """The verdict banner's label and its badge colour (0-1 RGB), as the page writes them."""
    m = re.search(r'<span class="badge" style="background: #([0-9A-Fa-f]{6})">([^<]+)</span>', page)
    assert m, "no verdict badge in the page"
    rgb = tuple(int(m.group(1)[i : i + 2], 16) / 255.0 for i in (0, 2, 4))
    return m.group(2).strip(), (rgb[0], rgb[1], rgb[2])


def _console_lines(stderr: str) -> list[str]:
    """What the page logged (Chromium with --enable-logging=stderr prints each console message as CONSOLE)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


@pytest.mark.parametrize("kind", ["training", "cluster", "request log", "diff"])
def test_report_kind_in_chromium(kind: str, corpus: Path, job8: Path, tmp_path: Path) -> None:
    import matplotlib.image as mpimg
    import numpy as np

    page = tmp_path / "report.html"
    _write(kind, corpus, job8, page)
    text = page.read_text(encoding="utf-8")
    label, colour = _badge(text)
    png = tmp_path / "report.png"
    shot = _chromium(tmp_path, "--enable-logging=stderr", "--v=0", f"--screenshot={png}",
                     f"--window-size={WIDTH},{HEIGHT}", page.resolve().as_uri())  # fmt: skip
    assert _console_lines(shot.stderr) == []
    img = mpimg.imread(str(png))
    assert img.shape[:2] == (HEIGHT, WIDTH)
    rgb = img[..., :3]
    assert float(rgb.std()) > 0.05, "the screenshot is blank"
    # the banner is painted: its badge colour covers a patch near the top (the badge alone is ~100 x 20 px)
    near = np.all(np.abs(rgb[:BANNER_ROWS] - np.array(colour)) < 0.03, axis=2)
    assert int(near.sum()) > 500, f"the verdict banner ({label}) is not on screen"
    dom = _chromium(tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom", page.resolve().as_uri())
    assert _console_lines(dom.stderr) == []
    assert 'class="verdict"' in dom.stdout and f">{label}</span>" in dom.stdout
