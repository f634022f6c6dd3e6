"""msdiag capture: the markers reader, the runner and bootstrap (no MindSpore needed), and real captures
of the examples with MindSpore 2.10 on CPU through the CLI (marked ``mindspore``).

The capture tests run short jobs (9-10 steps: the default window skips 2, warms up 1 and records
steps 4-8; step 9's boundary closes it) and take about 2-3 minutes on 2 cores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

import pytest
from conftest import REPO

from msdiag.analysis import Analysis, Options, analyze
from msdiag.capture import launch, preflight, runner, runtime
from msdiag.errors import InputError, ParseError, one_line
from msdiag.ingest import msdiag_markers
from msdiag.ingest.msdiag_markers import read_markers

HAS_MINDSPORE = importlib.util.find_spec("mindspore") is not None
needs_mindspore = pytest.mark.skipif(
    not HAS_MINDSPORE, reason="MindSpore is not importable here: install it (pip install 'msdiag[capture]') to run the capture tests"
)
EXAMPLES = REPO / "examples"
WINDOW = [4, 5, 6, 7, 8]  # default window: skip 2, warm up 1 (step 3), record 5
FETCH = runtime.STEP_SOURCE_LABEL["fetch"]
CELL = runtime.STEP_SOURCE_LABEL["cell"]


# ---- the markers file and its reader ---------------------------------------------------------


def _markers(tmp_path: Path, **over: Any) -> Path:
    doc = {
        "format": "msdiag-markers",
        "version": 1,
        "rank": 0,
        "steps_from": FETCH,
        "window": {"mode": "steps"},
        "steps": [{"step": 4, "start_us": 1000.0, "end_us": 1500.0}, {"step": 5, "start_us": 1500.0, "end_us": 2100.0}],
        "data_waits": [{"step": 4, "start_us": 1000.0, "end_us": 1200.0}, {"step": 5, "start_us": 1500.0, "end_us": 1510.0}],
    }
    doc.update(over)
    p = tmp_path / "msdiag_steps.json"
    p.write_text(json.dumps(doc))
    return p


def test_markers_become_step_and_data_wait_rows(tmp_path: Path) -> None:
    df = read_markers(_markers(tmp_path), rank=3)
    steps = df[df["lane"] == "step"]
    assert list(steps["name"]) == ["ProfilerStep#4", "ProfilerStep#5"]
    assert list(steps["dur_us"]) == [500.0, 600.0]
    waits = df[df["lane"] == "host"]
    assert set(waits["name"]) == {"msdiag::data_wait"}
    assert list(waits["dur_us"]) == [200.0, 10.0]
    assert set(df["rank"]) == {3}


@pytest.mark.parametrize(
    "over, problem",
    [
        ({"format": "x"}, "not an msdiag markers file"),
        ({"version": 2}, "this msdiag reads version 1"),
        ({"steps": [{"step": 1, "start_us": 5.0, "end_us": 4.0}]}, "ends before it starts"),
        ({"steps": [{"step": "1", "start_us": 5.0, "end_us": 6.0}]}, "not an integer"),
        ({"data_waits": {}}, "'data_waits' is not a list"),
    ],
)
def test_bad_markers_name_the_problem(tmp_path: Path, over: dict, problem: str) -> None:
    with pytest.raises(ParseError, match=problem):
        read_markers(_markers(tmp_path, **over), 0)


def test_runtime_and_reader_agree_on_the_format() -> None:
    # the runtime runs in the job's Python without msdiag: it carries its own copy of the constants
    assert runtime.MARKERS_FILE == msdiag_markers.MARKERS_FILE
    assert runtime.MARKERS_FORMAT == msdiag_markers.MARKERS_FORMAT
    assert runtime.MARKERS_VERSION == msdiag_markers.MARKERS_VERSION


def test_runtime_imports_only_the_standard_library() -> None:
    # the runtime package runs in the job's Python, which may lack msdiag and its dependencies:
    # every module imports the standard library, its sibling modules, or MindSpore (inside functions)
    import ast

    files = sorted((REPO / "msdiag" / "capture" / "runtime").glob("*.py"))
    assert len(files) >= 5
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                roots = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                roots = [] if node.level else [(node.module or "").split(".")[0]]
            else:
                continue
            for root in roots:
                assert root in sys.stdlib_module_names or root == "mindspore", f"{f.name}: import {root}"


def test_sample_steps_come_from_msdiag_markers(analysed: Callable[[str], Analysis]) -> None:
    """sample_traces/train_small_cpu (msdiag capture of train_small.py, 20 steps, default window):
    steps 4-8 are recorded (skip 2 + warm-up 1), each marked by the dataset fetch that starts it."""
    a = analysed("sample")  # the session's shared analysis (Options(jobs=1)): read only
    assert list(a.steps["step"]) == WINDOW
    rd = a.capture.ranks[0]
    assert rd.info.steps_from == "ProfilerStep#N markers"
    assert "msdiag_steps.json" in rd.info.step_source
    assert a.steps["data_wait_us"].notna().all()
    src = {s.name: s for s in rd.sources}
    assert src["msdiag_steps.json"].status == "present"
    assert src["minddata_pipeline_raw_0.csv"].status == "present"


# ---- the runner and the bootstrap (no MindSpore) -----------------------------------------------


def test_exit_codes_follow_the_shell() -> None:
    assert launch.describe_exit(3) == ("job exit code 3", 3)
    # killed by a signal: the words and the exit code say the same thing (128 + 15)
    assert launch.describe_exit(-15) == ("job killed by signal 15 (SIGTERM); exit code 143", 143)


def test_job_python_from_command_or_shebang(tmp_path: Path) -> None:
    assert preflight.job_python([sys.executable, "x.py"]) == sys.executable
    script = tmp_path / "launcher"
    script.write_text(f"#!{sys.executable}\nprint(1)\n")
    script.chmod(0o755)
    assert preflight.job_python([str(script)]) == sys.executable
    sh = tmp_path / "run.sh"
    sh.write_text("#!/bin/sh\necho hi\n")
    sh.chmod(0o755)
    assert preflight.job_python([str(sh)]) is None


def test_child_env(tmp_path: Path) -> None:
    opts = runner.CaptureOptions(out=tmp_path / "cap")
    env, problems = runner.child_env(opts, tmp_path / "boot", {"PYTHONPATH": "/a", "MS_PROFILER_OPTIONS": "{}", runtime.OWNER_ENV: "1"})
    assert env["PYTHONPATH"] == os.pathsep.join([str(tmp_path / "boot"), "/a"])
    assert "MS_PROFILER_OPTIONS" not in env and runtime.OWNER_ENV not in env
    assert problems and "MS_PROFILER_OPTIONS" in problems[0]
    cfg = json.loads(env[runtime.CONFIG_ENV])
    assert (cfg["skip"], cfg["warmup"], cfg["steps"]) == (2, 1, 5)
    assert Path(cfg["out"]).is_absolute()


@pytest.mark.slow
def test_bootstrap_chains_to_the_sitecustomize_it_shadows(tmp_path: Path) -> None:
    boot = runner._bootstrap_dir()
    try:
        other = tmp_path / "other"
        other.mkdir()
        (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED'] = 'yes'\n")
        cfg = {"out": str(tmp_path / "cap")}
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(boot), str(other)]), MSDIAG_CAPTURE=json.dumps(cfg))
        env.pop(runtime.OWNER_ENV, None)
        code = "import os, sys; print(os.environ.get('CHAINED'), '_msdiag_capture_runtime' in sys.modules)"
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert r.stdout.split() == ["yes", "True"]
        # the process claimed the capture and wrote its state; MindSpore was never imported
        [state] = (tmp_path / "cap" / ".msdiag").glob("pid_*.json")
        doc = json.loads(state.read_text())
        assert doc["state"] == "waiting" and doc["mindspore_imported"] is False
    finally:
        import shutil

        shutil.rmtree(boot)


def _env(**over: str) -> dict[str, str]:
    """The environment of an msdiag subprocess: this Python's folder first on PATH (python, msrun),
    no capture of an enclosing msdiag; ``over`` on top."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    for k in (runtime.CONFIG_ENV, runtime.OWNER_ENV, runtime.WORKER_OWNER_ENV):
        env.pop(k, None)
    env.update(over)
    return env


