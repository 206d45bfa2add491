"""``campaign --executor local --gpus N``: one worker process per GPU, on two fake GPUs with
simulated loops (each sleeps 3 s "measuring" its ceiling, so two loops side by side take less
wall time than one after the other).  One worker is killed (SIGKILL) mid-step: its kernel is
recorded as crashed and retried on the other GPU from the driver's ledger, nothing is lost; no
worker writes under the campaign's folder (an audit hook in every worker, from a sitecustomize,
logs their writes); no child process is left running.  And ``--gpus`` more than the machine has
is refused in one line."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from audit_writes import audit_source  # noqa: E402
from test_campaign import checkout_state  # noqa: E402

from cutile_diag.campaign.demo import SPECS, git, make_repo  # noqa: E402
from cutile_diag.campaign.executors import handover, make_executor  # noqa: E402
from cutile_diag.campaign.executors.local import LocalExecutor, resolve_gpus  # noqa: E402
from cutile_diag.campaign.plan import CampaignPlan, KernelPlan  # noqa: E402
from cutile_diag.campaign.report import write_report  # noqa: E402
from cutile_diag.campaign.run import Campaign, run_campaign  # noqa: E402
from cutile_diag.cli import main  # noqa: E402
from cutile_diag.errors import UsageError  # noqa: E402

SLEEP_S = 3.0
# the workers (only they: not the loops' own children) install the audit hook from a sitecustomize
SITE = """import sys
if "cutile_diag.campaign.executors.worker_process" in " ".join(sys.orig_argv):
    exec({code!r}, {{}})
"""


def _records(path: Path) -> list[dict]:
    try:
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    except (OSError, json.JSONDecodeError):
        return []


def _children(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (Linux /proc)."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            out.update(kids)
            todo.extend(kids)
    return out


def _kill_mid_step(monkeypatch, out: Path, killed: list) -> None:
    """SIGKILL the worker of the first loop that hands over the ``begin`` of a step (iteration >= 1,
    after every baseline), once the driver has written it and before the worker may go on; keep
    what the driver's ledger held at that moment."""
    take = handover.take_records

    def take_then_kill(c, jr, records):
        take(c, jr, records)
        if not killed and any(r["type"] == "begin" and r["iteration"] >= 1 for _rel, r in records):
            w = json.loads((out / "workers.json").read_text())[jr.worker]
            os.kill(w["pid"], signal.SIGKILL)
            killed.append((jr.name, jr.worker, w["gpu"], _records(out / "loops" / jr.name / "ledger.jsonl")))
    monkeypatch.setattr(handover, "take_records", take_then_kill)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PDEATHSIG")
def test_two_fake_gpus_run_side_by_side_and_a_killed_worker_is_retried_on_the_other(tmp_path, monkeypatch):
    repo = make_repo(tmp_path)
    before = checkout_state(repo)
    out = repo / "cutile-diag-out" / "campaign"
    out.mkdir(parents=True)
    log = tmp_path / "worker-writes.log"
    log.write_text("")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE.format(code=audit_source(os.path.realpath(out), str(log))))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    kernels = [KernelPlan(n, f"{repo}/ops/{n}.py::{n}", f"ops/{n}.py", expected_gain=g)
               for n, g in (("vector_add", 0.6), ("softmax", 0.4))]
    plan = CampaignPlan(["pytest"], str(repo), False, kernels, "test")
    sims = {}
    for k in kernels:
        sims[k.name] = str(tmp_path / f"{k.name}.json")
        spec = {**SPECS[k.name], "ceiling": {"dram_tbps": 4.24, "cached": False, "measure_s": SLEEP_S}}
        Path(sims[k.name]).write_text(json.dumps(spec))
    ex = make_executor("local", gpus="2", simulated=True)
    assert len(ex.gpus) == 2
    c = Campaign.create(out, plan, kernels, time_limit=None, simulate=sims, baselines_first=True,
                        options={"max_iterations": 2, "capture": False}, executor=ex.describe())
    c.data["roof_device"] = "h200"
    kids_before = _children(os.getpid())
    killed: list = []
    _kill_mid_step(monkeypatch, out, killed)
    lines: list[str] = []
    t0 = time.monotonic()
    run_campaign(c, ex, echo=lines.append)
    wall = time.monotonic() - t0
    rep = write_report(c)
    assert killed, f"no worker was killed: {lines}"
    victim, dead, dead_gpu, held = killed[0]
    workers = json.loads((out / "workers.json").read_text())

    # side by side: the two baselines (each >= SLEEP_S) overlapped; the campaign took less than its loops
    runs = [r for w in workers.values() for r in w["kernels"]]
    assert {w["gpu"] for w in workers.values()} == {0, 1}
    assert wall < sum(r["wall_s"] for r in runs), (wall, runs)
    first_step = next(i for i, ln in enumerate(lines) if ": resuming its loop on " in ln)
    assert sum(": its baseline on gpu" in ln for ln in lines[:first_step]) == 2, lines
    assert {w.split("-")[0] for w in (ln.split(" on ")[1].split(",")[0] for ln in lines[:first_step]
                                     if ": its baseline on " in ln)} == {"gpu0", "gpu1"}

    # the killed worker's kernel: crashed once, retried on the other GPU, finished
    rows = {r["kernel"]: r for r in rep["kernels"]}
    assert all(r["status"] == "done" and r["start_ms"] and r["final_ms"] for r in rows.values()), rows
    st = c.state(victim)
    assert st["crashes"] == 1 and st["worker"] != dead and st["gpu"] != dead_gpu
    assert any(f"{victim}: its worker process died mid-loop (exit -9)" in ln for ln in lines), lines
    assert any(r["kernel"] == victim and r["status"] == "died" for r in workers[dead]["kernels"])

    # nothing lost: the driver's ledger at the kill is the start of the final one; one baseline
    led = _records(out / "loops" / victim / "ledger.jsonl")
    assert held and led[:len(held)] == held and len(led) > len(held)
    assert sum(1 for r in led if r["type"] == "iteration" and r["iteration"] == 0) == 1
    assert (out / "loops" / victim / "perf_results.md").read_text().count("\n| ") >= 2

    # the driver wrote the campaign's folder; the workers wrote only their scratch folders
    writes = [ln.split(" ", 2) for ln in log.read_text().splitlines()]
    assert writes and all("cutile-diag-worker-loops-" in p for _pid, _ev, p in writes)   # the hook saw them
    assert not [w for w in writes if w[2].startswith(os.path.realpath(out) + os.sep)], writes
    assert str(os.getpid()) not in {pid for pid, _ev, _p in writes}
    assert len({pid for pid, _ev, _p in writes}) >= 2

    # per worker: its GPU, the kernels it ran, their wall time (no clock samples on fake GPUs)
    done = [r for r in runs if r["status"] != "died"]
    assert all(r["wall_s"] >= SLEEP_S * 0.9 and r["clocks"] is None for r in done if r["attempt"] == 1)
    # no worker (nor anything one started) is left running
    assert _children(os.getpid()) <= kids_before
    for w in workers.values():
        with pytest.raises(ProcessLookupError):
            os.kill(w["pid"], 0)
    assert checkout_state(repo) == before
    assert git(repo, "branch", "--list", f"cutile-perf-{victim}-*")


