"""The examples of issue 21 on the numpy emulator: the three-pass gather norm and the persistent
2-blocks/SM row softmax compute what their workloads' references say, before and after the
single steps and the composites the loop screens on them (W alone over gathers, A+W, P+X)."""
from __future__ import annotations

import numpy as np
import pytest

from cutile_diag.examples import EXAMPLES_DIR
from cutile_diag.loop.backends import Version
from cutile_diag.loop.composite import enabled_candidates
from cutile_diag.loop.diagnosis import Rec
from cutile_diag.transforms import TRANSFORMS

from .tf_support import emulated


def _composites(src: str, kernel: str, entry: str, blocked: str) -> list:
    a = Version("a", {"k.py": src}, None, ())
    return enabled_candidates(Rec(entry, entry, blocked), TRANSFORMS[blocked], a, kernel_file="k.py", kernel=kernel,
                              transforms=TRANSFORMS, facts={}, attempted=set(), limit=4, skipped=[])


def test_multipass_norm_single_and_composite_steps_compute_the_norm(emu_dir):
    import torch
    src = (EXAMPLES_DIR / "multipass_norm.py").read_text()
    comps = _composites(src, "multipass_norm", "W", "read_once")
    assert [c.transform for c in comps] == ["gather_to_load+read_once"] * 2
    variants = {"original": src, "W": TRANSFORMS["read_once"].apply(src, "multipass_norm").new_source,
                **{c.result.description.split(";")[0][:40] + str(i): c.result.new_source for i, c in enumerate(comps)}}
    torch.manual_seed(0)
    for n in (300, 4096, 5000):                     # one tile (read once), one full tile, two tiles
        x = torch.randn(3, n) * 2 + 0.5
        w = torch.randn(n)
        ref = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), None, 1e-5).numpy()
        for name, s in variants.items():
            y = torch.empty_like(x)
            emulated(emu_dir, s, "mpn").launch(x, w, y, stream=object())
            np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-4, err_msg=f"{name}, n={n}")


def test_persistent_rows_single_and_composite_steps_compute_softmax(emu_dir, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: type("P", (), {"multi_processor_count": 2}))
    src = (EXAMPLES_DIR / "persistent_rows.py").read_text()
    comps = _composites(src, "persistent_rows", "X", "rows_per_block")
    assert comps and all(c.transform == "tma_zero_padding+rows_per_block" for c in comps)
    variants = {"original": src, "P": TRANSFORMS["tma_zero_padding"].apply(src, "persistent_rows").new_source,
                "X": TRANSFORMS["rows_per_block"].apply(src, "persistent_rows", rows=4).new_source,
                **{f"P+X {i}": c.result.new_source for i, c in enumerate(comps)}}
    torch.manual_seed(0)
    x = torch.randn(11, 300) * 3                    # 11 rows on a grid of 4: uneven strides, a padded row tile
    ref = torch.softmax(x.double(), dim=1).numpy()
    for name, s in variants.items():
        y = torch.empty_like(x)
        emulated(emu_dir, s, "pr").launch(x, y, stream=object())
        np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("kernel", ["multipass_norm", "persistent_rows"])
def test_examples_are_registered_with_workloads(kernel):
    from cutile_diag.examples import SPECLESS_KERNELS
    from cutile_diag.workloads import load_workload
    assert (kernel,) in SPECLESS_KERNELS.values()
    wl = load_workload(f"examples:{kernel}")
    cfg = wl.configs[0]
    assert wl.bytes(cfg) > 0 and wl.flops(cfg) > 0
