#!/usr/bin/env python3
"""Export the benchmark models from PyTorch with random (seeded) weights.

    python3 bench/export_torch.py OUT_DIR [resnet50 mobilenetv2 efficientnet_b0 transformer]

Run by bench.py with whichever interpreter has torch; writes OUT_DIR/<name>.onnx. Batch-norm
statistics are estimated on random data first so activations stay finite through 50 layers.
"""

import inspect
import os
import sys
import warnings

import torch
import torch.nn as nn

warnings.filterwarnings("ignore")


def calibrate(model, make_input):
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(make_input())
    model.eval()


class Encoder(nn.Module):
    def __init__(self, d=256, heads=4, ff=1024, layers=4):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu",
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, x):
        return self.encoder(x)


def export(name, out_dir):
    import torchvision

    torch.manual_seed(0)
    if name == "resnet50":
        model, shape, opset = torchvision.models.resnet50(num_classes=1000), (1, 3, 224, 224), 13
    elif name == "mobilenetv2":
        model, shape, opset = torchvision.models.mobilenet_v2(num_classes=1000), (1, 3, 224, 224), 13
    elif name == "efficientnet_b0":
        model = torchvision.models.efficientnet_b0(num_classes=1000)
        shape, opset = (1, 3, 224, 224), 13
    elif name == "transformer":
        model, shape, opset = Encoder(), (1, 128, 256), 17
    else:
        raise SystemExit(f"unknown model {name}")
    calibrate(model, lambda: torch.randn((2,) + shape[1:]))
    path = os.path.join(out_dir, f"{name}.onnx")
    tmp = path + ".tmp"
    # Tracing with gradients enabled keeps nn.TransformerEncoderLayer off its fused fast path,
    # which has no ONNX export.
    kwargs = {}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False  # the TorchScript exporter needs no extra packages
    torch.onnx.export(model, torch.randn(shape), tmp, opset_version=opset,
                      input_names=["input"], output_names=["output"], do_constant_folding=True,
                      **kwargs)
    os.replace(tmp, path)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for name in sys.argv[2:] or ["resnet50", "mobilenetv2", "efficientnet_b0", "transformer"]:
        export(name, out_dir)


if __name__ == "__main__":
    main()
