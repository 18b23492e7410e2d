#!/usr/bin/env python3
"""Run onnx's backend node tests through the kiln CLI.

--suite picks one of onnx's other backend test sets instead (pytorch-converted,
pytorch-operator, simple), run the same way, each with its own expected-failure list
(expected_failures_<suite>.txt).

Each case (onnx/backend/test/data/node/<case>/model.onnx with test_data_set_*/input_*.pb and
output_*.pb) is run in its own `kiln run` process with a timeout, and its outputs are compared
with onnx's reference outputs using onnx's tolerances (rtol 1e-3, atol 1e-7 unless the case ships
a data.json). Every case ends in exactly one status:

  passed       all outputs match
  failed       kiln ran but an output differs (shape, dtype or values)
  error        kiln exited non-zero with a message (first stderr line kept)
  crash        killed by a signal, exit code >= 128, or a sanitizer report on stderr
  timeout      still running after --timeout seconds
  unsupported  a graph input or output is of a kind the CLI cannot carry (a map, a sparse
               tensor); not run, reported as "skipped"

--check compares the result with tests/conformance/expected_failures.txt and exits non-zero when
a case not listed there does not pass, or when any case crashes or times out (those are never
expected). --update rewrites the list from this run (only the cases selected by --filter).
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_EXPECTED = os.path.join(HERE, "expected_failures.txt")
CATEGORIES = ("unsupported-op", "unsupported-type", "sequence/optional", "training", "mismatch",
              "other")
SANITIZER_MARKS = ("Sanitizer", "runtime error:", "core dumped")
# Types a .npy file cannot carry without pickling or that kiln does not compute in.
EXOTIC_TYPES = {onnx.TensorProto.STRING, onnx.TensorProto.BFLOAT16, onnx.TensorProto.COMPLEX64,
                onnx.TensorProto.COMPLEX128, onnx.TensorProto.FLOAT8E4M3FN,
                onnx.TensorProto.FLOAT8E4M3FNUZ, onnx.TensorProto.FLOAT8E5M2,
                onnx.TensorProto.FLOAT8E5M2FNUZ, onnx.TensorProto.UINT4, onnx.TensorProto.INT4,
                onnx.TensorProto.FLOAT4E2M1, 25, 26}  # 25, 26: uint2, int2 (opset 25)
DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-7


SUITES = ("node", "pytorch-converted", "pytorch-operator", "simple")


def node_test_root(suite="node"):
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", suite)


def default_expected(suite):
    if suite == "node":
        return DEFAULT_EXPECTED
    return os.path.join(HERE, f"expected_failures_{suite.replace('-', '_')}.txt")


def default_kiln():
    for rel in ("build/bin/kiln",):
        path = os.path.join(REPO, rel)
        if os.path.exists(path):
            return path
    return os.path.join(REPO, "build", "bin", "kiln")


def list_cases(root, pattern):
    rx = re.compile(pattern) if pattern else None
    names = sorted(d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "model.onnx")))
    return [n for n in names if rx is None or rx.search(n)]


def value_kind(vi):
    return vi.type.WhichOneof("value")


def graph_io(model):
    """Names of the graph inputs that are fed (not initializers) and of the outputs."""
    inits = {t.name for t in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    return inputs, list(model.graph.output)


def model_traits(model):
    """What kind of model this is, used to guess a category when --update lists a new failure."""
    ops = set()
    domains = set()

    def walk(graph):
        for node in graph.node:
            ops.add(node.op_type)
            domains.add(node.domain)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)
                for g in attr.graphs:
                    walk(g)

    walk(model.graph)
    return ops, domains


def data_sets(case_dir):
    sets = sorted(d for d in os.listdir(case_dir) if d.startswith("test_data_set_"))
    return [os.path.join(case_dir, s) for s in sets]


def numbered(dirpath, prefix):
    files = [f for f in os.listdir(dirpath) if f.startswith(prefix) and f.endswith(".pb")]
    return [os.path.join(dirpath, f) for f in sorted(files, key=lambda f: int(f[len(prefix):-3]))]


def tolerances(case_dir):
    rtol, atol = DEFAULT_RTOL, DEFAULT_ATOL
    path = os.path.join(case_dir, "data.json")
    if os.path.exists(path):
        with open(path) as f:
            data = json.load(f)
        rtol = data.get("rtol", rtol)
        atol = data.get("atol", atol)
    return rtol, atol


def typed(actual):
    """kiln writes bfloat16, float8 and 4-bit outputs as a one-field unsigned record named after
    the ml_dtypes type (numpy itself cannot name them); view it as that type."""
    names = actual.dtype.names
    if names and len(names) == 1 and actual.dtype[0].kind == "u":
        kind = getattr(ml_dtypes, names[0], None)
        if isinstance(kind, type) and np.dtype(kind).itemsize == actual.dtype[0].itemsize:
            return np.ascontiguousarray(actual[names[0]]).view(kind)
    return actual


def compare(expected, actual, rtol, atol):
    """Return None when actual matches expected, else a one-line reason."""
    if actual.shape != expected.shape:
        return f"shape {list(actual.shape)} != expected {list(expected.shape)}"
    if expected.dtype == object or expected.dtype.kind in "SU":
        if actual.dtype.kind not in "OSU":
            return f"dtype {actual.dtype} != expected string"
        exp = np.vectorize(lambda s: s.decode() if isinstance(s, bytes) else str(s), otypes=[object])
        if expected.size and not np.array_equal(exp(expected), exp(actual)):
            return "string values differ"
        return None
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype} != expected {expected.dtype}"
    if expected.dtype.kind in "biu" or expected.dtype == np.bool_:
        if not np.array_equal(actual, expected):
            bad = int(np.count_nonzero(actual != expected))
            return f"{bad} of {expected.size} exact values differ"
        return None
    try:
        e = expected.astype(np.float64)
        a = actual.astype(np.float64)
    except (TypeError, ValueError):
        if expected.tobytes() != actual.tobytes():
            return f"values of dtype {expected.dtype} differ bitwise"
        return None
    nan_e, nan_a = np.isnan(e), np.isnan(a)
    if not np.array_equal(nan_e, nan_a):
        return f"NaN positions differ ({int(nan_e.sum())} expected, {int(nan_a.sum())} got)"
    ok = ~nan_e
    e, a = e[ok], a[ok]
    inf = np.isinf(e) | np.isinf(a)
    if not np.array_equal(e[inf], a[inf]):
        return "infinities differ"
    e, a = e[~inf], a[~inf]
    diff = np.abs(a - e)
    bad = diff > atol + rtol * np.abs(e)
    if bad.any():
        i = int(np.argmax(np.where(bad, diff, -1)))
        return (f"{int(bad.sum())} of {expected.size} values outside rtol={rtol:g} atol={atol:g}; "
                f"max abs err {float(diff.max()):.3g} (got {a[i]:.6g}, expected {e[i]:.6g})")
    return None


def first_line(text):
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def is_crash(rc, stderr):
    if rc < 0 or rc >= 128:
        return True
    return any(mark in stderr for mark in SANITIZER_MARKS)


def describe_rc(rc):
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


def run_case(kiln, root, name, timeout, input_format, workdir):
    case_dir = os.path.join(root, name)
    result = {"name": name, "status": "passed", "message": "", "seconds": 0.0}
    model = onnx.load(os.path.join(case_dir, "model.onnx"), load_external_data=False)
    inputs, outputs = graph_io(model)
    odd = [vi.name for vi in inputs + outputs if value_kind(vi) not in VALUE_KINDS]
    if odd:
        result["status"] = "unsupported"
        result["message"] = "map or sparse graph input or output: " + ", ".join(odd)
        return result
    rtol, atol = tolerances(case_dir)
    start = time.monotonic()
    for set_dir in data_sets(case_dir):
        try:
            status, message = run_data_set(kiln, set_dir, inputs, outputs, timeout,
                                           input_format, workdir, rtol, atol)
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            # Unreadable or inconsistent results from kiln fail the case, not the whole run.
            status, message = "failed", f"result unreadable: {type(exc).__name__}: {exc}"
        if status != "passed":
            result["status"], result["message"] = status, message
            break
    result["seconds"] = round(time.monotonic() - start, 3)
    return result


# Graph input/output kinds kiln carries: tensors, sequences (a folder of 0.npy, 1.npy, ...)
# and optionals (the element, or `none`).
VALUE_KINDS = {"tensor_type": onnx.TensorProto, "sequence_type": onnx.SequenceProto,
               "optional_type": onnx.OptionalProto}


def read_value(path, kind):
    """The proto in path, parsed as the graph's declared kind."""
    proto = VALUE_KINDS[kind]()
    with open(path, "rb") as f:
        proto.ParseFromString(f.read())
    return proto


