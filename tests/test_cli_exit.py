"""How the console command ends (`msdiag.cli.run`): its output whole, its exit handlers run, its exit code
sys.exit's, without the interpreter's teardown when nothing is left running; the usual exit otherwise."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)


LEAVE = """
    import atexit, sys
    from msdiag import cli
    atexit.register(lambda: print("handler ran", flush=True))
    sys.stdout.write("unflushed ")  # buffered: a pipe is not a terminal
    {before}
    cli._leave({code})
    print("not reached")
"""


@pytest.mark.parametrize(("code", "status"), [("0", 0), ("None", 0), ("2", 2), ("258", 2), ("True", 1)])
def test_leave_flushes_runs_handlers_and_keeps_the_status(code: str, status: int) -> None:
    """The buffered output is written, atexit's handlers run, the status is what sys.exit(code) gives."""
    p = _python(LEAVE.format(before="", code=code))
    assert p.returncode == status, p.stderr
    assert p.stdout == "unflushed handler ran\n"
    assert p.stderr == ""


def test_leave_with_a_text_says_it_on_stderr() -> None:
    """sys.exit("text") prints the text on stderr and ends with status 1; so does _leave."""
    p = _python(LEAVE.format(before="", code="'msdiag: gone'"))
    assert (p.returncode, p.stdout, p.stderr) == (1, "unflushed handler ran\n", "msdiag: gone\n")


def test_leave_with_a_thread_running_exits_the_usual_way() -> None:
    """A thread still running (here: one that writes after a pause) is waited for, as Python's exit does:
    its output is there, after the handlers' (the interpreter joins threads first, then runs atexit)."""
    before = """
    import threading, time
    def late():
        time.sleep(0.2)
        print("thread done", flush=True)
    threading.Thread(target=late).start()
    """
    p = _python(LEAVE.format(before=textwrap.indent(textwrap.dedent(before), "    ").strip(), code="3"))
    assert p.returncode == 3, p.stderr
    assert p.stdout.startswith("unflushed ")
    assert "thread done" in p.stdout and "handler ran" in p.stdout and "not reached" not in p.stdout


def test_command_output_whole_and_exit_codes() -> None:
    """The console entry end to end: a JSON report printed whole (exit 0), and a bad path one line, exit 2."""
    sample = SAMPLE_TRACES / "train_small_cpu"
    if not sample.is_dir():
        pytest.skip(f"{sample} is absent")
    p = subprocess.run([sys.executable, "-m", "msdiag.cli", "analyze", str(sample), "--format", "json", "--no-cache",
                        "--jobs", "1"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["verdict"]
    missing = Path(sample) / "no-such-folder"
    p = subprocess.run([sys.executable, "-m", "msdiag.cli", "analyze", str(missing)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2
    assert p.stderr.startswith("msdiag: error:") and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
