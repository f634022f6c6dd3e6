"""MindData pipeline profiling: on before the pipeline launches, started at the warm-up, saved with the trace.

MindData registers a pipeline with its profiler only when profiling is on at the pipeline's
launch, so :meth:`MindDataProfiling.init` runs from ``Iterator.__init__``. Sampling starts at the
first warm-up step (more queue samples, none of the skipped steps). When the trace is ready, the
raw files go into ``FRAMEWORK/`` and MindSpore's own MindData parser writes
``ASCEND_PROFILER_OUTPUT/minddata_pipeline_raw_<rank>.csv`` and ``minddata_pipeline_summary_<rank>.json``.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any, List, Optional, Tuple

from .journal import Journal
from .settings import Settings

_RANK_FILES = ("minddata_pipeline_raw_{}.csv", "minddata_pipeline_summary_{}.json", "minddata_pipeline_summary_{}.csv")


class MindDataProfiling:
    """MindData's profiling manager for one process: off, on (initialised), started, saved."""

    def __init__(self, settings: Settings, journal: Journal):
        self.enabled = settings.minddata
        self.interval_ms = settings.md_interval_ms
        self.journal = journal
        self.md: Any = None  # MindData's profiling manager, once initialised (None again once saved)
        self.started = False
        self.sampling_ms: Optional[int] = None

    def wanted(self) -> bool:
        """Whether a pipeline launching now should be profiled (on, and not initialised yet)."""
        return self.enabled and self.md is None

    @property
    def active(self) -> bool:
        return self.md is not None

    def init(self) -> None:
        """Before the first pipeline launches (MindData registers a pipeline only when profiling is on)."""
        import mindspore.dataset as ds
        from mindspore._c_dataengine import GlobalContext

        if self.interval_ms:
            ds.config.set_monitor_sampling_interval(int(self.interval_ms))
        interval = ds.config.get_monitor_sampling_interval()
        self.sampling_ms = int(interval)
        md = GlobalContext.profiling_manager()
        md.init()
        self.md = md
        self.journal.log(f"MindData pipeline profiling on (queues sampled every {interval} ms)")

    def start(self) -> None:
        """Start sampling (once); a failure is a problem, the capture goes on without MindData."""
        if self.md is not None and not self.started:
            self.started = True
            try:
                self.md.start()
            except Exception as e:  # noqa: BLE001
                self.journal.problem("MindData pipeline profiling could not start", e)
                self.md = None

    def save(self, ctx: Any, rank: int) -> None:
        """Stop MindData profiling, save its raw files into FRAMEWORK/ and parse them with MindSpore's parser."""
        md, self.md = self.md, None
        md.stop()
        fw = ctx.framework_path
        md.save(fw)
        raw = sorted(glob.glob(os.path.join(fw, "pipeline_profiling_*.json")))
        if not raw:
            self.journal.notes.append("MindData profiling saved no pipeline file (no dataset pipeline ran in the window?)")
            return
        dev = os.path.basename(raw[0])[len("pipeline_profiling_") : -len(".json")]
        out = ctx.ascend_profiler_output_path
        _parse(ctx, dev, out)
        if dev != str(rank):  # name the files by rank, as the rank folder's other files are
            for name in _RANK_FILES:
                src = os.path.join(out, name.format(dev))
                if os.path.exists(src):
                    os.replace(src, os.path.join(out, name.format(rank)))
        if not os.path.exists(os.path.join(out, f"minddata_pipeline_raw_{rank}.csv")):
            self.journal.notes.append("MindSpore's MindData parser wrote no minddata_pipeline_raw file")
        self._fix_per_batch_time(os.path.join(fw, f"dataset_iterator_profiling_{dev}.txt"), out, rank)

    def _fix_per_batch_time(self, iterator_file: str, out: str, rank: int) -> None:
        """Recompute the summary's per_batch_time when the window starts after the first batch.

        MindSpore's summary viewer averages the intervals between the iterator's batch records
        (ms timestamps), skipping batch 1; in a window that starts at batch N > 1 nothing is skipped
        and the first interval is counted from 0, which makes the average meaningless. Here the
        first record of the window takes batch 1's place.
        """
        summary = os.path.join(out, f"minddata_pipeline_summary_{rank}.json")
        if not (os.path.exists(iterator_file) and os.path.exists(summary)):
            return
        stamps = _batch_stamps(iterator_file)
        if not stamps or stamps[0][0] < 2:
            return  # MindSpore's own computation is right
        gaps = [b[1] - a[1] for a, b in zip(stamps, stamps[1:])]
        value = round(sum(gaps) / len(gaps), 3) if gaps else -1
        old = _rewrite_per_batch_time(summary, value)
        self.journal.notes.append(
            f"minddata_pipeline_summary per_batch_time recomputed over the window's batches ({old} -> [{value}] ms): "
            "MindSpore's parser counts the first interval from 0 when profiling starts after batch 1"
        )


def _parse(ctx: Any, dev: str, out: str) -> None:
    """MindSpore's MindData parser and its two viewers over the raw files of device ``dev``."""
    from mindspore.profiler.analysis.parser.ms_minddata_parser import MindDataParser
    from mindspore.profiler.analysis.viewer.ms_minddata_viewer import (
        MindDataPipelineRawViewer,
        MindDataPiplineSummaryViewer,
    )

    kwargs = ctx.to_dict()
    kwargs["device_id"] = dev
    kwargs["rank_id"] = dev
    os.makedirs(out, exist_ok=True)
    parser = MindDataParser(**kwargs)
    parser.register_post_hook(MindDataPipelineRawViewer(**kwargs).save)
    parser.register_post_hook(MindDataPiplineSummaryViewer(**kwargs).save)
    parser.parse({})


def _batch_stamps(iterator_file: str) -> List[Tuple[int, int]]:
    """(batch number, ms timestamp) of each batch that left the pipeline (record type 1)."""
    stamps = []
    with open(iterator_file, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and parts[0] == "1":
                stamps.append((int(parts[2]), int(parts[4])))
    return stamps


def _rewrite_per_batch_time(summary: str, value: float) -> Any:
    """Set per_batch_time in the summary JSON (and its CSV twin); the old value is returned."""
    with open(summary, encoding="utf-8") as f:
        doc = json.load(f)
    old = doc.get("per_batch_time")
    doc["per_batch_time"] = [value]
    with open(summary, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    csv_path = summary[: -len(".json")] + ".csv"
    if os.path.exists(csv_path):
        with open(csv_path, encoding="utf-8") as f:
            lines = f.readlines()
        lines = [f"per_batch_time,{value}\n" if ln.startswith("per_batch_time,") else ln for ln in lines]
        with open(csv_path, "w", encoding="utf-8") as f:
            f.writelines(lines)
    return old
