"""Peak dense FP16/BF16 throughput of accelerators: the denominator of MFU.

MFU is only as good as its peak, so every peak carries where it comes from. The figure computed
from the capture itself (CANN's ``info.json``: AI Core count x AI Core frequency) is the most
trustworthy on Ascend, where no official per-SKU datasheet exists; the table below is the fallback
when the user names the device. Facts and confidence levels are those of ``shared/docs/mfu.md``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

#: FLOPs per AI Core (cube) cycle in FP16: a 16x16x16 multiply-add per cycle = 16*16*16*2
#: (msprof-analyze's formula; INT8 uses 16*32*16*2).
CUBE_FP16_FLOPS_PER_CYCLE = 16 * 16 * 16 * 2
HZ_PER_MHZ = 1e6
FLOPS_PER_TFLOPS = 1e12


class Peak(NamedTuple):
    """A device's peak dense FP16/BF16 throughput and where the figure comes from."""

    tflops: float
    source: str


def _ascend(cores: int, ghz: float) -> float:
    return cores * ghz * 1e9 * CUBE_FP16_FLOPS_PER_CYCLE / FLOPS_PER_TFLOPS


#: Device -> peak dense FP16/BF16 TFLOP/s (no sparsity), with its source and confidence.
PEAKS: dict[str, Peak] = {
    "910A": Peak(256.0, "Ascend 910 (910A) FP16, secondary reports of Huawei's Hot Chips 2019 talk"),
    "910B1": Peak(
        round(_ascend(24, 1.85), 1),
        "derived: 24 cube cores x 1.85 GHz (CANN platform ini Ascend910B1: cube_core_cnt 24, cube_freq 1850) "
        "x 16^3 x 2",
    ),
    "910B2": Peak(
        354.0, "verl's device table; equals 24 cube cores x 16^3 x 2 x 1.8 GHz from the 910B2 platform ini"
    ),
    "910B3": Peak(round(_ascend(20, 1.8), 1), "derived: 20 cube cores x 1.8 GHz (frequency assumed) x 16^3 x 2"),
    "910B4": Peak(
        280.0, "commonly quoted, unverified: no primary source found (20 cube cores per the MindStudio chip table)"
    ),
    "910C": Peak(
        round(_ascend(24, 1.85), 1),
        "derived, per die (one profiled device; a package holds 2): 24 cube cores x 1.85 GHz x 16^3 x 2",
    ),
    "A100": Peak(312.0, "NVIDIA A100 spec (dense BF16/FP16), torchtitan's table"),
    "H100 SXM": Peak(989.0, "NVIDIA H100 SXM spec, torchtitan's table (1979 is with sparsity)"),
    "H100 PCIe": Peak(756.0, "NVIDIA H100 PCIe spec, torchtitan's table"),
    "H100 NVL": Peak(835.0, "NVIDIA H100 NVL spec, torchtitan's table"),
    "H200": Peak(989.0, "NVIDIA H200 SXM spec, torchtitan's table"),
    "H200 NVL": Peak(836.0, "NVIDIA H200 NVL, torchtitan and a public code table"),
}

_VENDOR_PREFIX = re.compile(r"^(ascend|huawei|nvidia)")


def _norm(name: str) -> str:
    """'Ascend910B2' / '910 b2' / 'H100-SXM' -> '910b2' / '910b2' / 'h100sxm'."""
    s = re.sub(r"[\s_\-]+", "", name.strip().lower())
    return _VENDOR_PREFIX.sub("", s)


_BY_NORM: dict[str, str] = {_norm(k): k for k in PEAKS}


def device_key(device: str) -> str:
    """The PEAKS key a user's device name stands for (case, spaces, '-', '_' and an
    'Ascend'/'NVIDIA' prefix ignored). Raises ValueError listing the known names."""
    key = _BY_NORM.get(_norm(device))
    if key is None:
        known = ", ".join(PEAKS)
        raise ValueError(f"unknown device {device!r}; known devices: {known}")
    return key


