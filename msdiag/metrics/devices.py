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
        round(_ascend(24, 1.8), 1),
        "derived, uncertain: 24 cube cores (MindStudio msSanitizer chip table, from CANN platform_config) "
        "x 1.8 GHz (assumed) x 16^3 x 2; mfu.md gives ~354-369",
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

    Precedence: an explicit ``peak_tflops`` (the user knows best), then the capture's own
    info.json (measured core count and clock), then the named ``device``'s table entry. An
    unknown device name raises ValueError listing the known names, even when a higher-precedence
    source exists, so a typo is never silently ignored.
    """
    key = device_key(device) if device else None
    if peak_tflops is not None:
        if not peak_tflops > 0:
            raise ValueError(f"peak TFLOP/s must be positive, got {peak_tflops}")
        return float(peak_tflops), "given by the user"
    if info_json is not None:
        peak = peak_from_info_json(Path(info_json))
        return peak, f"{info_json}: ai_core_num x aic_frequency x 16*16*16*2"
    if key is not None:
        p = PEAKS[key]
        return p.tflops, f"{key}: {p.source}"
    return None, "no peak FLOP/s known: no peak TFLOP/s or device name was given and no CANN info.json was found"
