"""An ordinary onnxruntime script. test_session.py runs it as it is and again with its import
changed to `import kiln as ort`, and compares what the two wrote.

usage: ort_script.py MODEL.onnx OUT.npz"""

import json
import sys

import numpy as np
import onnxruntime as ort

model, out = sys.argv[1], sys.argv[2]
so = ort.SessionOptions()
so.intra_op_num_threads = 2
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
sess = ort.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])

io = {
    "inputs": [[i.name, i.type, i.shape] for i in sess.get_inputs()],
    "outputs": [[o.name, o.type, o.shape] for o in sess.get_outputs()],
    "providers": sess.get_providers(),
}
rng = np.random.default_rng(0)
results = {}
for batch in (1, 3, 2):
    feeds = {}
    for i in sess.get_inputs():
        shape = [batch if d in ("batch", None) else (5 if isinstance(d, str) else d)
                 for d in i.shape]
        if i.type == "tensor(int64)":
            feeds[i.name] = rng.integers(0, 50, size=shape).astype(np.int64)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    for name, value in zip((o.name for o in sess.get_outputs()), sess.run(None, feeds)):
        results[f"all_{batch}_{name}"] = value
    first = sess.get_outputs()[0].name
    (value,) = sess.run([first], feeds)
    results[f"one_{batch}_{first}"] = value
np.savez(out, io=json.dumps(io), **results)
