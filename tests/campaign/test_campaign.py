"""``cutile-diag campaign`` on a fixture repository with three kernels and pytest perf tests
(CPU tensors: the survey records the launches without executing them)."""
from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest


from cutile_diag.campaign.demo import SPECS, git, make_repo, survey_command
from cutile_diag.cli import main

sys.path.insert(0, str(Path(__file__).parents[1]))
from diff.test_html_browser import browser  # noqa: E402,F401  (the headless Chromium fixture)

PYTEST = survey_command()


def checkout_state(repo: Path) -> tuple:
    """What the user sees of their checkout: HEAD, branch, index entries, status."""
    return (git(repo, "rev-parse", "HEAD"), git(repo, "branch", "--show-current"), git(repo, "ls-files", "-s"),
            git(repo, "status", "--porcelain", "--untracked-files=all"))


def run_main(argv: list[str]) -> tuple[int, str]:
    """The CLI in this process, its stdout captured (a module-scoped fixture has no capsys)."""
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(argv)
    return rc, buf.getvalue()


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """The fixture repository and its `campaign --plan --dry-run --json` (the survey is reused after)."""
    repo = make_repo(tmp_path_factory.mktemp("campaign"))
    before = checkout_state(repo)
    return (repo, before, *plan_in(repo))


def plan_in(repo: Path) -> tuple[int, dict]:
    """`campaign --plan --dry-run --json` of the fixture's perf tests, run in ``repo``."""
    cwd = os.getcwd()
    os.chdir(repo)
    try:
        rc, out = run_main(["campaign", "--plan", "--dry-run", "--json", "--", *PYTEST])
    finally:
        os.chdir(cwd)
    return rc, json.loads(out)


def test_plan_lists_the_three_kernels_with_refs_configs_and_derived_commands(planned):
    repo, before, rc, d = planned
    assert rc == 0
    ks = {k["name"]: k for k in d["plan"]["kernels"]}
    assert sorted(ks) == ["row_norm", "softmax", "vector_add"] and sorted(d["selected"]) == sorted(ks)
    va = ks["vector_add"]
    assert va["ref"] == f"{repo}/ops/vector_add.py::vector_add" and va["file"] == "ops/vector_add.py"
    assert [c["grid"] for c in va["configs"]] == [[1024], [4096]]
    assert [c["bytes"] for c in va["configs"]] == [3 * 4 * (1 << 20), 3 * 4 * (1 << 22)]
    assert va["tests"] == ["tests/test_ops.py::test_perf_vector_add[1048576]",
                           "tests/test_ops.py::test_perf_vector_add[4194304]"]
    py = sys.executable
    assert va["bench_cmd"] == (f"{py} -m pytest 'tests/test_ops.py::test_perf_vector_add[1048576]' "
                               "'tests/test_ops.py::test_perf_vector_add[4194304]' --print-record -s")
    assert va["test_cmd"] == f"{py} -m pytest tests/test_ops.py -k 'not perf'"
    # the counts the loop's roofline guard gets, keyed by test id
    assert va["counts"]["bytes"]["test_ops.py::test_perf_vector_add[4194304]"] == 3 * 4 * (1 << 22)
    assert va["counts"]["unit"] == ["f32", "cuda"]
    sm = ks["softmax"]
    assert [c["specs"]["X"] for c in sm["configs"]] == ["f16[256,1024]", "f16[1024,1024]"]
    assert ks["row_norm"]["tests"] == ["tests/test_ops.py::test_perf_row_norm"]
    # not executed: ranked by the share of the bytes moved, the largest first
    assert d["plan"]["kernels"][0]["name"] == "vector_add" and "not executed" in d["plan"]["ranked_by"]
    assert d["survey"]["complete"] and d["survey"]["launches"] == 5 and d["survey"]["tests"] == 5
    assert checkout_state(repo) == before


def test_dry_run_without_plan_or_simulate_is_refused(capsys, planned):
    assert main(["campaign", "--dry-run", "--", *PYTEST]) == 2
    assert "goes with --plan" in capsys.readouterr().err


def test_select_names_an_unknown_kernel(capsys, planned, monkeypatch):
    repo = planned[0]
    monkeypatch.chdir(repo)
    assert main(["campaign", "--plan", "--dry-run", "--select", "nope", "--", *PYTEST]) == 2
    assert "no kernel 'nope'" in capsys.readouterr().err


