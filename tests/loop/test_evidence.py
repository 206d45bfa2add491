"""The loop's per-version evidence: capture sources, the IR diff line, no-op steps."""
import json

from cutile_diag.loop import decide
from cutile_diag.loop.evidence import (capture_sources, changed_outside_kernel, diff_line, iteration_evidence, no_op,
                                       uncredit)


def _cap(tmp_path, name, grid):
    d = tmp_path / name
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({"launch": {"grid": grid, "args": [{"name": "X", "spec": "f16[8]"}]}}))
    return str(d)


def test_capture_sources_follow_the_backend(tmp_path):
    assert capture_sources({"backend": "workload", "workload": "examples:row_norm", "kwargs": {"source": "k.py"},
                            "configs": ["a", "b"]}) == {"workload": "examples:row_norm",
                                                        "kwargs": {"source": "k.py"}, "config": "a"}
    assert capture_sources({"backend": "command", "test_cmd": "pytest t.py"}) == {"command": "pytest t.py"}
    s = capture_sources({"backend": "simulated"}, "examples:row_lse", kernel_file=tmp_path / "row_lse.py")
    assert s == {"workload": "examples:row_lse", "kwargs": {"source": str(tmp_path / "row_lse.py")}}


def test_empty_diff_is_a_no_op_and_not_credited(tmp_path):
    a, b = _cap(tmp_path, "a", [64]), _cap(tmp_path, "b", [64])
    same = {"equivalent": True, "summary": {}, "a": a, "b": b}
    keep = decide.Decision("keep", "keep-baseline", "6.0% faster", improved=True)
    assert "launch equal the kept version's" in no_op(same)
    d = uncredit(keep, same)
    assert (d.status, d.rule) == ("revert", "no-op") and "not credited" in d.reason
    assert diff_line(same).startswith("IR: no change")
    # same IR, another grid (a wrapper change): a real change
    other = {**same, "b": _cap(tmp_path, "c", [132])}
    assert no_op(other) is None and uncredit(keep, other) is keep
    changed = {"equivalent": False, "summary": {"semantic_changes": 1, "cubin_changes": 2},
               "changes": [{"detail": "occupancy: unset → 2"}]}
    assert no_op(changed) is None
    assert diff_line(changed) == "IR: 1 semantic, 2 cubin change(s) — occupancy: unset → 2"
    assert diff_line({"skipped": "no capture of the baseline"}) == "IR diff skipped: no capture of the baseline"


def test_iteration_evidence_rows():
    rows = iteration_evidence([
        {"iteration": 0, "status": "keep", "capture": {"ok": True, "source": "workload-cpu"}},
        {"iteration": 1, "status": "revert", "comparison": {"improvement_pct": 3.0},
         "decision": {"rule": "no-op"}, "ir_diff": {"equivalent": True}, "capture": {"skipped": "off"}}])
    assert rows[0]["capture"] == "workload-cpu" and rows[0]["ir_diff"] == "baseline"
    assert rows[1]["rule"] == "no-op" and rows[1]["change_pct"] == 3.0 and rows[1]["capture"] == "off: off"


def test_without_launches_a_wrapper_change_is_not_a_no_op():
    src = "import cuda.tile as ct\n\n@ct.kernel\ndef k(x):\n    pass\n\ndef launch(x):\n    grid = (4,)\n"
    hinted = src.replace("@ct.kernel", "@ct.kernel(occupancy=2)")
    regrid = src.replace("(4,)", "(8,)")
    assert not changed_outside_kernel({"k.py": src}, {"k.py": hinted}, "k.py", "k")
    assert changed_outside_kernel({"k.py": src}, {"k.py": regrid}, "k.py", "k")
    same = {"equivalent": True, "summary": {}}             # run captures: no launch recorded
    keep = decide.Decision("keep", "keep-baseline", "6.0% faster", improved=True)
    assert uncredit(keep, same, outside_changed=True) is keep
    assert uncredit(keep, same, outside_changed=False).rule == "no-op"


class _CommentInKernel:
    """A 'transform' that changes nothing the GPU runs: a comment inside the kernel body."""
    name, playbook_id, kind = "comment_only", "X", "source"

    def candidates(self, source, kernel):
        return [] if "# a comment only" in source else [{}]

    def candidates_for(self, source, kernel, facts):
        return self.candidates(source, kernel)

    def why_no_candidates(self, source, kernel):
        return "done"

    def apply(self, source, kernel, **params):
        from looptools import FakeResult
        i = source.index(f"def {kernel}(")
        j = source.index("\n", i) + 1
        return FakeResult(self.name, source[:j] + "    # a comment only\n" + source[j:], "comment only")


