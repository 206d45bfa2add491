"""On a GPU: the structural transforms on the library-style row kernels (fixtures/row_kernels.py)
compute what the original computes, through the real cuTile JIT, on ragged shapes.
Run with ``pytest tests/transforms/test_gpu_rows.py -m gpu``; skipped without a GPU."""
from __future__ import annotations

from pathlib import Path

import pytest

from cutile_diag import transforms as T

pytestmark = pytest.mark.gpu
SRC = (Path(__file__).parent / "fixtures" / "row_kernels.py").read_text()

# (id, kernel, [(transform, params), ...] applied in order, entry point)
CASES = [
    ("A-rms", "rms_norm_rows", [("gather_to_load", {})], "rms"),
    ("A-bias", "bias_rows", [("gather_to_load", {})], "bias"),
    ("A-scale", "scale_rows", [("gather_to_load", {})], "scale"),
    ("A-softmax-neginf", "softmax_rows", [("gather_to_load", {})], "softmax"),
    ("A+W-rms", "rms_norm_rows", [("gather_to_load", {}), ("read_once", {})], "rms_fits"),
    ("A+B-rms", "rms_norm_rows", [("gather_to_load", {}), ("persistent_grid", {})], "rms"),
    ("A-off+W-rms", "rms_norm_rows", [("gather_to_load", {"tma": "off"}), ("read_once", {})], "rms_fits"),
    ("A-off-softmax-neginf", "softmax_rows", [("gather_to_load", {"tma": "off"})], "softmax"),
    ("P-off-rowmax", "row_max", [("tma_zero_padding", {"tma": "off"})], "row_max"),
    ("F-loads+P-softmax-tma", "softmax_tma_rows", [("store_allow_tma_false", {"loads": True}),
                                                  ("tma_zero_padding", {})], "softmax_tma"),
    ("P-rowmax", "row_max", [("tma_zero_padding", {})], "row_max"),
    ("P+X-softmax-tma", "softmax_tma_rows", [("tma_zero_padding", {}), ("rows_per_block", {"rows": 4})],
     "softmax_tma"),
    ("W-layernorm", "layer_norm_rows", [("read_once", {})], "layer"),
    ("X-layernorm", "layer_norm_rows", [("rows_per_block", {"rows": 4})], "layer"),
    ("B+X-layernorm", "layer_norm_rows", [("persistent_grid", {}), ("rows_per_block", {"rows": 2})], "layer"),
    ("joint-layernorm", "layer_norm_rows", [("joint_sweep", "first")], "layer"),
]


def _call(mod, entry, torch):
    torch.manual_seed(0)
    dev = "cuda"
    x = torch.randn(1000, 1000, device=dev) * 2
    w = torch.randn(1000, device=dev)
    b = torch.randn(1000, device=dev)
    if entry == "rms":
        return mod.rms_norm(x, w, 1e-6, 256)[0]
    if entry == "rms_fits":
        return mod.rms_norm(x, w, 1e-6, 1024)[0]
    if entry == "bias":
        return mod.bias_add(x, b, 4)
    if entry == "scale":
        return mod.scale(x, torch.randn(1000, device=dev))
    if entry == "softmax":
        return mod.softmax(x.half()).float()
    if entry == "softmax_tma":
        return mod.softmax_tma(x.half()).float()
    if entry == "row_max":
        y = torch.zeros(1000, 1, device=dev, dtype=torch.half)
        return mod.launch_row_max(-x.abs().half() - 1, y).float()
    if entry == "layer":
        return mod.layer_norm(x, w, b, 1e-5, 1024)
    raise AssertionError(entry)


@pytest.mark.parametrize("kernel, steps, entry", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_structural_rewrite_matches_the_original_on_gpu(tmp_path, kernel, steps, entry):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    from cutile_diag.capture.loader import import_file
    src = SRC
    for name, params in steps:
        t = T.get(name)
        if params == "first":
            params = t.candidates(src, kernel)[0]
        src = t.apply(src, kernel, **params).new_source
    outs = []
    for tag, s in (("orig", SRC), ("new", src)):
        path = tmp_path / f"{kernel}_{tag}.py"
        path.write_text(s)
        outs.append(_call(import_file(path), entry, torch))
    torch.cuda.synchronize()
    torch.testing.assert_close(outs[1], outs[0], atol=2e-3, rtol=2e-3)