# onnx 1.19 (the pinned onnx) predates the 2-bit types of opset 25: dtype -> ml_dtypes name.
TWO_BIT = {25: "uint2", 26: "int2"}


def two_bit_array(proto):
    """A uint2/int2 TensorProto (four values a byte, low bits first) as an ml_dtypes array."""
    dims = [int(d) for d in proto.dims]
    n = int(np.prod(dims)) if dims else 1
    packed = np.frombuffer(proto.raw_data, np.uint8) if proto.raw_data else \
        np.array(proto.int32_data, np.uint8)
    codes = (packed[:, None] >> np.array([0, 2, 4, 6], np.uint8)) & 3
    codes = codes.reshape(-1)[:n].astype(np.uint8)
    if proto.data_type == 26:
        codes = codes.astype(np.int8)
        codes[codes >= 2] -= 4
    return codes.astype(getattr(ml_dtypes, TWO_BIT[proto.data_type])).reshape(dims)


def value_array(proto, kind):
    """A sequence as a list of arrays, an optional as None or its element, a tensor as an array."""
    if kind == "sequence_type":
        return numpy_helper.to_list(proto)
    if kind == "optional_type":
        return numpy_helper.to_optional(proto)
    if proto.data_type in TWO_BIT:
        return two_bit_array(proto)
    return numpy_helper.to_array(proto)


