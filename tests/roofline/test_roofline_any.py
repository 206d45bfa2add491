"""`cutile-diag roofline` without a workload class: a bare kernel at specs, and every kernel a command launches."""
import json
import statistics
import sys
import textwrap

import pytest

from cutile_diag.cli import main
from cutile_diag.examples import EXAMPLES_DIR

pytest.importorskip("cuda.tile")

OFFLINE = ["--device", "h200", "--latency-ms", "0.5", "--json"]

# A kernel file in the styles real libraries use and without CAPTURE_SPECS: a row RMS norm with a weight
# vector broadcast over the row and a wrapper that allocates its output (parameter names differ from the
# kernel's), a 2-D tiled kernel with no wrapper, and a grid-stride kernel over a runtime row count.
KERNELS = textwrap.dedent('''
    import cuda.tile as ct


    @ct.kernel
    def rms_norm_rows(X, W, Y, eps: float, TILE_N: ct.Constant[int]):
        row = ct.bid(0)
        x = ct.load(X, index=(row, 0), shape=(1, TILE_N), padding_mode=ct.PaddingMode.ZERO).astype(ct.float32)
        w = ct.load(W, index=(0,), shape=(TILE_N,), padding_mode=ct.PaddingMode.ZERO).astype(ct.float32)
        ms = ct.sum(x * x, axis=1, keepdims=True) / TILE_N
        y = x * ct.rsqrt(ms + eps) * ct.reshape(w, (1, TILE_N))
        ct.store(Y, index=(row, 0), tile=y.astype(Y.dtype))


    def rms_norm(x, weight, eps=1e-6):
        import torch
        y = torch.empty_like(x)
        tile = 1 << (x.shape[1] - 1).bit_length()
        ct.launch(torch.cuda.current_stream(), (x.shape[0],), rms_norm_rows, (x, weight, y, eps, tile))
        return y


    @ct.kernel
    def scale_tiles(X, Y, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int]):
        bm, bn = ct.bid(0), ct.bid(1)
        t = ct.load(X, index=(bm, bn), shape=(TILE_M, TILE_N))
        ct.store(Y, index=(bm, bn), tile=t * 2.0)


    @ct.kernel
    def row_chunk_sum(X, Y, n_chunks: int, TILE: ct.Constant[int]):
        row = ct.bid(0)
        acc = ct.full((1, TILE), 0, dtype=ct.float32)
        for c in range(n_chunks):
            acc = acc + ct.load(X, index=(row, c), shape=(1, TILE)).astype(ct.float32)
        ct.store(Y, index=(row, 0), tile=acc)


    def _double_impl(X, Y, TILE: ct.Constant[int]):
        t = ct.load(X, index=(ct.bid(0),), shape=(TILE,))
        ct.store(Y, index=(ct.bid(0),), tile=t * 2.0)


    double = ct.kernel(_double_impl)        # attribute name != function name
''')


@pytest.fixture(scope="module")
def kfile(tmp_path_factory):
    p = tmp_path_factory.mktemp("kern") / "rowops.py"
    p.write_text(KERNELS)
    return p


def run_json(capsys, argv):
    rc = main(argv)
    cap = capsys.readouterr()
    return rc, json.loads(cap.out), cap.err


def nbytes(spec: str) -> int:
    from cutile_diag.capture.spec import parse_spec
    return parse_spec(spec).nbytes()


# the examples' known minimum traffic: every array read or written once (CAPTURE_SPECS shapes)
EXAMPLE_MIN = {
    "vector_add.py::vector_add": ((16384,), 3 * nbytes("f32[16777216]"), 16777216),
    "vector_add.py::vector_add_persistent": ((528,), 3 * nbytes("f32[16777216]"), 16777216),
    "softmax.py::softmax": ((32768,), 2 * nbytes("f16[32768,1024]"), None),
    "gather_scale.py::gather_scale": ((16384,), 2 * nbytes("f32[16777216]"), 2 * 16777216),
    "matmul.py::matmul": ((32, 32), 3 * nbytes("f16[4096,4096]"), 2 * 4096 ** 3),
    "matmul.py::matmul_tuned": ((132,), 3 * nbytes("f16[4096,4096]"), 2 * 4096 ** 3),
}