def peak_from_info_json(path: Path) -> float:
    """Peak FP16 TFLOP/s of the device a CANN ``PROF_*/device_N/info.json.N`` describes.

    ``DeviceInfo[0].ai_core_num x aic_frequency (MHz) x 1e6 x 16*16*16*2``, divided by 1e12 (the
    result is in TFLOP/s like :data:`PEAKS`). It is the nominal clock; a measured frequency drop
    (the AI Core Freq counter) lowers the achievable peak. Raises ValueError naming the file when
    it cannot be read or lacks the fields.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot read a JSON device description ({e})") from None
    devices = data.get("DeviceInfo") if isinstance(data, dict) else None
    if not isinstance(devices, list) or not devices or not isinstance(devices[0], dict):
        raise ValueError(f"{path}: no DeviceInfo list (expected a CANN info.json)")
    dev = devices[0]
    try:
        cores = int(dev["ai_core_num"])
        mhz = float(dev["aic_frequency"])
    except KeyError as e:
        raise ValueError(f"{path}: DeviceInfo lacks {e.args[0]}") from None
    except (TypeError, ValueError):
        raise ValueError(
            f"{path}: ai_core_num / aic_frequency are not numbers "
            f"({dev.get('ai_core_num')!r}, {dev.get('aic_frequency')!r})"
        ) from None
    if cores <= 0 or mhz <= 0:
        raise ValueError(f"{path}: ai_core_num {cores} and aic_frequency {mhz} MHz must be positive")
    return cores * mhz * HZ_PER_MHZ * CUBE_FP16_FLOPS_PER_CYCLE / FLOPS_PER_TFLOPS


def resolve_peak(
    peak_tflops: float | None, device: str | None, info_json: Path | None
) -> tuple[float | None, str]:
    """The peak TFLOP/s to divide by, and where it came from (or None and why).

    Precedence: an explicit ``peak_tflops`` (the user knows best), then the named ``device``'s
    table entry (an override of what the capture says), then the capture's own info.json
    (measured core count and clock). An unknown device name raises ValueError listing the known
    names, even when a higher-precedence source exists, so a typo is never silently ignored.
    """
    key = device_key(device) if device else None
    if peak_tflops is not None:
        if not peak_tflops > 0:
            raise ValueError(f"peak TFLOP/s must be positive, got {peak_tflops}")
        return float(peak_tflops), "given by the user"
    if key is not None:
        p = PEAKS[key]
        return p.tflops, f"{key}: {p.source}"
    if info_json is not None:
        peak = peak_from_info_json(Path(info_json))
        return peak, f"{info_json}: ai_core_num x aic_frequency x 16*16*16*2"
    return None, "no peak FLOP/s known: no peak TFLOP/s or device name was given and no CANN info.json was found"


class Chip(NamedTuple):
    """What a chip is made of, to recognise it from a capture: cube (AI Core) and vector core
    counts per device, the nominal AI Core clock (None: not published) and where the figures
    come from. The device's memory is :func:`device_memory_gb`'s table."""

    name: str
    cube_cores: int
    vector_cores: int
    clock_mhz: float | None
    source: str


#: Ascend chips by what a capture can measure of them (one profiled device each: a 910C package
#: holds two dies, each its own device). The vector cores are 2 per cube core on 910B-class chips
#: (CANN platform ini vector_core_cnt; the AI_VECTOR_CORE kernels run on them); 910A has none.
CHIPS: tuple[Chip, ...] = (
    Chip("910A", 32, 0, 1000.0, "CANN info.json of a 910A device: ai_core_num 32, aiv_num 0, aic_frequency 1000"),
    Chip("910B1", 24, 48, 1850.0, "CANN platform ini Ascend910B1: cube_core_cnt 24, vector_core_cnt 48, cube_freq 1850"),
    Chip("910B2", 24, 48, 1800.0, "24 cube cores at 1.8 GHz from the 910B2 platform ini (mfu.md, verl's 354 TFLOP/s)"),
    Chip("910B3", 20, 40, 1800.0, "20 cube cores (MindStudio chip table); 1.8 GHz assumed"),
    Chip("910B4", 20, 40, None, "20 cube cores (MindStudio chip table); clock not published"),
    Chip("910C", 24, 48, 1850.0, "per die: 24 cube cores at 1.85 GHz (CANN platform ini ai_core_cnt 24, cube_freq 1850)"),
)

#: Two clocks within this fraction are the same clock (a counter's 1800 vs a table's 1800.0; PMU
#: cycles over microseconds round to a few MHz).
CLOCK_TOLERANCE = 0.01


def chips_fitting(cube_cores: int | None, clock_mhz: float | None, recorded_name: str | None = None) -> list[Chip]:
    """The chips of :data:`CHIPS` a capture's measurements fit: same cube core count (when known),
    same clock within :data:`CLOCK_TOLERANCE` (when known and published: a chip whose clock is not
    published cannot be ruled out by it), and a name starting with the name the capture recorded
    (a family such as 'Ascend910B' narrows, never widens)."""
    prefix = _norm(recorded_name) if recorded_name else ""
    out = []
    for c in CHIPS:
        if cube_cores is not None and c.cube_cores != cube_cores:
            continue
        if clock_mhz is not None and c.clock_mhz is not None and abs(c.clock_mhz - clock_mhz) > CLOCK_TOLERANCE * c.clock_mhz:
            continue
        if prefix and not _norm(c.name).startswith(prefix):
            continue
        out.append(c)
    return out


def cube_peak_tflops(cube_cores: int, clock_mhz: float) -> float:
    """Dense FP16/BF16 peak of ``cube_cores`` cube units at ``clock_mhz``: cores x clock x 16*16*16*2 FLOP per cycle."""
    return cube_cores * clock_mhz * HZ_PER_MHZ * CUBE_FP16_FLOPS_PER_CYCLE / FLOPS_PER_TFLOPS


# ---- device memory ------------------------------------------------------------------------

# Device memory per device as one rank sees it, GB (= GiB). Sources:
# - Ascend 910A/910B2/910B3/910B4/910B4-1/910C: Project-HAMi/HAMi
#   charts/hami/templates/scheduler/device-configmap.yaml, vnpus memoryCapacity (MiB): 910A 32768,
#   910B2 65536, 910B3 65536, 910B4 32768, 910B4-1 65536, Ascend910C 65536. A 910C package holds
#   two dies with 64 GB each (128 GB per package); each die is a device of its own (one rank), so a
#   rank's capacity is 64.
# - 910B1 64 GB: Atlas 800T A2 (910B1) as stated in the msdiag brief; not in HAMi's table.
# - NVIDIA: HAMi's MIG profile table in the same file: A100-40GB "7g.40gb", A100-80GB "7g.79gb"
#   (80 GB card), H100 80GB "7g.80gb", H100 94GB (NVL) "7g.94gb", H200 "7g.141gb".
_DEVICE_MEMORY_GB: list[tuple[str, float]] = [
    (r"^910B41$", 64.0),
    (r"^910B[123]$", 64.0),
    (r"^910B4$", 32.0),
    (r"^910(A|PROA|PREMIUMA)?$", 32.0),
    (r"^910C$", 64.0),
    (r"^A100\w*80G", 80.0),
    (r"^A100\w*40G", 40.0),
    (r"^H100\w*(NVL|94G)", 94.0),
    (r"^H100\w*", 80.0),
    (r"^H200\w*", 141.0),
]
_AMBIGUOUS = {
    "910B": "910B comes with 64 GB (910B1/B2/B3) or 32 GB (910B4)",
    "A100": "A100 comes with 40 GB or 80 GB",
}


def device_memory_gb(device: str) -> tuple[float | None, str | None]:
    """The memory of one device of the named model in GB (GiB), or None and why."""
    key = re.sub(r"[^0-9A-Z]", "", device.upper())
    key = re.sub(r"^(HUAWEI)?(ASCEND|ATLAS)", "", key)
    key = re.sub(r"^NVIDIA", "", key)
    for prefix, why in _AMBIGUOUS.items():
        if key == prefix:
            return None, f"device {device!r}: {why}; give the exact model or device_memory_gb"
    for pat, gb in _DEVICE_MEMORY_GB:
        if re.search(pat, key):
            return gb, None
    return None, f"device {device!r} is not in msdiag's device memory table; give device_memory_gb"
