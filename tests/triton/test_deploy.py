"""Deployment: the self-contained backend folder that `cmake --install --component triton_backend_folder` makes is
what an image's backends directory needs, and a server given only that folder serves from it."""
from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
import tritonclient.http as httpclient

import harness
import models


@pytest.mark.skipif(not os.environ.get("TRITON_TEST_BUILD_DIR"), reason="TRITON_TEST_BUILD_DIR not set")
def test_installed_backend_folder_serves_on_its_own(work_dir):
    prefix = work_dir / "install"
    done = subprocess.run(["cmake", "--install", os.environ["TRITON_TEST_BUILD_DIR"], "--component",
                           "triton_backend_folder", "--prefix", str(prefix)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    folder = prefix / "backends" / "tessera"
    for file in ("libtriton_tessera.so", "libtessera.so.0", "tessera/tessera-plugin-scanner",
                 "tessera/plugins/libtessera_cpu.so"):
        assert (folder / file).exists(), file
    repo = work_dir / "deploy-repository"
    harness.write_model(repo, "dense", 'backend: "tessera"\nmax_batch_size: 4\n', models.dense_model())
    server = harness.Server(repo, work_dir, name="deploy", load=("dense",),
                            backend_dir=str(prefix / "backends")).start(wait_for=("dense",))
    try:
        client = server.http()
        x = np.random.default_rng(5).standard_normal((2, 16)).astype(np.float32)
        tensor = httpclient.InferInput("x", [2, 16], "FP32")
        tensor.set_data_from_numpy(x)
        np.testing.assert_allclose(client.infer("dense", [tensor]).as_numpy("y"), models.dense_reference(x),
                                   rtol=1e-5, atol=1e-5)
        client.close()
        # The CPU provider came from the folder, not from the build tree.
        assert f"tessera plugin {folder}/tessera/plugins/libtessera_cpu.so: loaded" in server.log_text()
    finally:
        server.stop()
