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

    def split(self, x, sizes, axis=1):
        outs = [self.name("split") for _ in sizes]
        self.nodes.append(helper.make_node("Split", [x, self.const(np.array(sizes, np.int64), "sizes")],
                                           outs, name=outs[0], axis=axis))
        return outs

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


def yolov8n(size=320):
    """An Ultralytics YOLOv8n-style detector (width 0.25, depth 0.33): Conv-BN-SiLU (BN folded),
    C2f blocks, SPPF, nearest upsampling and concat in the neck, and the anchor-free head with
    DFL (softmax over 16 bins, expectation by a 1x1 conv) and box decoding; 80 classes."""
    b = Builder(4)

    def conv(x, cin, cout, k=1, s=1):
        return b.conv(x, cin, cout, k, s, act="silu")

    def c2f(x, cin, cout, n, shortcut):
        c = cout // 2
        y = conv(x, cin, 2 * c)
        parts = list(b.split(y, [c, c]))
        for _ in range(n):
            t = conv(conv(parts[-1], c, c, 3), c, c, 3)
            parts.append(b.op("Add", [parts[-1], t]) if shortcut else t)
        return conv(b.op("Concat", parts, axis=1), (2 + n) * c, cout)

    def sppf(x, cin, cout):
        c = cin // 2
        y = [conv(x, cin, c)]
        for _ in range(3):
            y.append(b.op("MaxPool", [y[-1]], kernel_shape=[5, 5], strides=[1, 1],
                          pads=[2, 2, 2, 2]))
        return conv(b.op("Concat", y, axis=1), 4 * c, cout)

    def up(x):
        scales = b.const(np.array([1, 1, 2, 2], np.float32), "scales")
        return b.op("Resize", [x, "", scales], mode="nearest")

    x = conv(conv("input", 3, 16, 3, 2), 16, 32, 3, 2)
    x = c2f(x, 32, 32, 1, True)
    p3 = c2f(conv(x, 32, 64, 3, 2), 64, 64, 2, True)
    p4 = c2f(conv(p3, 64, 128, 3, 2), 128, 128, 2, True)
    p5 = sppf(c2f(conv(p4, 128, 256, 3, 2), 256, 256, 1, True), 256, 256)
    h4 = c2f(b.op("Concat", [up(p5), p4], axis=1), 384, 128, 1, False)
    h3 = c2f(b.op("Concat", [up(h4), p3], axis=1), 192, 64, 1, False)
    h4 = c2f(b.op("Concat", [conv(h3, 64, 64, 3, 2), h4], axis=1), 192, 128, 1, False)
    h5 = c2f(b.op("Concat", [conv(h4, 128, 128, 3, 2), p5], axis=1), 384, 256, 1, False)
    levels, anchors, strides = [], [], []
    for feat, ch, stride in ((h3, 64, 8), (h4, 128, 16), (h5, 256, 32)):
        box = b.conv(conv(conv(feat, ch, 64, 3), 64, 64, 3), 64, 64, 1, act=None)
        cls = b.conv(conv(conv(feat, ch, 80, 3), 80, 80, 3), 80, 80, 1, act=None)
        g = size // stride
        shape = b.const(np.array([1, 144, g * g], np.int64), "shape")
        levels.append(b.op("Reshape", [b.op("Concat", [box, cls], axis=1), shape]))
        ys, xs = np.meshgrid(np.arange(g) + 0.5, np.arange(g) + 0.5, indexing="ij")
        anchors.append(np.stack([xs.ravel(), ys.ravel()]))
        strides.append(np.full(g * g, stride))
    n_anchors = sum(a.shape[1] for a in anchors)
    out = b.op("Concat", levels, axis=2)
    box, cls = b.split(out, [64, 80], axis=1)
    box = b.op("Reshape", [box, b.const(np.array([1, 4, 16, n_anchors], np.int64), "shape")])
    box = b.op("Softmax", [b.op("Transpose", [box], perm=[0, 2, 1, 3])], axis=1)
    bins = b.const(np.arange(16, dtype=np.float32).reshape(1, 16, 1, 1), "dfl")
    box = b.op("Reshape", [b.op("Conv", [box, bins]),
                           b.const(np.array([1, 4, n_anchors], np.int64), "shape")])
    lt, rb = b.split(box, [2, 2], axis=1)
    anchor = b.const(np.concatenate(anchors, 1)[None].astype(np.float32), "anchors")
    x1y1, x2y2 = b.op("Sub", [anchor, lt]), b.op("Add", [anchor, rb])
    centre = b.op("Mul", [b.op("Add", [x1y1, x2y2]), b.const(np.float32(0.5), "half")])
    wh = b.op("Sub", [x2y2, x1y1])
    stride = b.const(np.concatenate(strides)[None, None].astype(np.float32), "strides")
    boxes = b.op("Mul", [b.op("Concat", [centre, wh], axis=1), stride])
    y = b.op("Concat", [boxes, b.op("Sigmoid", [cls])], axis=1)
    return b.model([1, 3, size, size], y, [1, 84, n_anchors], 13)


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
            "yolov8n_320": yolov8n, "yolov8n_640": lambda: yolov8n(640), "transformer": transformer,
            "bert": lambda: transformer(d=768, heads=12, ff=3072, layers=12, seq=128)}


def build(name, path):
    model = BUILDERS[name]()
    onnx.checker.check_model(model)
    onnx.save(model, path)
