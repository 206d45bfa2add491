"""Workload references: built-ins, user files, and every way loading can fail."""
import textwrap

import pytest

from cutile_diag.errors import CutileDiagError, KernelLoadError, UsageError
from cutile_diag.workload import CaptureSpec, WorkloadConfig, WorkloadError, dtype_name, torch_dtype, workload
from cutile_diag.workloads import builtin_names, load_workload

GOOD = '''
from cutile_diag.workload import Workload, WorkloadConfig

class Copy(Workload):
    configs = [WorkloadConfig("small", {"n": 16})]
    outputs = ("y",)
    def make_inputs(self, cfg, seed, device="cpu"):
        import torch
        return {"x": torch.arange(cfg["n"], dtype=torch.float32), "y": torch.empty(cfg["n"])}
    def run(self, inputs):
        inputs["y"].copy_(inputs["x"])
    def reference(self, inputs):
        return {"y": inputs["x"].double()}
    def flops(self, cfg):
        return 0
    def bytes(self, cfg):
        return 8 * cfg["n"]
'''


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_builtins_are_listed_and_resolve():
    names = builtin_names()
    for n in ("examples:vector_add", "examples:matmul", "examples:softmax", "examples:gather_scale",
              "examples:matmul_tuned", "examples:vector_add_persistent", "examples:matmul_f32",
              "tilegym:softmax", "tilegym:rms_norm", "tilegym:matmul", "tilegym:layer_norm_legacy"):
        assert n in names
    wl = load_workload("examples:vector_add")
    assert wl.ref == "examples:vector_add" and wl.name == "examples:vector_add"
    assert wl.config("16M-f32")["n"] == 1 << 24
    assert load_workload("gather_scale").ref == "examples:gather_scale"      # a unique bare name


def test_unknown_and_ambiguous_builtins():
    with pytest.raises(WorkloadError, match="unknown workload 'examples:nope'"):
        load_workload("examples:nope")
    with pytest.raises(WorkloadError, match="ambiguous"):
        load_workload("matmul")
    with pytest.raises(UsageError):
        load_workload("  ")


@pytest.mark.parametrize("ref", ["", "   ", None])
def test_an_empty_reference_is_one_usage_error_before_and_at_loading(ref):
    from cutile_diag.workloads import check_ref
    for resolve in (check_ref, load_workload):
        with pytest.raises(UsageError, match="empty workload reference"):
            resolve(ref)


def test_example_kernel_path_maps_to_its_workload():
    from cutile_diag.examples import EXAMPLES_DIR
    wl = load_workload(f"{EXAMPLES_DIR / 'matmul.py'}::matmul_tuned")
    assert wl.ref == "examples:matmul_tuned"


def test_user_file(tmp_path):
    p = _write(tmp_path, "wl.py", GOOD)
    wl = load_workload(f"{p}::Copy")
    assert wl.name == "Copy" and wl.ref == f"{p.resolve()}::Copy"
    assert load_workload(str(p)).name == "Copy"           # the only workload in the file


def test_file_that_does_not_import(tmp_path):
    p = _write(tmp_path, "broken.py", "import no_such_module_xyz\n")
    with pytest.raises(KernelLoadError, match="No module named 'no_such_module_xyz'") as e:
        load_workload(f"{p}::X")
    assert str(p) in e.value.one_line() and ":1" in e.value.one_line()
    p2 = _write(tmp_path, "syntax.py", "def f(:\n")
    with pytest.raises(KernelLoadError, match="syntax error"):
        load_workload(f"{p2}::X")
    with pytest.raises(UsageError, match="no such file"):
        load_workload(f"{tmp_path / 'missing.py'}::X")


