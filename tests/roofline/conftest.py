"""Fixtures for the roofline / bench / workload / plugin tests.

``pytester`` is needed by the plugin tests.  ``pytest_plugins = ["pytester"]`` is only
allowed in the top-level conftest (pytest rejects it here when the whole suite runs from
the repository root), so the plugin is imported from ``pytest_configure`` instead, which
works for both ``pytest`` and ``pytest tests/roofline``.  GPU tests are skipped by the
top-level conftest.
"""
import pytest


def pytest_configure(config):
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("CUTILE_DIAG_CACHE_DIR", str(d))
    return d
