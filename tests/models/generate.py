#!/usr/bin/env python3
"""Generate the small real-model test set: PyTorch models with random weights, exported to ONNX,
with inputs and PyTorch's own outputs as references.

Needs torch (and torchvision for the architectures it provides); CI does not have them, so the
generated files are committed and this script only regenerates them:

    python3 tests/models/generate.py            # all models
    python3 tests/models/generate.py resnet gru # only those whose name contains a word

Each model gets a folder with model.onnx and one folder per case holding <input>.npy and
<output>.npy files; manifest.json lists models, the --shapes each needs and the cases.
Weights are random but seeded; batch-norm statistics are estimated on random data so that
activations stay in a realistic range instead of exploding or vanishing.
"""

import json
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
RTOL = 1e-3
ATOL = 1e-3

warnings.filterwarnings("ignore")

try:
    from torchvision.models import densenet, efficientnet, mobilenetv2, mobilenetv3, shufflenetv2
except ImportError:  # the architectures torchvision provides are skipped without it
    densenet = efficientnet = mobilenetv2 = mobilenetv3 = shufflenetv2 = None


# ---------------------------------------------------------------------------------------------
# Architectures written here, in reduced size.


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + identity)


class ResNetMini(nn.Module):
    def __init__(self, widths=(8, 16, 32, 64), classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 7, 2, 3, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            layers += [BasicBlock(cin, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)]
            cin = w
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.pool(self.layers(self.stem(x)))
        return self.fc(torch.flatten(x, 1))


class Fire(nn.Module):
    def __init__(self, cin, squeeze, expand):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.e1 = nn.Conv2d(squeeze, expand, 1)
        self.e3 = nn.Conv2d(squeeze, expand, 3, padding=1)

    def forward(self, x):
        s = F.relu(self.squeeze(x))
        return torch.cat([F.relu(self.e1(s)), F.relu(self.e3(s))], 1)


class SqueezeNetMini(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, 2), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(32, 8, 16), Fire(32, 8, 16),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(32, 16, 32), Fire(64, 16, 32))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(64, classes, 1),
                                        nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1))

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


class ConvBNReLU(nn.Sequential):
    def __init__(self, cin, cout, k, stride=1):
        super().__init__(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Inception(nn.Module):
    def __init__(self, cin, c1, c3r, c3, c5r, c5, pp):
        super().__init__()
        self.b1 = ConvBNReLU(cin, c1, 1)
        self.b2 = nn.Sequential(ConvBNReLU(cin, c3r, 1), ConvBNReLU(c3r, c3, 3))
        self.b3 = nn.Sequential(ConvBNReLU(cin, c5r, 1), ConvBNReLU(c5r, c5, 3),
                                ConvBNReLU(c5, c5, 3))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), ConvBNReLU(cin, pp, 1))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)


