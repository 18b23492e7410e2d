"""A small CNN built layer by layer with kiln.Network, checked against the same model imported
from small_cnn.onnx (written by make_small_cnn.py with the same names and weights).

    PYTHONPATH=python python3 examples/network_api/small_cnn.py

Checks: the two plans are byte-identical (reported either way); their optimized layer lists are
identical; their outputs on the same random input are identical, and match a numpy reference.
Exit code 0 when the checks pass.
"""

import os
import sys

import numpy as np

import kiln

HERE = os.path.dirname(os.path.abspath(__file__))
WEIGHT_NAMES = ["conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc.weight", "fc.bias"]


def load_weights():
    return {n: np.load(os.path.join(HERE, "weights", n + ".npy")) for n in WEIGHT_NAMES}


def build_network(w):
    """The network by code. Constants first, then the input, then the layers: the order an
    ONNX import creates tensors in (initializers, inputs, node outputs)."""
    net = kiln.Network(opset=17)
    c = {n: net.add_constant(w[n], name=n) for n in WEIGHT_NAMES}
    x = net.add_input("input", np.float32, (1, 3, 16, 16))
    t = net.add_convolution(x, c["conv1.weight"], c["conv1.bias"], pads=(1, 1, 1, 1), name="conv1")
    t.name = "conv1_out"
    t = net.add_activation(t, "relu", name="relu1")
    t.name = "relu1_out"
    t = net.add_pooling(t, "max", kernel=(2, 2), strides=(2, 2), name="pool1")
    t.name = "pool1_out"
    t = net.add_convolution(t, c["conv2.weight"], c["conv2.bias"], pads=(1, 1, 1, 1), name="conv2")
    t.name = "conv2_out"
    t = net.add_pooling(t, "average", global_pool=True, name="gap")
    t.name = "gap_out"
    t = net.add_layer("Flatten", [t], {"axis": 1}, name="flatten")
    t.name = "flatten_out"
    t = net.add_matmul(t, c["fc.weight"], c["fc.bias"], trans_b=True, name="fc")
    t.name = "fc_out"
    t = net.add_softmax(t, axis=1, name="softmax")
    net.mark_output(t, name="probs")
    return net


def reference(w, x):
    """The model in numpy (float64), independent of kiln."""

    def conv(x, wt, b):
        n, c, h, wd = x.shape
        m, _, kh, kw = wt.shape
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        out = np.zeros((n, m, h, wd))
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, :, i : i + h, j : j + wd]
                out += np.einsum("nchw,mc->nmhw", patch, wt[:, :, i, j])
        return out + b[None, :, None, None]

    x = x.astype(np.float64)
    t = np.maximum(conv(x, w["conv1.weight"], w["conv1.bias"]), 0)
    n, c, h, wd = t.shape
    t = t.reshape(n, c, h // 2, 2, wd // 2, 2).max(axis=(3, 5))
    t = conv(t, w["conv2.weight"], w["conv2.bias"]).mean(axis=(2, 3))
    t = t @ w["fc.weight"].T + w["fc.bias"]
    e = np.exp(t - t.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main():
    w = load_weights()
    plan_code = kiln.build(build_network(w))
    plan_onnx = kiln.build(os.path.join(HERE, "small_cnn.onnx"))
    identical = plan_code == plan_onnx
    print(
        f"plans: by code {len(plan_code)} bytes, from ONNX {len(plan_onnx)} bytes: "
        f"{'byte-identical' if identical else 'different bytes'}"
    )
    layers_code, layers_onnx = kiln.plan_layers(plan_code), kiln.plan_layers(plan_onnx)
    print("optimized layers:", ", ".join(f"{n} ({op})" for n, op, _ in layers_code))
    same_layers = layers_code == layers_onnx
    if not same_layers:
        print("layer lists differ; from ONNX:", layers_onnx)

    x = np.random.RandomState(7).standard_normal((1, 3, 16, 16)).astype(np.float32)
    y_code = kiln.Engine(plan_code).context().run({"input": x})["probs"]
    y_onnx = kiln.Engine(plan_onnx).context().run({"input": x})["probs"]
    same_out = np.array_equal(y_code, y_onnx)
    err = float(np.abs(y_code - reference(w, x)).max())
    print(f"outputs identical: {same_out}; max |kiln - numpy reference| = {err:.2e}")
    ok = same_layers and same_out and err < 1e-5
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