def _msdiag(args: list[str], cwd: Path, timeout: float = 600, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "msdiag.cli", *args], cwd=cwd, env=env or _env(), stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=timeout,
    )


@pytest.mark.slow
def test_mindspore_missing_gives_the_install_command(tmp_path: Path) -> None:
    # a Python that cannot import MindSpore: this interpreter without site-packages (-S)
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    fake.chmod(0o755)
    r = _msdiag(["capture", "--out", "cap", "--", str(fake), "-c", "import mindspore"], tmp_path)
    assert r.returncode == 2, r.stderr
    assert "MindSpore is not importable by the job's Python" in r.stderr
    assert "pip install 'msdiag[capture]'" in r.stderr
    assert len(r.stderr.splitlines()) == 1  # one line, before anything ran
    assert not (tmp_path / "cap").exists()  # the job never ran, and the refusal created nothing


@pytest.mark.slow
def test_command_not_found(tmp_path: Path) -> None:
    r = _msdiag(["capture", "--out", "cap", "--", "no-such-command-xyz"], tmp_path)
    assert r.returncode == 2 and "command not found" in r.stderr
    assert not (tmp_path / "cap").exists()


# ---- issue 20 (capture) and issue 19: refusals, sitecustomize, exit codes, escaping --------------


def _python_without_mindspore(tmp_path: Path) -> Path:
    """A folder whose python3 / python is this interpreter without site-packages (-S): no MindSpore."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("python3", "python"):
        fake = bin_dir / name
        fake.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
        fake.chmod(0o755)
    return bin_dir


def _fake_mindspore(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python finds a package named mindspore (an empty one): msdiag's check passes
    without MindSpore installed, for jobs that never import it."""
    site = tmp_path / "fake_site"
    (site / "mindspore").mkdir(parents=True)
    (site / "mindspore" / "__init__.py").write_text("__version__ = '0.0'\n")
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(site)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