class InceptionMini(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(ConvBNReLU(3, 16, 7, 2), nn.MaxPool2d(3, 2, ceil_mode=True),
                                  ConvBNReLU(16, 32, 3))
        self.i3a = Inception(32, 8, 12, 16, 4, 8, 8)
        self.i3b = Inception(40, 16, 16, 24, 4, 12, 8)
        self.pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.i4a = Inception(60, 24, 12, 26, 4, 12, 16)
        self.avg = nn.AdaptiveAvgPool2d((1, 1))
        self.drop = nn.Dropout(0.2)
        self.fc = nn.Linear(78, classes)

    def forward(self, x):
        x = self.i4a(self.pool(self.i3b(self.i3a(self.stem(x)))))
        return self.fc(self.drop(torch.flatten(self.avg(x), 1)))


class VGGMini(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        cfg, layers, cin = [16, "M", 32, "M", 64, 64, "M", 64, 64, "M"], [], 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU(inplace=True)]
                cin = v
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(64 * 2 * 2, 64), nn.ReLU(True), nn.Dropout(),
                                        nn.Linear(64, 64), nn.ReLU(True), nn.Dropout(),
                                        nn.Linear(64, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


class TransformerMini(nn.Module):
    """Token ids in, per-token logits out. Token id 0 is padding: the key padding mask comes from
    the ids, the causal mask from the sequence length, so both are computed inside the graph."""

    def __init__(self, vocab=50, d=32, heads=4, ff=64, layers=2, max_len=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(max_len, d) * 0.1)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.1, activation="gelu",
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        seq = ids.shape[1]
        x = self.embed(ids) + self.pos[:seq].unsqueeze(0).expand(ids.shape[0], -1, -1)
        pad = ids == 0
        pos = torch.arange(seq, device=ids.device)
        causal = pos.unsqueeze(0) > pos.unsqueeze(1)
        attn = torch.zeros(seq, seq).masked_fill(causal, float("-inf"))
        y = self.encoder(x, mask=attn, src_key_padding_mask=pad)
        y = torch.where(pad.unsqueeze(-1), torch.zeros_like(y), y)
        return self.head(self.norm(y))


class RecurrentNet(nn.Module):
    def __init__(self, cell, features=8, hidden=16, classes=5):
        super().__init__()
        rnn = nn.GRU if cell == "gru" else nn.LSTM
        self.rnn = rnn(features, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y), y[:, -1, :]


class DetectionHead(nn.Module):
    """Features → heatmap with upsampling; top-k peaks, their scores gathered back, per-pixel
    class, and the coordinates of confident pixels (a data-dependent NonZero)."""

    def __init__(self, classes=4, k=8):
        super().__init__()
        self.k = k
        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.InstanceNorm2d(16, affine=True),
                                      nn.ReLU(), nn.Conv2d(16, 16, 3, 2, 1),
                                      nn.InstanceNorm2d(16), nn.ReLU())
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.heat = nn.Conv2d(16, classes, 3, 1, 1)

    def forward(self, x):
        f = self.up(self.backbone(x))
        f = F.interpolate(f, scale_factor=2.0, mode="bilinear", align_corners=False)
        heat = torch.sigmoid(self.heat(f))
        flat = heat.flatten(2)
        scores, idx = torch.topk(flat, self.k, dim=2)
        gathered = torch.gather(flat, 2, idx)
        best = torch.argmax(heat, dim=1)
        peaks = torch.nonzero(heat[:, 0] > 0.5)
        return scores, idx, gathered * 2.0, best, peaks


# ---------------------------------------------------------------------------------------------
# The list of models


def tv_mobilenet_v2():
    setting = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 2, 2], [6, 64, 2, 2], [6, 96, 1, 1]]
    return mobilenetv2.MobileNetV2(num_classes=10, width_mult=0.5,
                                   inverted_residual_setting=setting)


def tv_mobilenet_v3():
    conf, last = mobilenetv3._mobilenet_v3_conf("mobilenet_v3_small", width_mult=0.25)
    return mobilenetv3.MobileNetV3(conf, 256, num_classes=10)


def tv_shufflenet_v2():
    return shufflenetv2.ShuffleNetV2([2, 2, 2], [16, 32, 64, 128, 256], num_classes=10)


def tv_efficientnet():
    setting, _ = efficientnet._efficientnet_conf("efficientnet_b0", width_mult=0.25,
                                                 depth_mult=0.25)
    return efficientnet.EfficientNet(setting, 0.2, num_classes=10, last_channel=256)


def tv_densenet():
    return densenet.DenseNet(growth_rate=8, block_config=(2, 3, 2), num_init_features=16,
                             bn_size=2, num_classes=10)


def image(name="input"):
    return {"name": name, "kind": "image"}


