"""docs/simulate.md documents the --simulate spec: its example loads, and its key table and the
loader (SimSpec) name the same keys, so the page and the code cannot drift apart."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from cutile_diag.cli import main
from cutile_diag.loop.backends.simulated import SimSpec

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGE = (DOCS / "simulate.md").read_text()


def test_the_documented_example_loads_and_is_the_example_file():
    block = re.search(r"```json\n(.*?)```", PAGE, re.S).group(1)
    assert json.loads(block) == json.loads((DOCS / "simulate.json").read_text())
    spec = SimSpec.load(DOCS / "simulate.json")
    assert spec.configs == {"1M": 0.012, "16M": 0.06} and spec.unit == ("f32", "cuda")
    assert set(json.loads(block)) == {f.name for f in dataclasses.fields(SimSpec)}   # the example shows every key


def test_every_key_the_loader_accepts_is_documented_and_no_other():
    table = re.findall(r"^\| `(\w+)` \| (.+?) \| (.+?) \|$", PAGE, re.M)
    documented = {k: (default, meaning) for k, default, meaning in table}
    fields = {f.name: f for f in dataclasses.fields(SimSpec)}
    assert set(documented) == set(fields)
    for name, f in fields.items():       # each documented default is the loader's
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        shown = documented[name][0]
        if default is dataclasses.MISSING:
            assert shown == "required"
        else:
            assert json.loads(shown.strip("`")) == (list(default) if isinstance(default, tuple) else default)


def test_the_pointers_to_the_page_exist(capsys):
    readme = (DOCS.parent / "README.md").read_text()
    assert "docs/simulate.md" in readme
    try:
        main(["optimize", "--help"])
    except SystemExit:
        pass
    assert "docs/simulate.md" in " ".join(capsys.readouterr().out.split())


def test_measuring_without_a_gpu_points_at_the_simulation(capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the worker measures")
    assert main(["calibrate", "examples:vector_add", "-n", "2", "--rounds", "2", "--no-save"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA GPU" in err[0] and "--simulate SPEC.json" in err[0]
    assert "docs/simulate.md" in err[0]