def write_container(value, path):
    """A sequence input as a folder of .npy files, an empty optional as `none`."""
    if value is None:
        return "none"
    if isinstance(value, list):
        os.mkdir(path)
        for k, arr in enumerate(value):
            np.save(os.path.join(path, f"{k}.npy"), arr)
        return path
    np.save(path + ".npy", value)
    return path + ".npy"


def input_args(set_dir, inputs, input_format, workdir):
    """Build the --input NAME=FILE arguments for one data set."""
    args = []
    files = numbered(set_dir, "input_")
    names = [vi.name for vi in inputs]
    kinds = {vi.name: value_kind(vi) for vi in inputs}
    for i, path in enumerate(files):
        by_position = names[i] if i < len(names) else None
        tensor = read_value(path, kinds.get(by_position, "tensor_type"))
        name = tensor.name if tensor.name in names else by_position
        if name is None:
            raise ValueError(f"input file {os.path.basename(path)} matches no graph input")
        if kinds[name] != "tensor_type":
            value = value_array(read_value(path, kinds[name]), kinds[name])
            args += ["--input", f"{name}={write_container(value, os.path.join(workdir, f'input_{i}'))}"]
            continue
        if input_format == "npy" and tensor.data_type != onnx.TensorProto.STRING:
            arr = numpy_helper.to_array(tensor)
            if arr.dtype.kind in "biufc" or arr.dtype == np.bool_:
                npy = os.path.join(workdir, f"input_{i}.npy")
                np.save(npy, arr)
                path = npy
        args += ["--input", f"{name}={path}"]
    return args


def run_data_set(kiln, set_dir, inputs, outputs, timeout, input_format, workdir, rtol, atol):
    for entry in os.listdir(workdir):
        p = os.path.join(workdir, entry)
        shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    out_dir = os.path.join(workdir, "out")
    os.mkdir(out_dir)
    model_path = os.path.join(os.path.dirname(set_dir), "model.onnx")
    cmd = [kiln, "run", model_path] + input_args(set_dir, inputs, input_format, workdir)
    cmd += ["--output-dir", out_dir]
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "timeout", f"no result after {timeout:g} s"
    stderr = proc.stderr.decode("utf-8", "replace")
    if is_crash(proc.returncode, stderr):
        mark = next((m for m in SANITIZER_MARKS if m in stderr), None)
        line = next((ln for ln in stderr.splitlines() if mark and mark in ln), "") if mark else ""
        return "crash", f"{describe_rc(proc.returncode)}: {line.strip() or first_line(stderr)}"[:300]
    if proc.returncode != 0:
        # The model's long path adds nothing to the report: the case name says it.
        message = first_line(stderr.replace(model_path + ": ", "").replace(model_path, "model"))
        return "error", message or describe_rc(proc.returncode)
    index_path = os.path.join(out_dir, "outputs.json")
    if not os.path.exists(index_path):
        return "failed", "kiln exited 0 but wrote no outputs.json"
    with open(index_path) as f:
        index = json.load(f)
    expected_files = numbered(set_dir, "output_")
    kinds = {vi.name: value_kind(vi) for vi in outputs}
    for i, path in enumerate(expected_files):
        by_position = outputs[i].name if i < len(outputs) else None
        tensor = read_value(path, kinds.get(by_position, "tensor_type"))
        name = tensor.name if tensor.name in index else by_position
        if name not in index:
            return "failed", f"output {name!r} missing from outputs.json"
        expected = value_array(read_value(path, kinds[name]), kinds[name])
        reason = compare_value(expected, index[name], out_dir, rtol, atol)
        if reason:
            return "failed", f"output {name!r}: {reason}"
    return "passed", ""


