"""The child-process launch observer on a CPU: launches recorded without executing, the user's
sitecustomize still runs, failing and kernel-less commands, and the lazy event bookkeeping."""
import sys
import textwrap
import time

import pytest

from cutile_diag.measure import observe as lo
from cutile_diag.capture.launches import LaunchRecord, read_jsonl

pytest.importorskip("cuda.tile")
PY = sys.executable

SCRIPT = textwrap.dedent("""
    import torch
    from cuda.tile import launch            # bound after the import: must be the observed one too
    from cutile_diag.examples import softmax, vector_add
    x = torch.zeros(64, 1000, dtype=torch.float16)
    for _ in range(3):
        softmax.launch(x, torch.empty_like(x))
    vector_add.launch(*(torch.zeros(1 << 16),) * 3, persistent=True)
    assert launch.__wrapped__ is not None
    print("script done")
""")


def _script(tmp_path, text, name="prog.py"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_records_every_launch_without_executing(tmp_path):
    lines = []
    run = lo.observe_command([PY, _script(tmp_path, SCRIPT)], execute=False, echo=lines.append)
    assert "script done" in lines and not run.executed
    kernels = [(r.kernel, r.grid) for r in run.records]
    # persistent grid from the CPU stand-in device: min(64 tiles, 4 x 132 SMs)
    assert kernels == [("softmax", (64,))] * 3 + [("vector_add_persistent", (64,))]
    assert [r.extra["first"] for r in run.records] == [True, False, False, True]
    assert [r.extra["seq"] for r in run.records] == [1, 2, 3, 4]
    assert run.records[0].specs()["X"].text() == "f16[64,1000]"
    assert all(r.device_ms is None for r in run.records)


def test_user_sitecustomize_still_runs_and_child_processes_are_observed(tmp_path, monkeypatch):
    site = tmp_path / "usersite"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = 'yes'\n")
    child = _script(tmp_path, SCRIPT, "child.py")
    parent = _script(tmp_path, textwrap.dedent(f"""
        import os, subprocess, sys
        assert os.environ.get('USER_SITE_RAN') == 'yes', 'user sitecustomize did not run'
        subprocess.run([sys.executable, {child!r}], check=True)
    """))
    import os
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    run = lo.observe_command([PY, parent], execute=False)       # the parent's assert would fail the command
    assert len(run.records) == 4 and len({r.extra["pid"] for r in run.records}) == 1


def test_failing_command_reports_code_and_stderr_tail(tmp_path):
    prog = _script(tmp_path, "import sys\nprint('some output')\nprint('boom: shape mismatch', file=sys.stderr)\n"
                             "sys.exit(3)\n")
    with pytest.raises(lo.CommandFailedError) as e:
        lo.observe_command([PY, prog], execute=False)
    msg = e.value.one_line()
    assert "exited with 3" in msg and "boom: shape mismatch" in msg and e.value.exit_code == 1


def test_command_without_cutile_launch(tmp_path):
    with pytest.raises(lo.NoLaunchesError, match="launched no cuTile kernel") as e:
        lo.observe_command([PY, "-c", "import cuda.tile; print('nothing')"], execute=False)
    assert e.value.exit_code == 1 and "imported cuda.tile but called ct.launch never" in e.value.one_line()
    with pytest.raises(lo.NoLaunchesError, match="no Python process of it imported cuda.tile"):
        lo.observe_command([PY, "-c", "print('no cuTile at all')"], execute=False)


def test_missing_command_is_usage_error():
    from cutile_diag.errors import UsageError
    with pytest.raises(UsageError, match="command not found"):
        lo.observe_command(["no-such-program-xyz"])


class _Event:
    """Stands in for torch.cuda.Event: completes when the test says so."""
    clock = 0.0

    def __init__(self):
        self.t, self.ready = None, False

    def record(self, stream=None):
        _Event.clock += 1.0
        self.t = _Event.clock

    def query(self):
        return self.ready

    def synchronize(self):
        self.ready = True

    def elapsed_time(self, end):
        return end.t - self.t


def test_events_are_read_lazily_and_flushed_at_exit(tmp_path, monkeypatch):
    import cuda.tile as ct
    from cutile_diag.examples import softmax
    rec = lo._Recorder(str(tmp_path), execute=True, pad_us=1e6)
    made = []
    idle = ["padded", "busy", "busy"]           # the stream is idle at the first launch only
    monkeypatch.setattr(rec, "_capturing", lambda: False)
    monkeypatch.setattr(rec, "_pad", lambda ts: idle.pop(0))

    def event():
        made.append(_Event())
        return made[-1]

    monkeypatch.setattr(rec, "_event", event)
    monkeypatch.setattr(rec, "_torch_stream", lambda s: s)
    import torch
    x = torch.zeros(8, 100, dtype=torch.float16)
    launched = []
    original = lambda stream, grid, kernel, args, **kw: launched.append(grid)   # noqa: E731
    for _ in range(2):
        rec.launch(original, "stream", (8,), softmax.softmax, (x, x, 128))
    assert len(launched) == 2 and len(rec.pending) == 2 and not rec.done     # nothing waited for
    made[1].ready = True                                                     # first launch's end event done
    rec.launch(original, "stream", (8,), softmax.softmax, (x, x, 128))
    assert len(rec.done) == 1 and rec.done[0].device_ms == 1.0 and len(rec.pending) == 2
    rec.finish()                                                             # waits for the rest, writes all
    got = read_jsonl(next(tmp_path.glob("launches-*.jsonl")))
    assert [r.device_ms for r in got] == [1.0, 1.0, 1.0] and [r.extra["first"] for r in got] == [True, False, False]
    assert got[0].extra["padded_us"] == 1e6 and "enqueue_gap" not in got[0].extra
    assert got[1].extra["stream_busy"] and "padded_us" not in got[1].extra
    assert ct.launch is not original
    assert isinstance(got[0], LaunchRecord)


def test_graph_capture_launches_are_recorded_without_events(tmp_path, monkeypatch):
    import torch
    from cutile_diag.examples import softmax
    rec = lo._Recorder(str(tmp_path), execute=True)
    monkeypatch.setattr(rec, "_capturing", lambda: True)
    monkeypatch.setattr(rec, "_torch_stream", lambda s: s)
    monkeypatch.setattr(rec, "_event", lambda: pytest.fail("no event may be made during capture"))
    x = torch.zeros(8, 100, dtype=torch.float16)
    rec.launch(lambda *a, **k: None, "stream", (8,), softmax.softmax, (x, x, 128))
    rec.finish()
    (r,) = read_jsonl(next(tmp_path.glob("launches-*.jsonl")))
    assert r.extra["graph_capture"] and r.device_ms is None


def test_command_past_its_timeout_is_killed(tmp_path):
    prog = _script(tmp_path, "import sys, time\nprint('waiting', file=sys.stderr, flush=True)\ntime.sleep(60)\n")
    t0 = time.monotonic()
    with pytest.raises(lo.CommandFailedError, match="timed out after 1 s") as e:
        lo.observe_command([PY, prog], execute=False, timeout=1)
    assert "waiting" in e.value.one_line() and time.monotonic() - t0 < 30