@pytest.fixture(scope="module")
def simulated(planned, tmp_path_factory):
    """`campaign --simulate` in a child, SIGTERM once the first loop has a ledger, then `--resume`."""
    repo, before, _rc, _d = planned
    tmp_path = tmp_path_factory.mktemp("specs")
    spec = tmp_path / "specs.json"
    spec.write_text(json.dumps(SPECS))
    out = repo / "cutile-diag-out" / "campaign"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-m", "cutile_diag", "campaign", "--simulate", str(spec),
                              "--max-iterations", "2", "--no-capture", "--", *PYTEST], cwd=repo, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first = out / "loops" / "vector_add" / "ledger.jsonl"
    deadline = time.monotonic() + 120
    while not first.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    child.send_signal(signal.SIGTERM)
    err = child.communicate(timeout=60)[1]
    killed = (child.returncode, json.loads((out / "campaign.json").read_text()), err)
    rc, d = resume_in(repo)
    return repo, before, out, killed, rc, d


def resume_in(repo: Path) -> tuple[int, dict]:
    """`campaign --resume --json` run in ``repo`` (this process): its exit code and output."""
    cwd = os.getcwd()
    os.chdir(repo)
    try:
        rc, text = run_main(["campaign", "--resume", "--json"])
    finally:
        os.chdir(cwd)
    return rc, json.loads(text)


def test_simulated_campaign_killed_then_resumed_runs_all_three_loops(simulated):
    """Every loop done after --resume, the report complete, the user's checkout untouched."""
    repo, before, out, (code, state, err), rc, d = simulated
    first = out / "loops" / "vector_add" / "ledger.jsonl"
    assert code == 143, err[-2000:]
    assert state["kernels"]["vector_add"]["status"] == "running"            # cut short, resumable
    assert state["options"]["until_roof"] == 0.9                             # a campaign goes on towards the roof
    assert "survey: complete from an earlier run" in err                     # the --plan survey was reused
    rows = {r["kernel"]: r for r in d["report"]["kernels"]}
    assert rc == 0 and sorted(rows) == ["row_norm", "softmax", "vector_add"]
    assert all(r["status"] == "done" and r["start_ms"] and r["final_ms"] for r in rows.values())
    assert rows["vector_add"]["branch"] == git(repo, "branch", "--list", "cutile-perf-vector_add-*").strip(" *+")
    # the resumed loop went on from its ledger: one baseline, not two
    led = [json.loads(x) for x in (first).read_text().splitlines()]
    assert sum(1 for r in led if r.get("type") == "iteration" and r["iteration"] == 0) == 1
    # a simulation's ratio is never a speedup: carried as simulated_speedup, labelled where shown
    assert rows["row_norm"]["speedup"] is None and rows["row_norm"]["simulated"]
    assert rows["row_norm"]["simulated_speedup"] > 1.3 and rows["row_norm"]["kept_steps"] >= 1
    # % of the datasheet roof (the specs give no ceiling): the loop's own figure, the faster kernel higher
    assert rows["row_norm"]["pct_of"] == "datasheet roof"
    assert rows["row_norm"]["final_pct"] > 1.3 * rows["row_norm"]["start_pct"] > 0
    md = (out / "campaign.md").read_text()
    for name in rows:
        assert f"ops/{name}.py::{name}" in md
    assert "[perf_results.md](loops/row_norm/perf_results.md)" in md and "[diff](diffs/row_norm.diff)" in md
    assert "ops/row_norm.py" in (out / "diffs" / "row_norm.diff").read_text()
    assert f"{rows['row_norm']['simulated_speedup']:.3f}x simulated, not a speedup" in md
    assert "nothing ran on a GPU" in md
    html = (out / "campaign.html").read_text()
    assert "x simulated, not a speedup</td>" in html and "nothing ran on a GPU" in html
    assert html.count("<tr data-kernel=") == 3 and "data:image/svg+xml;base64," in html
    assert checkout_state(repo) == before


def test_a_time_limited_campaign_gives_every_kernel_steps_in_passes(planned, tmp_path):
    """Loops whose checks and runs take wall time (the simulator's verify_s / run_s), under --time-limit: every
    kernel gets steps, in passes of a few steps each, and the time is spent, not left over.  On an H100 the
    campaign gave four of five kernels a share that held no step and ended with 60 of 397 s unused."""
    repo = planned[0]
    before = checkout_state(repo)
    spec = {k: {**v, "verify_s": 0.2, "run_s": 0.08} for k, v in SPECS.items()}
    (tmp_path / "specs.json").write_text(json.dumps(spec))
    out = tmp_path / "c"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-m", "cutile_diag", "campaign", "--out", str(out), "--simulate",
                          str(tmp_path / "specs.json"), "--no-capture", "--baselines-first", "--time-limit", "70",
                          "--", *PYTEST], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "another pass over 3 paused loop(s)" in res.stderr, res.stderr[-3000:]
    state = json.loads((out / "campaign.json").read_text())
    assert state["spent_s"] <= 70 + 10
    for name in ("vector_add", "row_norm", "softmax"):
        assert res.stderr.count(f"{name}: resuming its loop") >= 2, name        # steps in two passes or more
        led = [json.loads(x) for x in (out / "loops" / name / "ledger.jsonl").read_text().splitlines()]
        assert sum(1 for r in led if r.get("type") == "iteration") >= 3, name   # its baseline and steps
    assert checkout_state(repo) == before