def _run(repo, transform, effect: float = 0.94, max_iterations: int = 1):
    """A loop on vector_add (captured for real: it ships CAPTURE_SPECS) whose simulated GPU says
    ``transform`` makes it 6 % faster."""
    from looptools import RankedDiagnoser, rec
    from cutile_diag.loop.backends import SimulatedBackend
    from cutile_diag.loop.runner import LoopOptions, Runner
    from cutile_diag.loop.setup import create_session
    backend = SimulatedBackend({"configs": {"a": 0.1}, "effects": {transform.name: effect}, "noise": 0.001})
    opts = LoopOptions(rounds=2, max_iterations=max_iterations)
    s, led = create_session(f"{repo / 'vector_add.py'}::vector_add", backend=backend.describe(),
                            options=opts.to_json())
    r = Runner(s, backend, led, diagnoser=RankedDiagnoser([rec("X", transform.name)]),
               transforms={transform.name: transform}, options=opts)
    r.start()
    return led


def test_a_step_with_an_empty_ir_diff_is_a_no_op(repo):
    it = _run(repo, _CommentInKernel()).iterations[1]
    assert it["ir_diff"]["equivalent"] is True
    assert (it["status"], it["decision"]["rule"]) == ("revert", "no-op")
    assert "not measured" in it["decision"]["reason"] and "comparison" not in it   # the 6 % is never timed


class _Hint:
    """A hint on the decorator: ``occupancy`` settings, or (``sub``) a real change of the body."""
    playbook_id, kind = "C", "source"

    def __init__(self, name, settings):
        self.name, self.settings = name, settings

    def candidates(self, source, kernel):
        return [] if "@ct.kernel(" in source or "ta - tb" in source else list(self.settings)

    def candidates_for(self, source, kernel, facts):
        return self.candidates(source, kernel)

    def why_no_candidates(self, source, kernel):
        return "done"

    def apply(self, source, kernel, **params):
        from looptools import FakeResult
        if params.get("sub"):
            return FakeResult(self.name, source.replace("tile=ta + tb", "tile=ta - tb", 1), "ta - tb", params=params)
        new = source.replace("@ct.kernel\ndef vector_add(", f"@ct.kernel(occupancy={params['occupancy']})\n"
                             "def vector_add(", 1)
        return FakeResult(self.name, new, f"occupancy={params['occupancy']}", params=params)


def test_a_hint_that_compiles_to_the_same_machine_code_is_a_no_op_and_not_measured(repo):
    """occupancy=1 on a 28-register kernel: the TileIR gains the hint, the SASS and resources stay
    (the H200's geglu and dropout steps: +0.06 % and -0.05 %, kept by the < 2 % rule, loop stopped)."""
    led = _run(repo, _Hint("hint_only", [{"occupancy": 1}]), max_iterations=2)
    it = led.iterations[1]
    assert it["ir_diff"]["equivalent"] is False and it["ir_diff"]["summary"]["cubin_changes"] == 0
    assert all(t["same_code"] is True for t in it["ir_diff"]["cubin"]["archs"].values())
    assert (it["status"], it["decision"]["rule"]) == ("revert", "no-op") and "comparison" not in it
    assert "machine code" in it["decision"]["reason"] and not it["decision"]["improved"]
    assert not any(r.get("type") == "stop" and r.get("rule") == "below-threshold" for r in led.records)


def test_a_sweep_screens_only_the_points_that_change_the_machine_code(repo):
    """Two hint settings with vector_add's SASS and one real body change: only the change is timed."""
    led = _run(repo, _Hint("hint_sweep", [{"occupancy": 1}, {"occupancy": 4}, {"sub": True}]))
    it = led.iterations[1]
    rows = {json.dumps(r["params"], sort_keys=True): r for r in it["sweep"]}
    for p in ({"occupancy": 1}, {"occupancy": 4}):
        r = rows[json.dumps(p)]
        assert r["failure"] == "no-op" and "machine code" in r["result"] and "screen_ratio" not in r
    assert rows['{"sub": true}'].get("chosen") and "comparison" in it