def test_workload_without_a_reference(tmp_path):
    p = _write(tmp_path, "noref.py", GOOD.replace("    def reference(self, inputs):\n"
                                                  "        return {\"y\": inputs[\"x\"].double()}\n", ""))
    with pytest.raises(WorkloadError, match="has no reference") as e:
        load_workload(f"{p}::Copy")
    assert "higher precision" in e.value.one_line()
    from cutile_diag.workload import validate
    fw = workload(name="f", configs=[WorkloadConfig("a")], make_inputs=lambda *a: {}, run=lambda i: None,
                  reference=None, flops=lambda c: 0, bytes=lambda c: 0)
    with pytest.raises(WorkloadError, match="workload f has no reference"):
        validate(fw)


def test_incomplete_workloads(tmp_path):
    p = _write(tmp_path, "noflops.py", GOOD.replace("    def flops(self, cfg):\n        return 0\n", ""))
    with pytest.raises(WorkloadError, match="does not implement flops"):
        load_workload(f"{p}::Copy")
    p = _write(tmp_path, "noconf.py", GOOD.replace('configs = [WorkloadConfig("small", {"n": 16})]', "configs = []"))
    with pytest.raises(WorkloadError, match="no configurations"):
        load_workload(f"{p}::Copy")
    p = _write(tmp_path, "dup.py", GOOD.replace('configs = [WorkloadConfig("small", {"n": 16})]',
                                                'configs = [WorkloadConfig("a"), WorkloadConfig("a")]'))
    with pytest.raises(WorkloadError, match="duplicate configuration names: a"):
        load_workload(f"{p}::Copy")


def test_names_in_files(tmp_path):
    p = _write(tmp_path, "two.py", GOOD + "\nclass Other(Copy):\n    pass\n")
    with pytest.raises(WorkloadError, match="several workloads"):
        load_workload(str(p))
    with pytest.raises(WorkloadError, match="no workload named 'Nope'"):
        load_workload(f"{p}::Nope")
    p = _write(tmp_path, "none.py", "x = 1\n")
    with pytest.raises(WorkloadError, match="defines no Workload"):
        load_workload(str(p))
    with pytest.raises(WorkloadError, match="is int, not a Workload"):
        load_workload(f"{p}::x")


def test_kernel_instead_of_workload_gets_a_hint():
    pytest.importorskip("cuda.tile")
    import tempfile
    from pathlib import Path
    src = "import cuda.tile as ct\n\n@ct.kernel\ndef k(a, T: ct.Constant[int]):\n    pass\n"
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "kern.py"
        p.write_text(src)
        with pytest.raises(WorkloadError, match="is a @ct.kernel, not a workload") as e:
            load_workload(f"{p}::k")
        assert "examples:" in e.value.one_line()


def test_constructor_kwargs(tmp_path):
    from cutile_diag.examples import EXAMPLES_DIR
    variant = tmp_path / "vadd_variant.py"
    variant.write_text((EXAMPLES_DIR / "vector_add.py").read_text())
    wl = load_workload("examples:vector_add", source=str(variant))
    assert wl.ref_kwargs == {"source": str(variant)}
    cap = wl.capture(wl.config("1M-f32"), 132)
    assert cap.kernel == f"{variant.resolve()}::vector_add" and cap.grid == (1024,)
    with pytest.raises(WorkloadError, match="no such file"):
        load_workload("examples:vector_add", source=str(tmp_path / "nope.py"))
    with pytest.raises(WorkloadError, match="cannot create workload"):
        load_workload(f"{_write(tmp_path, 'wl.py', GOOD)}::Copy", bogus=1)
    # built-ins refuse unknown arguments the same way, and list the ones they take
    with pytest.raises(WorkloadError, match="cannot create workload examples:matmul: .*'foo'") as e:
        load_workload("examples:matmul", foo="bar")
    assert "it takes: source" in e.value.one_line()
    with pytest.raises(WorkloadError, match="tilegym:matmul: .*'foo'") as e:
        load_workload("tilegym:matmul", foo="bar")
    assert "it takes no arguments" in e.value.one_line()


def test_config_lookup_error_lists_names():
    wl = load_workload("examples:softmax")
    with pytest.raises(WorkloadError, match="no configuration 'x'") as e:
        wl.select(["x"])
    assert "32768x1024-f16" in e.value.one_line()
    assert [c.name for c in wl.select(None)] == [c.name for c in wl.configs]
    with pytest.raises(WorkloadError, match="has no parameter 'nope'"):
        wl.configs[0]["nope"]


