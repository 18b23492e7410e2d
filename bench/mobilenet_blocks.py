#!/usr/bin/env python3
"""Small pieces of MobileNetV2 at a fixed batch, to time a layer alone and inside its block.

Writes into DIR, for batch 1 and 8:
  dw{C}_{HW}_b{N}.onnx   a 3x3 depthwise conv (pad 1) + Clip(0, 6), C channels over HW x HW
  blk{C}_{HW}_b{N}.onnx  expansion 1x1 (Cin -> C) + Clip, that depthwise conv + Clip,
                         projection 1x1 (C -> Cin), residual Add
for MobileNetV2's 960-channel 7x7 and 576-channel 14x14 blocks. Nodes are named expand, dw,
project, add, so that bench/layer_compare.py lines kiln's layers up with onnxruntime's:

    python3 bench/mobilenet_blocks.py /tmp/blocks
    python3 bench/layer_compare.py /tmp/blocks/blk960_7_b8.onnx --threads 2 --iterations 50
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def weights(rng, name, shape, fan_in):
    w = rng.standard_normal(shape) * (2.0 / fan_in) ** 0.5
    return numpy_helper.from_array(w.astype(np.float32), name)


def zeros(name, n):
    return numpy_helper.from_array(np.zeros(n, np.float32), name)


def save(path, nodes, inits, shape):
    g = helper.make_graph(nodes, os.path.basename(path)[:-5],
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)


def clip(src, dst):
    return helper.make_node("Clip", [src, "lo", "hi"], [dst], name=dst)


def depthwise(src, dst, c):
    return helper.make_node("Conv", [src, "Wd", "Bd"], [dst], name="dw", kernel_shape=[3, 3],
                            pads=[1] * 4, group=c)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    rng = np.random.default_rng(0)
    bounds = [numpy_helper.from_array(np.array(0, np.float32), "lo"),
              numpy_helper.from_array(np.array(6, np.float32), "hi")]
    for b in (1, 8):
        for cin, c, hw in ((160, 960, 7), (96, 576, 14)):
            dw = [weights(rng, "Wd", (c, 1, 3, 3), 9), zeros("Bd", c)]
            save(os.path.join(args.dir, f"dw{c}_{hw}_b{b}.onnx"),
                 [depthwise("x", "d", c), clip("d", "y")], dw + bounds, [b, c, hw, hw])
            inits = [weights(rng, "We", (c, cin, 1, 1), cin), zeros("Be", c)] + dw + [
                weights(rng, "Wp", (cin, c, 1, 1), c), zeros("Bp", cin)] + bounds
            nodes = [helper.make_node("Conv", ["x", "We", "Be"], ["e"], name="expand",
                                      kernel_shape=[1, 1]), clip("e", "e2"),
                     depthwise("e2", "d", c), clip("d", "d2"),
                     helper.make_node("Conv", ["d2", "Wp", "Bp"], ["p"], name="project",
                                      kernel_shape=[1, 1]),
                     helper.make_node("Add", ["p", "x"], ["y"], name="add")]
            save(os.path.join(args.dir, f"blk{c}_{hw}_b{b}.onnx"), nodes, inits,
                 [b, cin, hw, hw])


if __name__ == "__main__":
    main()
