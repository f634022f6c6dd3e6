"""Number formatting, defined once: how msdiag writes a time, a size, a share or a metric value for a reader.

Every renderer (terminal text, HTML, charts, the diff views) formats through these functions, so a
figure reads the same everywhere. Two value styles exist on purpose: :func:`value` (the report: units a
reader expects, ``1.23 ms``, ``45.6%``, ``2.00 GB``) and :func:`value_short` (the diff: four significant
digits beside its change). A value that is absent (None, NaN, infinite) prints as ``-``.

Top level, imports nothing from msdiag's packages: the report and the diff both read it.
"""

from __future__ import annotations

import math
from typing import Any

from msdiag.units import FLOPS_PER_TFLOPS, MIB_PER_GIB, MS_PER_S, US_PER_MS, US_PER_S

MISSING = "-"
# units whose values count things: written as whole numbers with their unit
COUNT_UNITS = ("rank", "steps", "kernels", "groups", "votes", "workers", "ops")


def finite(x: Any) -> bool:
    """A real, finite number (not a bool, None, NaN or infinity)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x))


def _absent(x: Any) -> bool:
    return x is None or (isinstance(x, float) and not math.isfinite(x))


def us(x: Any) -> str:
    """Microseconds as us / ms / s (two decimals above a millisecond)."""
    if _absent(x):
        return MISSING
    x = float(x)
    if abs(x) >= US_PER_S:
        return f"{x / US_PER_S:.2f} s"
    if abs(x) >= US_PER_MS:
        return f"{x / US_PER_MS:.2f} ms"
    return f"{x:.1f} us"


def ms(x: Any) -> str:
    """Milliseconds as ms (two decimals below 10 ms) or s (from 10 s)."""
    if _absent(x):
        return MISSING
    x = float(x)
    if abs(x) >= 10 * MS_PER_S:
        return f"{x / MS_PER_S:.2f} s"
    return f"{x:.1f} ms" if abs(x) >= 10 else f"{x:.2f} ms"


def mib(x: Any) -> str:
    """MiB (2^20 B, what the memory tables call MB) as MB or GB."""
    if _absent(x):
        return MISSING
    x = float(x)
    return f"{x / MIB_PER_GIB:.2f} GB" if abs(x) >= MIB_PER_GIB else f"{x:.1f} MB"


def pct(x: Any, digits: int = 1) -> str:
    """A fraction as a percentage: 0.1234 -> ``12.3%``."""
    if _absent(x):
        return MISSING
    return f"{100.0 * float(x):.{digits}f}%"


def signed_pct(x: float | None, digits: int = 1) -> str:
    """A relative change with its sign: 0.05 -> ``+5.0%``; ``n/a`` when unknown."""
    return "n/a" if x is None else f"{100 * x:+.{digits}f}%"


def pts(x: float) -> str:
    """A change of a share in percentage points: 0.012 -> ``+1.2 pp`` (every share change is said in pp)."""
    return f"{100 * x:+.1f} pp"


def share(part: float | None, total: float | None) -> str:
    """``part`` as a percentage of ``total``; ``-`` when either is unknown or the total is 0."""
    if part is None or not total:
        return MISSING
    return f"{100.0 * part / total:.1f}%"


def flop(x: Any) -> str:
    """A FLOP count with its SI prefix (MFLOP .. PFLOP)."""
    if _absent(x):
        return MISSING
    x = float(x)
    for div, unit in ((1e3 * FLOPS_PER_TFLOPS, "PFLOP"), (FLOPS_PER_TFLOPS, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP")):
        if abs(x) >= div:
            return f"{x / div:.2f} {unit}"
    return f"{x:.0f} FLOP"


def count(x: float) -> str:
    """A count that may be a mean (launches per rank): whole with separators, else one decimal."""
    return f"{x:,.0f}" if x.is_integer() or x >= 100 else f"{x:.1f}"


def plain(v: Any) -> str:
    """A number without unit: whole with separators from 1000, else three significant digits."""
    if not finite(v):
        return MISSING if v is None else str(v)
    x = float(v)
    return f"{x:,.0f}" if abs(x) >= 1000 or x.is_integer() else f"{x:.3g}"


def rank_ranges(ranks: list[int]) -> str:
    """Ranks as runs: "0-63", "0-40, 42-63", "3, 5" (a run of three or more consecutive ranks as first-last)."""
    ids = sorted(set(int(r) for r in ranks))
    out: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.extend([f"{ids[i]}-{ids[j]}"] if j - i >= 2 else [str(r) for r in ids[i : j + 1]])
        i = j + 1
    return ", ".join(out)


def shorten(s: str, n: int) -> str:
    """``s`` cut to ``n`` characters, an ellipsis marking the cut."""
    return s if len(s) <= n else s[: n - 1] + "…"


def value(v: Any, unit: str | None) -> str:
    """A metric value with its unit, in the form a reader expects (ms / us, %, GB): the report's style."""
    if v is None:
        return MISSING
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    if not finite(v):
        return MISSING
    x = float(v)
    u = unit or ""
    by_unit = {
        "us": us, "ms": lambda y: us(y * US_PER_MS), "ratio": pct, "MB": mib, "GB": lambda y: f"{y:g} GB", "FLOP": flop,
        "GB/s": lambda y: f"{y:.2f} {u}", "TFLOP/s": lambda y: f"{y:.2f} {u}", "flag": lambda y: "yes" if y else "no",
    }  # fmt: skip
    if u in by_unit:
        return by_unit[u](x)
    if u in COUNT_UNITS or x.is_integer():
        return f"{x:,.0f}" if u in ("rank", "") else f"{x:,.0f} {u}"
    return f"{x:.3g} {u}".strip()