@pytest.mark.parametrize("ref", sorted(EXAMPLE_MIN))
def test_example_kernels_offline_static_bytes_are_the_minimum_traffic(capsys, ref):
    grid, min_bytes, flops = EXAMPLE_MIN[ref]
    rc, d, _ = run_json(capsys, ["roofline", str(EXAMPLES_DIR / ref), *OFFLINE])
    assert rc == 0
    wl, r = d["workload"], d["results"][0]
    assert tuple(wl["grid"]) == grid and wl["grid_source"].startswith("launch wrapper launch(")
    p = r["point"]
    assert p["counts_source"] == "static" and p["latency_source"] == "recorded"
    assert p["bytes"] == min_bytes
    assert r["static"]["exact"] and r["static"]["bytes_total"] >= min_bytes
    if flops is not None and "matmul" in ref:
        assert r["static"]["mma_flops"] == flops and (p["compute_dtype"], p["compute_unit"]) == ("f16", "tensor")
    elif flops is not None:
        assert p["flops"] == flops
    assert p["achieved_tbps"] == pytest.approx(min_bytes / 0.5e-3 / 1e12)
    assert any("static estimates" in n for n in p["notes"])


def test_gemm_issues_more_than_its_footprint_but_is_placed_on_the_minimum(capsys):
    rc, d, _ = run_json(capsys, ["roofline", str(EXAMPLES_DIR / "matmul.py::matmul"), "--device", "h200",
                                 "--latency-ms", "0.22", "--json"])
    st, p = d["results"][0]["static"], d["results"][0]["point"]
    # A re-read 4096/128 times, B likewise: 2.1 GB of tile traffic; placing that on the roof would
    # read 9.9 TB/s and trip the guard
    assert st["bytes_total"] == pytest.approx(2 * 32 * 4096 * 4096 * 2 + 4096 * 4096 * 2)
    assert p["bytes"] == st["footprint_bytes"] and p["valid"] and rc == 0


def test_kernel_without_capture_specs_with_args_and_wrapper_grid(capsys, kfile):
    args = ["--arg", "X=bf16[4096,4096]", "--arg", "W=bf16[4096]", "--arg", "Y=bf16[4096,4096]",
            "--arg", "eps=f32", "--arg", "TILE_N=4096"]
    rc, d, _ = run_json(capsys, ["roofline", f"{kfile}::rms_norm_rows", *args, *OFFLINE])
    assert rc == 0
    wl, p = d["workload"], d["results"][0]["point"]
    assert wl["grid"] == [4096] and "rms_norm(" in wl["grid_source"] and wl["scalars"] == {"eps": 1e-6}
    # X read + Y written once + W once; the issued traffic re-reads W in every row block
    assert p["bytes"] == 2 * nbytes("bf16[4096,4096]") + nbytes("bf16[4096]")
    assert d["results"][0]["static"]["bytes_total"] == 2 * nbytes("bf16[4096,4096]") + 4096 * nbytes("bf16[4096]")


def test_kernel_without_wrapper_takes_grid(capsys, kfile):
    base = ["roofline", f"{kfile}::scale_tiles", "--arg", "X=f32[1024,1024]", "--arg", "Y=f32[1024,1024]",
            "--arg", "TILE_M=64", "--arg", "TILE_N=64"]
    rc = main([*base, "--device", "h200", "--latency-ms", "0.01"])
    err = capsys.readouterr().err
    assert rc == 2 and "launch grid of scale_tiles is unknown" in err and "--grid" in err
    rc, d, _ = run_json(capsys, [*base, "--grid", "16,16", *OFFLINE])
    assert rc == 0 and d["workload"]["grid"] == [16, 16] and d["workload"]["grid_source"] == "--grid"
    assert d["results"][0]["point"]["bytes"] == 2 * nbytes("f32[1024,1024]")


