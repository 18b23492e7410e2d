"""A ReLU plugin written in Python, used in a network built by code: one 1x1x10x10 input, one
plugin layer, one output. Builds the plan, runs it on random data and checks y == max(x, 0)
exactly; then loads the plan again (the plugin stays registered in this process, which is what
loading a plan that names a Python plugin needs).

    PYTHONPATH=python python3 examples/network_api/relu_plugin.py
"""

import sys

import numpy as np

import kiln


class PyRelu(kiln.Plugin):
    name = "PyRelu"
    version = "1"
    namespace = ""
    # y = max(x, 0) + slope * min(x, 0); slope 0 (the default) is the plain ReLU.
    fields = {"slope": kiln.field(kiln.FLOAT32, default=0.0)}

    def num_outputs(self):
        return 1

    def output_shapes(self, input_shapes):
        return [input_shapes[0]]

    def compute(self, inputs, outputs):
        x, y = inputs[0], outputs[0]
        np.maximum(x, 0, out=y)
        slope = self.fields["slope"]
        if slope:
            y += np.float32(slope) * np.minimum(x, 0)


kiln.register_plugin(PyRelu)


def build_plan():
    net = kiln.Network(opset=17)
    x = net.add_input("x", np.float32, (1, 1, 10, 10))
    y = net.add_plugin("PyRelu", [x], name="relu")
    net.mark_output(y, name="y")
    return kiln.build(net)


def main():
    plan = build_plan()
    print(f"built a {len(plan)}-byte plan: {kiln.plan_layers(plan)}")
    x = np.random.RandomState(1234).uniform(-1, 1, (1, 1, 10, 10)).astype(np.float32)
    y = kiln.Engine(plan).context().run({"x": x})["y"]
    exact = np.array_equal(y, np.maximum(x, 0))
    print(f"y == max(x, 0) exactly: {exact} ({int((x < 0).sum())} of {x.size} inputs negative)")
    again = kiln.run(plan, {"x": x})["y"]
    ok = exact and np.array_equal(again, y)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
