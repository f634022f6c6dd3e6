"""Reading each rank only as deep as the answer needs (--deep; ingest/loader.load_rank_shallow,
metrics/reduce.reduce_rank_shallow, metrics/depth.py).

- a rank read shallow whose kernel_details.csv carries its steps and communication leaves trace_view.json
  unparsed (listed as skipped): every other table is the full read's, its step rows the full read's less the
  host columns (preparing, data wait), and it has no host side at all;
- the shallow reduction of a real rank is the full read reduced less the Python frame rows beyond the first
  of each name (expected rows derived from the full reader's output);
- the JSON report with ``--deep auto`` (threshold forced to 0: ranks really read shallow) equals the one
  with ``--deep all`` for every metric, finding and the verdict, on the corpus clusters and on
  bench/cluster.py's replicated job;
- a rank read shallow has no host side (no activities, no call sites, never sites guessed from first-of-name
  frames); the host-side figures rest on the ranks read deep; a rank without repeated frames is whole;
- --deep all parses every rank: a damaged trace_view.json of an unchosen rank leaves that rank out there,
  while --deep auto, which does not parse it, analyses it from its summary files and lists the file as skipped;
- the depth is part of the cache key: a warm run reads only the cache.
"""

from __future__ import annotations

import contextlib
import csv
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from msdiag.analysis import _steps_for, analyze
from msdiag.cli import _check_strict, main
from msdiag.config import ConfigError, load_config
from msdiag.contract import build
from msdiag.errors import InputError
from msdiag.ingest.discover import discover
from msdiag.ingest.engine import RankDir, skips_when_shallow
from msdiag.ingest.formats import BY_NAME
from msdiag.ingest.loader import Tiered, load, load_rank, load_rank_shallow
from msdiag.metrics.causes import FRAME_PATTERN, rank_activity
from msdiag.metrics.reduce import plan, reduce_rank, reduce_rank_shallow, shallow_plan
from msdiag.metrics.registry import Context
from msdiag.model import RankData
from msdiag.options import Options
from msdiag.report.text import read_depth_line

#: Multi-rank corpus captures of the Ascend text format (p2p-2024 has no trace_view.json: read deep whatever asked).
TEXT_CLUSTERS = ("ascend/torchnpu-2rank-level0", "ascend/torchnpu-2rank-level1", "ascend/torchnpu-2rank-p2p-2024")


def _report(path: Path, deep: str, up_to: int, **kw: Any) -> dict[str, Any]:
    """The JSON report object (through JSON, as the CLI prints it) with ``--deep deep``."""
    return json.loads(json.dumps(build(analyze(path, Options(deep=deep, deep_all_up_to=up_to, **kw))), ensure_ascii=False))


def _answer(report: dict[str, Any]) -> dict[str, Any]:
    """The report less what describes the read itself (read_depth)."""
    return {k: v for k, v in report.items() if k != "read_depth"}


def _frames_beyond_first(tl: pd.DataFrame) -> pd.Series:
    """Host rows that are Python frames (and nothing the shallow plan reads by pattern) and not the first
    row of their name: what a shallow read leaves out of the reduced timeline."""
    names = tl["name"].astype("string")
    host = (tl["lane"] == "host").fillna(False).to_numpy(bool)
    frame = names.str.contains(FRAME_PATTERN, regex=True, na=False).to_numpy(bool)
    # each pattern on its own (a leading (?i) cannot be joined into one expression under Python's re, pandas 2's)
    named = np.zeros(len(tl), dtype=bool)
    for lane, pat in shallow_plan().lane_rows:
        if lane == "host":
            named |= names.str.contains(pat, regex=True, na=False).to_numpy(bool)
    later = tl["name"].where(pd.Series(host, index=tl.index)).duplicated(keep="first").to_numpy(bool) & host
    return pd.Series(frame & ~named & later, index=tl.index)


#: Corpus clusters whose traces hold Python frames (with_stack) and whose kernel_details.csv has Step Id and HCCL tasks.
WITH_FRAMES = ("ascend/torchnpu-2rank-level0", "ascend/torchnpu-2rank-level1")


def _both(corpus: Path, capture: str, loader: Callable[[RankDir], RankData]) -> Iterator[tuple[RankDir, RankData, RankData]]:
    """Each rank of a capture read in full and reduced, and read by ``loader`` and reduced shallow."""
    for d in discover(corpus / capture).ranks:
        yield d, reduce_rank(load_rank(d)), reduce_rank_shallow(loader(d))


