"""AOT capture of every example kernel for sm_90 and sm_100: real facts of real output."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cutile_diag.capture.manifest import SCHEMA, load_capture, sha256_file
from cutile_diag.capture.summary import summarize_capture
from cutile_diag.examples import EXAMPLE_KERNELS

ALL = [k for ks in EXAMPLE_KERNELS.values() for k in ks]


@pytest.mark.parametrize("name", ALL)
def test_every_example_has_complete_artifacts(example_captures, name):
    c = example_captures[name]
    assert c.manifest["schema"] == SCHEMA
    for f in ("kernel.tileirbc", "kernel.tileir", "kernel.loc.tileir", "manifest.json"):
        assert (c.path / f).is_file(), f
    assert c.targets == ["sm_100", "sm_90"]
    for arch in c.targets:
        for f in ("kernel.cubin", "kernel.sass", "resource-usage.txt", "kernel.ptx",
                  "ptxas.txt", "elf-info.txt"):
            assert (c.path / arch / f).stat().st_size > 0, (arch, f)
        # tileiras only remarks on view memory ops and mma: a pure gather kernel has none
        remarks = (c.path / arch / "remarks.yaml")
        assert remarks.exists() and (remarks.stat().st_size > 0) == (name != "gather_scale")
        t = c.target(arch)
        assert t["opt_level"] == 3
        assert t["tileiras_flags"][:4] == ["--gpu-name", arch, "-O3", "--lineinfo"]
        facts = t["facts"]
        # parsed numbers, cross-checked against the raw reports
        res = c.resources(arch)
        sym = c.symbol
        assert facts["registers"] == res[sym].registers > 0
        assert facts["shared"] == res[sym].shared
        assert facts["spill_stores"] >= 0 and isinstance(facts["spill_loads"], int)
        assert facts["threads_per_cta"][0] in (128, 256, 384)
        assert facts["language"] == "TILEIR"
        assert facts["sass"]["instructions"] > 10
        assert t["ptx_target"] == f"{arch}a"


def test_manifest_hashes_and_decoded_constants(example_captures):
    c = example_captures["matmul"]
    for rel, meta in c.manifest["files"].items():
        p = c.path / rel
        assert sha256_file(p) == meta["sha256"] and p.stat().st_size == meta["bytes"]
    dec = c.manifest["signature"]["decoded"]
    assert dec["function"] == "matmul"
    assert dec["constants"] == [128, 128, 64]
    assert c.manifest["signature"]["spec"]["TM"] == "128"
    assert c.manifest["bytecode_version"].startswith("13.")
    assert c.manifest["tools"]["tileiras"]
    assert c.manifest["kernel"]["symbol"].startswith("matmul_K")


def test_gemm_uses_tensor_cores_and_tma_on_both_archs(example_captures):
    c = example_captures["matmul"]
    r90 = c.facts("sm_90")["remarks"]
    assert r90["tensor_core_kinds"] == ["Tensor-core SM90"]
    assert r90["tma_loads"] == 2 and r90["tma_stores"] == 1     # one per op after de-duplication
    assert [64, 128, 16] in r90["mma_shapes"]
    assert c.facts("sm_100")["remarks"]["tensor_core_kinds"] == ["Tensor-core SM100"]
    sass90 = c.facts("sm_90")["sass"]
    assert any(f.startswith("HGMMA") for f in sass90["mma_forms"])
    assert sass90["classes"]["tma"] > 0
    assert c.facts("sm_90")["reg_reconfig"] is True   # warp-specialised: REG 255 is a ceiling
    assert c.facts("sm_90")["threads_per_cta"] == [256, 1, 1]


def test_f32_gemm_falls_back_to_fma_and_spills(example_captures):
    f = example_captures["matmul_f32"].facts("sm_90")
    assert f["remarks"]["fma_fallbacks"] >= 1
    assert f["remarks"]["tensor_core_kinds"] == []
    assert f["spill_stores"] > 0 and f["stack_frame"] > 0
    assert f["sass"]["classes"].get("local", 0) > 0


def test_gather_kernel_shows_pointer_loads(example_captures):
    c = example_captures["gather_scale"]
    s = summarize_capture(c, "sm_90")
    assert s.ptr_loads == 1 and s.ptr_stores == 1 and s.view_loads == 0
    names = [op.name for op in c.module.entries[0].walk()]
    assert "load_ptr_tko" in names and "load_view_tko" not in names
    assert c.facts("sm_90")["sass"]["classes"]["global_load"] >= 1


def test_persistent_variant_loops_over_num_tile_blocks(example_captures):
    c = example_captures["vector_add_persistent"]
    e = c.module.entries[0]
    grid = [op for op in e.walk() if op.name == "get_num_tile_blocks"]
    loops = [op for op in e.walk() if op.name == "for"]
    assert grid and loops
    step = dict(zip(loops[0].operand_roles, loops[0].operands))["step"]
    assert step in grid[0].results
    assert summarize_capture(c).persistent_loop
    assert not summarize_capture(example_captures["vector_add"]).persistent_loop


def test_softmax_load_is_not_tma_because_of_padding(example_captures):
    s = summarize_capture(example_captures["softmax"], "sm_90")
    assert s.tma_failures and "padding" in s.tma_failures[0]
    assert s.tma_loads == 0


def test_tileir_is_arch_independent_and_has_locations(example_captures):
    c = example_captures["softmax"]
    text = c.tileir_text()
    loc = c.tileir_loc_text()
    assert "loc(#loc" not in text and "loc(#loc" in loc
    mod = c.module     # parsed from the -g text
    ops = [op for op in mod.entries[0].walk() if op.name == "exp"]
    assert ops and ops[0].source is not None
    assert Path(ops[0].source.file).name == "softmax.py"
    src = Path(ops[0].source.file).read_text().splitlines()[ops[0].source.line - 1]
    assert "ct.exp" in src


def test_hints_reach_manifest_and_cubin(tmp_path):
    from cutile_diag.capture.aot import capture_aot
    from cutile_diag.examples import EXAMPLES_DIR
    ref = f"{EXAMPLES_DIR / 'matmul.py'}::matmul"
    c = capture_aot(ref, archs=["sm_90"], out_dir=tmp_path, hints={"occupancy": 2, "num_ctas": 2},
                    name="mm-hinted")
    assert c.manifest["hints"]["entry"]["default"] == {"num_cta_in_cga": 2, "occupancy": 2}
    assert c.manifest["hints"]["requested"] == {"occupancy": 2, "num_ctas": 2}
    f = c.facts("sm_90")
    assert f["cluster_shape"] == [2, 1, 1]
    assert f["registers"] <= 128


def test_recapture_replaces_atomically(tmp_path, monkeypatch):
    """A capture that fails half-way leaves the previous capture intact and no partial folder."""
    from cutile_diag.capture import artifacts
    from cutile_diag.capture.aot import capture_aot
    from cutile_diag.errors import ToolFailedError
    from cutile_diag.examples import EXAMPLES_DIR
    ref = f"{EXAMPLES_DIR / 'vector_add.py'}::vector_add"
    first = capture_aot(ref, archs=["sm_90"], out_dir=tmp_path)
    before = (first.path / "manifest.json").read_text()
    real = artifacts.run_tool

    def failing(name, args, **kw):
        if name == "tileiras":
            raise ToolFailedError("tileiras exited with 1: injected")
        return real(name, args, **kw)
    monkeypatch.setattr(artifacts, "run_tool", failing)
    with pytest.raises(Exception):
        capture_aot(ref, archs=["sm_90"], out_dir=tmp_path)
    assert (first.path / "manifest.json").read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["vector_add"]


def test_load_capture_rejects_non_capture(tmp_path):
    from cutile_diag.errors import UsageError
    with pytest.raises(UsageError):
        load_capture(tmp_path)
    (tmp_path / "manifest.json").write_text("{nope")
    from cutile_diag.errors import ParseError
    with pytest.raises(ParseError):
        load_capture(tmp_path)


def test_foreign_schema_is_flagged(example_captures, tmp_path):
    import shutil
    src = example_captures["vector_add"].path
    dst = tmp_path / "old"
    shutil.copytree(src, dst)
    m = json.loads((dst / "manifest.json").read_text())
    m["schema"] = "cutile-diag.capture/0"
    (dst / "manifest.json").write_text(json.dumps(m))
    c = load_capture(dst)
    assert not c.schema_ok and "capture/0" in c.problems[0]
    assert c.module.entries   # the files are still usable


def test_op_hints_reach_manifest(example_captures):
    ops = example_captures["matmul_tuned"].manifest["hints"]["ops"]
    assert len(ops) == 2 and {o["op"] for o in ops} == {"load_view_tko"}
    for o in ops:
        assert o["hints"] == {"default": {"latency": 10}}
        assert o["tileir"].startswith("kernel.loc.tileir:")
        assert o["source"].split(":")[0].endswith("matmul.py") and "latency=10" in o["code"]
    assert example_captures["matmul"].manifest["hints"]["ops"] == []