def compare_value(expected, entry, out_dir, rtol, atol):
    """Why kiln's output (outputs.json entry) differs from expected, or None."""
    if expected is None or entry is None:
        return None if expected is None and entry is None else (
            f"expected {'an empty optional' if expected is None else 'a value'}, got "
            f"{'an empty optional' if entry is None else entry!r}")
    path = os.path.join(out_dir, entry)
    if isinstance(expected, list):
        if not os.path.isdir(path):
            return "expected a sequence (a folder of .npy files)"
        got = numbered_npy(path)
        if len(got) != len(expected):
            return f"sequence of {len(got)} elements, expected {len(expected)}"
        for k, (e, f) in enumerate(zip(expected, got)):
            reason = compare_value(e, os.path.relpath(f, out_dir), out_dir, rtol, atol)
            if reason:
                return f"element {k}: {reason}"
        return None
    try:
        actual = np.load(path, allow_pickle=False)
    except Exception as exc:  # a malformed .npy from kiln is a failure of this case
        return f"unreadable .npy ({exc})"
    return compare(expected, typed(actual), rtol, atol)


def numbered_npy(dirpath):
    files = [f for f in os.listdir(dirpath) if f.endswith(".npy") and f[:-4].isdigit()]
    return [os.path.join(dirpath, f) for f in sorted(files, key=lambda f: int(f[:-4]))]