@pytest.mark.parametrize("capture", WITH_FRAMES)
def test_shallow_rank_is_the_full_rank_less_frames(corpus: Path, capture: str) -> None:
    # Each rank read in full and reduced gives the expected tables: its timeline less the Python frame rows
    # ("file.py(N): fn" host events) beyond the first of each name, every other table, the rank's info (but
    # read_depth) and its sources (the same row counts: the full read's) unchanged.
    for _, deep, shallow in _both(corpus, capture, load_rank):
        assert shallow.info.read_depth == "shallow" and deep.info.read_depth is None
        tl = deep.tables["timeline"]
        drop = _frames_beyond_first(tl)
        assert drop.sum() > 100  # these traces hold Python frames repeated over steps (with_stack)
        expected = tl[~drop.to_numpy(bool)].reset_index(drop=True)
        pd.testing.assert_frame_equal(shallow.tables["timeline"], expected)
        assert set(shallow.tables) == set(deep.tables)
        for name in deep.tables:
            if name != "timeline":
                pd.testing.assert_frame_equal(shallow.tables[name], deep.tables[name], obj=name)
        assert replace(shallow.info, read_depth=None) == deep.info
        assert shallow.sources == deep.sources and shallow.meta == deep.meta and shallow.notes == deep.notes


def test_shallow_plan_leaves_out_only_the_frames() -> None:
    # the shallow plan is the reduction's plan less the rows read on deep ranks only: the frame pattern
    full, shallow = plan(), shallow_plan()
    assert ("host", FRAME_PATTERN) in full.lane_rows and full.deep_rows == (("host", FRAME_PATTERN),)
    assert set(full.lane_rows) - set(shallow.lane_rows) == {("host", FRAME_PATTERN)}
    assert replace(shallow, lane_rows=full.lane_rows) == full


@pytest.mark.parametrize("capture", [TEXT_CLUSTERS[1], *(pytest.param(c, marks=pytest.mark.slow) for c in TEXT_CLUSTERS[::2])])
def test_tiered_answer_is_the_full_answer_on_corpus_clusters(corpus: Path, capture: str, rank_cache: str) -> None:
    # threshold 0: every rank is read shallow first, then the chosen ones deep (here both ranks are chosen:
    # the slowest and the fastest); the report equals --deep all but for read_depth. Both read through the
    # session's rank cache (tests/conftest.py): shallow and deep entries are apart (the depth is part of the key),
    # so the ranks are parsed shallow once and deep once, not deep twice
    auto = _report(corpus / capture, "auto", 0, jobs=1, cache=rank_cache)
    full = _report(corpus / capture, "all", 0, jobs=1, cache=rank_cache)
    assert _answer(auto) == _answer(full)
    assert auto["read_depth"]["mode"] == "auto" and full["read_depth"]["mode"] == "all"
    assert auto["read_depth"]["why"] == full["read_depth"]["why"]  # the same choice at either depth
    assert auto["read_depth"]["deep"] == full["read_depth"]["deep"] == [0, 1]


def test_small_jobs_are_read_deep_whole(analysed_json: Any) -> None:
    # up to Options.deep_all_up_to (8) ranks: every rank in full, nothing chosen, nothing to say in the text
    rd = analysed_json("level1")["read_depth"]
    assert rd == {"mode": "auto", "deep": [0, 1], "why": {}, "shallow": 0, "summary": 0}
    assert read_depth_line(analysed_json("level1")) is None


def test_summary_rank_has_no_host_side(corpus: Path) -> None:
    # level1 rank 0's host syncs resolve to call sites when read in full; read shallow (nothing chosen deep)
    # its trace_view.json is not parsed: no host activity at all, measured or guessed
    path = corpus / "ascend/torchnpu-2rank-level1"

    def acts(select: dict[int, list[str]]) -> pd.DataFrame:
        cap = load(path, jobs=1, reduce=reduce_rank, tiered=Tiered("auto", 0, reduce_rank_shallow, lambda ranks: select))
        steps = _steps_for(cap)[0]
        return rank_activity(Context(capture=cap, steps=steps, options=Options(jobs=1)), 0)

    deep, shallow = acts({0: ["test"]}), acts({})
    assert deep["site"].notna().sum() > 0 and (deep["cause"] == "host-sync").sum() > 0
    assert len(shallow) == 0


