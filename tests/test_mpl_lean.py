"""msdiag.report.mpl imports matplotlib without the help text of every Artist's set(): the same drawings, the
same set() behaviour."""

from __future__ import annotations

import subprocess
import sys

# One figure using set() with properties and aliases on lines, patches, texts and a collection, saved as SVG
# (a fixed hash salt: matplotlib's SVG ids are stable given it)
_DRAW = r"""
import io, sys
if sys.argv[1] == "lean":
    from msdiag.report.mpl import Figure, Line2D, PolyCollection, Rectangle
else:
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Rectangle
import matplotlib
matplotlib.rcParams["svg.hashsalt"] = "msdiag"
fig = Figure(figsize=(3, 2))
ax = fig.add_subplot()
(line,) = ax.plot([0, 1, 2], [1, 3, 2])
line.set(lw=3, color="C1", linestyle="--", label="a")
r = Rectangle((0.2, 0.5), 0.5, 1.0)
r.set(fc="#336699", alpha=0.5, hatch="//")
ax.add_patch(r)
pc = PolyCollection([[(0, 0), (1, 0), (1, 1)]])
pc.set(facecolor="C2", edgecolor="k", linewidths=0.5)
ax.add_collection(pc)
ax.set_title("t").set(fontsize=9, color="0.3")
ax.add_line(Line2D([0, 2], [0, 3]))
ax.legend()
out = io.StringIO()
fig.savefig(out, format="svg", metadata={"Date": None})
print(out.getvalue())
print("SIGNATURE", line.set.__doc__ is None, type(line).set is not type(r).set)
"""


def _draw(mode: str) -> str:
    return subprocess.run([sys.executable, "-c", _DRAW, mode], capture_output=True, text=True, check=True).stdout


def test_lean_import_draws_the_same_svg() -> None:
    plain, lean = _draw("plain"), _draw("lean")
    svg_plain, sig_plain = plain.rsplit("SIGNATURE", 1)
    svg_lean, sig_lean = lean.rsplit("SIGNATURE", 1)
    assert "<svg" in svg_plain and svg_lean == svg_plain  # byte for byte, set() with aliases (lw, fc) included
    # what the hook leaves out is the help text: matplotlib writes a docstring for each class' set(), msdiag's
    # import none; each class still has its own set()
    assert sig_plain.split() == ["False", "True"]
    assert sig_lean.split() == ["True", "True"]
