"""DFT at lengths past the direct sum: powers of two (radix-2), primes and other composites
(Bluestein's chirp-z), forward, inverse and one-sided, real and complex, zero-padded and cut by
dft_length, against numpy's FFT in double precision. A long prime length (8202 = 2 * 3 * 1367)
runs in well under a second (the direct sum took minutes under the sanitizers)."""

import os
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")


def dft_model(n, channels, inverse, onesided, length):
    inits = [numpy_helper.from_array(np.array(1, np.int64), "axis")]
    if length:
        inits.append(numpy_helper.from_array(np.array(length, np.int64), "len"))
    node = helper.make_node("DFT", ["x", "len" if length else "", "axis"], ["y"],
                            inverse=inverse, onesided=onesided)
    graph = helper.make_graph(
        [node], "dft", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, n, 3, channels])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


@pytest.mark.parametrize("n, inverse, onesided, cplx, length", [
    (100, 0, 0, False, None), (100, 1, 0, True, None), (1367, 0, 1, False, None),
    (1367, 1, 0, True, None), (8202, 0, 0, True, None), (1024, 1, 0, True, None),
    (70, 0, 0, True, 130), (200, 1, 0, True, 150), (97, 0, 1, False, 300)])
def test_dft_matches_numpy(tmp_path, n, inverse, onesided, cplx, length):
    onnx.save(dft_model(n, 2 if cplx else 1, inverse, onesided, length), tmp_path / "dft.onnx")
    x = np.random.RandomState(n).randn(2, n, 3, 2 if cplx else 1).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = subprocess.run([KILN, "run", tmp_path / "dft.onnx", "--input", f"x={tmp_path / 'x.npy'}",
                           "--output-dir", tmp_path / "out"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = np.load(tmp_path / "out" / "y.npy")
    signal = x[..., 0].astype(np.float64) + (1j * x[..., 1] if cplx else 0)
    size = length or n
    want = np.fft.ifft(signal, n=size, axis=1) if inverse else np.fft.fft(signal, n=size, axis=1)
    if onesided:
        want = want[:, :size // 2 + 1]
    assert got.shape == want.shape + (2,)
    scale = np.abs(want).max()
    np.testing.assert_allclose(got[..., 0] + 1j * got[..., 1], want, rtol=0, atol=1e-5 * scale)