def test_summary_rank_stores_no_step_kinds_and_the_projection_computes_them(corpus: Path) -> None:
    # A rank read without its trace keeps no step_kinds table (the projection leaves its steps out while a rank read
    # deep is there). Where none is (nothing chosen deep here; in a job, every chosen rank's trace damaged), the
    # projection computes each rank's windows and kinds from its rows: what rank_kinds would have stored.
    from msdiag.metrics.causes import _Names
    from msdiag.metrics.projection import _from_table, _measured, rank_kinds, step_sets
    from msdiag.model import STEP_KINDS_TABLE

    path = corpus / "ascend/torchnpu-2rank-level1"
    cap = load(path, jobs=1, reduce=reduce_rank, tiered=Tiered("auto", 0, reduce_rank_shallow, lambda ranks: {}))
    assert [rd.info.read_depth for rd in cap.ranks] == ["summary", "summary"]
    assert all(STEP_KINDS_TABLE.name not in rd.tables for rd in cap.ranks)
    ctx = Context(capture=cap, steps=_steps_for(cap)[0], options=Options(jobs=1))
    sets = step_sets(ctx)
    assert {s.rank for s in sets} == {0, 1} and all(s.source == "timeline" for s in sets)
    for rd in cap.ranks:
        got, stored = _measured(ctx, rd, _Names()), _from_table(rank_kinds(rd))
        assert got.keys() == stored.keys() and len(got) >= 1
        for step, kinds in got.items():
            assert kinds.keys() == stored[step].keys()
            for kind, (lo, hi) in kinds.items():
                np.testing.assert_array_equal(lo, stored[step][kind][0], err_msg=f"rank {rd.rank} step {step} {kind}")
                np.testing.assert_array_equal(hi, stored[step][kind][1], err_msg=f"rank {rd.rank} step {step} {kind}")


@pytest.mark.parametrize("capture", WITH_FRAMES)
def test_summary_rank_is_the_full_rank_without_its_trace(corpus: Path, capture: str) -> None:
    # Read shallow, a rank whose kernel_details.csv has Step Id and HCCL tasks leaves trace_view.json unparsed.
    # Expected, from the full read: the tables trace_view.json alone gives (timeline, counters) absent; every
    # other table the same; the step rows the same but preparing (host marker to first task) and data wait
    # (host dataset events), which only the host side gives, null; trace_view.json listed as skipped.
    for d, full, short in _both(corpus, capture, load_rank_shallow):
        assert short.info.read_depth == "summary" and full.info.read_depth is None
        assert len(full.tables["timeline"]) > 1000 and len(short.table("timeline")) == 0
        assert len(short.table("counters")) == 0
        for name in set(full.tables) - {"timeline", "counters", "steps", "step_kinds"}:
            pd.testing.assert_frame_equal(short.tables[name], full.tables[name], obj=name)
        host = ["preparing_us", "data_wait_us"]
        pd.testing.assert_frame_equal(short.tables["steps"].drop(columns=host), full.tables["steps"].drop(columns=host))
        assert short.tables["steps"][host].isna().all().all() and full.tables["steps"]["preparing_us"].notna().any()
        status = {s.name: s.status for s in short.sources}
        assert status["trace_view.json"] == "skipped"
        assert {n: st for n, st in status.items() if n != "trace_view.json"} == {
            s.name: s.status for s in full.sources if s.name != "trace_view.json"}
        # a rank's device side read from kernel_details.csv: nothing a shallow read skips on a format without it
        assert skips_when_shallow(BY_NAME[d.format], full)


@pytest.mark.parametrize("capture", ["mindspore-cpu/msrun_dp2_pynative", "ascend/torchnpu-2rank-p2p-2024"])
def test_rank_whose_trace_gives_its_device_side_is_read_whole(corpus: Path, capture: str) -> None:
    # MindSpore on CPU: the host ops come from trace_view.json itself; p2p-2024 has no trace_view.json. Read
    # shallow, nothing is skipped: the rank is the full read
    for d in discover(corpus / capture).ranks:
        short, full = load_rank_shallow(d), load_rank(d)
        assert short.info.read_depth is None and not skips_when_shallow(BY_NAME[d.format], full)
        assert [s.status for s in short.sources] == [s.status for s in full.sources]
        assert set(short.tables) == set(full.tables)