MODELS = [
    # name, builder, opset, inputs, output names, dynamic axes, input shapes of each case, the
    # --shapes profile (None for static models), keep_bn to keep BatchNormalization nodes
    dict(name="resnet_mini", build=ResNetMini, opset=13, inputs=[image()], outputs=["logits"],
         dynamic={"input": {0: "batch", 2: "height", 3: "width"}, "logits": {0: "batch"}},
         cases=[[(1, 3, 64, 64)], [(3, 3, 48, 80)]],
         profile=["input:1x3x32x32,2x3x64x64,4x3x96x96"], keep_bn=True),
    dict(name="mobilenetv2_mini", build=tv_mobilenet_v2, opset=11, inputs=[image()],
         outputs=["logits"], dynamic={"input": {0: "batch"}, "logits": {0: "batch"}},
         cases=[[(1, 3, 64, 64)], [(2, 3, 64, 64)]], profile=["input:1x3x64x64,2x3x64x64,4x3x64x64"],
         keep_bn=True),
    dict(name="mobilenetv3_mini", build=tv_mobilenet_v3, opset=17, inputs=[image()],
         outputs=["logits"], dynamic=None, cases=[[(1, 3, 64, 64)]], profile=None),
    dict(name="shufflenetv2_mini", build=tv_shufflenet_v2, opset=13, inputs=[image()],
         outputs=["logits"], dynamic={"input": {0: "batch"}, "logits": {0: "batch"}},
         cases=[[(1, 3, 64, 64)], [(2, 3, 64, 64)]], profile=["input:1x3x64x64,1x3x64x64,2x3x64x64"]),
    dict(name="squeezenet_mini", build=SqueezeNetMini, opset=11, inputs=[image()],
         outputs=["logits"], dynamic={"input": {2: "height", 3: "width"}},
         cases=[[(1, 3, 64, 64)], [(1, 3, 96, 72)]], profile=["input:1x3x48x48,1x3x64x64,1x3x96x96"]),
    dict(name="efficientnet_mini", build=tv_efficientnet, opset=17, inputs=[image()],
         outputs=["logits"], dynamic=None, cases=[[(1, 3, 64, 64)]], profile=None),
    dict(name="inception_mini", build=InceptionMini, opset=13, inputs=[image()],
         outputs=["logits"], dynamic=None, cases=[[(2, 3, 64, 64)]], profile=None),
    dict(name="densenet_mini", build=tv_densenet, opset=11, inputs=[image()], outputs=["logits"],
         dynamic=None, cases=[[(1, 3, 64, 64)]], profile=None),
    dict(name="vgg_mini", build=VGGMini, opset=17, inputs=[image()], outputs=["logits"],
         dynamic={"input": {0: "batch"}, "logits": {0: "batch"}},
         cases=[[(1, 3, 32, 32)], [(5, 3, 32, 32)]], profile=["input:1x3x32x32,4x3x32x32,8x3x32x32"]),
    dict(name="transformer_encoder", build=TransformerMini, opset=17,
         inputs=[{"name": "ids", "kind": "tokens"}], outputs=["logits"],
         dynamic={"ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}},
         cases=[[(2, 12)], [(1, 20)]], profile=["ids:1x4,2x16,4x32"]),
    dict(name="transformer_encoder_op13", build=TransformerMini, opset=13,
         inputs=[{"name": "ids", "kind": "tokens"}], outputs=["logits"],
         dynamic={"ids": {1: "seq"}, "logits": {1: "seq"}},
         cases=[[(2, 7)], [(2, 16)]], profile=["ids:2x4,2x16,2x32"]),
    dict(name="gru_bidir", build=lambda: RecurrentNet("gru"), opset=13,
         inputs=[{"name": "x", "kind": "sequence"}], outputs=["scores", "last"],
         dynamic={"x": {1: "seq"}, "scores": {1: "seq"}},
         cases=[[(2, 10, 8)], [(2, 25, 8)]], profile=["x:2x1x8,2x16x8,2x32x8"]),
    dict(name="lstm_bidir", build=lambda: RecurrentNet("lstm"), opset=11,
         inputs=[{"name": "x", "kind": "sequence"}], outputs=["scores", "last"],
         dynamic={"x": {0: "batch", 1: "seq"}, "scores": {0: "batch", 1: "seq"},
                  "last": {0: "batch"}},
         cases=[[(1, 6, 8)], [(3, 17, 8)]], profile=["x:1x1x8,2x16x8,4x32x8"]),
    dict(name="detection_head", build=DetectionHead, opset=11, inputs=[image()],
         outputs=["scores", "indices", "gathered", "classes", "peaks"], dynamic=None,
         cases=[[(1, 3, 32, 32)]], profile=None),
]


def needs_torchvision(spec):
    return spec["build"] in (tv_mobilenet_v2, tv_mobilenet_v3, tv_shufflenet_v2,
                             tv_efficientnet, tv_densenet)


def calibrate(model, make_input, seed):
    """Estimate batch-norm statistics on random data, then randomize the affine parameters so
    that folding them into convolutions is exercised with non-trivial values."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    g = torch.Generator().manual_seed(seed + 1)
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
        with torch.no_grad():
            bn.weight.copy_(0.5 + torch.rand(bn.weight.shape, generator=g))
            bn.bias.copy_(0.2 * torch.randn(bn.bias.shape, generator=g))
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(*make_input())
    model.eval()


def make_tensor(kind, shape, gen):
    if kind == "tokens":
        ids = torch.randint(1, 50, shape, generator=gen)
        if shape[1] > 3:  # pad the tail of the last sequence so the padding mask matters
            ids[-1, -2:] = 0
        return ids
    return torch.randn(shape, generator=gen)


def detection_margin_ok(outputs):
    """Reject inputs whose discrete outputs sit on a knife edge (ties, threshold crossings)."""
    heat_scores = outputs[0]
    vals = np.sort(heat_scores.reshape(-1))
    return np.min(np.abs(vals - 0.5)) > 1e-3 and np.min(np.diff(np.unique(vals))) > 1e-5


def save_case(folder, names, arrays):
    files = {}
    os.makedirs(folder, exist_ok=True)
    for name, arr in zip(names, arrays):
        path = os.path.join(folder, f"{name}.npy")
        np.save(path, arr)
        files[name] = os.path.relpath(path, HERE)
    return files


def generate(spec, index):
    seed = 1000 + index
    torch.manual_seed(seed)
    model = spec["build"]()
    gen = torch.Generator().manual_seed(seed)
    first = spec["cases"][0]
    calibrate(model, lambda: tuple(make_tensor(i["kind"], s, gen)
                                   for i, s in zip(spec["inputs"], first)), seed)
    model.eval()
    folder = os.path.join(HERE, spec["name"])
    os.makedirs(folder, exist_ok=True)
    onnx_path = os.path.join(folder, "model.onnx")
    in_names = [i["name"] for i in spec["inputs"]]
    example = tuple(make_tensor(i["kind"], s, gen) for i, s in zip(spec["inputs"], first))
    # The exporter folds batch norm into convolutions in eval mode; PRESERVE keeps the
    # BatchNormalization nodes so that the engine's own folding is exercised too.
    training = (torch.onnx.TrainingMode.PRESERVE if spec.get("keep_bn")
                else torch.onnx.TrainingMode.EVAL)
    with torch.no_grad():
        torch.onnx.export(model, example, onnx_path, opset_version=spec["opset"],
                          input_names=in_names, output_names=spec["outputs"],
                          dynamic_axes=spec["dynamic"], do_constant_folding=True,
                          training=training)
    cases = []
    for ci, shapes in enumerate(spec["cases"]):
        for attempt in range(50):
            inputs = tuple(make_tensor(i["kind"], s, gen) for i, s in zip(spec["inputs"], shapes))
            with torch.no_grad():
                outs = model(*inputs)
            outs = outs if isinstance(outs, tuple) else (outs,)
            outs = [o.numpy() for o in outs]
            if spec["name"] != "detection_head" or detection_margin_ok(outs):
                break
        else:
            raise RuntimeError(f"{spec['name']}: no input away from ties after 50 tries")
        case_name = "case%d_%s" % (ci, "_".join("x".join(map(str, s)) for s in shapes))
        case_dir = os.path.join(folder, case_name)
        cases.append({
            "name": case_name,
            "inputs": save_case(case_dir, in_names, [t.numpy() for t in inputs]),
            "outputs": save_case(case_dir, spec["outputs"], outs),
        })
    params = sum(p.numel() for p in model.parameters())
    return {
        "name": spec["name"],
        "model": os.path.relpath(onnx_path, HERE),
        "opset": spec["opset"],
        "parameters": int(params),
        "dynamic": bool(spec["dynamic"]),
        "shapes": spec["profile"] or [],
        "rtol": RTOL,
        "atol": ATOL,
        "cases": cases,
    }


def main(argv):
    words = argv[1:]
    manifest_path = os.path.join(HERE, "manifest.json")
    old = {}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            old = {m["name"]: m for m in json.load(f)["models"]}
    entries = []
    for index, spec in enumerate(MODELS):
        if words and not any(w in spec["name"] for w in words):
            if spec["name"] in old:
                entries.append(old[spec["name"]])
            continue
        if needs_torchvision(spec) and mobilenetv2 is None:
            print(f"skip {spec['name']}: torchvision is not installed")
            continue
        entry = generate(spec, index)
        size = sum(os.path.getsize(os.path.join(dp, f))
                   for dp, _, fs in os.walk(os.path.join(HERE, spec["name"])) for f in fs)
        print(f"{spec['name']:<26} opset {spec['opset']:>2}  {entry['parameters']:>8} params  "
              f"{size / 1024:7.0f} KiB  {len(entry['cases'])} case(s)")
        entries.append(entry)
    with open(manifest_path, "w") as f:
        json.dump({"generator": "tests/models/generate.py", "torch": torch.__version__,
                   "models": entries}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv)