def test_gpus_are_resolved_and_more_than_present_refused(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert resolve_gpus("all", simulated=False) == ["3", "5"]
    assert resolve_gpus(2, simulated=False) == ["3", "5"]
    assert resolve_gpus("1", simulated=False) == [] and resolve_gpus(None, simulated=False) == []
    assert resolve_gpus("4", simulated=True) == ["0", "1", "2", "3"]       # fake GPUs for a simulation
    with pytest.raises(UsageError, match=r"--gpus 3: this machine has 2 GPU\(s\)"):
        resolve_gpus("3", simulated=False)
    with pytest.raises(UsageError, match="a number of GPUs"):
        resolve_gpus("two", simulated=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(UsageError, match="no GPU"):
        resolve_gpus("all", simulated=True)
    assert LocalExecutor().describe() == {"executor": "local"}            # today's default, unchanged


def test_cli_refuses_more_gpus_than_present_in_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert main(["campaign", "--gpus", "2", "--", "pytest", "tests"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cutile-diag: error: --gpus 2: this machine has 1 GPU(s)")
    assert main(["campaign", "--executor", "ray", "--gpus", "2", "--", "pytest"]) == 2
    assert "--gpus is the local executor's" in capsys.readouterr().err
    assert not (tmp_path / "cutile-diag-out").exists()                    # refused before the survey


def test_time_limit_is_spent_on_every_gpu(tmp_path):
    """Two workers: a kernel's share is its gain's share of the GPU time still free (each worker's
    time left, less what running loops hold), at most the time left; one worker: as before."""
    import time as _time

    from cutile_diag.campaign.executors.handover import Driver, Running
    ks = [KernelPlan(n, f"/r/{n}.py::{n}", f"{n}.py", expected_gain=g) for n, g in (("a", 0.4), ("b", 0.4), ("c", 0.2))]
    c = Campaign.create(tmp_path, CampaignPlan(["pytest"], "/r", True, ks, "test"), ks, time_limit=100.0,
                        simulate=None, options={}, executor={"executor": "local"})
    now = _time.monotonic()
    d = Driver(pool=None)
    d.workers = {"w0": {"gpu": 0}}
    assert d._share(c, "a", now, False, {}) == pytest.approx(40.0, abs=0.1)          # Campaign.time_share
    d.workers["w1"] = {"gpu": 1}
    assert d._share(c, "a", now, False, {}) == pytest.approx(80.0, abs=0.1)          # 200 GPU s x 0.4
    running = {"j": Running("a", "w0", "j", False, share=80.0, started=now)}
    c.mark("a", status="running")
    assert d._share(c, "b", now, False, running) == pytest.approx(80.0, abs=0.2)     # (200 - 80) x 0.4 / 0.6
    assert d._share(c, "a", now, True, {}) is None                                   # a baseline is measured whole
    c.data["spent_s"] = 90.0
    c.mark("a", status="done")
    assert d._share(c, "c", now, False, {}) == pytest.approx(20 * 0.2 / 0.6, abs=0.1)  # b and c to come
    c.mark("b", status="done")
    assert d._share(c, "c", now, False, {}) == pytest.approx(10.0, abs=0.1)          # never more than the time left
