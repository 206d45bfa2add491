"""On a GPU: every applicable transform of every example kernel still computes the right thing.

For each (kernel, transform, first candidate) the rewritten file is imported, its host
wrapper ``launch(...)`` runs on CUDA tensors through the real cuTile JIT, and the output is
compared with a torch reference.  Tolerances are the numerics the transform may change:
TF32 for the f32 GEMM, FTZ/APPROX/exp2 for softmax.  Run with
``pytest tests/transforms/test_gpu_equivalence.py -m gpu``; skipped without a GPU.
"""
from __future__ import annotations

import pytest

from cutile_diag import transforms as T
from cutile_diag.source.model import load

from .tf_support import EXAMPLE_FILES, example_source

pytestmark = pytest.mark.gpu


def _run(kernel: str, mod, torch, dev: str = "cuda"):
    """(output, reference, atol, rtol) of one call of the example's wrapper."""
    torch.manual_seed(0)
    if kernel in ("vector_add", "vector_add_persistent"):
        a = torch.randn((1 << 20) + 3 * 1024, device=dev)
        b = torch.randn_like(a)
        c = torch.zeros_like(a)
        mod.launch(a, b, c, persistent=kernel.endswith("persistent"))
        return c, a + b, 0.0, 0.0
    if kernel in ("matmul", "matmul_tuned"):
        A = torch.randn(1024, 512, device=dev, dtype=torch.float16)
        B = torch.randn(512, 768, device=dev, dtype=torch.float16)
        C = torch.zeros(1024, 768, device=dev, dtype=torch.float16)
        mod.launch(A, B, C, tuned=kernel == "matmul_tuned")
        return C.float(), A.float() @ B.float(), 0.25, 1e-2
    if kernel == "matmul_f32":
        A = torch.randn(512, 256, device=dev)
        B = torch.randn(256, 384, device=dev)
        C = torch.zeros(512, 384, device=dev)
        mod.launch(A, B, C, tm=64, tn=64, tk=32)
        return C, A.double().matmul(B.double()).float(), 0.15, 1e-2     # TF32 allowed
    if kernel == "softmax":
        X = torch.randn(4096, 1000, device=dev, dtype=torch.float16) * 3
        Y = torch.zeros_like(X)
        mod.launch(X, Y)
        return Y.float(), torch.softmax(X.float(), dim=-1), 2e-3, 1e-2
    if kernel == "gather_scale":
        x = torch.randn((1 << 20) + 5, device=dev)
        y = torch.zeros_like(x)
        mod.launch(x, y)
        return y, x * 2 + 1, 1e-6, 1e-6
    raise AssertionError(kernel)


def _cases():
    for kernel in EXAMPLE_FILES:
        src = example_source(kernel)
        yield pytest.param(kernel, None, {}, id=f"baseline-{kernel}")
        for t in T.TRANSFORMS.values():
            cands = t.candidates(src, kernel)
            if cands:
                yield pytest.param(kernel, t.name, cands[0], id=f"{t.name}-{kernel}")


@pytest.mark.parametrize("kernel, name, params", list(_cases()))
def test_transformed_kernel_is_correct_on_gpu(tmp_path, kernel, name, params):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    from cutile_diag.capture.loader import import_file
    src = example_source(kernel)
    hinted = None
    if name is not None:
        res = T.get(name).apply(src, kernel, **params)
        if res.kind == "source":
            src = res.new_source
        else:
            hinted = res
    path = tmp_path / f"{kernel}_{name or 'baseline'}.py"
    path.write_text(src)
    mod = import_file(path)
    if hinted is not None:
        # the wrapper launches the def's global: swap in the hinted kernel object
        fn = load(src, kernel).func.name.value
        setattr(mod, fn, hinted.apply_to(getattr(mod, fn)))
    out, ref, atol, rtol = _run(kernel, mod, torch)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, ref, atol=atol, rtol=rtol)
