"""Fixtures for the transform tests: one AOT compiler per session, the CPU emulator."""
from __future__ import annotations

import types

import pytest

from cutile_diag.toolchain import have_tool

from .tf_support import Compiler


@pytest.fixture(scope="session")
def compiler(tmp_path_factory):
    if not have_tool("tileirdisasm"):
        pytest.skip("tileirdisasm not installed (pip install 'cuda-tile[tileiras]')")
    return Compiler(tmp_path_factory.mktemp("transform-variants"))


@pytest.fixture(scope="session")
def emu_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("transform-emulated")


@pytest.fixture
def one_sm(monkeypatch):
    """torch reports a 1-SM device, so persistent grids really stride."""
    import torch
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda dev: types.SimpleNamespace(multi_processor_count=1))