def value_short(x: Any, unit: str | None) -> str:
    """A metric value in the diff's style: times and sizes as :func:`value`, other numbers to 4 digits."""
    if x is None:
        return MISSING
    if isinstance(x, str):
        return x
    if unit == "us":
        return us(float(x))
    if unit == "ms":
        return us(float(x) * US_PER_MS)
    if unit == "MB":
        return mib(float(x))
    if unit == "ratio":
        return f"{100 * float(x):.1f}%"
    return f"{float(x):.4g}" + (f" {unit}" if unit and unit not in ("rank", "flag") else "")


def wait_phrases(metrics: dict[str, Any]) -> list[str]:
    """The collectives' waits as phrases ("late arrival: 5.6 ms per step, mostly rank 1"), from the report's
    metrics: one wording for every renderer of "Why the device waits"."""
    out = []
    if metrics.get("late_arrival_ms_per_step") is not None:
        out.append(f"late arrival: {metrics['late_arrival_ms_per_step']:.1f} ms per step, mostly rank {metrics.get('late_rank')}")
    if metrics.get("uncaptured_wait_ms_per_step"):
        out.append(
            f"waiting for ranks not captured ({metrics.get('ranks_not_captured')}): "
            f"{metrics['uncaptured_wait_ms_per_step']:.1f} ms per step"
        )
    return out


#: a suggestion's ``framework`` as a reader names it
FRAMEWORK_NAMES = {"mindspore": "MindSpore", "torch_npu": "torch_npu"}


def framework_key(name: Any) -> str | None:
    """The capture's framework as a suggestion names it (mindspore / torch_npu), None when unknown."""
    text = str(name or "").lower()
    if "torch" in text:
        return "torch_npu"
    if "mindspore" in text:
        return "mindspore"
    return None


def framework_label(suggestion: dict[str, Any], capture_framework: Any) -> str:
    """" (MindSpore)" for a suggestion meant for another framework than the capture's (or when the capture's
    is unknown); "" for one meant for any framework or for the capture's own."""
    fw = suggestion.get("framework") or "any"
    if fw == "any" or fw == framework_key(capture_framework):
        return ""
    return f" ({FRAMEWORK_NAMES.get(fw, fw)})"


#: How each goal's figure reads (msdiag/plan.py GOALS): a share, milliseconds or tokens per second.
_GOAL_UNITS = {"mfu": "share", "memory-share": "share", "step-ms": "ms", "ttft-p99-ms": "ms", "tpot-p99-ms": "ms",
               "tokens-per-s": "tokens/s"}


def goal_figure(name: str, x: Any) -> str:
    """A goal's figure in its own unit: ``mfu`` 0.45 -> ``45.0%``, ``step-ms`` 850 -> ``850.0 ms``."""
    unit = _GOAL_UNITS.get(name)
    if unit == "share":
        return pct(x)
    if unit == "ms":
        return ms(x)
    return MISSING if _absent(x) else f"{plain(x)} {unit or ''}".rstrip()


def finite_float(x: Any) -> float | None:
    """``x`` as a finite float, else None (None, NA, text that is no number, NaN and infinity): JSON has no NaN."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None