@pytest.mark.slow
@pytest.mark.parametrize("job", [["bash", "-c", "touch ran"], ["false"]])
def test_non_python_commands_are_checked_for_mindspore_before_they_run(tmp_path: Path, job: list[str]) -> None:
    # the command is not Python: the Python first on its PATH is checked (here one without MindSpore)
    env = _env(PATH=os.pathsep.join([str(_python_without_mindspore(tmp_path)), "/usr/bin", "/bin"]))
    r = _msdiag(["capture", "--out", "a/b/cap", "--", *job], tmp_path, env=env)
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.splitlines()
    assert line.startswith("msdiag: error: ") and "MindSpore is not importable by the Python first on the job's PATH" in line
    assert not (tmp_path / "ran").exists()  # nothing ran
    assert not (tmp_path / "a").exists()  # and nothing was created, not even --out's parents


@pytest.mark.slow
def test_refusing_a_used_out_folder_creates_nothing(tmp_path: Path) -> None:
    used = tmp_path / "used"
    used.mkdir()
    (used / "manifest.json").write_text("{}")
    r = _msdiag(["capture", "--out", "used", "--", "true"], tmp_path)
    assert r.returncode == 2 and "already holds a capture" in r.stderr
    assert sorted(p.name for p in used.iterdir()) == ["manifest.json"]


