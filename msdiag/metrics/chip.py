"""The chip a capture ran on, from what the capture itself records (issue 15).

MFU needs the device's peak, and on Ascend the peak is the cube cores x their clock x 16*16*16*2
FLOP per cycle (dense FP16/BF16). Both numbers are in the files even when no CANN ``info.json``
was kept:

- the cube core count: CANN's ``info.json`` ``ai_core_num``; else the ``Block Dim`` of the kernels
  that ran on the cube (``Accelerator Core`` AI_CORE / MIX_AIC; the matmul / conv / attention ones
  when there are any): their tiling launches one block per core, so the largest Block Dim that at
  least :data:`MIN_LAUNCH_SHARE` of them carry is the core count (a capture of tiny kernels gives a
  lower bound). A kernel whose PMU counted no cube cycles ran on the vector cores whatever its label
  (older CANN labels vector ops AI_CORE), and a rare larger Block Dim is blocks run in waves over
  fewer cores (vector work on 910A's AI Cores): neither counts;
- the clock: ``info.json`` ``aic_frequency``; else the ``AI Core Freq`` counter (trace_view.json,
  the SQLite export's AICORE_FREQ), its highest sample (the nominal clock; drops are throttling,
  ``aicore_freq_drop``); else the PMU at Level2: ``aic_total_cycles / aicore_time(us) / Block Dim``;
- the chip's name: the profiler's own name (the SQLite export's NPU_INFO, a family such as
  ``Ascend910B``) narrows the chips of ``devices.CHIPS`` that fit the cores and clock.

The peak is computed from cores and clock whenever both are recorded, whatever the chip's name;
when several chips fit, only the name (and the memory size, when they differ) is ambiguous.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from msdiag.metrics import devices
from msdiag.metrics.hardware import AICORE_FREQ_TRACK
from msdiag.metrics.registry import Context, Reads, Value, metric

#: Accelerator Core labels of kernels that run on the cube units (MIX_AIC: Block Dim counts cube blocks).
CUBE_CORE_KINDS = ("AI_CORE", "MIX_AIC")
#: Op types that only run on the cube: where the capture has them, they alone give the core count.
CUBE_OP_TYPE = re.compile(r"matmul|conv|flashattention|gemm", re.IGNORECASE)
#: A Block Dim carried by fewer of the cube kernels' launches than this is blocks run in waves, not cores.
MIN_LAUNCH_SHARE = 0.10
#: A kernel's PMU clock (cycles / time / blocks) this far from the capture's median is a damaged row.
PMU_CLOCK_SPREAD = 0.25
CONVENTION = "dense FP16/BF16: cube cores x clock x 16*16*16*2 FLOP per cycle, whatever the kernels' dtypes"

READS = Reads(tables=("kernels", "counters"), tracks=(AICORE_FREQ_TRACK,))


@dataclass(frozen=True)
class Measured:
    """One number about the chip and how it was found (a phrase for ``peak_source``)."""

    value: float
    how: str


@dataclass(frozen=True)
class ChipGuess:
    """What the capture says of its chip: cube cores, clock, the table's chips that fit, and the
    recorded name; each None when the files do not say."""

    cores: Measured | None
    clock: Measured | None
    recorded_name: str | None
    fitting: tuple[devices.Chip, ...]
    host_only: bool = False  # every kernel ran on the host (a MindSpore CPU capture)

    @property
    def peak_tflops(self) -> float | None:
        """Cores x clock x 8192 FLOP per cycle, when both were recorded."""
        if self.cores is None or self.clock is None:
            return None
        return devices.cube_peak_tflops(int(self.cores.value), self.clock.value)

    def peak_source(self) -> str:
        """'inferred: 24 AI Cores (largest cube Block Dim) x 1800 MHz (AI Core Freq)', with the convention."""
        assert self.cores is not None and self.clock is not None
        fit = f"; fits {self.name()}" if self.fitting else "; no chip of msdiag's table has these cores and clock"
        return (
            f"inferred: {int(self.cores.value)} AI Cores ({self.cores.how}) x {self.clock.value:g} MHz ({self.clock.how})"
            f"{fit}; {CONVENTION}"
        )

    def name(self) -> str | None:
        """The chip's name, or the chips that fit ('910B1 or 910C'), None when none does."""
        if not self.fitting:
            return None
        return " or ".join(c.name for c in self.fitting)

    def why_no_peak(self) -> str:
        """Why the capture gives no peak, in a few words."""
        if self.host_only:
            return "no accelerator peak for a CPU capture; give --peak-tflops"
        missing = []
        if self.cores is None:
            missing.append("the cube core count (no CANN info.json and no cube kernel with a Block Dim: Level0 records none)")
        if self.clock is None:
            missing.append("the AI Core clock (no CANN info.json, no AI Core Freq counter, no PMU cycles)")
        return "the capture does not record " + " nor ".join(missing) + "; give --device or --peak-tflops"


