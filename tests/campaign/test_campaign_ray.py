"""The campaign on Ray: a local instance with two fake GPUs, simulated loops, every baseline first,
one actor killed mid-loop: its kernel is recorded as crashed, retried once on another actor from
the driver's ledger, nothing is lost; no actor process writes anything under the campaign's folder
(an audit hook in every Ray worker logs their writes).  (Ray is in the test extra; starting a
local instance takes ~25 s of it on a 2-core machine.)"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from audit_writes import audit_source  # noqa: E402
from test_campaign import checkout_state  # noqa: E402

ray = pytest.importorskip("ray")

from cutile_diag.campaign.demo import SPECS, git, make_repo  # noqa: E402
from cutile_diag.campaign.executors.ray import NAMESPACE, RayExecutor  # noqa: E402
from cutile_diag.campaign.plan import CampaignPlan, KernelPlan  # noqa: E402
from cutile_diag.campaign.report import write_report  # noqa: E402
from cutile_diag.campaign.run import Campaign, run_campaign  # noqa: E402


def _audit(watch: str, log: str):
    """A Ray worker setup hook: every file a worker process opens for writing or renames onto, under
    ``watch`` or in an actor's loop scratch folder, is logged with the writer's pid."""
    code = audit_source(watch, log)

    def install():
        exec(code, {})
    return install


@pytest.fixture
def repo_and_ray(tmp_path):
    repo = make_repo(tmp_path)
    out = repo / "cutile-diag-out" / "campaign"
    out.mkdir(parents=True)
    log = tmp_path / "worker-writes.log"
    log.write_text("")
    ray.init(num_gpus=2, num_cpus=2, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False,
             runtime_env={"worker_process_setup_hook": _audit(os.path.realpath(out), str(log))})
    yield repo, out, log
    ray.shutdown()


def _records(path: Path) -> list[dict]:
    try:
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    except (OSError, json.JSONDecodeError):
        return []


def _kill_mid_step(state: Path, killed: list) -> None:
    """Kill the actor of the first kernel whose loop has begun a step (iteration >= 1, after every
    baseline), keeping what the driver's ledger held at that moment."""
    end = time.monotonic() + 240
    while time.monotonic() < end:
        try:
            d = json.loads(state.read_text())
        except (OSError, json.JSONDecodeError):
            time.sleep(0.05)
            continue
        for name, st in d["kernels"].items():
            led = state.parent / "loops" / name / "ledger.jsonl"
            recs = _records(led)
            if st.get("worker") and st["status"] == "running" and \
                    any(r["type"] == "begin" and r["iteration"] >= 1 for r in recs):
                ray.kill(ray.get_actor(st["worker"], namespace=NAMESPACE))
                killed.append((name, st["worker"], _records(led)))
                return
        time.sleep(0.05)


def test_ray_actor_killed_mid_loop_its_kernel_is_retried_from_the_driver_ledger(repo_and_ray):
    repo, out, log = repo_and_ray
    before = checkout_state(repo)
    # the executor's test needs no survey: a plan of two kernels of the fixture repository
    kernels = [KernelPlan(n, f"{repo}/ops/{n}.py::{n}", f"ops/{n}.py", expected_gain=g)
               for n, g in (("vector_add", 0.6), ("row_norm", 0.4))]
    plan = CampaignPlan(["pytest"], str(repo), False, kernels, "test")
    sims = {}
    for k in kernels:
        sims[k.name] = str(out / "simulate" / f"{k.name}.json")
        Path(sims[k.name]).parent.mkdir(exist_ok=True)
        Path(sims[k.name]).write_text(json.dumps(SPECS[k.name]))
    c = Campaign.create(out, plan, kernels, time_limit=None, simulate=sims, baselines_first=True,
                        options={"max_iterations": 2, "capture": False}, executor={"executor": "ray"})
    c.data["roof_device"] = "h200"                  # the simulation's device (as `campaign --simulate` sets it)
    killed: list = []
    watcher = threading.Thread(target=_kill_mid_step, args=(c.path, killed), daemon=True)
    watcher.start()
    lines: list[str] = []
    run_campaign(c, RayExecutor(), echo=lines.append)
    rep = write_report(c)
    watcher.join(timeout=5)
    assert killed, f"no actor was killed: {lines}"
    victim, dead, held = killed[0]

    # every baseline before any step: both baselines dispatched and measured before a loop resumed
    first_step = next(i for i, ln in enumerate(lines) if ": resuming its loop on " in ln)
    assert sum(": its baseline on " in ln for ln in lines[:first_step]) == 2, lines
    assert sum("its steps come after every baseline" in ln for ln in lines[:first_step]) == 2, lines

    rows = {r["kernel"]: r for r in rep["kernels"]}
    assert sorted(rows) == ["row_norm", "vector_add"]
    assert all(r["status"] == "done" and r["start_ms"] and r["final_ms"] and r["start_pct"] for r in rows.values()), rows
    st = c.state(victim)
    assert st["crashes"] == 1 and st["worker"] != dead                       # retried on another actor
    assert any(f"{victim}: its Ray actor died mid-loop" in ln for ln in lines)
    assert any(f"{victim}: retried once" in ln for ln in lines)

    # nothing lost: the driver's ledger at the kill is the start of the final one; one baseline
    led = _records(out / "loops" / victim / "ledger.jsonl")
    assert held and led[:len(held)] == held and len(led) > len(held)
    assert sum(1 for r in led if r["type"] == "iteration" and r["iteration"] == 0) == 1
    assert any(r["type"] == "stop" and r["rule"] == "baseline-only" for r in led)
    assert (out / "loops" / victim / "perf_results.md").read_text().count("\n| ") >= 2
    assert Path(st["state_dir"]) == out / "loops" / victim and rows[victim]["table"].startswith(str(out))

    # the driver wrote the campaign's folder; the actors wrote only their scratch folders
    writes = [ln.split(" ", 2) for ln in log.read_text().splitlines()]
    assert writes and all("cutile-diag-worker-loops-" in p for _pid, _ev, p in writes)     # the hook saw the actors
    assert not [w for w in writes if w[2].startswith(os.path.realpath(out) + os.sep)], writes
    assert str(os.getpid()) not in {pid for pid, _ev, _p in writes}

    assert (out / "campaign.html").read_text().count("<tr data-kernel=") == 2
    assert checkout_state(repo) == before
    assert git(repo, "branch", "--list", f"cutile-perf-{victim}-*")


