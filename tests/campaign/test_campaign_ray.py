"""The campaign on Ray: a local instance with two fake GPUs, simulated loops, one actor killed
mid-loop: its kernel is recorded as crashed, retried once on another actor, nothing is lost.
(Ray is in the test extra; starting a local instance takes ~25 s of it on a 2-core machine.)"""
from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_campaign import checkout_state  # noqa: E402

ray = pytest.importorskip("ray")

from cutile_diag.campaign.demo import SPECS, git, make_repo  # noqa: E402
from cutile_diag.campaign.executors.ray import NAMESPACE, RayExecutor  # noqa: E402
from cutile_diag.campaign.plan import CampaignPlan, KernelPlan  # noqa: E402
from cutile_diag.campaign.report import write_report  # noqa: E402
from cutile_diag.campaign.run import Campaign, run_campaign  # noqa: E402


@pytest.fixture
def local_ray():
    ray.init(num_gpus=2, num_cpus=2, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _kill_first_worker(state: Path, killed: list) -> None:
    """Kill the actor of the first kernel whose loop has started (its ledger exists)."""
    end = time.monotonic() + 120
    while time.monotonic() < end:
        try:
            d = json.loads(state.read_text())
        except (OSError, json.JSONDecodeError):
            time.sleep(0.05)
            continue
        for name, st in d["kernels"].items():
            if st.get("worker") and (state.parent / "loops" / name / "ledger.jsonl").exists():
                ray.kill(ray.get_actor(st["worker"], namespace=NAMESPACE))
                killed.append((name, st["worker"]))
                return
        time.sleep(0.05)


def test_ray_actor_killed_mid_loop_its_kernel_is_retried_and_the_report_is_complete(tmp_path, local_ray):
    repo = make_repo(tmp_path)
    before = checkout_state(repo)
    out = repo / "cutile-diag-out" / "campaign"
    out.mkdir(parents=True)
    # the executor's test needs no survey: a plan of two kernels of the fixture repository
    kernels = [KernelPlan(n, f"{repo}/ops/{n}.py::{n}", f"ops/{n}.py", expected_gain=g)
               for n, g in (("vector_add", 0.6), ("row_norm", 0.4))]
    plan = CampaignPlan(["pytest"], str(repo), False, kernels, "test")
    sims = {}
    for k in kernels:
        sims[k.name] = str(tmp_path / f"{k.name}.json")
        Path(sims[k.name]).write_text(json.dumps(SPECS[k.name]))
    c = Campaign.create(out, plan, kernels, time_limit=None, simulate=sims,
                        options={"max_iterations": 2, "capture": False}, executor={"executor": "ray"})
    killed: list = []
    watcher = threading.Thread(target=_kill_first_worker, args=(c.path, killed), daemon=True)
    watcher.start()
    lines: list[str] = []
    run_campaign(c, RayExecutor(), echo=lines.append)
    rep = write_report(c)
    watcher.join(timeout=5)
    assert killed, "no actor was killed"
    victim, dead = killed[0]
    rows = {r["kernel"]: r for r in rep["kernels"]}
    assert sorted(rows) == ["row_norm", "vector_add"]
    assert all(r["status"] == "done" and r["final_ms"] for r in rows.values()), lines
    st = c.state(victim)
    assert st["crashes"] == 1 and st["attempts"] == 2 and st["worker"] != dead     # retried on another actor
    assert any(f"{victim}: its Ray actor died mid-loop" in ln for ln in lines)
    assert any(f"{victim}: retried once" in ln for ln in lines)
    # one baseline in the retried loop's ledger: the retry resumed the loop
    led = [json.loads(x) for x in (out / "loops" / victim / "ledger.jsonl").read_text().splitlines()]
    assert sum(1 for r in led if r.get("type") == "iteration" and r["iteration"] == 0) == 1
    assert (out / "campaign.html").read_text().count("<tr data-kernel=") == 2
    assert checkout_state(repo) == before
    assert git(repo, "branch", "--list", f"cutile-perf-{victim}-*")
