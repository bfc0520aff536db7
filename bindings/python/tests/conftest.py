"""Shared fixtures.  The package is imported from this source tree (pyproject's pytest `pythonpath`); the library
from TESSERA_LIBRARY or the build tree, as tessera._capi describes."""

from __future__ import annotations

import os

import pytest

import tessera

BACKEND_DATA = os.environ.get(
    "TESSERA_BACKEND_DATA",
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "onnx-backend-data"))


def pytest_report_header(config):  # noqa: ARG001
    return f"tessera {tessera.__version__}: {tessera.library_path} (providers: {tessera.get_available_providers()})"


def pytest_sessionstart(session):  # noqa: ARG001
    """One clear error instead of a hundred failures when the build has no usable CPU provider."""
    if "cpu" not in tessera.get_default_environment().providers():
        pytest.exit(f"no usable 'cpu' provider next to {tessera.library_path}; plugin report: {tessera.plugins()}",
                    returncode=1)


@pytest.fixture(scope="session")
def backend_data() -> str:
    """The ONNX backend conformance data directory (skips the test when it is absent)."""
    if not os.path.isdir(os.path.join(BACKEND_DATA, "simple")):
        pytest.skip(f"no ONNX backend data at {BACKEND_DATA} (set TESSERA_BACKEND_DATA)")
    return BACKEND_DATA