def _from_info(ctx: Context) -> tuple[Measured | None, Measured | None]:
    """CANN info.json's ai_core_num and aic_frequency, as the ranks' RankInfo holds them."""
    cores = clock = None
    for rd in ctx.capture.ranks:
        i = rd.info
        if i.ai_core_num and cores is None:
            cores = Measured(float(i.ai_core_num), "ai_core_num of CANN info.json")
        if i.aic_frequency_mhz and clock is None:
            clock = Measured(float(i.aic_frequency_mhz), "aic_frequency of CANN info.json")
    return cores, clock


#: The kernel columns the clock and the core count read (_pmu_clocks, _core_count): no other column is copied.
_CUBE_COLUMNS = ["type", "block_dim", "aic_total_cycles", "aicore_time_us"]


def _cube_kernels(k: pd.DataFrame) -> pd.DataFrame:
    """Kernels that ran on the cube: AI_CORE / MIX_AIC with a Block Dim, less those whose PMU counted no cube cycles
    (their :data:`_CUBE_COLUMNS`)."""
    on_cube = k["core"].isin(CUBE_CORE_KINDS).fillna(False).to_numpy() & (k["block_dim"] > 0).fillna(False).to_numpy()
    no_cube_cycles = (k["aic_total_cycles"] <= 0).fillna(False).to_numpy()  # null: not recorded, kept
    return k.loc[on_cube & ~no_cube_cycles, _CUBE_COLUMNS]


def _pmu_clocks(cube: pd.DataFrame) -> pd.Series:
    """Each cube kernel's clock in MHz from its PMU: cycles over all blocks / busy time (us) / blocks."""
    ok = (cube["aic_total_cycles"] > 0).fillna(False).to_numpy() & (cube["aicore_time_us"] > 0).fillna(False).to_numpy()
    c = cube[ok]
    return (c["aic_total_cycles"] / c["aicore_time_us"] / c["block_dim"]).astype(float)


def _from_kernels(ctx: Context) -> tuple[Measured | None, Measured | None]:
    """The cube core count (largest cube Block Dim) and the PMU clock (median over cube kernels)."""
    cube = _cube_kernels(ctx.capture.table("kernels"))
    clocks = _pmu_clocks(cube)
    clock = None
    if len(clocks):
        med = float(np.median(clocks))
        clock = Measured(round(med), f"PMU: aic_total_cycles / aicore_time / Block Dim, median of {len(clocks)} cube kernels")
        # a row whose PMU columns disagree with the clock is damaged (a shifted CSV row): not a core count
        pmu = cube["aic_total_cycles"] / cube["aicore_time_us"] / cube["block_dim"]
        bad = (pmu.notna() & ((pmu - med).abs() > PMU_CLOCK_SPREAD * med)).to_numpy()
        cube = cube[~bad]
    return _core_count(cube), clock


def _core_count(cube: pd.DataFrame) -> Measured | None:
    """The largest Block Dim at least MIN_LAUNCH_SHARE of the cube kernels carry (cube op types only, when any)."""
    ops = cube["type"].astype("string").str.contains(CUBE_OP_TYPE, na=False).to_numpy()
    pool = cube[ops] if ops.any() else cube
    counts = pool["block_dim"].dropna().astype("int64").value_counts()
    common = counts[counts >= MIN_LAUNCH_SHARE * counts.sum()]
    if not len(common):
        return None
    how = "largest cube Block Dim" if ops.any() else "largest Block Dim of AI_CORE kernels, no matmul among them"
    return Measured(float(common.index.max()), how)


def _from_counter(ctx: Context) -> Measured | None:
    """The highest sample of the AI Core Freq counter (MHz) over the ranks."""
    c = ctx.capture.table("counters")
    v = c.loc[(c["track"] == AICORE_FREQ_TRACK).fillna(False).to_numpy(), "value"]
    v = v[v > 0]
    return Measured(float(v.max()), "AI Core Freq") if len(v) else None


