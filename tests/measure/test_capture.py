"""Capture without hand-written specs: intercepted launches -> KernelSignature -> AOT.

The signature pin replays the calls of bench/gpu/launch_examples.py (the run whose JIT dumps
are committed in fixtures/jit-h200) on CPU tensors with ct.launch intercepted: the AOT export
of the derived specs must give the JIT's TileIR byte for byte, symbol included.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cutile_diag.capture import aot, spec
from cutile_diag.measure.capture import LaunchNotSeen, capture_auto, launch_from_workload
from cutile_diag.capture.launches import cpu_cuda, intercept_launches
from cutile_diag.capture.loader import load_kernel
from cutile_diag.errors import UsageError
from cutile_diag.examples import EXAMPLES_DIR, gather_scale, matmul, softmax, vector_add
from cutile_diag.workload import workload
from cutile_diag.workloads import load_workload

JIT = Path(__file__).parent / "fixtures" / "jit-h200"


def _replay_launch_examples():
    """bench/gpu/launch_examples.py's launches, on CPU tensors (same shapes and dtypes)."""
    n = 1 << 22
    a, b, c = torch.randn(n), torch.randn(n), torch.empty(n)
    A, B, C = (torch.randn(1024, 1024, dtype=torch.float16) for _ in range(3))
    X = torch.randn(4096, 1024, dtype=torch.float16)
    with cpu_cuda(sm_count=132), intercept_launches() as recs:
        vector_add.launch(a, b, c)
        vector_add.launch(a, b, c, persistent=True)
        gather_scale.launch(a, c)
        matmul.launch(A, B, C)
        matmul.launch(A, B, C, tuned=True)
        matmul.launch(A.float(), B.float(), C.float(), tm=64, tn=64, tk=32)
        softmax.launch(X, torch.empty_like(X))
    return recs


@pytest.fixture(scope="module")
def replayed():
    recs = _replay_launch_examples()
    files = {"vector_add": "vector_add.py", "vector_add_persistent": "vector_add.py",
             "gather_scale": "gather_scale.py", "matmul": "matmul.py", "matmul_tuned": "matmul.py",
             "softmax": "softmax.py"}
    out = {}
    for r in recs:
        name = "matmul_f32" if r.kernel == "matmul" and r.args[0].dtype == "float32" else r.kernel
        out[name] = (EXAMPLES_DIR / files.get(r.kernel, "matmul.py"), r)
    return out


@pytest.mark.parametrize("name", sorted(p.stem for p in JIT.glob("*.tileir")))
def test_intercepted_signature_gives_the_jit_tileir(replayed, name, tmp_path):
    from cutile_diag.toolchain import run_tool
    path, rec = replayed[name]
    kernel = "matmul" if name == "matmul_f32" else name
    loaded = load_kernel(f"{path}::{kernel}")
    bc = aot.export_bytecode(loaded, spec.bind(loaded, rec.specs()))
    f = tmp_path / "k.tileirbc"
    f.write_bytes(bc)
    assert run_tool("tileirdisasm", [str(f)]).stdout == (JIT / f"{name}.tileir").read_text()


@pytest.mark.parametrize("name", ["row_norm", "row_lse"])
def test_specless_examples_capture_from_their_workload(name, tmp_path):
    ref = f"{EXAMPLES_DIR / (name + '.py')}::{name}"
    with pytest.raises(UsageError):      # no CAPTURE_SPECS: plain AOT cannot
        aot.capture_aot(ref, out_dir=tmp_path / "plain")
    res = capture_auto(ref, workload=f"examples:{name}", out_dir=tmp_path / "out", gpu=False)
    assert res.source == "workload-cpu"
    launch = res.folder.manifest["launch"]
    wl = load_workload(f"examples:{name}")
    cfg = wl.config(launch["configuration"])
    assert launch["grid"] == [cfg["M"]] and launch["sm_count"] == 132
    specs = {a["name"]: a["spec"] for a in launch["args"]}
    if name == "row_norm":
        assert specs == {"X": f"f16[{cfg['M']},{cfg['N']}]", "Y": f"f16[{cfg['M']},{cfg['N']}]",
                         "Mean": f"f32[{cfg['M']}]", "Rstd": f"f32[{cfg['M']}]", "N": "i32",
                         "EPS": "1e-05", "TILE_N": "1024"}
    else:
        assert specs == {"X": f"f32[{cfg['M']},{cfg['N']}]", "Out": f"f32[{cfg['M']}]",
                         "TILE_N": str(1 << (cfg["N"] - 1).bit_length())}
    assert res.folder.manifest["signature"]["spec"] == specs