def test_runtime_scalar_value_counts_its_loop(capsys, kfile):
    base = ["roofline", f"{kfile}::row_chunk_sum", "--arg", "X=f16[1024,8192]", "--arg", "Y=f32[1024,1024]",
            "--arg", "TILE=1024", "--grid", "1024"]
    rc, d, _ = run_json(capsys, [*base, "--arg", "n_chunks=8", *OFFLINE])
    assert rc == 0 and d["workload"]["scalars"] == {"n_chunks": 8}
    assert d["results"][0]["point"]["bytes"] == nbytes("f16[1024,8192]") + nbytes("f32[1024,1024]")
    rc = main([*base, "--arg", "n_chunks=i32", "--device", "h200", "--latency-ms", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "upper bound not known before the run" in err and "--arg n_chunks=4096" in err


def test_kernel_without_specs_lists_parameters_with_kinds(capsys, kfile):
    rc = main(["roofline", f"{kfile}::rms_norm_rows", "--device", "h200", "--latency-ms", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert ("X=DTYPE[d0,d1] (2-D array), W=DTYPE[d0] (1-D array), Y=DTYPE[d0,d1] (2-D array), "
            "eps=DTYPE (scalar float: f32, ...), TILE_N=<int> (ct.Constant[int])") in err
    assert "e.g. --arg X=f32[4096,4096] --arg W=f32[4096] --arg Y=f32[4096,4096] --arg eps=f32 --arg TILE_N=128" in err


@pytest.mark.parametrize("extra,msg", [
    (["--arg", "X=f32[M,1024]", "--arg", "Y=f32[1024,1024]", "--arg", "TILE_M=64", "--arg", "TILE_N=64",
      "--grid", "4,4"], "needs concrete sizes"),
    (["--arg", "X=f32[64,64]", "--arg", "Y=f32[64,64]", "--arg", "TILE_M=64", "--arg", "TILE_N=64",
      "--grid", "0"], "--grid '0'"),
    (["--arg", "X=f32[64,64]", "--grid", "1"], "no spec for parameters"),
    (["--config", "x"], "--config applies only to a workload"),
    (["--dry-run"], "--dry-run applies only to -- COMMAND"),
])
def test_kernel_reference_bad_input(capsys, kfile, extra, msg):
    rc = main(["roofline", f"{kfile}::scale_tiles", *extra, "--device", "h200", "--latency-ms", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and msg in err and err.count("\n") == 1


def test_workload_form_rejects_kernel_options(capsys):
    rc = main(["roofline", "examples:softmax", "--arg", "X=f16[8,8]", "--device", "h200", "--latency-ms", "1"])
    assert rc == 2 and "--arg applies only to a kernel reference" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------
# -- COMMAND

SCRIPT = textwrap.dedent("""
    import torch
    from cutile_diag.examples import matmul, softmax
    x = torch.zeros(256, 1024, dtype=torch.float16)
    for _ in range(4):
        softmax.launch(x, torch.empty_like(x))
    a = torch.zeros(512, 512, dtype=torch.float16)
    matmul.launch(a, a, torch.empty_like(a))
    print("Cutile: {'forward': {'median': 1.0}} ms")
""")


def test_command_dry_run_counts_each_kernel_and_shape(capsys, tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(SCRIPT)
    plot = tmp_path / "roof.svg"
    rc = main(["roofline", "--dry-run", "--device", "h200", "--json", "--plot", str(plot), "--",
               sys.executable, str(prog)])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["executed"] is False and d["launches"] == 5
    assert d["stdout_tail"] == ["Cutile: {'forward': {'median': 1.0}} ms"]    # the program's own output, kept
    ks = {k["kernel"]: k for k in d["kernels"]}
    assert ks["softmax"]["calls"] == 4 and ks["softmax"]["grid"] == [256] and ks["softmax"]["status"] == "no_time"
    assert ks["softmax"]["static"]["bytes_compulsory"] == 2 * 256 * 1024 * 2
    assert ks["matmul"]["static"]["mma_flops"] == 2 * 512 ** 3 and ks["matmul"]["grid"] == [4, 4]
    assert d["plot"] is None and not plot.exists()            # no measured point: nothing drawn


def test_command_counts_an_array_passed_twice_once(capsys, tmp_path):
    """vector_add.launch(a, a, c): `a` is read through two parameters, DRAM moves it once; counting it
    twice put the GPU's point above the roof (INVALID) on an H200."""
    prog = tmp_path / "twice.py"
    prog.write_text("import torch\nfrom cutile_diag.examples import vector_add\n"
                    "a = torch.ones(1 << 16)\nvector_add.launch(a, a, torch.empty_like(a))\n"
                    "vector_add.launch(a, torch.ones(1 << 16), torch.empty_like(a))\n")
    rc = main(["roofline", "--dry-run", "--json", "--", sys.executable, str(prog)])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0
    got = sorted(k["static"]["bytes_compulsory"] for k in d["kernels"])
    assert got == [2 * 4 * (1 << 16), 3 * 4 * (1 << 16)], d["kernels"]


def test_command_scalars_split_configurations_and_bound_loops(capsys, tmp_path, kfile):
    prog = tmp_path / "chunks.py"
    prog.write_text(textwrap.dedent(f"""
        import importlib.util, torch, cuda.tile as ct
        spec = importlib.util.spec_from_file_location("rowops", {str(kfile)!r})
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        x, y = torch.zeros(64, 8192, dtype=torch.float16), torch.zeros(64, 1024)
        for n in (4, 8, 8):
            ct.launch(torch.cuda.current_stream(), (64,), m.row_chunk_sum, (x, y, n, 1024))
        v = torch.zeros(4096)
        ct.launch(torch.cuda.current_stream(), (4,), m.double, (v, v, 1024))
    """))
    rc = main(["roofline", "--dry-run", "--json", "--", sys.executable, str(prog)])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0
    (dbl,) = [k for k in d["kernels"] if k["kernel"] == "_double_impl"]
    assert dbl["static"]["bytes_total"] == 2 * 4096 * 4
    got = sorted((k["scalars"]["n_chunks"], k["calls"], k["static"]["bytes_total"]) for k in d["kernels"]
                 if k["kernel"] == "row_chunk_sum")
    assert got == [(4, 1, 64 * 1024 * 2 * 4 + 64 * 1024 * 4), (8, 2, 64 * 1024 * 2 * 8 + 64 * 1024 * 4)]


def test_command_without_gpu_needs_dry_run(capsys, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rc = main(["roofline", "--device", "h200", "--", sys.executable, "-c", "pass"])
    err = capsys.readouterr().err
    assert rc == 2 and "--dry-run" in err


def test_command_failure_reports_exit_code_and_stderr_tail(capsys, tmp_path):
    prog = tmp_path / "bad.py"
    prog.write_text(SCRIPT + "\nimport sys\nprint('assertion: outputs differ', file=sys.stderr)\nsys.exit(5)\n")
    plot = tmp_path / "roof.png"
    rc = main(["roofline", "--dry-run", "--device", "h200", "--plot", str(plot), "--json", "--",
               sys.executable, str(prog)])
    cap = capsys.readouterr()
    assert rc == 1 and cap.out == "" and not plot.exists()
    assert "command exited with 5" in cap.err and "assertion: outputs differ" in cap.err and cap.err.count("\n") == 1


def test_command_launching_nothing_exits_1(capsys):
    rc = main(["roofline", "--dry-run", "--", sys.executable, "-c", "print('no kernels here')"])
    err = capsys.readouterr().err
    assert rc == 1 and "launched no cuTile kernel" in err


@pytest.mark.parametrize("argv,msg", [
    (["roofline"], "nothing to place on the roofline"),
    (["roofline", "examples:softmax", "--", "python", "x.py"], "not both"),
    (["roofline", "--arg", "X=f16[8]", "--", "python", "x.py"], "--arg applies only to a kernel reference"),
    (["roofline", "--latency-ms", "1", "--", "python", "x.py"], "--latency-ms applies only to"),
    (["roofline", "--cuda-graph", "--", "python", "x.py"], "--cuda-graph applies only to"),
    (["roofline", "--dry-run", "--", "no-such-program-xyz"], "command not found"),
])
def test_command_form_bad_input(capsys, argv, msg):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and msg in err and err.count("\n") == 1


def test_measured_launches_become_points(tmp_path):
    """The same path as a GPU run after the observer: records with device times -> one point per
    configuration, the JIT-compiling first launch out of the median."""
    import torch
    from dataclasses import replace
    from cutile_diag.capture.launches import cpu_cuda, intercept_launches
    from cutile_diag.examples import softmax
    from cutile_diag.roofline.device import preset
    from cutile_diag.roofline.observed import roofline_launches
    from cutile_diag.roofline.peaks import recorded_ceilings
    x = torch.zeros(4096, 1024, dtype=torch.float16)
    times = []                  # launch-bound small shapes, ~3.5 TB/s large ones; the first launch compiles
    with cpu_cuda(), intercept_launches() as recs:
        for _ in range(4):
            softmax.launch(x, x)
    times = [50.0, 0.0110, 0.0100, 0.0105]                  # the first one compiled
    recs = [replace(r, device_ms=t, extra={"first": i == 0}) for i, (r, t) in enumerate(zip(recs, times))]
    dev = preset("h200")
    (res,) = roofline_launches(recs, device=dev, ceilings=recorded_ceilings(dev))
    p = res.point
    assert res.status == "ok" and p.latency_ms == pytest.approx(statistics.median(times[1:]))
    assert p.bytes == 2 * 4096 * 1024 * 2 and p.achieved_tbps == pytest.approx(p.bytes / 0.0105e-3 / 1e12)
    assert p.counts_source == "static" and p.pct_measured is not None
    assert res.to_json()["total_ms"] == pytest.approx(sum(times)) and res.to_json()["calls"] == 4
    assert any("first launch" in n for n in p.notes)
    from cutile_diag.roofline.plot import plot_roofline
    assert plot_roofline([p], dev, recorded_ceilings(dev), tmp_path / "roof.svg").stat().st_size > 0


def test_launches_whose_enqueue_outlasted_the_spin_do_not_time_the_host():
    """A wrapper that spends 23 ms inside ct.launch on every call (TileGym's replace_hints kernels on an H100): the
    events hold the idle GPU waiting for the host. Clean launches are used where there are any; where every launch
    has the gap, each time less its host time past the spin."""
    import torch
    from dataclasses import replace
    from cutile_diag.capture.launches import cpu_cuda, intercept_launches
    from cutile_diag.examples import softmax
    from cutile_diag.roofline.device import preset
    from cutile_diag.roofline.observed import roofline_launches
    from cutile_diag.roofline.peaks import recorded_ceilings
    x = torch.zeros(4096, 1024, dtype=torch.float16)
    with cpu_cuda(), intercept_launches() as recs:
        for _ in range(4):
            softmax.launch(x, x)
    dev = preset("h200")

    def timed(rows):   # (device_ms, host_us, gap) per launch after the first, which compiles
        out = [replace(recs[0], device_ms=900.0, extra={"first": True, "host_us": 9e5, "padded_us": 50.0})]
        for r, (ms, host_us, gap) in zip(recs[1:], rows):
            out.append(replace(r, device_ms=ms, extra={"host_us": host_us, "padded_us": 50.0,
                                                       **({"enqueue_gap": True} if gap else {})}))
        (res,) = roofline_launches(out, device=dev, ceilings=recorded_ceilings(dev))
        return res
    every = timed([(23.03, 23_050.0, True), (23.21, 23_230.0, True), (22.99, 23_000.0, True)])
    assert every.point.latency_ms == pytest.approx(0.03, abs=1e-6)
    assert every.to_json()["total_ms"] == pytest.approx(900.0 + 0.03 + 0.03 + 0.04)
    assert any("less its host time" in n for n in every.point.notes)
    some = timed([(0.0105, 20.0, False), (23.21, 23_230.0, True), (0.0101, 20.0, False)])
    assert some.point.latency_ms == pytest.approx((0.0105 + 0.0101) / 2)
    assert any("left out of the median" in n for n in some.point.notes)
    # the host worked on after the enqueue: nothing is left of the time, and the reason says why
    gone = timed([(0.5, 23_000.0, True)] * 3)
    assert gone.status == "no_time" and "host enqueue" in gone.error


def test_bare_kernel_rebuilds_in_the_measuring_subprocess_and_makes_fresh_inputs(kfile):
    """What the worker does on a GPU: load_workload(ref, **ref_kwargs), then make_inputs from the specs."""
    import torch
    from cutile_diag.workloads import load_workload
    from cutile_diag.workloads.kernel import kernel_workload
    from cutile_diag.capture.spec import parse_assignments
    wl = kernel_workload(f"{kfile}::rms_norm_rows", parse_assignments(
        ["X=bf16[64,256]", "W=bf16[256]", "Y=bf16[64,256]", "eps=f32", "TILE_N=256"]))
    again = load_workload(wl.ref, **wl.ref_kwargs)
    assert again.grid == wl.grid == (64,) and again.scalars == {"eps": 1e-6}
    assert again.flops(again.configs[0]) == wl.flops(wl.configs[0])
    a = again.make_inputs(again.configs[0], seed=3, device="cpu")
    b = again.make_inputs(again.configs[0], seed=3, device="cpu")
    assert a["X"].dtype == torch.bfloat16 and tuple(a["X"].shape) == (64, 256) and a["TILE_N"] == 256
    assert torch.equal(a["X"], b["X"]) and not torch.equal(a["X"], again.make_inputs(again.configs[0], 4, "cpu")["X"])
    assert a["eps"] == pytest.approx(1e-6) and again.repeatable is False and again.counts_source == "static"


def test_f_layout_inputs_keep_their_strides(kfile):
    from cutile_diag.capture.spec import parse_assignments
    from cutile_diag.workloads.kernel import kernel_workload
    wl = kernel_workload(f"{kfile}::scale_tiles", parse_assignments(
        ["X=f32[128,64]:layout=F", "Y=f32[128,64]", "TILE_M=64", "TILE_N=64"]), grid=[2, 1])
    x = wl.make_inputs(wl.configs[0], 0, "cpu")["X"]
    assert tuple(x.shape) == (128, 64) and x.stride() == (1, 128)


def test_ncu_bytes_attach_to_the_kernel_and_grid_they_belong_to():
    import torch
    from dataclasses import replace
    from cutile_diag.capture.launches import cpu_cuda, intercept_launches
    from cutile_diag.examples import softmax
    from cutile_diag.roofline.device import preset
    from cutile_diag.roofline.ncu import NcuKernel, NcuResult
    from cutile_diag.roofline.observed import attach_ncu, roofline_launches
    with cpu_cuda(), intercept_launches() as recs:
        softmax.launch(torch.zeros(4096, 1024, dtype=torch.float16), torch.zeros(4096, 1024, dtype=torch.float16))
        softmax.launch(torch.zeros(2048, 1024, dtype=torch.float16), torch.zeros(2048, 1024, dtype=torch.float16))
    recs = [replace(r, device_ms=0.01) for r in recs]
    results = roofline_launches(recs, device=preset("h200"))
    ncu = NcuResult(kernels=[NcuKernel("softmax_Kt1_abc", dram_read_bytes=8.0e6, dram_write_bytes=8.4e6, grid_size=4096),
                             NcuKernel("softmax_Kt1_abc", dram_read_bytes=8.2e6, dram_write_bytes=8.4e6, grid_size=4096),
                             NcuKernel("other_kernel", dram_read_bytes=1, dram_write_bytes=1, grid_size=2048)])
    attach_ncu(results, ncu)
    big, small = sorted(results, key=lambda r: -r.group.grid[0])
    assert big.ncu["profiled_launches"] == 2 and big.ncu["dram_bytes"] == pytest.approx(16.5e6)
    assert big.ncu["dram_vs_static"] == pytest.approx(16.5e6 / big.point.bytes)
    assert "no profiled launch matched" in small.ncu["error"]
    attach_ncu(results, NcuResult(error="ncu has no permission"))
    assert all(r.ncu == {"error": "ncu has no permission"} for r in results)


def test_example_kernel_no_wrapper_launches_takes_grid(capsys):
    """matmul_f32 ships CAPTURE_SPECS but no wrapper launches it: the grid comes from --grid."""
    ref = str(EXAMPLES_DIR / "matmul.py::matmul_f32")
    rc = main(["roofline", ref, "--device", "h200", "--latency-ms", "1"])
    assert rc == 2 and "give --grid" in capsys.readouterr().err
    rc, d, _ = run_json(capsys, ["roofline", ref, "--grid", "32,32", *OFFLINE])
    p, st = d["results"][0]["point"], d["results"][0]["static"]
    assert rc == 0 and p["bytes"] == 3 * nbytes("f32[2048,2048]") and st["mma_flops"] == 2 * 2048 ** 3
    assert (p["compute_dtype"], p["compute_unit"]) == ("f32", "cuda")      # f32 mma: no tensor cores


# ---------------------------------------------------------------------------------------
# on a GPU: real launches, real events

GPU_SCRIPT = textwrap.dedent("""
    import torch
    from cutile_diag.examples import vector_add
    a = torch.randn(1 << 24, device="cuda")
    c = torch.empty_like(a)
    for _ in range(20):
        vector_add.launch(a, a, c)
    torch.cuda.synchronize()
    assert torch.allclose(c, 2 * a)          # the observed launches still compute
""")


@pytest.mark.gpu
def test_gpu_observed_command_times_each_launch(capsys, tmp_path):
    prog = tmp_path / "va.py"
    prog.write_text(GPU_SCRIPT)
    rc = main(["roofline", "--json", "--no-peaks", "--", sys.executable, str(prog)])
    cap = capsys.readouterr()
    # on failure, what a GPU run needs to show the cause: the command's error (its stderr tail) or the point
    why = f"rc {rc}; stderr: {cap.err[-3000:]}; stdout: {cap.out[-3000:]}"
    assert cap.out.strip(), why
    d = json.loads(cap.out)
    (k,) = d["kernels"]
    why += f"; kernel: {json.dumps({x: k.get(x) for x in ('status', 'error', 'calls', 'timed_calls', 'median_ms')})}"
    pt = k.get("point") or {}
    why += f"; point: {json.dumps({x: pt.get(x) for x in ('valid', 'invalid_reasons', 'achieved_bw', 'bytes', 'notes')})}"
    assert rc == 0 and k["calls"] == 20 and k["timed_calls"] == 19, why    # the compiling first one left out
    p = k["point"]
    # 2 x 64 MiB (a is read through two parameters, moved once) at a few TB/s: tens of µs; the spin
    # keeps Python's enqueue out of it
    assert 0.02 < k["median_ms"] < 1.0 and p["latency_source"].startswith("measured") and p["valid"], why
    assert p["bytes"] == 2 * 4 * (1 << 24) and 0.5e12 < p["achieved_bw"] < 5.0e12, why


@pytest.mark.gpu
def test_gpu_bare_kernel_measured_on_fresh_inputs(capsys):
    rc, d, _ = run_json(capsys, ["roofline", str(EXAMPLES_DIR / "vector_add.py::vector_add"), "--json",
                                 "--no-peaks", "--rep-ms", "50"])
    r = d["results"][0]
    assert rc == 0 and r["status"] == "ok" and r["point"]["latency_source"] == "measured"
    assert r["point"]["counts_source"] == "static" and r["measure"]["check"] is None


LAYER_NORM = textwrap.dedent('''
    import cuda.tile as ct


    @ct.kernel
    def _persistent_layer_norm_fwd_kernel(X, Y, W, B, Mean, Rstd, EPS: ct.Constant[float], TILE_N: ct.Constant[int]):
        row = ct.bid(0)
        x = ct.load(X, index=(row, 0), shape=(1, TILE_N)).astype(ct.float32)
        mean = ct.sum(x, axis=1, keepdims=True) / TILE_N
        xc = x - mean
        rstd = ct.rsqrt(ct.sum(xc * xc, axis=1, keepdims=True) / TILE_N + EPS)
        w = ct.reshape(ct.load(W, index=(0,), shape=(TILE_N,)).astype(ct.float32), (1, TILE_N))
        b = ct.reshape(ct.load(B, index=(0,), shape=(TILE_N,)).astype(ct.float32), (1, TILE_N))
        ct.store(Y, index=(row, 0), tile=(xc * rstd * w + b).astype(Y.dtype))
        ct.store(Mean, index=(row,), tile=ct.reshape(mean, (1,)))
        ct.store(Rstd, index=(row,), tile=ct.reshape(rstd, (1,)))
''')


def test_command_table_fits_100_columns(tmp_path, monkeypatch, natural_width):
    """TileGym's layer-norm tests as ``roofline -- pytest …`` measures them: a long kernel name at
    several shapes and dtypes.  Each row stays on one line of a 100-column terminal (short
    shapes; the full array list and the notes go below the table)."""
    import importlib.util
    import torch
    from dataclasses import replace
    from rich.console import Console
    from cutile_diag.measure.observe import ObservedRun
    from cutile_diag.capture.launches import cpu_cuda, intercept_launches
    from cutile_diag.commands import _roofline_command
    from cutile_diag.roofline.device import preset
    from cutile_diag.roofline.observed import roofline_launches
    from cutile_diag.roofline.peaks import recorded_ceilings
    f = tmp_path / "layer_norm.py"
    f.write_text(LAYER_NORM)
    spec = importlib.util.spec_from_file_location("layer_norm", f)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    import cuda.tile as ct
    times = []                  # launch-bound small shapes, ~3.5 TB/s large ones; the first launch compiles
    with cpu_cuda(), intercept_launches() as recs:
        for rows, n, dt in ((256, 256, torch.float16), (256, 256, torch.float32), (4096, 8192, torch.bfloat16),
                            (16384, 4096, torch.bfloat16)):
            x = torch.zeros(rows, n, dtype=dt)
            w = torch.zeros(n, dtype=dt)
            stats = torch.zeros(rows)
            for i in range(3):
                times.append(50.0 if i == 0 else 0.006 + 2 * x.numel() * x.element_size() / 3.5e9)
                ct.launch(torch.cuda.current_stream(), (rows,), m._persistent_layer_norm_fwd_kernel,
                          (x, x, w, w, stats, stats, 1e-5, n))
    recs = [replace(r, device_ms=t, extra={"first": t == 50.0}) for r, t in zip(recs, times)]
    dev = preset("h200")
    results = roofline_launches(recs, device=dev, ceilings=recorded_ceilings(dev))
    assert len(results) == 4 and [r.status for r in results] == ["ok"] * 4, [r.error for r in results]
    run = ObservedRun(command=["pytest"], returncode=0, seconds=1.0, records=recs)
    assert natural_width(_roofline_command._table(results, dev, run)) <= 100
    console = Console(width=100, record=True, color_system=None)
    monkeypatch.setattr(_roofline_command, "console", console)
    _roofline_command._print(results, dev, run)
    lines = console.export_text().splitlines()
    # one line per configuration under its kernel's name, shortened to its largest array
    rows = [ln for ln in lines if " x2 +4 " in ln]
    assert [ln.split()[0] for ln in rows] == ["f16[256,256]", "f32[256,256]", "bf16[4096,8192]", "bf16[16384,4096]"]
    assert all(ln.rstrip().endswith(("far below", "headroom", "launch")) for ln in rows), rows
    # the 6 µs shapes are at their launch floor's door, the large ones far from their attainable time
    assert [ln.rstrip().endswith("launch") for ln in rows] == [True, True, False, False], rows
    # below the table: the full array list, the grid and the counts
    assert any(ln.startswith("_persistent_layer_norm_fwd_kernel bf16[16384,4096] x2, bf16[4096] x2, f32[16384] x2 "
                             "(grid 16384") for ln in lines)