def _recorded_name(ctx: Context) -> str | None:
    names = sorted({rd.info.device_name for rd in ctx.capture.ranks if rd.info.device_name})
    return names[0] if len(names) == 1 else None


def infer(ctx: Context) -> ChipGuess:
    """The chip the capture ran on, from its own files (cached in the context: several metrics ask)."""
    cached = ctx.cache.get("chip")
    if isinstance(cached, ChipGuess):
        return cached
    cores, clock = _from_info(ctx)
    k_cores, k_clock = _from_kernels(ctx)
    cores = cores or k_cores
    clock = clock or _from_counter(ctx) or k_clock
    name = _recorded_name(ctx)
    fitting = devices.chips_fitting(None if cores is None else int(cores.value), None if clock is None else clock.value, name)
    if cores is None and clock is None and name is None:
        fitting = []
    k = ctx.capture.table("kernels")
    host_only = bool(len(k)) and bool((k["core"] == "CPU").fillna(False).all())
    guess = ChipGuess(cores, clock, name, tuple(fitting), host_only)
    ctx.cache["chip"] = guess
    return guess


def inferred_peak(ctx: Context) -> tuple[float | None, str]:
    """The peak the capture gives (cores x clock), with its source, or None and why not."""
    g = infer(ctx)
    peak = g.peak_tflops
    return (peak, g.peak_source()) if peak is not None else (None, g.why_no_peak())


def inferred_memory_gb(ctx: Context) -> tuple[float | None, str]:
    """The device memory the capture recorded (msdiag capture), else that of the chips that fit when they
    agree (with the chips); else None and why."""
    recorded = sorted({rd.info.device_memory_gb for rd in ctx.capture.ranks if rd.info.device_memory_gb})
    if recorded:
        return recorded[-1], "MindSpore's device properties recorded by msdiag capture"
    g = infer(ctx)
    if not g.fitting:
        return None, "the capture does not say which chip it ran on"
    sizes = {c.name: devices.device_memory_gb(c.name)[0] for c in g.fitting}
    known = {v for v in sizes.values() if v is not None}
    if len(known) != 1 or None in sizes.values():
        listed = ", ".join(f"{n} {'?' if v is None else f'{v:g}'} GB" for n, v in sizes.items())
        return None, f"the chips that fit differ in memory ({listed}): give --device-memory-gb"
    return known.pop(), f"the memory of {g.name()} (msdiag's device table)"


@metric("device_name", "text", "The chip the capture ran on (the chips that fit its cores and clock, 'A or B' when several)", "cube cores and clock of the capture, devices.CHIPS, NPU_INFO", reads=READS)
def _device_name(ctx: Context) -> Value:
    if ctx.options.device:
        return Value(devices.device_key(ctx.options.device))
    g = infer(ctx)
    name = g.name()
    if name is None:
        if g.cores is None and g.clock is None:
            return Value(None, reason=g.why_no_peak())
        return Value(None, reason="no chip of msdiag's device table has the cube cores and clock the capture records")
    return Value(name)


@metric("ai_cores", "cores", "Cube (AI Core) units per device, as the capture records them", "CANN info.json ai_core_num, else the largest cube Block Dim", reads=READS)
def _ai_cores(ctx: Context) -> Value:
    g = infer(ctx)
    return Value(None, reason=g.why_no_peak()) if g.cores is None else Value(int(g.cores.value))


@metric("vector_cores", "cores", "Vector (AI Vector Core) units per device, of the chips that fit", "devices.CHIPS (2 per cube core on 910B-class chips)", reads=READS)
def _vector_cores(ctx: Context) -> Value:
    g = infer(ctx)
    counts = {c.vector_cores for c in g.fitting}
    if len(counts) != 1:
        return Value(None, reason="the capture does not say which chip it ran on" if not counts else "the chips that fit differ")
    return Value(counts.pop())


@metric("aicore_clock_mhz", "MHz", "Nominal AI Core clock of the device", "CANN info.json aic_frequency, else the AI Core Freq counter's highest sample, else PMU cycles", reads=READS)
def _aicore_clock(ctx: Context) -> Value:
    g = infer(ctx)
    return Value(None, reason=g.why_no_peak()) if g.clock is None else Value(g.clock.value)