def _wl(run):
    return workload(name="bad", configs=[{"name": "c", "params": {}}],
                    make_inputs=lambda cfg, seed, device="cuda": {"x": torch.zeros(8, 8, device=device)},
                    run=run, reference=lambda i: None, flops=lambda c: 1, bytes=lambda c: 1)


def test_bad_workloads_say_which_way_they_failed():
    with pytest.raises(LaunchNotSeen, match="launches nothing on CPU inputs"):
        launch_from_workload(_wl(lambda i: None), "softmax")
    with pytest.raises(LaunchNotSeen, match="launches softmax, not row_norm"):
        launch_from_workload(_wl(lambda i: softmax.launch(i["x"], i["x"])), "row_norm")
    with pytest.raises(LaunchNotSeen, match=r"raises on CPU inputs \(RuntimeError: no"):
        launch_from_workload(_wl(lambda i: (_ for _ in ()).throw(RuntimeError("no"))), "softmax")

    def cuda_only(cfg, seed, device="cuda"):
        raise RuntimeError("built on cuda only")
    wl = workload(name="gpu_only", configs=[{"name": "c", "params": {}}], make_inputs=cuda_only,
                  run=lambda i: None, reference=lambda i: None, flops=lambda c: 1, bytes=lambda c: 1)
    with pytest.raises(LaunchNotSeen, match="cannot build CPU inputs"):
        launch_from_workload(wl, "softmax")


def test_the_configuration_that_launches_the_kernel_is_found():
    """One op, two kernels (TileGym's softmax: use_tma picks the kernel): the configuration asked
    for launches the other one, so the workload's other configurations are tried."""
    from cutile_diag.examples import row_lse
    x = lambda i: i["x"]
    wl = workload(name="two", configs=[{"name": "tma", "params": {"k": "softmax"}},
                                       {"name": "plain", "params": {"k": "lse"}}],
                  make_inputs=lambda cfg, seed, device="cuda": {"x": torch.zeros(8, 8, device=device), "k": cfg["k"]},
                  run=lambda i: softmax.launch(x(i), x(i)) if i["k"] == "softmax" else
                  row_lse.launch(x(i), torch.zeros(8, device=x(i).device)),
                  reference=lambda i: None, flops=lambda c: 1, bytes=lambda c: 1)
    rec, cfg = launch_from_workload(wl, "row_lse", config="tma")
    assert cfg == "plain" and rec.kernel == "row_lse"
    with pytest.raises(LaunchNotSeen, match=r"launches softmax, not matmul \(configuration tma\) \(nor in its 1 other"):
        launch_from_workload(wl, "matmul", config="tma")


def test_every_source_failing_lists_real_parameter_kinds(tmp_path):
    ref = f"{EXAMPLES_DIR / 'row_norm.py'}::row_norm"
    with pytest.raises(UsageError) as ei:
        capture_auto(ref, workload="examples:softmax", out_dir=tmp_path, gpu=False)
    e = ei.value
    assert "launches softmax, not row_norm" in e.message
    for part in ("X=DTYPE[d0,d1] (2-D array)", "Mean=DTYPE[d0] (1-D array)", "N=DTYPE (scalar",
                 "EPS=<float> (ct.Constant[float])", "TILE_N=<int> (ct.Constant[int])"):
        assert part in e.hint
    assert "f16[M,K]" not in e.hint
    # the example names the kernel's own parameters, every one of them, and nothing else
    example = e.hint.split("e.g. ", 1)[1].split()
    assert [a.split("=")[0] for a in example[1::2]] == ["X", "Y", "Mean", "Rstd", "N", "EPS", "TILE_N"]