def test_rank_without_repeated_frames_is_whole(corpus: Path) -> None:
    # the p2p-2024 ranks have no trace_view.json, hence no Python frames: the shallow reduction drops nothing
    for d in discover(corpus / "ascend/torchnpu-2rank-p2p-2024").ranks:
        assert reduce_rank_shallow(load_rank(d)).info.read_depth is None


def test_deep_option_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="deep should be one of auto, all"):
        Options(deep="some")
    with pytest.raises(ValueError, match="deep_all_up_to"):
        Options(deep_all_up_to=-1)
    # the config key as --deep: checked, naming the file and line
    f = tmp_path / "msdiag.toml"
    f.write_text('deep = "all"\n')
    assert load_config(f).values["deep"] == "all"
    f.write_text('device = "910B2"\ndeep = "some"\n')
    with pytest.raises(ConfigError, match=":2: .*should be one of 'auto', 'all', found 'some'"):
        load_config(f)
    # the flag: a usage error, exit 2, before anything is read
    r = CliRunner().invoke(main, ["analyze", str(tmp_path), "--deep", "some"])
    assert r.exit_code == 2 and "'some' is not one of 'auto', 'all'" in r.stderr


@pytest.mark.slow
def test_tiered_answer_is_the_full_answer_on_a_replicated_cluster(corpus: Path, job8: Path, tmp_path: Path) -> None:
    # bench/cluster.py's 8-rank job (rank 5's compute planted 3x slower), threshold 0: rank 5 is read deep as
    # the late arriver the others wait for (their steps last as long as its: the step time does not single
    # it out), the other unchosen ranks are read without their trace, and the answer is --deep all's
    cache = tmp_path / "cache"
    auto = _report(job8, "auto", 0, jobs=2, cache=str(cache))
    full = _report(job8, "all", 0, jobs=2)
    assert _answer(auto) == _answer(full)
    rd = auto["read_depth"]
    assert rd["shallow"] >= 1 and rd["shallow"] + len(rd["deep"]) == 8 and rd["summary"] == rd["shallow"]
    assert full["read_depth"]["why"] == rd["why"] and full["read_depth"]["summary"] == rd["summary"]
    assert rd["why"]["5"][:2] == ["late arriver (collectives)", "slow rank (late-arrival votes)"] and 5 in rd["deep"]
    assert auto["metrics"]["slow_rank"] == 5
    # its ranks are alike but for jitter: no rank's device idle or Preparing stands out, none is chosen for it
    assert not any(w.startswith(("most device idle", "longest preparing")) for v in rd["why"].values() for w in v)
    # the host-side figures rest on the ranks read deep: data wait share = their data waits over their step time
    # (timed steps, warm-up left out), summed from the report's own step rows; the others' data waits are unknown
    deep = [s for s in auto["steps"] if s["rank"] in rd["deep"] and s["total_us"] and not s.get("warmup")]
    waits = sum(s["data_wait_us"] or 0.0 for s in deep) / sum(s["total_us"] for s in deep)
    assert waits > 0 and auto["metrics"]["data_wait_share"] == pytest.approx(waits, rel=1e-12)
    assert all(s["data_wait_us"] is None and s["preparing_us"] is None for s in auto["steps"] if s["rank"] not in rd["deep"])
    line = read_depth_line(auto)
    assert line is not None and line.startswith(f"read deep: {len(rd['deep'])} of 8 ranks (") and "rank 5: late arriver" in line
    # warm: the same selection read from the cache alone (shallow and deep entries are apart)
    a = analyze(job8, Options(jobs=2, deep="auto", deep_all_up_to=0, cache=str(cache)))
    stats = a.capture.ingest["cache"]
    assert stats["misses"] == 0 and stats["hits"] == 8 + len(rd["deep"])
    assert _answer(json.loads(json.dumps(build(a), ensure_ascii=False))) == _answer(auto)


