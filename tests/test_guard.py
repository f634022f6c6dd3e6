"""Issue 20, the guard part, at the level of the code that guards: rule files (rules/loader.py), SQLite
databases (ingest/_sqlite.py), the rank cache (ingest/cache.py: trust, validation, paths) and the CLI's
exit codes (3 for an internal error, --strict). The bounded end-to-end cases are in test_hostile.py."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from hostile import mutators as m

from msdiag.cli import EXIT_INTERNAL, main
from msdiag.errors import ParseError, RuleError
from msdiag.ingest._sqlite import DbDamaged, open_db
from msdiag.ingest.cache import RankCache, read_entry_file
from msdiag.ingest.cachedir import untrusted
from msdiag.ingest.discover import discover
from msdiag.ingest.loader import load_rank
from msdiag.rules.loader import MAX_DEPTH, MAX_RULE_BYTES, parse_rule

L0 = ("ascend", "torchnpu-2rank-level0", "rank0_ascend_pt")
DB_RANK = ("ascend", "torchnpu-2rank-level1-db", "rank0_ascend_pt")
DB_FILE = "ascend_pytorch_profiler_0.db"
APO = "ASCEND_PROFILER_OUTPUT"


# ---- rule files --------------------------------------------------------------------------------------------

def _rule(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "r.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def test_rule_anchor_and_alias_refused_with_their_line(tmp_path: Path) -> None:
    # line 2 holds the anchor &p: refused there, before anything is built from it
    with pytest.raises(RuleError) as e:
        parse_rule(_rule(tmp_path, "id: x\nparams: &p\n  a: 1\nother: *p\n"), set())
    assert e.value.line == 2 and "aliases" in e.value.problem


def test_rule_nesting_bounded(tmp_path: Path) -> None:
    ok = "[" * MAX_DEPTH + "]" * MAX_DEPTH  # with the top mapping: MAX_DEPTH + 1 levels, one too many
    with pytest.raises(RuleError, match="nested more than"):
        parse_rule(_rule(tmp_path, "condition: " + ok + "\n"), set())
    # one level fewer passes the shape check and fails later, on the schema (no id)
    with pytest.raises(RuleError, match="missing required key"):
        parse_rule(_rule(tmp_path, "condition: " + ok[1:-1] + "\n"), set())


def test_rule_not_utf8_names_line_and_byte(tmp_path: Path, repo: Path) -> None:
    # comm-exposed.yaml's summary is on its line 5: a Latin-1 é (0xe9) written there is reported there
    data = (repo / "rules" / "comm-exposed.yaml").read_bytes()
    at = data.index(b"summary:") + len(b"summary:")
    p = tmp_path / "comm-exposed.yaml"
    p.write_bytes(data[:at] + b" caf\xe9" + data[at:])
    with pytest.raises(RuleError) as e:
        parse_rule(p, set())
    assert e.value.line == 5 and "0xe9" in e.value.problem and f"offset {at + 4}" in e.value.problem


def test_rule_file_not_regular_or_too_large(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(RuleError, match="not a regular file"):
        parse_rule(fifo, set())  # refused without blocking: opened non-blocking, checked with fstat
    big = _rule(tmp_path, "id: x\n" + "# filler\n" * (MAX_RULE_BYTES // 9 + 1))
    with pytest.raises(RuleError, match="larger than"):
        parse_rule(big, set())


# ---- SQLite: a database is data, never code ---------------------------------------------------------------

def _db_copy(corpus: Path, tmp_path: Path) -> Path:
    src = corpus.joinpath(*DB_RANK) / APO / DB_FILE
    dst = tmp_path / DB_FILE
    shutil.copyfile(src, dst)
    return dst


def test_views_are_not_tables_and_never_run(corpus: Path, tmp_path: Path) -> None:
    db = _db_copy(corpus, tmp_path)
    con = sqlite3.connect(db)
    con.execute("CREATE VIEW ENDLESS AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r")
    con.execute('CREATE VIEW "TASK_COPY" AS SELECT * FROM TASK')
    con.commit()
    con.close()
    with open_db(db) as d:
        assert "TASK" in d.tables and "ENDLESS" not in d.tables and sorted(d.not_tables) == ["ENDLESS", "TASK_COPY"]
        assert d.count("TASK") > 0  # msdiag's own query of a real table runs
        for sql in ("SELECT n FROM ENDLESS LIMIT 1", "SELECT COUNT(*) FROM TASK_COPY"):
            with pytest.raises(DbDamaged, match="never runs a database's own SQL"):
                d.query(sql)
        with pytest.raises(DbDamaged):  # a recursive query is refused at prepare time
            d.query("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r LIMIT 1")
        with pytest.raises(ParseError, match="TASK_COPY is a view"):
            d.require("TASK_COPY", "startNs")


# ---- the rank cache -----------------------------------------------------------------------------------------

def test_cache_folder_trust(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert untrusted(cache) is None  # absent: created private by msdiag
    cache.mkdir(mode=0o700)
    assert untrusted(cache) is None
    cache.chmod(0o777)
    assert "writable by others (mode 0777)" in str(untrusted(cache))
    cache.chmod(0o700)
    open_room = tmp_path / "shared"
    open_room.mkdir()
    open_room.chmod(0o777)  # anyone may rename a folder in it away and put another in its place
    assert "without the sticky bit" in str(untrusted(open_room / "cache"))
    open_room.chmod(0o1777)  # like /tmp
    assert untrusted(open_room / "cache") is None


def test_cache_paths_do_not_depend_on_the_working_folder(corpus: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Stored from one working folder with a relative rank path, read from another: the rank's path
    and every source path are this run's (what a cold run from there prints)."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    shutil.copytree(corpus.joinpath(*L0), work / "cap")
    elsewhere.mkdir()
    monkeypatch.chdir(work)
    d = discover("cap").ranks[0]
    rd = load_rank(d)
    cache = RankCache.open(tmp_path / "cache", "test")
    key = cache.key(d.rank, d.family, d.path, d.rank_from, d.captured_ns)
    assert cache.put(key, rd) is None
    header, _ = read_entry_file(cache.entry(key).read_bytes())
    stored = header["ranks"][0]["head"]
    assert "path" not in stored and all(s["path"] is None or not s["path"].startswith("cap") for s in stored["sources"])
    monkeypatch.chdir(elsewhere)
    d2 = discover("../work/cap").ranks[0]
    cold = load_rank(d2)
    warm = cache.get(cache.key(d2.rank, d2.family, d2.path, d2.rank_from, d2.captured_ns), path=d2.path)
    assert warm is not None and warm.path == cold.path == "../work/cap" and warm.sources == cold.sources


@pytest.mark.parametrize("edit", ["bool rank", "float in a source's rows", "table renamed", "path escapes"])
def test_cache_entry_validated_whole(corpus: Path, tmp_path: Path, edit: str) -> None:
    d = discover(corpus.joinpath(*L0)).ranks[0]
    cache = RankCache.open(tmp_path / "cache", "test")
    key = cache.key(d.rank, d.family, d.path, d.rank_from, d.captured_ns)
    assert cache.put(key, load_rank(d)) is None
    entry = cache.entry(key)
    header, tables = read_entry_file(entry.read_bytes())
    head = header["ranks"][0]["head"]
    if edit == "bool rank":
        head["rank"] = False  # == 0 in Python, still not a rank id
    elif edit == "float in a source's rows":
        next(s for s in head["sources"] if s["rows"] is not None)["rows"] = 1.5
    elif edit == "table renamed":
        head["tables"]["memory"], head["tables"]["kernels"] = head["tables"]["kernels"], head["tables"]["memory"]
    else:
        head["sources"][0]["path"] = "../../outside"
    m.write_entry_file(entry, header, tables)
    from msdiag.ingest.cache import CacheStats

    stats = CacheStats()
    assert cache.get(key, stats) is None and len(stats.ignored) == 1


# ---- the CLI: exit 3 for a bug, --strict -------------------------------------------------------------------

def test_internal_error_is_one_line_exit_3(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import msdiag.analysis as analysis

    def bug(*_: object, **__: object) -> None:
        raise KeyError("injected")

    monkeypatch.setattr(analysis, "compute_all", bug)  # where the analysis calls it: undone after the test
    r = CliRunner().invoke(main, ["analyze", "--no-cache", str(corpus.joinpath(*L0))])
    assert r.exit_code == EXIT_INTERNAL
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("msdiag: internal error: KeyError")
    r = CliRunner().invoke(main, ["analyze", "--no-cache", "--debug", str(corpus.joinpath(*L0))])
    assert isinstance(r.exception, KeyError)  # --debug: the exception itself, for its traceback


def test_broken_environment_is_one_line_exit_2(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # pip pairs pyarrow 26 with numpy 1.26 (pyarrow declares no numpy requirement), and pyarrow then refuses to
    # import with this text (seen when .ci/run's oldest-pandas environment was first tried): not a bug in msdiag
    import msdiag.analysis as analysis

    def broken(*_: object, **__: object) -> None:
        raise ImportError("pyarrow requires NumPy 2.0 or newer, found 1.26.4")

    monkeypatch.setattr(analysis, "compute_all", broken)
    r = CliRunner().invoke(main, ["analyze", "--no-cache", str(corpus.joinpath(*L0))])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("msdiag: error: this Python environment cannot import what msdiag needs (ImportError: pyarrow")
    assert "install 'pyarrow<26'" in r.stderr and "internal error" not in r.stderr
    r = CliRunner().invoke(main, ["analyze", "--no-cache", "--debug", str(corpus.joinpath(*L0))])
    assert isinstance(r.exception, ImportError)  # --debug: the exception itself

    def missing_own_module(*_: object, **__: object) -> None:  # msdiag's own module missing: a bug in msdiag
        raise ModuleNotFoundError("No module named 'msdiag.metrics.gone'", name="msdiag.metrics.gone")

    monkeypatch.setattr(analysis, "compute_all", missing_own_module)
    r = CliRunner().invoke(main, ["analyze", "--no-cache", str(corpus.joinpath(*L0))])
    assert r.exit_code == EXIT_INTERNAL and r.stderr.startswith("msdiag: internal error: ModuleNotFoundError")


def test_strict_failed_source(corpus: Path, tmp_path: Path) -> None:
    """op_statistic.csv emptied: a failed optional source (a note-free exit 0 by default), exit 2 with --strict."""
    cap = tmp_path / "cap"
    shutil.copytree(corpus.joinpath(*L0), cap)
    (cap / APO / "op_statistic.csv").write_bytes(b"")
    r = CliRunner().invoke(main, ["analyze", "--no-cache", "--format", "json", str(cap)])
    assert r.exit_code == 0
    assert [s["name"] for s in json.loads(r.stdout)["sources"] if s["status"] == "failed"] == ["op_statistic.csv"]
    r = CliRunner().invoke(main, ["analyze", "--no-cache", "--strict", str(cap)])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert "op_statistic.csv of rank 0 failed: the file is empty" in r.stderr and "--strict" in r.stderr
