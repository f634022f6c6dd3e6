"""Readers of the CANN summaries copied into ``ASCEND_PROFILER_OUTPUT/``: ``l2_cache.csv`` (L2 hits
per device task, written with ``l2_cache=True``) and ``api_statistic.csv`` (host time per CANN API,
profiler Level1 and above).

Headers (CANN's field descriptions, checked against the corpus files):

- ``l2_cache.csv``: ``[Device_id,]Stream Id,Task Id,Hit Rate,Victim Rate,Op Name``. On Atlas A2 / A3
  the Hit Rate is N/A: CANN collects it with ``aic_metrics`` L2Cache into the kernel table instead.
- ``api_statistic.csv``: ``[Device_id,]Level,API Name,Time(us),Count,Avg(us),Min(us),Max(us),Variance``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from msdiag import model
from msdiag.ingest._csv import Cells
from msdiag.ingest.ascend_csv import Column, RankOf, _floats, _ints, _present, _rank_of, _read, _strs, read_many

L2_CACHE_REQUIRED = ("Op Name", "Victim Rate")
API_STATISTIC_REQUIRED = ("Level", "API Name", "Time(us)", "Count")


def read_l2_cache(path: Path, rank: int) -> pd.DataFrame:
    """l2_cache.csv -> model.L2_CACHE (rates as the file writes them, 0..1; N/A -> null)."""
    return _l2_cache(_read(path, required=L2_CACHE_REQUIRED), path, _rank_of(rank), [])


def read_l2_cache_many(paths: list[Path], ranks: list[int]) -> list[pd.DataFrame] | None:
    """:func:`read_l2_cache` of several files at once (ascend_csv.read_many)."""
    return read_many(paths, ranks, _l2_cache, required=L2_CACHE_REQUIRED)


def _l2_cache(df: Cells, path: Path, rank_of: RankOf, notes: list[str]) -> pd.DataFrame:
    cols: dict[str, Column | None] = {
        "rank": rank_of(len(df)),
        "stream": _ints(df, path, ("Stream Id", "Stream ID")),
        "task_id": _ints(df, path, ("Task Id", "Task ID")),
        "name": _strs(df, ("Op Name",)),
        "hit_rate": _floats(df, path, ("Hit Rate",)),
        "victim_rate": _floats(df, path, ("Victim Rate",)),
    }
    return model.L2_CACHE.frame(_present(cols))


def read_api_statistic(path: Path, rank: int) -> pd.DataFrame:
    """api_statistic.csv -> model.API_STATS, one row per (level, API)."""
    return _api_statistic(_read(path, required=API_STATISTIC_REQUIRED), path, _rank_of(rank), [])


def read_api_statistic_many(paths: list[Path], ranks: list[int]) -> list[pd.DataFrame] | None:
    """:func:`read_api_statistic` of several files at once (ascend_csv.read_many)."""
    return read_many(paths, ranks, _api_statistic, required=API_STATISTIC_REQUIRED)


def _api_statistic(df: Cells, path: Path, rank_of: RankOf, notes: list[str]) -> pd.DataFrame:
    cols: dict[str, Column | None] = {
        "rank": rank_of(len(df)),
        "level": _strs(df, ("Level",)),
        "api": _strs(df, ("API Name",)),
        "total_us": _floats(df, path, ("Time(us)",)),
        "count": _ints(df, path, ("Count",)),
        "avg_us": _floats(df, path, ("Avg(us)",)),
        "max_us": _floats(df, path, ("Max(us)",)),
    }
    return model.API_STATS.frame(_present(cols))