def test_report_shows_percent_of_attainable_beside_the_ceiling(simulated):
    """The report places every kernel against the time attainable at its size as well as against the
    ceiling (the H200 preset's size curve): small kernels sit higher against the former."""
    _repo, _before, out, _killed, _rc, d = simulated
    rows = {r["kernel"]: r for r in d["report"]["kernels"]}
    for r in rows.values():
        assert r["final_pct_attainable"] is not None and r["final_pct_attainable"] > r["final_pct"] > 0
    assert rows["row_norm"]["final_pct_attainable"] > 1.3 * rows["row_norm"]["start_pct_attainable"]
    md = (out / "campaign.md").read_text()
    head = next(ln for ln in md.splitlines() if ln.startswith("| kernel"))
    assert head.index("final % ceiling") < head.index("start % attainable") < head.index("final % attainable")
    assert "| pytorch ms |" in head and "% attainable: of the time attainable" in md
    assert "% attainable: of the time attainable" in (out / "campaign.html").read_text()


@pytest.mark.browser
def test_report_page_in_headless_chromium(simulated, browser):  # noqa: F811  (the imported fixture)
    """The page is self-contained: its chart is an inline image that renders, and each kernel's
    row links to files that exist next to it."""
    _repo, _before, out, _killed, _rc, d = simulated
    kept = sum(1 for r in d["report"]["kernels"] if r["kept_steps"])     # a kernel with a kept step has a diff
    page = browser.new_page()
    try:
        page.goto((out / "campaign.html").as_uri())
        assert page.evaluate("document.getElementById('chart').naturalWidth") > 100
        assert page.evaluate("document.getElementById('chart').src.startsWith('data:image/svg+xml')")
        rows = page.locator("#kernels tbody tr")
        assert rows.count() == 3
        assert sorted(rows.nth(i).get_attribute("data-kernel") for i in range(3)) == ["row_norm", "softmax", "vector_add"]
        hrefs = page.evaluate("[...document.querySelectorAll('#kernels a')].map(a => a.getAttribute('href'))")
        assert kept >= 1 and len(hrefs) == 3 + kept and all((out / h).is_file() for h in hrefs)
        assert "perf_results.md" in page.inner_text("#kernels")
    finally:
        page.close()


def test_measured_survey_ranks_by_headroom_times_share(planned):
    """The survey's launches with device times (as a GPU run records them): the kernel with the most
    GPU time to give back at the measured ceiling ranks first; the gain is headroom x share."""
    from dataclasses import replace

    from cutile_diag.campaign.plan import build_plan
    from cutile_diag.campaign.survey import Survey, _load
    from cutile_diag.roofline.device import preset
    from cutile_diag.roofline.peaks import recorded_ceilings
    repo = planned[0]
    records = _load(repo / "cutile-diag-out" / "campaign" / "survey" / "records")
    ms = {"vector_add": 0.05, "softmax": 2.0, "row_norm": 0.01}
    timed = [replace(r, device_ms=ms[r.kernel], extra={**r.extra, "first": False}) for r in records]
    dev = preset("h200")
    plan = build_plan(Survey(PYTEST, str(repo), True, True, timed), repo, device=dev, ceilings=recorded_ceilings(dev))
    ks = {k.name: k for k in plan.kernels}
    assert [k.name for k in plan.kernels][0] == "softmax" and "headroom" in plan.ranked_by
    assert plan.suite_gpu_ms == pytest.approx(2 * 0.05 + 2 * 2.0 + 0.01)
    for k in ks.values():
        assert k.expected_gain == pytest.approx(k.share * k.headroom)
        assert all(c["pct_of_ceiling"] is not None and c["roof_ms"] < c["median_ms"] for c in k.configs)
    # softmax moves 5 MB in 2 ms: nearly all of its time is headroom
    assert ks["softmax"].headroom > 0.99 and ks["softmax"].share == pytest.approx(4.0 / 4.11)