@pytest.mark.slow
def test_a_job_that_never_imports_mindspore_leaves_no_capture_folder(tmp_path: Path) -> None:
    # issue 19: the default folder (msdiag_capture_<time>) was left behind, empty but for msdiag's state
    r = _msdiag(["capture", "--", sys.executable, "-c", "print('no mindspore here')"], tmp_path, env=_fake_mindspore(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "no mindspore here" in r.stdout
    assert "never imported MindSpore" in r.stderr and "was removed" in r.stderr
    assert not list(tmp_path.glob("msdiag_capture_*"))


@pytest.mark.slow
def test_the_job_gets_the_users_environment_not_what_msdiag_set_for_itself(tmp_path: Path) -> None:
    # msdiag.cli sets ARROW_DEFAULT_MEMORY_POOL and NUMPY_MADVISE_HUGEPAGE for its own pandas work where the user set
    # none: the job must not inherit them (runner.py: the only changes to the job's environment are the capture's
    # own); a value the user set reaches the job as it was
    code = ("import os; print('pool', os.environ.get('ARROW_DEFAULT_MEMORY_POOL'));"
            "print('hugepage', os.environ.get('NUMPY_MADVISE_HUGEPAGE'))")
    env = _fake_mindspore(tmp_path)
    env.pop("ARROW_DEFAULT_MEMORY_POOL", None)
    env.pop("NUMPY_MADVISE_HUGEPAGE", None)
    r = _msdiag(["capture", "--", sys.executable, "-c", code], tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert {"pool None", "hugepage None"} <= set(r.stdout.splitlines())
    r = _msdiag(["capture", "--", sys.executable, "-c", code], tmp_path,
                env=dict(env, ARROW_DEFAULT_MEMORY_POOL="jemalloc", NUMPY_MADVISE_HUGEPAGE="1"))
    assert r.returncode == 0, r.stderr
    assert {"pool jemalloc", "hugepage 1"} <= set(r.stdout.splitlines())


def test_msdiag_turns_numpys_huge_pages_off_for_itself_unless_the_user_set_them() -> None:
    # numpy reads NUMPY_MADVISE_HUGEPAGE when it is imported; msdiag.cli sets it to 0 where the user set nothing
    # (_own_env). _set_madvise_hugepage returns the setting numpy had until that call.
    code = ("import msdiag.cli, numpy\n"
            "core = getattr(numpy, '_core', None) or numpy.core\n"
            "print(core.multiarray._set_madvise_hugepage(True))")
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    for given, expected in ((None, "False"), ("1", "True")):
        run_env = env if given is None else dict(env, NUMPY_MADVISE_HUGEPAGE=given)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=run_env, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == expected


@pytest.mark.slow
def test_a_job_killed_by_a_signal_says_it_as_the_exit_code_does(tmp_path: Path) -> None:
    job = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    r = _msdiag(["capture", "--out", "cap", "--", *job], tmp_path, env=_fake_mindspore(tmp_path))
    assert r.returncode == 137  # 128 + 9, as a shell says it
    assert "job killed by signal 9 (SIGKILL); exit code 137" in r.stderr
    assert "-9" not in r.stderr


SITECUSTOMIZE_JOB = "import sitecustomize, sys; print('job', getattr(sitecustomize, 'MARK', None), sitecustomize.__file__)"


def _run_with_bootstrap(tmp_path: Path, user_sitecustomize: str) -> subprocess.CompletedProcess:
    """This Python with msdiag's bootstrap first on PYTHONPATH, shadowing the user's sitecustomize."""
    boot = runner._bootstrap_dir()
    try:
        other = tmp_path / "other"
        other.mkdir()
        (other / "sitecustomize.py").write_text(user_sitecustomize)
        env = _env(PYTHONPATH=os.pathsep.join([str(boot), str(other)]), MSDIAG_CAPTURE=json.dumps({"out": str(tmp_path / "cap")}))
        return subprocess.run([sys.executable, "-c", SITECUSTOMIZE_JOB], env=env, capture_output=True, text=True, timeout=60)
    finally:
        import shutil

        shutil.rmtree(boot)


@pytest.mark.slow
def test_import_sitecustomize_gives_the_users_module(tmp_path: Path) -> None:
    r = _run_with_bootstrap(tmp_path, "MARK = 'users'\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["job", "users", str(tmp_path / "other" / "sitecustomize.py")]


@pytest.mark.slow
def test_an_error_in_the_users_sitecustomize_is_printed_as_python_prints_it(tmp_path: Path) -> None:
    r = _run_with_bootstrap(tmp_path, "raise ValueError('boom')\n")
    assert r.returncode == 0, r.stderr  # the job goes on, as with Python's own site.py
    # site.py's words (Python 3.11: Lib/site.py execsitecustomize)
    assert "Error in sitecustomize; set PYTHONVERBOSE for traceback:\nValueError: boom\n" in r.stderr
    assert r.stdout.startswith("job None")  # the job ran (its sitecustomize is msdiag's, the user's failed)
    assert "ValueError: boom" in (tmp_path / "cap" / runtime.LOG_FILE).read_text()  # and msdiag's log has it


def test_error_messages_escape_control_characters() -> None:
    e = InputError("cap\nmsdiag: error: forged\x1b[2J\u202e", "does not exist")
    assert str(e) == "cap\\nmsdiag: error: forged\\x1b[2J\\u202e: does not exist"
    assert one_line("训练 run 1\u00a0ok") == "训练 run 1\u00a0ok"  # printable text is left as it is
    assert pickle.loads(pickle.dumps(e)).path == e.path  # the raw path crosses process boundaries


@pytest.mark.slow
def test_a_folder_name_with_a_newline_cannot_forge_an_error_line(tmp_path: Path) -> None:
    r = _msdiag(["analyze", "x\nmsdiag: error: forged"], tmp_path)
    assert r.returncode == 2
    [line] = r.stderr.splitlines()
    assert line.startswith("msdiag: error: x\\nmsdiag: error: forged")


# ---- real captures with MindSpore on CPU ------------------------------------------------------


# The step window is what these tests check, not the time-window fallback (one test of its own sets 1 s): a job
# that a loaded machine keeps from its first step for 30 s (the default) must not fall back to a time window.
NO_FALLBACK = ("--wait-for-steps", "600")


def _capture(tmp_path: Path, name: str, job: list[str], *opts: str, timeout: float = 600) -> tuple[subprocess.CompletedProcess, Path, dict]:
    out = tmp_path / name
    r = _msdiag(["capture", "--out", str(out), "--jobs", "1", *NO_FALLBACK, *opts, "--", *job], tmp_path, timeout)
    manifest = json.loads((out / "manifest.json").read_text()) if (out / "manifest.json").exists() else {}
    return r, out, manifest


def _analysis(out: Path) -> Any:
    return analyze(out, Options(jobs=1))


def _window_from_markers(a: Any, manifest: dict, steps: list[int] = WINDOW) -> None:
    """Steps were found from msdiag's markers (not from repetition) and are the recorded window."""
    for r in manifest["ranks"]:
        assert r["state"] == "captured" and r["captured_steps"] == steps
    for rd in a.capture.ranks:
        assert rd.info.steps_from == "ProfilerStep#N markers"
        assert "msdiag_steps.json" in rd.info.step_source
    for _, g in a.steps.groupby("rank"):
        assert list(g["step"]) == steps


@pytest.mark.mindspore
@pytest.mark.slow
@needs_mindspore
def test_data_bound_waits_on_data_and_the_fixed_job_does_not(tmp_path: Path) -> None:
    # --load-ms 10: 64 x 10 ms of sleeping per batch, wall time that a loaded machine does not stretch, against
    # ~30 ms of compute (idle) that it does: data stays most of the step even at 10x slower compute (640 / 940)
    job = [sys.executable, str(EXAMPLES / "data_bound.py"), "--steps", "9", "--load-ms", "10"]
    r, out, m = _capture(tmp_path, "bound", job, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert m["exit_code"] == 0 and m["device"] == "CPU" and m["world_size"] == 1
    assert m["ranks"][0]["steps_from"] == FETCH
    # MindSpore exposes no device properties on CPU: recorded as such, never asked (issue 15)
    assert m["device_info"]["name"] is None and m["device_info"]["from"].startswith("none: MindSpore exposes no device")
    assert m["ranks"][0]["device_properties"]["from"].startswith("none:")
    assert "step 9/9" in r.stdout  # the job's output, then the report: one JSON line, the last
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["verdict"]["bottleneck"] == "data"
    a = _analysis(out)
    _window_from_markers(a, m)
    bound = a.metrics["data_wait_share"].value
    assert a.verdict["bottleneck"] == "data"
    # MindData pipeline profiling was on: the pipeline's ops and queues are there
    pipe = a.capture.ranks[0].table("data_pipeline")
    assert {"Map", "Batch", "Generator"} <= set(pipe["op_type"].dropna())

    r, out, m = _capture(tmp_path, "fixed", [*job, "--fixed"])
    assert r.returncode == 0, r.stderr
    fixed = _analysis(out).metrics["data_wait_share"].value
    # data_bound: 640 ms of loading per batch against 30-300 ms of compute -> most of the step waits;
    # fixed: one 10 ms read per batch on up to 4 workers, 16 batches ahead -> the batch is ready, a few %
    assert bound > 0.5 and fixed < 0.2


@pytest.mark.mindspore
@pytest.mark.slow
@needs_mindspore
def test_compute_bound(tmp_path: Path) -> None:
    html = tmp_path / "cb.html"
    r, out, m = _capture(tmp_path, "cb", [sys.executable, str(EXAMPLES / "compute_bound.py"), "--steps", "9"], "--report", str(html))
    assert r.returncode == 0, r.stderr
    assert m["execution_mode"] == "graph"
    assert "Verdict:" in r.stdout
    assert html.exists() and "<svg" in html.read_text()  # --report: the HTML report as well
    a = _analysis(out)
    _window_from_markers(a, m)
    assert a.verdict["bottleneck"] in ("compute", "balanced")
    # big MatMuls fill the step (~95% on an idle machine); a loaded machine stretches the gaps between ops too,
    # so the bound is that compute is most of the step, not how much
    assert a.metrics["computing_share"].value > 0.5
    assert a.metrics["data_wait_share"].value < 0.05


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.mindspore
@pytest.mark.slow
@needs_mindspore
def test_dp2_msrun_two_ranks_with_host_allreduce_and_stop_after(tmp_path: Path) -> None:
    msrun = Path(sys.executable).parent / "msrun"
    if not msrun.exists():
        pytest.skip("msrun is not installed beside this Python")
    job = [str(msrun), "--worker_num=2", "--local_worker_num=2", f"--master_port={_free_port()}", "--join=True",
           str(EXAMPLES / "dp2_msrun.py"), "--steps", "20"]
    r, out, m = _capture(tmp_path, "dp2", job, "--stop-after")
    # --stop-after: both ranks stop at step 9 once steps 4-8 are written; msdiag exits 0
    assert r.returncode == 0, r.stderr
    assert m["stopped_by_msdiag"] is True and m["exit_code"] == 0, (m, r.stderr)
    assert m["world_size"] == 2 and m["parallel"]["parallel_mode"] == "data_parallel"
    assert sorted(x["rank"] for x in m["ranks"]) == [0, 1]
    assert all(x["steps_seen"] == 9 for x in m["ranks"])
    assert len({x["folder"] for x in m["ranks"]}) == 2  # one folder per rank
    a = _analysis(out)
    assert sorted(rd.rank for rd in a.capture.ranks) == [0, 1]
    _window_from_markers(a, m)
    for rd in a.capture.ranks:
        k = rd.table("kernels")
        comm = k[k["kind"] == "communication"]
        assert len(comm) and comm["name"].str.contains("AllReduce").all()
    assert (a.steps["communication_us"] > 0).all()


@pytest.mark.mindspore
@pytest.mark.slow
@needs_mindspore
def test_generate_kv_counts_each_top_level_call_as_a_step(tmp_path: Path) -> None:
    # 1 request: 1 prefill + 9 decode calls = 10 calls of the decoder = 10 steps
    job = [sys.executable, str(EXAMPLES / "generate_kv.py"), "--requests", "1", "--new-tokens", "9"]
    r, out, m = _capture(tmp_path, "gen", job)
    assert r.returncode == 0, r.stderr
    assert m["ranks"][0]["steps_from"] == CELL
    assert m["ranks"][0]["steps_seen"] == 10
    a = _analysis(out)
    _window_from_markers(a, m)
    assert a.steps["data_wait_us"].isna().all()  # no dataset: no data wait measured


JOB_EXITS = """
import sys
import numpy as np
import mindspore, mindspore.dataset as ds
from mindspore import nn
mindspore.set_device("CPU")
dense = nn.Dense(64, 10)
net = nn.TrainOneStepCell(nn.WithLossCell(dense, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")),
                          nn.Momentum(dense.trainable_params(), 0.1, 0.9))
x = np.random.default_rng(0).standard_normal((640, 64)).astype(np.float32)
y = (np.arange(640) % 10).astype(np.int32)
for step, (bx, by) in enumerate(ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(32).create_tuple_iterator(num_epochs=1), 1):
    print("step", step, float(net(bx, by).asnumpy()), flush=True)
    if step == int(sys.argv[1]):
        sys.exit(3)
"""


@pytest.mark.mindspore
@pytest.mark.slow
@needs_mindspore
def test_failed_job_exit_code_and_partial_capture(tmp_path: Path) -> None:
    job = tmp_path / "exits.py"
    job.write_text(textwrap.dedent(JOB_EXITS))
    # exits with 3 during step 6, inside the window (4-8): steps 4-6 are kept, step 6 ending at its
    # last Cell call; msdiag exits 3 and analyzes them
    r, out, m = _capture(tmp_path, "fail", [sys.executable, str(job), "6"])
    assert r.returncode == 3, r.stderr
    assert m["exit_code"] == 3 and m["job_returncode"] == 3
    assert m["ranks"][0]["captured_steps"] == [4, 5, 6]
    assert "3 of 5 steps captured" in r.stderr
    assert "step 6 " in r.stdout  # the job's own output passed through
    a = _analysis(out)
    assert list(a.steps["step"]) == [4, 5, 6]
    assert "Verdict:" in r.stdout

    # exits before the window opens: nothing captured, said so, exit code still the job's
    r, out, m = _capture(tmp_path, "early", [sys.executable, str(job), "2"])
    assert r.returncode == 3
    assert "the window opens at step 4" in r.stderr and "nothing was captured" in r.stderr


def _wait_for_step_6(p: subprocess.Popen) -> None:
    """Read the job's output until it prints step 6 (inside the window 4-8), however long a loaded machine takes:
    the signal is sent only then, never on a timer. A job that ends without it fails here, saying so."""
    assert p.stdout is not None
    for line in p.stdout:  # the job's own output, line by line
        if line.startswith("step 6 "):
            return
    p.wait()
    pytest.fail(f"the job ended (exit {p.returncode}) before printing step 6: {p.stderr.read()[-2000:] if p.stderr else ''}")


@pytest.mark.mindspore
@pytest.mark.slow
@needs_mindspore
def test_ctrl_c_is_forwarded_and_the_capture_kept(tmp_path: Path) -> None:
    import signal

    job = tmp_path / "slow.py"
    job.write_text(textwrap.dedent(JOB_EXITS).replace('flush=True)', 'flush=True); __import__("time").sleep(0.3)'))
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    cmd = [sys.executable, "-m", "msdiag.cli", "capture", "--out", str(tmp_path / "int"), "--jobs", "1", "--",
           sys.executable, str(job), "0"]
    # stdin too is not a terminal: msdiag is not a terminal's foreground job, so it forwards SIGINT
    p = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    _wait_for_step_6(p)
    p.send_signal(signal.SIGINT)  # not a terminal: msdiag forwards it to the job
    out, err = p.communicate(timeout=600)
    # MindSpore ends a job on SIGINT with SIGTERM (its own handler), as it does without msdiag:
    # exit 128 + 15. The runtime closes the window on that SIGTERM first: steps 4-6 are kept.
    assert p.returncode == 143, err
    m = json.loads((tmp_path / "int" / "manifest.json").read_text())
    assert m["exit_code"] == 143
    assert m["ranks"][0]["captured_steps"][:3] == [4, 5, 6]
    assert "Verdict:" in out


JOB_COUNTS_SIGINT = """
import signal, sys, time
import numpy as np
import mindspore, mindspore.dataset as ds
from mindspore import nn
mindspore.set_device("CPU")
calls = []
def on_sigint(signum, frame):  # the job's own Ctrl-C handler: log each call, finish the step, stop
    calls.append(signum)
    with open(sys.argv[1], "a") as f:
        f.write("SIGINT\\n")
dense = nn.Dense(64, 10)
net = nn.TrainOneStepCell(nn.WithLossCell(dense, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")),
                          nn.Momentum(dense.trainable_params(), 0.1, 0.9))
x = np.random.default_rng(0).standard_normal((640, 64)).astype(np.float32)
y = (np.arange(640) % 10).astype(np.int32)
for step, (bx, by) in enumerate(ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(32).create_tuple_iterator(num_epochs=1), 1):
    loss = float(net(bx, by).asnumpy())
    # MindSpore installs SIGINT handlers of its own (MindData, the runtime): the job's is set after them
    signal.signal(signal.SIGINT, on_sigint)
    print("step", step, loss, flush=True)
    time.sleep(0.5)
    if calls:
        break
print("stopped after step", step, flush=True)
"""


@pytest.mark.mindspore
@pytest.mark.slow
@needs_mindspore
def test_one_sigint_to_the_process_group_reaches_the_job_once(tmp_path: Path) -> None:
    import signal

    job = tmp_path / "counts_sigint.py"
    job.write_text(textwrap.dedent(JOB_COUNTS_SIGINT))
    calls = tmp_path / "sigint_calls.txt"
    cmd = [sys.executable, "-m", "msdiag.cli", "capture", "--out", str(tmp_path / "grp"), "--jobs", "1", "--",
           sys.executable, str(job), str(calls)]
    # msdiag leads a process group of its own (as a shell's job would), without a terminal
    p = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert p.stdout is not None
    _wait_for_step_6(p)
    os.killpg(p.pid, signal.SIGINT)  # e.g. `kill -INT -PGID`: msdiag and everything in its group
    out, err = p.communicate(timeout=600)
    # before: the job got the group's SIGINT and msdiag's forward, two calls of its handler
    assert calls.read_text().splitlines() == ["SIGINT"], err
    assert p.returncode == 0, err
    # the job ended normally inside the window (at step 6, or 7 on a machine slow to deliver the signal):
    # the window closed, its steps so far were written and analyzed
    [last] = [int(line.split()[-1]) for line in out.splitlines() if line.startswith("stopped after step")]
    assert 6 <= last <= 8
    m = json.loads((tmp_path / "grp" / "manifest.json").read_text())
    assert m["ranks"][0]["state"] == "captured" and m["ranks"][0]["captured_steps"] == list(range(4, last + 1))
    assert "Verdict:" in out


JOB_NO_STEPS = """
import time
import numpy as np
import mindspore
from mindspore import Tensor, ops
mindspore.set_device("CPU")
x = Tensor(np.ones((64, 64), np.float32))
t0 = time.time()
while time.time() - t0 < 6:
    ops.matmul(x, x).asnumpy()
    time.sleep(0.01)
"""


@pytest.mark.mindspore
@pytest.mark.slow
@needs_mindspore
def test_time_window_when_nothing_marks_steps(tmp_path: Path) -> None:
    job = tmp_path / "no_steps.py"
    job.write_text(textwrap.dedent(JOB_NO_STEPS))
    r, out, m = _capture(tmp_path, "tw", [sys.executable, str(job)], "--wait-for-steps", "1", "--seconds", "2")
    assert r.returncode == 0, r.stderr
    assert m["window"]["mode"] == "time" and m["ranks"][0]["window_mode"] == "time"
    assert "recorded a time window of 2 s" in r.stderr
    a = _analysis(out)
    assert any("time window" in n for n in a.capture.ranks[0].notes)
    assert len(a.capture.ranks[0].table("kernels")) > 0
