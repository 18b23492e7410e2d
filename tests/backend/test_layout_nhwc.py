"""The NHWC layout pass (src/passes/layout_nhwc.c), seen through testdev: with
KILN_TESTDEV_NHWC set testdev offers NHWC for every op, and a bfloat16 build (testdev lowers
element-wise ops) must store exactly the 16-bit rank-4 values whose every reader takes NHWC,
recorded as kiln_nhwc masks that `kiln inspect --json` shows. Without the offer (the CPU, a
float32 build) no layer gets a mask. The CUDA backend's kernels for these masks are checked
against the CPU on the GPU machine (tests/cuda/diff_backends.py with KILN_CUDA_NHWC=1).
"""

import json
import os
import subprocess

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KILN = os.environ.get("KILN") or os.path.join(REPO, "build", "bin", "kiln")
BUILD = os.path.dirname(os.path.dirname(os.path.abspath(KILN)))
BACKEND_PATH = os.environ.get("KILN_BACKEND_PATH") or os.path.join(BUILD, "tests", "lib")


def kiln(*args, nhwc=True):
    env = dict(os.environ, KILN_BACKEND_PATH=BACKEND_PATH)
    env.pop("KILN_TESTDEV_NHWC", None)
    if nhwc:
        env["KILN_TESTDEV_NHWC"] = "1"
    proc = subprocess.run([KILN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, timeout=120, env=env)
    assert proc.returncode == 0, f"kiln {' '.join(args)} failed: {proc.stderr.decode()}"
    return proc.stdout.decode()


def model(path, reshape_reader=False, spatial=8):
    """x -> Conv -> Mul by a per-channel constant -> Conv -> y: the Mul is the one element-wise
    layer between the float32 convs, so it runs in bfloat16 between two Casts. With
    reshape_reader the Mul's output is also flattened into a second output."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 8, 1, 1)).astype(np.float32), "w2")
    s = numpy_helper.from_array(rng.standard_normal((8, 1, 1)).astype(np.float32), "s")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Mul", ["a", "s"], ["b"], name="mul"),
             helper.make_node("Conv", ["b", "w2"], ["y"], name="conv2")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if reshape_reader:
        nodes.append(helper.make_node("Reshape", ["b", "shape"], ["flat"], name="flatten"))
        outputs.append(helper.make_tensor_value_info("flat", TensorProto.FLOAT, None))
    graph = helper.make_graph(
        nodes, "nhwc", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                      [1, 4, spatial, spatial])],
        outputs, [w1, w2, s, shape])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def layers(tmp_path, nhwc=True, precision="bf16", **kw):
    onnx_path, plan = str(tmp_path / "m.onnx"), str(tmp_path / "m.plan")
    model(onnx_path, **kw)
    kiln("build", onnx_path, "-o", plan, "--backend", "testdev,cpu", "--precision", precision,
         "--quiet", nhwc=nhwc)
    return json.loads(kiln("inspect", plan, "--json", nhwc=nhwc))["layers"]


def masks(info):
    return {(layer["op"], layer["name"]): layer["nhwc"] for layer in info if "nhwc" in layer}


def test_region_between_casts_is_stored_nhwc(tmp_path):
    info = layers(tmp_path)
    got = masks(info)
    mul = [m for (op, _), m in got.items() if op == "Mul"]
    assert mul == [{"inputs": 1, "outputs": 1}], got  # the constant [8, 1, 1] needs no layout
    casts = sorted((m["inputs"], m["outputs"]) for (op, _), m in got.items() if op == "Cast")
    # into the region (made NHWC) and out of it (read NHWC); nothing else has a mask
    assert casts == [(0, 1), (1, 0)], got
    assert len(got) == 3, got


def test_a_reader_without_nhwc_keeps_the_region_nchw(tmp_path):
    assert masks(layers(tmp_path, reshape_reader=True)) == {}


def test_no_offer_or_no_16_bit_values_means_no_masks(tmp_path):
    assert masks(layers(tmp_path, nhwc=False)) == {}
    assert masks(layers(tmp_path, precision="fp32")) == {}


def test_values_the_same_in_both_orders_need_no_layout(tmp_path):
    # a 1x1 image: NCHW and NHWC are the same bytes, so nothing is stored NHWC
    assert masks(layers(tmp_path, spatial=1)) == {}