def test_a_sweep_of_no_ops_measures_nothing(repo):
    it = _run(repo, _Hint("hint_sweep", [{"occupancy": 1}, {"occupancy": 4}])).iterations[1]
    assert (it["status"], it["decision"]["rule"]) == ("revert", "no-op") and it["correctness"] == "-"
    assert all(r["failure"] == "no-op" for r in it["sweep"]) and "comparison" not in it
    assert it["decision"]["reason"].startswith("every sweep point compiles to the kept version's machine code")


def test_the_ir_diff_line_names_a_resident_block_collapse(tmp_path):
    """Real AOT captures (CPU intercept of examples:row_norm): gathers -> tile loads (A) give the
    one-row-per-block kernel a TMA pipeline (255 registers, 256 threads, ~56 KB shared memory),
    12 -> 1 resident blocks per SM; the loop's diff line says so before any timing (the H200
    measured that step 7.4x slower: bench/results/acceptance-h200-s2)."""
    from cutile_diag.measure.capture import capture_auto
    from cutile_diag.examples import EXAMPLES_DIR
    from cutile_diag.loop.integrations import resident_change
    from cutile_diag.transforms import get
    caps = []
    for name in ("a", "b"):
        f = tmp_path / name / "row_norm.py"
        f.parent.mkdir()
        src = (EXAMPLES_DIR / "row_norm.py").read_text()
        f.write_text(src if name == "a" else get("gather_to_load").apply(src, "row_norm").new_source)
        caps.append(capture_auto(f"{f}::row_norm", workload="examples:row_norm", workload_kwargs={"source": str(f)},
                                 gpu=False, out_dir=tmp_path / name / "cap").folder.path)
    occ = resident_change(*caps)
    assert occ["before"] >= 8 and occ["after"] == 1 and "255 regs" in occ["after_why"]
    line = diff_line({"equivalent": False, "summary": {"semantic_changes": 3}, "resident_ctas": occ})
    assert f"resident blocks/SM {occ['before']} -> 1" in line
    assert resident_change(caps[0], caps[0]) is None


def test_a_bare_replay_times_the_kernel_and_its_constants_not_the_host_code_its_launch_runs():
    """``changed_launch_host``: what a replay of the recorded launch would not time."""
    from cutile_diag.loop.evidence import changed_launch_host
    src = (
        "import cuda.tile as ct\nimport torch\nTILE = 256\nGELU = 1\n\n"
        "@ct.kernel\ndef k(x, T: ct.Constant[int]):\n    t = ct.exp(ct.load(x, index=(ct.bid(0),), shape=(T,)))\n\n"
        "class _Op(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
        "        B = TILE\n        ct.launch(None, (x.numel() // B,), k, (x, B))\n\n"
        "def op(x):\n    return _Op.apply(x)\n\n"
        "def _blocks(n):\n    return n // 128\n\n"
        "@ct.kernel\ndef k2(x):\n    pass\n\n"
        "def other(x):\n    ct.launch(None, (_blocks(x.numel()),), k2, (x,))\n")

    def changed(new_src, other=None):
        b = {"k.py": new_src, **({"w.py": other} if other else {})}
        return changed_launch_host({"k.py": src}, b, "k.py", "k")
    assert not changed(src + "\n# a comment\n")
    # inside the kernel, and a new constant only the kernel reads (exp -> exp2 with LOG2E): timed
    assert not changed(src.replace("t = ct.exp(", "t = ct.exp2(LOG2E * ").replace("GELU = 1", "GELU = 1\nLOG2E = 1.44"))
    # the launch's grid or tile in the Function's forward, or a module value forward reads: not timed
    assert changed(src.replace("B = TILE", "B = 2 * TILE"))
    assert changed(src.replace("TILE = 256", "TILE = 512"))
    assert changed(src, other="x = 1\n")
    # another kernel's launch, and a host helper only that launch reads, are not k's: timed
    assert not changed(src.replace("(_blocks(x.numel()),)", "(_blocks(x.numel()) * 2,)"))
    assert not changed(src.replace("return n // 128", "return n // 64"))
    # a helper k's launch reads is its host code: not timed
    assert changed_launch_host({"k.py": src.replace("B = TILE", "B = _blocks(TILE)")},
                                {"k.py": src.replace("B = TILE", "B = _blocks(TILE)").replace("// 128", "// 64")},
                                "k.py", "k")