def test_errors_are_cutile_diag_errors():
    assert issubclass(WorkloadError, CutileDiagError)


def test_dtype_helpers():
    import torch
    assert torch_dtype("bf16") is torch.bfloat16 and torch_dtype(torch.float16) is torch.float16
    assert dtype_name(torch.float32) == "f32" and dtype_name("half") == "f16"
    with pytest.raises(UsageError):
        torch_dtype("f17")


@pytest.mark.parametrize("name", ["vector_add", "vector_add_persistent", "matmul", "matmul_f32", "matmul_tuned",
                                  "softmax", "gather_scale"])
def test_example_workloads_declare_everything_and_check_on_cpu_refs(name):
    import torch
    wl = load_workload(f"examples:{name}")
    for cfg in wl.configs:
        assert wl.flops(cfg) >= 0 and wl.bytes(cfg) > 0
        cap = wl.capture(cfg, 132)
        assert isinstance(cap, CaptureSpec) and all(g > 0 for g in cap.grid)
        d, u = wl.compute_unit(cfg)
        assert u in ("tensor", "cuda")
    # the reference runs on CPU for a shrunken configuration (the GPU kernels do not)
    small = WorkloadConfig("tiny", {**wl.configs[0].params})
    for k in ("n", "M", "N", "K"):
        if k in small.params:
            small.params[k] = 64
    inputs = wl.make_inputs(small, 0, "cpu")
    ref = wl.reference(inputs)
    assert set(ref) == set(wl.outputs)
    assert all(torch.isfinite(v).all() for v in ref.values())


def test_tilegym_workloads_report_missing_package():
    wl = load_workload("tilegym:softmax")
    why = wl.available()
    try:
        import tilegym  # noqa: F401
    except Exception:
        assert why and "tilegym" in why
        with pytest.raises(WorkloadError, match="tilegym"):
            wl.run({"x": None, "_use_tma": False})
    assert wl.flops(wl.configs[0]) == 5.0 * 4096 * 4096
    rms = load_workload("tilegym:rms_norm")
    c = rms.config("16384x4096-bf16-multiwave")
    assert rms.bytes(c) == 2 * 16384 * 4096 * 2 + 4096 * 2
    assert load_workload("tilegym:matmul").compute_unit(load_workload("tilegym:matmul").configs[0]) == ("f16", "tensor")


def test_tilegym_references_on_cpu():
    import torch
    sm = load_workload("tilegym:softmax")
    cfg = WorkloadConfig("t", {"M": 8, "N": 16, "dtype": "f32", "use_tma": False})
    x = sm.make_inputs(cfg, 0, "cpu")
    assert torch.allclose(sm.reference(x).sum(-1), torch.ones(8, dtype=torch.float64))
    rms = load_workload("tilegym:rms_norm")
    cfg = WorkloadConfig("t", {"M": 4, "N": 32, "dtype": "f32", "mode": "static_persistent"})
    inp = rms.make_inputs(cfg, 0, "cpu")
    y = rms.reference(inp)
    xd, wd = inp["x"].double(), inp["w"].double()
    assert torch.allclose(y / wd, xd / xd.pow(2).mean(-1, keepdim=True).add(rms.eps).sqrt())