def test_a_1_ms_kernel_outranks_many_2_4_us_launches(planned):
    """A simulated measured survey: softmax runs 2.4 µs a launch, 500 times per test (as split-K
    reduces do), row_norm 1 ms once.  Against the flat ceiling softmax had the most GPU time to give
    back; against what is attainable at its size (a 1.08 µs launch floor) it has 1.3 µs a launch at
    most, so the 1 ms kernel ranks first; softmax's 1 MB configuration is reported launch-bound."""
    from dataclasses import replace

    from cutile_diag.campaign.plan import build_plan
    from cutile_diag.campaign.survey import Survey, _load
    from cutile_diag.roofline.device import preset
    from cutile_diag.roofline.peaks import recorded_ceilings
    repo = planned[0]
    records = _load(repo / "cutile-diag-out" / "campaign" / "survey" / "records")
    small = [replace(r, device_ms=0.0024, extra={**r.extra, "first": False}) for r in records if r.kernel == "softmax"]
    big = [replace(r, device_ms=1.0, extra={**r.extra, "first": False}) for r in records if r.kernel == "row_norm"]
    dev = preset("h200")
    plan = build_plan(Survey(PYTEST, str(repo), True, True, small * 500 + big), repo, device=dev,
                      ceilings=recorded_ceilings(dev))
    ks = {k.name: k for k in plan.kernels}
    assert [k.name for k in plan.kernels] == ["row_norm", "softmax"]
    assert ks["softmax"].gpu_ms > ks["row_norm"].gpu_ms                  # more GPU time, less of it to gain
    flat_gain = sum(c["calls"] * (c["median_ms"] - c["roof_ms"]) for c in ks["softmax"].configs)
    assert flat_gain > ks["row_norm"].gpu_ms - sum(c["calls"] * c["roof_ms"] for c in ks["row_norm"].configs)
    for k in ks.values():
        assert all(c["attainable_ms"] >= c["floor_ms"] > 0 for c in k.configs)
    one_mb = min(ks["softmax"].configs, key=lambda c: c["bytes"])
    assert one_mb["bound"] == "memory" and 1.08e-3 < one_mb["attainable_ms"] < 1.4e-3   # 1 MB: 0.78 TB/s
    assert ks["softmax"].expected_gain < ks["row_norm"].expected_gain
    assert ks["softmax"].headroom < 0.6 and "attainable" in plan.ranked_by
    # on a GPU whose launch floor is 2 µs the 1 MB configuration is at its floor: launch-bound, its gain 0.4 µs
    ceil = recorded_ceilings(dev)
    ceil.curve.floor_ms = 2e-3
    plan = build_plan(Survey(PYTEST, str(repo), True, True, small * 500 + big), repo, device=dev, ceilings=ceil)
    one_mb = min(plan.kernel("softmax").configs, key=lambda c: c["bytes"])
    assert one_mb["bound"] == "launch" and one_mb["attainable_ms"] == pytest.approx(2e-3)
    d = {k["name"]: k for k in json.loads(json.dumps(plan.to_json()))["kernels"]}      # what --plan --json prints
    assert sorted(c["bound"] for c in d["softmax"]["configs"]) == ["launch", "memory"]


def test_time_limit_is_split_by_expected_gain_and_paused_loops_resume(tmp_path):
    import time as _time

    from cutile_diag.campaign.plan import CampaignPlan, KernelPlan
    from cutile_diag.campaign.run import Campaign
    ks = [KernelPlan("a", "/r/a.py::a", "a.py", expected_gain=0.6), KernelPlan("b", "/r/b.py::b", "b.py", expected_gain=0.2)]
    c = Campaign.create(tmp_path, CampaignPlan(["pytest"], "/r", True, ks, "test"), ks, time_limit=100.0,
                        simulate=None, options={}, executor={"executor": "local"})
    now = _time.monotonic()
    assert c.time_share("a", now) == pytest.approx(75.0, abs=0.1)
    c.mark("a", status="done")
    c.data["spent_s"] = 70.0
    assert c.time_share("b", now) == pytest.approx(30.0, abs=0.1)       # all that is left goes to the last one
    c.mark("b", status="paused")
    assert Campaign.load(tmp_path).todo() == ["b"]                       # a paused loop resumes


def test_derived_commands_from_a_relative_repository_root(tmp_path, monkeypatch):
    """`./dev demo` runs where it is called with a relative --out: the repository root can be
    relative while the test files resolve to absolute paths."""
    from cutile_diag.campaign.plan import _commands
    (tmp_path / "r" / "tests").mkdir(parents=True)
    (tmp_path / "r" / "tests" / "test_x.py").write_text("def test_a(): pass\n")
    monkeypatch.chdir(tmp_path)
    check, bench, ids = _commands(["pytest", "tests", "-k", "test_perf"], ["tests/test_x.py::test_a"],
                                  cwd=Path("r").resolve(), root=Path("r"))
    assert ids == ["tests/test_x.py::test_a"] and check and bench and "tests/test_x.py" in bench


