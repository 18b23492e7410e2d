"""The benchmark models built directly with onnx.helper, for machines without torch.

Same architectures as torchvision's resnet50, mobilenet_v2 and efficientnet_b0 and the bench
transformer encoder, in the form the PyTorch exporter leaves them (batch norm folded into
convolution biases), with random weights scaled so activations stay finite.
"""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, arr, base="w"):
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def op(self, op_type, inputs, **attrs):
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x, cin, cout, k, stride=1, groups=1, act="relu"):
        fan_in = cin // groups * k * k
        w = self.rng.standard_normal((cout, cin // groups, k, k)).astype(np.float32)
        w *= np.sqrt(2.0 / fan_in)
        b = (0.01 * self.rng.standard_normal(cout)).astype(np.float32)
        y = self.op("Conv", [x, self.const(w), self.const(b, "b")], kernel_shape=[k, k],
                    strides=[stride, stride], pads=[k // 2] * 4, group=groups)
        if act == "relu":
            return self.op("Relu", [y])
        if act == "relu6":
            return self.op("Clip", [y, self.const(np.float32(0), "lo"),
                                    self.const(np.float32(6), "hi")])
        if act == "silu":
            return self.op("Mul", [y, self.op("Sigmoid", [y])])
        return y

    def linear(self, x, cin, cout):
        w = (self.rng.standard_normal((cin, cout)) / np.sqrt(cin)).astype(np.float32)
        b = (0.01 * self.rng.standard_normal(cout)).astype(np.float32)
        return self.op("Add", [self.op("MatMul", [x, self.const(w)]), self.const(b, "b")])

    def model(self, x_shape, y, y_shape, opset):
        graph = helper.make_graph(
            self.nodes, "bench", [helper.make_tensor_value_info("input", TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, y_shape)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        return model


def classifier(b, x, cin, classes=1000):
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    return b.linear(x, cin, classes)


def resnet50():
    b = Builder(0)
    x = b.conv("input", 3, 64, 7, 2)
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (width, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3))):
        for i in range(blocks):
            stride = 2 if i == 0 and stage > 0 else 1
            y = b.conv(x, cin, width, 1)
            y = b.conv(y, width, width, 3, stride)
            y = b.conv(y, width, width * 4, 1, act=None)
            short = b.conv(x, cin, width * 4, 1, stride, act=None) if i == 0 else x
            x = b.op("Relu", [b.op("Add", [y, short])])
            cin = width * 4
    y = classifier(b, x, cin)
    return b.model([1, 3, 224, 224], y, [1, 1000], 13)


def mobilenetv2():
    b = Builder(1)
    x = b.conv("input", 3, 32, 3, 2, act="relu6")
    cin = 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = b.conv(x, cin, hidden, 1, act="relu6") if t != 1 else x
            y = b.conv(y, hidden, hidden, 3, stride, groups=hidden, act="relu6")
            y = b.conv(y, hidden, c, 1, act=None)
            x = b.op("Add", [x, y]) if stride == 1 and cin == c else y
            cin = c
    x = b.conv(x, cin, 1280, 1, act="relu6")
    y = classifier(b, x, 1280)
    return b.model([1, 3, 224, 224], y, [1, 1000], 13)


def efficientnet_b0():
    """torchvision's efficientnet_b0 as its exporter leaves it: SiLU as x * Sigmoid(x),
    squeeze-excitation as GlobalAveragePool, two 1x1 convs, Sigmoid and a channel Mul."""
    b = Builder(3)
    x = b.conv("input", 3, 32, 3, 2, act="silu")
    cin = 32
    for t, k, s, c, n in ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
                          (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = b.conv(x, cin, hidden, 1, act="silu") if t != 1 else x
            y = b.conv(y, hidden, hidden, k, stride, groups=hidden, act="silu")
            sq = max(1, cin // 4)
            se = b.conv(b.op("GlobalAveragePool", [y]), hidden, sq, 1, act="silu")
            se = b.op("Sigmoid", [b.conv(se, sq, hidden, 1, act=None)])
            y = b.conv(b.op("Mul", [y, se]), hidden, c, 1, act=None)
            x = b.op("Add", [x, y]) if stride == 1 and cin == c else y
            cin = c
    x = b.conv(x, cin, 1280, 1, act="silu")
    y = classifier(b, x, 1280)
    return b.model([1, 3, 224, 224], y, [1, 1000], 13)


def transformer(d=256, heads=4, ff=1024, layers=4, seq=128):
    b = Builder(2)
    hd = d // heads
    x = "input"

    def norm(v):
        return b.op("LayerNormalization", [v, b.const(np.ones(d, np.float32), "g"),
                                           b.const(np.zeros(d, np.float32), "beta")], axis=-1)

    split_shape = b.const(np.array([1, seq, heads, hd], np.int64), "shape")
    merge_shape = b.const(np.array([1, seq, d], np.int64), "shape")
    for _ in range(layers):
        q, k, v = (b.op("Transpose", [b.op("Reshape", [b.linear(x, d, d), split_shape])],
                        perm=perm) for perm in ([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3]))
        scores = b.op("Div", [b.op("MatMul", [q, k]), b.const(np.float32(np.sqrt(hd)), "s")])
        attn = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])
        attn = b.op("Reshape", [b.op("Transpose", [attn], perm=[0, 2, 1, 3]), merge_shape])
        x = norm(b.op("Add", [x, b.linear(attn, d, d)]))
        h = b.linear(x, d, ff)
        gelu = b.op("Erf", [b.op("Div", [h, b.const(np.float32(np.sqrt(2.0)), "s")])])
        gelu = b.op("Mul", [b.op("Mul", [h, b.op("Add", [gelu, b.const(np.float32(1), "one")])]),
                            b.const(np.float32(0.5), "half")])
        x = norm(b.op("Add", [x, b.linear(gelu, ff, d)]))
    return b.model([1, seq, d], x, [1, seq, d], 17)


BUILDERS = {"resnet50": resnet50, "mobilenetv2": mobilenetv2, "efficientnet_b0": efficientnet_b0,
            "transformer": transformer}


def build(name, path):
    model = BUILDERS[name]()
    onnx.checker.check_model(model)
    onnx.save(model, path)