def test_bind_hint_names_kinds_not_made_up_shapes():
    loaded = load_kernel(f"{EXAMPLES_DIR / 'row_norm.py'}::row_norm")
    with pytest.raises(UsageError) as ei:
        spec.bind(loaded, {"X": spec.parse_spec("f16[4,4]")})
    assert "Mean=DTYPE[d0] (1-D array)" in ei.value.hint and "EPS=<float>" in ei.value.hint
    assert "f16[M,K]" not in ei.value.hint


def test_capture_cli_workload_json(capsys, tmp_path):
    from cutile_diag.cli import main
    code = main(["capture", f"{EXAMPLES_DIR / 'row_lse.py'}::row_lse", "--workload", "examples:row_lse",
                 "--config", "32768x1000-f32", "--out", str(tmp_path), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    doc = json.loads(out.out)
    assert doc["source"] == "workload-cpu" and doc["launch"]["grid"] == [32768]
    assert doc["launch"]["configuration"] == "32768x1000-f32"


def test_workload_run_keeps_the_named_kernel_and_its_launch(monkeypatch, tmp_path):
    """GPU path, with the run faked: the child's code is valid Python, the kernel is picked by
    name among the run's captures, and the observed launch lands in its manifest."""
    import re

    from cutile_diag.capture import run_mode
    from cutile_diag.measure import capture as auto
    from cutile_diag.capture.launches import LaunchRecord
    wl = load_workload("examples:softmax")
    ref = f"{EXAMPLES_DIR / 'softmax.py'}::softmax"

    def fake_run(argv, *, out_dir, timeout=None, **kw):
        code = argv[-1]
        compile(code, "<observe>", "exec")
        obs = re.search(r"open\('([^']+)'", code).group(1)
        with cpu_cuda(), intercept_launches() as recs:
            softmax.launch(torch.zeros(64, 1000, dtype=torch.float16), torch.zeros(64, 1000, dtype=torch.float16))
        Path(obs).write_text(json.dumps({"sm_count": 132, "launches": [r.to_json() for r in recs]}))
        other = aot.capture_aot(f"{EXAMPLES_DIR / 'vector_add.py'}::vector_add", out_dir=out_dir)
        mine = aot.capture_aot(ref, out_dir=Path(out_dir).parent / "more")
        return run_mode.RunCapture(argv, 0, 0.1, captures=[other, mine])

    monkeypatch.setattr(run_mode, "capture_run", fake_run)
    cap, rec = auto.capture_workload_run(wl, "softmax", config=wl.configs[0].name, out_dir=tmp_path / "out",
                                         name="v1")
    assert cap.path == tmp_path / "out" / "v1" and cap.manifest["kernel"]["function"] == "softmax"
    assert isinstance(rec, LaunchRecord) and cap.manifest["launch"]["grid"] == [64]
    assert cap.manifest["launch"]["source"] == "workload-run" and cap.manifest["launch"]["sm_count"] == 132


def test_parameter_kinds_come_from_the_libcst_model_of_the_kernel():
    """The hint's kinds: constants from the annotations, array ranks from the memory ops' index
    tuples in source.locate's model (one source model), scalars otherwise."""
    from cutile_diag.capture.loader import load_kernel
    from cutile_diag.capture.spec import param_kinds
    kinds = param_kinds(load_kernel(f"{EXAMPLES_DIR / 'row_norm.py'}::row_norm"))
    assert kinds == {"X": "2-D array", "Y": "2-D array", "Mean": "1-D array", "Rstd": "1-D array", "N": "scalar",
                     "EPS": "ct.Constant[float]", "TILE_N": "ct.Constant[int]"}