def test_a_repository_inside_another_project_gets_commands_that_run_from_its_root(tmp_path):
    """`./dev demo` in a fresh clone makes its campaign repository under the clone's cutile-diag-out/: pytest's
    rootdir is then the clone (its pyproject.toml configures pytest) and node ids are relative to it. The derived
    commands run from the inner repository, so their test paths must be relative to it (they were not: every
    kernel's correctness command "could not be collected" and the demo exited 2)."""
    outer = tmp_path / "project"
    outer.mkdir()
    (outer / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = \"\"\n")
    rc, doc = plan_in(make_repo(outer / "cutile-diag-out"))
    ks = {k["name"]: k for k in doc["plan"]["kernels"]}
    assert rc == 0 and all(k["ok"] and not k["problems"] for k in ks.values()), [k["problems"] for k in ks.values()]
    va = ks["vector_add"]
    assert va["tests"][0] == "tests/test_ops.py::test_perf_vector_add[1048576]"
    assert va["test_cmd"].endswith("-m pytest tests/test_ops.py -k 'not perf'")


def simulated_campaign(repo: Path, tmp_path: Path, options: dict, specs: dict | None = None, **kw):
    """A campaign of row_norm (expected gain 0.7) and vector_add (0.3) of ``repo`` on simulated GPUs
    (``specs``: each kernel's spec, default SPECS), its plan made here (no survey)."""
    from cutile_diag.campaign.plan import CampaignPlan, KernelPlan
    from cutile_diag.campaign.run import Campaign
    out = repo / "cutile-diag-out" / "campaign"
    out.mkdir(parents=True)
    ks = [KernelPlan(n, f"{repo}/ops/{n}.py::{n}", f"ops/{n}.py", expected_gain=g)
          for n, g in (("row_norm", 0.7), ("vector_add", 0.3))]
    sims = {}
    for k in ks:
        sims[k.name] = str(tmp_path / f"{k.name}.json")
        Path(sims[k.name]).write_text(json.dumps((specs or SPECS)[k.name]))
    c = Campaign.create(out, CampaignPlan(["pytest"], str(repo), False, ks, "test"), ks, time_limit=None,
                        simulate=sims, options=options, executor={"executor": "local"}, **kw)
    return c, ks


def test_baselines_first_measures_every_kernel_before_any_step(tmp_path):
    """--baselines-first on the local executor: each kernel's baseline (a loop stopped after
    iteration 0, paused), then the loops go on from their ledgers, best expected gain first."""
    from cutile_diag.campaign.executors.local import LocalExecutor
    from cutile_diag.campaign.report import write_report
    from cutile_diag.campaign.run import run_campaign
    repo = make_repo(tmp_path, ("vector_add", "row_norm"))
    before = checkout_state(repo)
    out = repo / "cutile-diag-out" / "campaign"
    c, ks = simulated_campaign(repo, tmp_path, {"max_iterations": 1, "capture": False}, baselines_first=True)
    lines: list[str] = []
    run_campaign(c, LocalExecutor(), echo=lines.append)
    own = [ln for ln in lines if ln.startswith("[")]          # the executor's lines, not the loops'
    # the simulated latencies carry the simulator's noise: the lines' shape and order are what is pinned
    shape = [re.sub(r"baseline \d+\.\d+ ms", "baseline X ms", ln) for ln in own]
    assert shape == [
        "[1/2] row_norm: its baseline", "[1/2] row_norm: baseline X ms; its steps come after every baseline",
        "[2/2] vector_add: its baseline", "[2/2] vector_add: baseline X ms; its steps come after every baseline",
        "[1/2] row_norm: resuming its loop", shape[5], "[2/2] vector_add: resuming its loop", shape[7]], own
    assert own[5].startswith("[1/2] row_norm: max-iterations, ") and own[7].startswith("[2/2] vector_add: max-iter")
    for k in ks:
        led = [json.loads(x) for x in (out / "loops" / k.name / "ledger.jsonl").read_text().splitlines()]
        kinds = [(r["type"], r.get("iteration"), r.get("rule")) for r in led]
        assert kinds[:4] == [("setup", None, None), ("begin", 0, None), ("iteration", 0, None),
                             ("stop", None, "baseline-only")]
        assert ("iteration", 1, None) in kinds and c.state(k.name)["status"] == "done"
    rep = write_report(c)
    assert all(r["start_ms"] and r["kept_steps"] is not None for r in rep["kernels"])
    assert checkout_state(repo) == before