@pytest.mark.slow
def test_a_chosen_rank_with_a_damaged_trace_is_analysed_from_its_summary(job8: Path, tmp_path: Path) -> None:
    # rank 5, read deep as the late arriver, its trace_view.json cut short: --deep auto still analyses it from
    # its summary files (its trace failed, said in a note and the sources; --strict stops on it), where --deep
    # all, a full read, leaves it out
    job = tmp_path / "job8"
    shutil.copytree(job8, job)
    trace = next(job.glob("rank5_*/ASCEND_PROFILER_OUTPUT/trace_view.json"))
    trace.write_bytes(trace.read_bytes()[: trace.stat().st_size // 2])
    auto = _report(job, "auto", 0, jobs=2)
    assert len(auto["ranks"]) == 8 and not auto["ranks_left_out"] and auto["metrics"]["slow_rank"] == 5
    assert "5" in auto["read_depth"]["why"] and 5 not in auto["read_depth"]["deep"]
    failed = [s for s in auto["sources"] if s["rank"] == 5 and s["name"] == "trace_view.json"]
    assert [s["status"] for s in failed] == ["failed"] and failed[0]["reason"]
    assert any(n.startswith("rank 5 was chosen to be read deep, but ") and "trace_view.json" in n for n in auto["notes"])
    with pytest.raises(InputError, match=r"trace_view\.json of rank 5 failed: .*--strict"):
        _check_strict(analyze(job, Options(jobs=2, deep="auto", deep_all_up_to=0)))  # what --strict runs
    full = _report(job, "all", 0, jobs=2)
    assert [x["rank"] for x in full["ranks_left_out"]] == [5]


@pytest.mark.slow
def test_a_rank_preparing_longer_is_read_deep(job8: Path, tmp_path: Path) -> None:
    # an unchosen rank's step_trace_time.csv given 1.5x its Preparing (the host's time before each step's first
    # device task): it stands out over the others' median by more than STANDS_OUT, so it is read deep, chosen for
    # that, in both modes
    job = tmp_path / "job8"
    shutil.copytree(job8, job)
    before = _report(job, "auto", 0, jobs=2)
    rank = max(r for r in range(8) if str(r) not in before["read_depth"]["why"])
    f = next(job.glob(f"rank{rank}_*/ASCEND_PROFILER_OUTPUT/step_trace_time.csv"))
    with open(f, newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        r["Preparing"] = repr(1.5 * float(r["Preparing"]))
    with open(f, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    after = _report(job, "auto", 0, jobs=2)
    assert after["read_depth"]["why"][str(rank)] == ["longest preparing before the first device task (step_trace_time.csv)"]
    assert rank in after["read_depth"]["deep"]
    assert _report(job, "all", 0, jobs=2)["read_depth"]["why"] == after["read_depth"]["why"]


def test_a_host_signal_names_a_rank_only_when_it_stands_out() -> None:
    # depth._standing_out: the largest figure's rank (the lowest on ties) when it exceeds the ranks' median by more
    # than STANDS_OUT (5%); ranks alike, or a figure of 0, name none
    from msdiag.metrics.depth import STANDS_OUT, _standing_out

    assert STANDS_OUT == 0.05
    assert _standing_out(pd.Series({0: 100.0, 1: 100.0, 2: 106.0})) == 2  # 6% above the median 100
    assert _standing_out(pd.Series({0: 100.0, 1: 100.0, 2: 104.0})) is None  # 4%: jitter
    assert _standing_out(pd.Series({3: 200.0, 1: 200.0, 2: 10.0, 0: 10.0, 4: 10.0})) == 1  # ties: the lowest rank
    assert _standing_out(pd.Series({0: 0.0, 1: 0.0})) is None
    assert _standing_out(pd.Series(dtype=float)) is None


@pytest.mark.slow
def test_deep_all_parses_every_rank(job8: Path, tmp_path: Path) -> None:
    # one unchosen rank's trace_view.json cut short: --deep auto never parses it (analysed from its summary
    # files, the file listed as skipped); --deep all parses every rank and leaves that one out, as a full read does
    job = tmp_path / "job8"
    shutil.copytree(job8, job)
    auto = _report(job, "auto", 0, jobs=2)
    rank = next(r for r in range(8) if r not in auto["read_depth"]["deep"])
    trace = next(job.glob(f"rank{rank}_*/ASCEND_PROFILER_OUTPUT/trace_view.json"))
    trace.write_bytes(trace.read_bytes()[: trace.stat().st_size // 2])
    cut = _report(job, "auto", 0, jobs=2)
    assert _answer(cut) == _answer(auto) and len(cut["ranks"]) == 8
    assert [s["status"] for s in cut["sources"] if s["rank"] == rank and s["name"] == "trace_view.json"] == ["skipped"]
    full = _report(job, "all", 0, jobs=2)
    assert [x["rank"] for x in full["ranks_left_out"]] == [rank] and len(full["ranks"]) == 7
    assert full["ranks_left_out"][0]["file"].endswith("trace_view.json")


def test_the_reductions_patterns_join_as_one_expression_pythons_re_accepts() -> None:
    """The reduction matches a lane's distinct names against all its patterns at once. The causes' patterns
    start with a global flag ("(?i)^(?:gc|...)"): joined as they are, Python's re (pandas 2's string methods)
    refuses the expression ("global flags not at the start"), which stopped every Ascend capture under
    pandas 2.2. Each pattern's leading flags become its own group's, so the flag reaches no other pattern."""
    import re

    from msdiag.metrics.causes import ACTIVITY_PATTERNS
    from msdiag.metrics.reduce import _either

    joined = _either([ACTIVITY_PATTERNS["gc"], r"^ProfilerStep#\d+$"])
    assert joined == r"(?i:^(?:gc|garbage ?collect|PyGC))|(?:^ProfilerStep#\d+$)"
    rx = re.compile(joined)  # (the old join, "(?:(?i)^...)|(?:...)", raises re.error here)
    # case-insensitive for the gc pattern only: names written by hand
    assert rx.search("GC collect") and rx.search("garbage collect") and rx.search("ProfilerStep#3")
    assert not rx.search("profilerstep#3")
    names = pd.Series(["PyGC", "Garbage collect", "ProfilerStep#12", "profilerstep#12", "MatMul"], dtype="string")
    assert names.str.contains(joined, regex=True, na=False).tolist() == [True, True, True, False, False]


@pytest.mark.parametrize("mode", ["auto", "all"])
def test_the_first_pass_joined_while_the_second_reads_gives_the_same_capture(
    job8: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    # with a pool, the loader joins the first pass' ranks while the workers read the second (parallel.meanwhile),
    # and each rank read again takes the joined frame of every table it reads alike (loader._share_alike): the
    # capture is the one a load joining once at the end gives, every rank and table to the value and dtype
    from msdiag.ingest import loader, parallel
    from msdiag.metrics.reduce import reduce_id

    def select(ranks: list[RankData]) -> dict[int, list[str]]:
        return {2: ["chosen"], 5: ["chosen"]}

    def load_it() -> Any:
        return load(job8, jobs=2, reduce=reduce_rank, reduce_id=reduce_id(),
                    tiered=Tiered(mode, 0, reduce_rank_shallow, select))  # fmt: skip

    shared: dict[int, list[str]] = {}
    real = loader._share_alike

    def spy(again: RankData, first: RankData) -> None:
        before = dict(again.tables)
        real(again, first)
        shared[again.rank] = [n for n, df in again.tables.items() if df is not before[n]]
        assert all(again.tables[n] is first.tables[n] for n in shared[again.rank])

    monkeypatch.setattr(loader, "_share_alike", spy)
    early = load_it()
    again = [r for r in early.ranks if (r.rank in (2, 5)) == (mode == "auto")]
    assert sorted(shared) == sorted(r.rank for r in again)  # every rank read a second time took the joined frames
    for names in shared.values():
        # its device side is read alike both times; its step rows are not (preparing and data waits need the trace)
        assert {"kernels", "comm_ops", "comm_links", "memory", "profiler_steps"} <= set(names) and "steps" not in names
    monkeypatch.setattr(parallel, "meanwhile", lambda fn: contextlib.nullcontext())  # no join while reading
    shared.clear()
    late = load_it()
    assert not shared
    assert [r.rank for r in early.ranks] == [r.rank for r in late.ranks]
    for x, y in zip(early.ranks, late.ranks):
        assert (x.info, x.meta, x.sources, x.notes, list(x.tables)) == (y.info, y.meta, y.sources, y.notes, list(y.tables))
        for name in x.tables:
            pd.testing.assert_frame_equal(x.tables[name], y.tables[name], check_exact=True)
    for name in {n for r in early.ranks for n in r.tables}:
        pd.testing.assert_frame_equal(early.table(name), late.table(name), check_exact=True)