def load_expected(path):
    expected = {}
    if not os.path.exists(path):
        return expected
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 2)
            if len(parts) < 2 or parts[1] not in CATEGORIES:
                sys.exit(f"{path}:{lineno}: expected 'name  category  reason' with a category "
                         f"from {', '.join(CATEGORIES)}")
            expected[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
    return expected


def guess_category(root, result):
    model = onnx.load(os.path.join(root, result["name"], "model.onnx"), load_external_data=False)
    ops, domains = model_traits(model)
    msg = result["message"].lower()
    name = result["name"]
    if result["status"] == "unsupported" or any(
            op.startswith(("Sequence", "Optional")) or op in ("SplitToSequence",
                                                             "ConcatFromSequence")
            for op in ops):
        return "sequence/optional"
    if "ai.onnx.preview.training" in domains or "training" in name:
        return "training"
    io_types = {vi.type.tensor_type.elem_type for vi in list(model.graph.input) +
                list(model.graph.output) if value_kind(vi) == "tensor_type"}
    if io_types & EXOTIC_TYPES:
        return "unsupported-type"
    if result["status"] == "failed":
        return "mismatch"
    if "dtype" in msg or "data type" in msg or "string tensor" in msg:
        return "unsupported-type"
    if any(m in msg for m in ("not a built-in op", "unsupported", "not supported", "unknown op",
                              "no kernel")):
        return "unsupported-op"
    return "other"


def write_expected(path, root, results, old, selected, suite="node"):
    entries = {k: v for k, v in old.items() if k not in selected}
    for r in results:
        if r["status"] in ("passed", "crash", "timeout"):
            continue
        category = guess_category(root, r)
        if r["name"] in old and old[r["name"]][0] == category:
            entries[r["name"]] = old[r["name"]]  # keeps a reason written by hand
        else:
            reason = r["message"] or r["status"]
            reason = re.sub(r"^kiln: (error: )?", "", reason).replace("'model': ", "")
            entries[r["name"]] = (category, reason)
    with open(path, "w") as f:
        f.write(f"# ONNX {suite} test cases kiln is known not to pass: name  category  reason.\n")
        f.write("# Categories: " + ", ".join(CATEGORIES) + ". A crash or timeout is never listed.\n")
        flag = "" if suite == "node" else f" --suite {suite}"
        f.write(f"# Regenerate with: tests/conformance/run_node_tests.py{flag} --update\n")
        width = max([len(n) for n in entries] + [10])
        for name in sorted(entries):
            cat, reason = entries[name]
            reason = " ".join(reason.split())[:160]
            f.write(f"{name:<{width}}  {cat:<17}  {reason}\n".rstrip() + "\n")
    return len(entries)


def summarize(results):
    counts = {s: 0 for s in ("passed", "failed", "error", "crash", "timeout", "unsupported")}
    for r in results:
        counts[r["status"]] += 1
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", default=os.environ.get("KILN") or default_kiln(),
                    help="path of the kiln binary (default: $KILN or build/bin/kiln)")
    ap.add_argument("--suite", choices=SUITES, default="node",
                    help="which of onnx's backend test sets to run (default node)")
    ap.add_argument("--filter", default="", help="regular expression selecting case names")
    ap.add_argument("--jobs", "-j", type=int, default=2, help="parallel cases (default 2)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per case (default 60)")
    ap.add_argument("--json-out", help="write the per-case report here")
    ap.add_argument("--expected", help="expected-failure list (default: the suite's own, "
                    "tests/conformance/expected_failures[_SUITE].txt)")
    ap.add_argument("--check", action="store_true",
                    help="exit non-zero on an unexpected failure, any crash or any timeout")
    ap.add_argument("--strict", action="store_true",
                    help="with --check, also fail when a listed case now passes")
    ap.add_argument("--update", action="store_true", help="rewrite the expected-failure list")
    ap.add_argument("--input-format", choices=("pb", "npy"), default="pb",
                    help="feed inputs as the TensorProto files (default) or converted to .npy")
    ap.add_argument("--verbose", "-v", action="store_true", help="print every non-passing case")
    ap.add_argument("--data", help="folder of node test cases (default: the installed onnx's)")
    args = ap.parse_args()

    if not os.access(args.kiln, os.X_OK):
        sys.exit(f"kiln binary not found or not executable: {args.kiln}")
    kiln = os.path.abspath(args.kiln)
    root = args.data or node_test_root(args.suite)
    if not os.path.isdir(root):
        where = "--data" if args.data else "the installed onnx package (some builds ship without it)"
        sys.exit(f"no node test cases at {root} (from {where}): pass --data FOLDER, a copy of "
                 f"onnx/backend/test/data/{args.suite}")
    args.expected = args.expected or default_expected(args.suite)
    names = list_cases(root, args.filter)
    if not names:
        sys.exit(f"no node test case matches {args.filter!r}")

    results = []
    tmp_root = tempfile.mkdtemp(prefix="kiln-node-tests-")
    started = time.monotonic()
    try:
        def job(i_name):
            i, name = i_name
            workdir = os.path.join(tmp_root, str(i))
            os.makedirs(workdir, exist_ok=True)
            try:
                return run_case(kiln, root, name, args.timeout, args.input_format, workdir)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for r in pool.map(job, enumerate(names)):
                results.append(r)
                if args.verbose and r["status"] != "passed":
                    print(f"{r['status']:<11} {r['name']}: {r['message']}", flush=True)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    elapsed = time.monotonic() - started

    expected = load_expected(args.expected)
    counts = summarize(results)
    failing = [r for r in results if r["status"] not in ("passed", "unsupported")]
    unexpected = [r for r in results
                  if r["status"] not in ("passed",) and r["name"] not in expected]
    never_ok = [r for r in results if r["status"] in ("crash", "timeout")]
    now_passing = [r for r in results if r["status"] == "passed" and r["name"] in expected]
    for r in results:
        r["expected"] = r["name"] in expected
        if r["expected"]:
            r["expected_category"] = expected[r["name"]][0]

    if args.json_out:
        report = {"kiln": kiln, "onnx": onnx.__version__, "filter": args.filter,
                  "seconds": round(elapsed, 1), "counts": counts, "total": len(results),
                  "cases": results}
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=1)

    if args.update:
        n = write_expected(args.expected, root, results, expected, set(names), args.suite)
        print(f"wrote {n} entries to {os.path.relpath(args.expected)}")

    for r in never_ok:
        print(f"{r['status'].upper()}: {r['name']}: {r['message']}")
    if args.check:
        for r in unexpected:
            if r["status"] not in ("crash", "timeout"):
                print(f"UNEXPECTED {r['status']}: {r['name']}: {r['message']}")
        for r in now_passing:
            print(f"now passes (remove from the list): {r['name']}")

    total = len(results)
    pct = 100.0 * counts["passed"] / total if total else 0.0
    runnable = total - counts["unsupported"]
    pct_run = 100.0 * counts["passed"] / runnable if runnable else 0.0
    print(f"breakdown: {counts['failed']} mismatch, {counts['error']} error, {counts['crash']} crash, "
          f"{counts['timeout']} timeout, {counts['unsupported']} not runnable (map or sparse I/O); "
          f"{len(failing) + counts['unsupported'] - len(unexpected)} of the non-passing are listed "
          f"as expected; {elapsed:.0f} s")
    print(f"pass rate: {pct:.1f}% of {total} cases ({pct_run:.1f}% of the {runnable} runnable)")
    print(f"{args.suite} tests: {counts['passed']} passed, {len(failing)} failed, "
          f"{counts['unsupported']} skipped")

    if args.check:
        bad = bool(unexpected) or bool(never_ok) or (args.strict and bool(now_passing))
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