def test_an_actor_may_not_write_the_campaign_folder(tmp_path):
    """The guard every actor installs: writes under the campaign's folder raise, elsewhere they do not."""
    import subprocess
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    out.mkdir()
    scratch.mkdir()
    code = (f"from cutile_diag.campaign.executors.handover import forbid_writes; import os, pathlib\n"
            f"forbid_writes({str(out)!r})\n"
            f"pathlib.Path({str(scratch / 'ok')!r}).write_text('x')\n"
            f"for f in (lambda: open({str(out / 'a')!r}, 'w'), lambda: os.replace({str(scratch / 'ok')!r}, {str(out / 'b')!r}),\n"
            f"          lambda: os.mkdir({str(out / 'c')!r}), lambda: os.open({str(out / 'd')!r}, os.O_CREAT | os.O_WRONLY)):\n"
            f"    try:\n        f()\n    except PermissionError as e:\n        print('refused', e)\n"
            f"print(open({str(scratch / 'ok')!r}).read())\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")})
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("refused") == 4 and "the driver writes it" in res.stdout
    assert res.stdout.rstrip().endswith("x") and sorted(os.listdir(out)) == []


def _descendants(pid: int) -> dict[int, str]:
    """pid -> start time of every process below ``pid`` (Linux /proc)."""
    kids: dict[int, list] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                rest = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            kids.setdefault(int(rest[1]), []).append((int(d), rest[19]))
    out, stack = {}, [pid]
    while stack:
        for c, start in kids.get(stack.pop(), []):
            out[c] = start
            stack.append(c)
    return out


def _alive(procs: dict[int, str], width: int = 80) -> list[str]:
    left = []
    for pid, start in procs.items():
        try:
            rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if rest[19] == start and rest[0] not in "ZX":
            left.append(Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:width])
    return left


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_simulated_ray_campaign_needs_no_gpu_and_a_kill_leaves_no_ray_process(tmp_path):
    """`campaign --executor ray --simulate` on a machine without GPUs runs (actors of no GPU); after a
    kill -9 of it, nothing it started (ray::DashboardAgent, ray::RuntimeEnvAgent, ...) runs on."""
    import subprocess
    from test_campaign import PYTEST
    repo = make_repo(tmp_path, ("vector_add", "row_norm"))
    spec = tmp_path / "specs.json"
    spec.write_text(json.dumps({k: SPECS[k] for k in ("vector_add", "row_norm")}))
    out = repo / "cutile-diag-out" / "campaign"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")]),
           "CUDA_VISIBLE_DEVICES": ""}
    log = tmp_path / "campaign.log"
    with open(log, "w") as f:
        child = subprocess.Popen([sys.executable, "-m", "cutile_diag", "campaign", "--executor", "ray", "--simulate",
                                  str(spec), "--max-iterations", "6", "--no-capture", "--", *PYTEST],
                                 cwd=repo, env=env, stdout=f, stderr=subprocess.STDOUT)
    # Ray starts its processes in the background: on two loaded cores the raylet and the workers' titles
    # ("ray::...") can come seconds after the first ledger record, and on idle cores a simulated loop can be over
    # (its actors gone) seconds after it: every descendant seen while the campaign runs is watched
    below: dict[int, str] = {}
    end, ray_seen, started = time.monotonic() + 300, False, False
    while child.poll() is None and time.monotonic() < end and not (ray_seen and started):
        below.update(_descendants(child.pid))
        ray_seen = ray_seen or any("ray::" in x or "raylet" in x for x in _alive(below, width=4096))
        started = started or any(_records(out / "loops" / k / "ledger.jsonl") for k in ("vector_add", "row_norm"))
        time.sleep(0.5)
    assert child.poll() is None, log.read_text()[-3000:]
    assert ray_seen and started, (ray_seen, started, _alive(below))
    below.update(_descendants(child.pid))
    child.kill()
    child.wait()
    end = time.monotonic() + 60
    while _alive(below) and time.monotonic() < end:
        time.sleep(1.0)
    assert not _alive(below), _alive(below)
    assert "ray: 2 actor(s), simulated GPUs" in log.read_text()