def test_a_kernel_at_its_roof_after_its_baseline_is_done_and_takes_no_step(tmp_path):
    """--until-roof F: a kernel whose baseline is already at F of the time attainable at its size is done after its
    baseline (an H100 campaign gave 58 s of 548 to a dropout at 97.5 %); the kernel below it gets the steps."""
    from cutile_diag.campaign.executors.local import LocalExecutor
    from cutile_diag.campaign.run import run_campaign
    repo = make_repo(tmp_path, ("vector_add", "row_norm"))
    ceiling = {"dram_tbps": 4.24, "cached": True, "curve": True}
    specs = {"vector_add": {"configs": {"lse": 0.012}, "bytes": {"lse": 33.6e6}, "ceiling": ceiling,
                            "effects": {"persistent_grid": 0.85, "latency_hints": 0.92}},
             "row_norm": {**SPECS["row_norm"], "ceiling": ceiling}}
    c, ks = simulated_campaign(repo, tmp_path, {"max_iterations": 2, "capture": False, "until_roof": 0.9}, specs,
                               baselines_first=True)
    lines: list[str] = []
    run_campaign(c, LocalExecutor(), echo=lines.append)
    own = [ln for ln in lines if ln.startswith("[")]
    assert own[3].startswith("[2/2] vector_add: done: the kept version is at 9") and \
        "% of the attainable time at its size, at or above --until-roof 0.9" in own[3], own
    assert not any("vector_add: resuming" in ln for ln in own), own
    out = repo / "cutile-diag-out" / "campaign" / "loops"
    va = [json.loads(x) for x in (out / "vector_add" / "ledger.jsonl").read_text().splitlines()]
    assert [r.get("iteration") for r in va if r["type"] == "iteration"] == [0]
    assert c.state("vector_add")["status"] == "done" and c.state("vector_add")["result"]["stop_rule"] == "at-roof"
    rn = [json.loads(x) for x in (out / "row_norm" / "ledger.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rn if r["type"] == "iteration"] == [0, 1, 2]


def test_a_step_share_holds_one_step_of_the_best_kernel_first(tmp_path):
    """With the loops' costs known (their baselines), the kernel of the larger expected gain gets
    at least one step's time while that much is left; the others get their share of the rest."""
    import time as _time

    from cutile_diag.campaign.plan import CampaignPlan, KernelPlan
    from cutile_diag.campaign.run import Campaign
    from cutile_diag.ledger import Ledger
    ks = [KernelPlan("a", "/r/a.py::a", "a.py", expected_gain=0.5), KernelPlan("b", "/r/b.py::b", "b.py", expected_gain=0.5)]
    c = Campaign.create(tmp_path, CampaignPlan(["pytest"], "/r", True, ks, "test"), ks, time_limit=100.0,
                        simulate=None, options={"rounds": 2}, executor={"executor": "local"}, baselines_first=True)
    now = _time.monotonic()
    assert c.todo(baseline_only=True) == ["a", "b"] and c.phases() == [True, False]
    assert c.time_share("a", now, baseline_only=True) is None           # a baseline is measured whole
    assert c.step_cost("a") is None and c.time_share("a", now) == pytest.approx(50.0, abs=0.1)
    for k in ks:
        Ledger(c.ledger_dir(k.name)).adopt([{"type": "setup"}, {"type": "iteration", "iteration": 0, "status": "keep",
                                                                    "costs": {"verify_s": 14.0, "run_s": 10.0}}])
    assert c.todo(baseline_only=True) == []                              # both measured
    step = (14.0 + 2 * 2 * 10.0) / 0.85                                   # one check, one comparison of 2 rounds
    assert c.step_cost("a") == pytest.approx(step)
    least = 1.2 * step + 5.0                                             # with slack, and the paused loop's start
    assert c.share_bounds("a")[0] == pytest.approx(least)
    assert c.time_share("a", now) == pytest.approx(least, abs=0.1)       # 50 s would not hold one step
    c.data["spent_s"] = 95.0
    now = _time.monotonic()                   # the clock runs until the call: 5 s left from here
    assert c.time_share("b", now) == 0.0                                 # 5 s left: no step fits, not started
    c.data["time_limit_s"] = 1.0
    assert c.time_share("a", now, baseline_only=True) == 0.0             # no time left: not started


def test_time_a_loop_leaves_goes_to_more_passes_while_they_measure_something(tmp_path):
    """A loop that stops before its share ends (its next step would not fit, nothing left to try) leaves the time to
    further passes over the paused loops: an H100 campaign ended with 60 of 397 s unused and four of five kernels
    paused without a step.  Passes end when one measures nothing, or when no paused loop's step fits."""
    import time as _time

    from cutile_diag.campaign.plan import CampaignPlan, KernelPlan
    from cutile_diag.campaign.run import Campaign
    from cutile_diag.ledger import Ledger
    ks = [KernelPlan("a", "/r/a.py::a", "a.py", expected_gain=0.5), KernelPlan("b", "/r/b.py::b", "b.py", expected_gain=0.5)]
    c = Campaign.create(tmp_path, CampaignPlan(["pytest"], "/r", True, ks, "test"), ks, time_limit=300.0,
                        simulate=None, options={"rounds": 2}, executor={"executor": "local"}, baselines_first=True)
    led = {k.name: Ledger(c.ledger_dir(k.name)) for k in ks}
    base = {"type": "iteration", "iteration": 0, "status": "keep", "costs": {"verify_s": 4.0, "run_s": 1.0}}
    passes, lines = [], []
    now = _time.monotonic()
    for baseline_only in c.passes(now, lines.append):
        passes.append(baseline_only)
        if baseline_only:
            for k in ks:
                led[k.name].adopt([{"type": "setup"}, base])
            c.data["spent_s"] = 100.0
            continue
        if len(passes) == 2:                # a pass gives a loop at most 4 steps (its half of 200 s would be 100)
            step = (4.0 + 2 * 2 * 1.0) / 0.85
            assert c.share_bounds("a")[1] == pytest.approx(4 * 1.2 * step + 5.0)
            assert c.time_share("a", _time.monotonic()) == pytest.approx(c.share_bounds("a")[1], abs=0.1)
        if len(passes) <= 4:                # the steps: a measures one iteration a pass, b stops at once
            n = len(led["a"].iterations)
            led["a"].adopt([{"type": "setup"}, *led["a"].iterations, {**base, "iteration": n, "status": "revert"}])
            c.data["spent_s"] += 40.0
            for k in ks:
                c.mark(k.name, status="paused")
        assert len(passes) < 10
    # baselines, steps, two more passes that measured something, one that measured nothing
    assert passes == [True, False, False, False, False], passes
    assert len(lines) == 3 and all("another pass over 2 paused loop(s)" in ln for ln in lines), lines
    # no paused loop's step fits in what is left: no pass, and a kernel is not started
    (tmp_path / "c2").mkdir()
    c2 = Campaign.create(tmp_path / "c2", CampaignPlan(["pytest"], "/r", True, ks, "test"), ks, time_limit=20.0,
                         simulate=None, options={"rounds": 2}, executor={"executor": "local"})
    step = [{"type": "setup"}, {**base, "costs": {"verify_s": 40.0, "run_s": 10.0}}]
    Ledger(c2.ledger_dir("a")).adopt(step)
    it = c2.passes(_time.monotonic())
    assert next(it) is False
    Ledger(c2.ledger_dir("a")).adopt([*step, {**step[1], "iteration": 1}])     # the pass measured something
    assert list(it) == [] and c2.time_share("a", _time.monotonic()) == 0.0


def test_a_loop_that_yielded_waits_until_the_others_have_had_their_steps(tmp_path):
    """A loop with no move expected to gain stops (rule ``unpromising``: the campaign's loops run with ``yield_flat``
    while another kernel is to do) and is left out of the passes while another loop can take a step; then the passes
    explore: the yielded loops go on without yielding.  On an H100 geglu's loop spent three steps expected at x1.000
    beside its x0.893 keep while the layer norm waited."""
    import time as _time

    from cutile_diag.campaign.plan import CampaignPlan, KernelPlan
    from cutile_diag.campaign.run import Campaign, record_outcome
    from cutile_diag.ledger import Ledger
    ks = [KernelPlan("a", "/r/a.py::a", "a.py", expected_gain=0.5), KernelPlan("b", "/r/b.py::b", "b.py", expected_gain=0.5)]
    c = Campaign.create(tmp_path, CampaignPlan(["pytest"], "/r", True, ks, "test"), ks, time_limit=600.0,
                        simulate=None, options={"rounds": 2}, executor={"executor": "local"}, baselines_first=True)
    led = {k.name: Ledger(c.ledger_dir(k.name)) for k in ks}
    base = {"type": "iteration", "iteration": 0, "status": "keep", "costs": {"verify_s": 4.0, "run_s": 1.0}}

    def step(name: str, rule: str) -> None:
        n = len(led[name].iterations)
        led[name].adopt([{"type": "setup"}, *led[name].iterations, {**base, "iteration": n, "status": "revert"}])
        end(name, rule)

    def end(name: str, rule: str) -> None:
        record_outcome(c, name, {"status": "done", "result": {"stop_rule": rule, "state_dir": str(c.ledger_dir(name)),
                                                              "branch": f"b-{name}"}})
        c.data["spent_s"] += 20.0

    seen, lines = [], []
    for baseline_only in c.passes(_time.monotonic(), lines.append):
        seen.append((baseline_only, c.explore, c.todo()))
        yields = {n: c.job(n, 50.0).options.get("yield_flat") for n in c.todo()}
        if baseline_only:
            for k in ks:
                led[k.name].adopt([{"type": "setup"}, base])
                end(k.name, "baseline-only")
        elif len(seen) == 2:              # both step; a has nothing promising left
            assert yields == {"a": True, "b": True}
            step("a", "unpromising")
            step("b", "time-limit")
        elif len(seen) == 3:              # b alone: nothing to yield to
            assert yields == {"b": None}
            step("b", "unpromising")
        elif len(seen) == 4:              # every loop yielded: they go on, without yielding
            assert yields == {"a": None, "b": None}
            step("a", "time-limit")
        assert len(seen) < 8
    assert seen == [(True, False, ["a", "b"]), (False, False, ["a", "b"]), (False, False, ["b"]),
                    (False, True, ["a", "b"]), (False, True, ["a", "b"])], seen
    assert c.state("a")["unpromising"] is False and c.state("a")["status"] == "paused"
    assert any("the loops that yielded go on with their less promising moves" in ln for ln in lines), lines
    # resumed without a time limit, a loop that yielded goes on (once: it no longer yields)
    c.mark("b", status="paused", unpromising=True)
    again = Campaign.load(tmp_path)
    again.data["time_limit_s"] = None
    assert again.todo() == ["a"]
    runs = [(b, again.todo()) for b in again.passes(_time.monotonic())]
    assert runs == [(True, ["a"]), (False, ["a"]), (False, ["a", "b"])], runs      # its phases, then b too
    assert again.job("b", None).options.get("yield_flat") is None


def test_once_measured_a_kernel_shares_the_time_by_what_its_own_measurements_say_it_can_give_back(tmp_path):
    """The survey's launch times carry the observer's and the host's overhead; once a loop has measured a version,
    its roofline (latency against the attainable time, per configuration of the plan) ranks it instead."""
    import time as _time

    from cutile_diag.campaign.plan import CampaignPlan, KernelPlan
    from cutile_diag.campaign.run import Campaign
    from cutile_diag.ledger import Ledger

    def cfg(name, calls):
        return {"label": name, "calls": calls, "replay": f"/r/out/survey/replay/{name}", "tests": [f"tests/t.py::{name}"]}
    ks = [KernelPlan("a", "/r/a.py::a", "a.py", configs=[cfg("a-1", 10), cfg("a-2", 10)], expected_gain=0.6),
          KernelPlan("b", "/r/b.py::b", "b.py", configs=[cfg("b-1", 20)], expected_gain=0.2)]
    plan = CampaignPlan(["pytest"], "/r", True, ks, "test", suite_gpu_ms=10.0)
    c = Campaign.create(tmp_path, plan, ks, time_limit=100.0, simulate=None, options={"rounds": 2},
                        executor={"executor": "local"}, baselines_first=True)
    now = _time.monotonic()
    assert c.gain("a") == 0.6 and c.time_share("a", now) == pytest.approx(75.0, abs=0.1)    # the plan's, unmeasured

    def point(lat, att):
        return {"latency_ms": lat, "attainable_ms": att}
    Ledger(c.ledger_dir("a")).adopt([{"type": "setup"}, {"type": "iteration", "iteration": 0, "status": "keep",
                                     "roofline": {"a-1": point(0.0155, 0.0134), "a-2": point(0.053, 0.0466)}}])
    Ledger(c.ledger_dir("b")).adopt([
        {"type": "setup"},
        {"type": "iteration", "iteration": 0, "status": "keep", "roofline": {"tests/t.py::b-1": point(0.10, 0.05)}},
        {"type": "iteration", "iteration": 1, "status": "revert", "roofline": {"tests/t.py::b-1": point(0.09, 0.05)}},
        {"type": "iteration", "iteration": 2, "status": "keep", "roofline": {"tests/t.py::b-1": point(0.08, 0.05)}}])
    assert c.gain("a") == pytest.approx((10 * 0.0021 + 10 * 0.0064) / 10.0)
    assert c.gain("b") == pytest.approx(20 * 0.03 / 10.0)              # the latest kept version's, matched by test id
    assert c.time_share("b", now) > c.time_share("a", now)
    # a share asks every kernel's ledger: read once, and again only once its file changed
    reads = []
    real = Ledger.load
    import unittest.mock as _mock
    with _mock.patch.object(Ledger, "load", classmethod(lambda cls, d, **kw: reads.append(d) or real(d, **kw))):
        c.time_share("a", now)
        c.time_share("b", now)
        assert reads == []
        Ledger(c.ledger_dir("a")).adopt([{"type": "setup"}, {"type": "iteration", "iteration": 0, "status": "keep",
                                         "roofline": {"a-1": point(0.0134, 0.0134), "a-2": point(0.0466, 0.0466)}}])
        assert c.gain("a") == 0.0 and reads == [c.ledger_dir("a")]