def _fake_tilegym(monkeypatch, impls):
    """A stand-in tilegym package: ops dispatch to ``impls`` (op -> cutile implementation)."""
    import sys
    import types
    from cutile_diag.workloads import tilegym_ops
    calls = []
    tg, backend, disp, ops = (types.ModuleType(n) for n in
                              ("tilegym", "tilegym.backend", "tilegym.backend.dispatcher", "tilegym.ops"))
    disp._REGISTRY = {op: {"cutile": fn, "pytorch": fn} for op, fn in impls.items()}
    disp.has_backend_impl = lambda op, b: op in disp._REGISTRY and b in disp._REGISTRY[op]
    backend.dispatcher = disp
    for op, fn in impls.items():
        def stub(*a, _fn=fn, _op=op, **kw):
            calls.append((_op, dict(kw)))
            kw.pop("backend", None)
            return _fn(*a, **kw)
        setattr(ops, op, stub)
    tg.backend, tg.ops = backend, ops
    for name, mod in (("tilegym", tg), ("tilegym.backend", backend), ("tilegym.backend.dispatcher", disp),
                      ("tilegym.ops", ops)):
        monkeypatch.setitem(sys.modules, name, mod)
    tilegym_ops._tilegym_status.cache_clear()
    monkeypatch.setattr(tilegym_ops, "_tilegym_status", lambda: None)
    return calls


@pytest.mark.parametrize("style", ["mode", "static_persistent"])
def test_tilegym_rms_norm_picks_the_installed_keyword(monkeypatch, style):
    if style == "mode":
        def impl(input, normalized_shape, weight, eps, bias=None, mode=None, offset=0.0, **kwargs):
            return input.clone()
    else:
        def impl(input, normalized_shape, weight, eps, bias=None, static_persistent=None, **kwargs):
            return input.clone()
    calls = _fake_tilegym(monkeypatch, {"rms_norm": impl})
    wl = load_workload("tilegym:rms_norm")
    assert wl.available() is None
    cfg = WorkloadConfig("t", {"M": 4, "N": 8, "dtype": "f32", "mode": "multi_wave"})
    wl.run(wl.make_inputs(cfg, 0, "cpu"))
    kw = calls[-1][1]
    assert kw["backend"] == "cutile"
    if style == "mode":
        assert kw["mode"] == "multi_wave_reload" and "static_persistent" not in kw
    else:
        assert kw["static_persistent"] is False and "mode" not in kw


def test_tilegym_layer_norm_legacy_checks_the_op_on_cpu(monkeypatch):
    import torch
    from cutile_diag.harness.correctness import check_workload

    def impl(input, normalized_shape, weight, bias, eps, weight_shift=0.0, **kwargs):
        y = torch.nn.functional.layer_norm(input.float(), normalized_shape, (weight + weight_shift).float(),
                                           bias.float(), eps)
        return y.to(input.dtype)

    def no_bias(input, normalized_shape, weight, bias, eps, **kwargs):
        return impl(input, normalized_shape, weight, torch.zeros_like(bias), eps)
    calls = _fake_tilegym(monkeypatch, {"layer_norm_legacy": impl})
    wl = load_workload("tilegym:layer_norm_legacy")
    cfg = WorkloadConfig("t", {"M": 8, "N": 64, "dtype": "bf16"})
    assert check_workload(wl, cfg, seed=0, device="cpu").passed
    assert calls[-1] == ("layer_norm_legacy", {"backend": "cutile"})
    from tilegym import ops
    monkeypatch.setattr(ops, "layer_norm_legacy", lambda *a, backend=None, **kw: no_bias(*a, **kw))
    assert not check_workload(wl, cfg, seed=0, device="cpu").passed
    c = wl.config("16384x4096-bf16")
    assert wl.bytes(c) == 2 * 16384 * 4096 * 2 + 2 * 4096 * 2 + 8 * 16384 and wl.kernel_name == "_layer_norm_fwd_kernel"


def test_tilegym_op_without_cutile_impl_is_refused(monkeypatch):
    calls = _fake_tilegym(monkeypatch, {"softmax": lambda x, use_tma=False, **kw: x})
    from tilegym.backend import dispatcher
    del dispatcher._REGISTRY["softmax"]["cutile"]          # only the PyTorch fallback is left
    wl = load_workload("tilegym:softmax")
    assert "no cuTile implementation" in wl.available()
    with pytest.raises(WorkloadError, match="no cuTile implementation"):
        wl.run({"x": None, "_use_tma": False})
    assert calls == []                                      # never silently timed the fallback
