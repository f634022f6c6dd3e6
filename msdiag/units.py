"""Units, defined once. Every conversion factor msdiag uses lives here, named by what it converts.

The profilers mean two different things by "MB": the Ascend memory files (memory_record.csv,
npu_module_mem.csv, operator_memory.csv and their SQLite tables) write binary MB (MiB, 2^20 bytes),
while MindSpore's legacy hccl_raw sizes are decimal (bytes / 1e3 per KB in MindSpore's parsers).
The names say which: ``MIB`` / ``KIB`` are binary, ``MB_DECIMAL`` / ``KB_DECIMAL`` decimal.
Canonical memory tables hold MiB in their ``_mb`` columns; ``_kb`` columns hold KiB.
"""

from __future__ import annotations

# time
NS_PER_US = 1000
US_PER_MS = 1000.0
MS_PER_S = 1000.0
US_PER_S = 1e6

# memory: binary (what the Ascend profiler's "MB"/"KB" mean)
BYTES_PER_KIB = 1024.0
BYTES_PER_MIB = float(1 << 20)
KIB_PER_MIB = 1024.0
MIB_PER_GIB = 1024.0  # device capacities are GiB (HBM sizes are binary)

# memory and transfer sizes: decimal (legacy hccl_raw)
BYTES_PER_KB_DECIMAL = 1e3
BYTES_PER_MB_DECIMAL = 1e6
MB_PER_KB_DECIMAL = 1e-3

# compute
HZ_PER_MHZ = 1e6
FLOPS_PER_TFLOPS = 1e12
