"""Keep the arity columns of src/ops/op_list.h (the input and output counts ONNX allows for each
default-domain op, over opsets 7 to 28) equal to the onnx package's schemas. The runtime checks
them before any shape inference, so a malformed node never reaches an infer function with too
few inputs. Ops of other domains, and ops ONNX lists only as deprecated, keep -1 in all four
columns: their counts are not checked, and so do ops newer than the installed onnx (their infer
functions check the counts).

usage: python3 scripts/gen_arity.py          rewrite the columns in place
       python3 scripts/gen_arity.py --check  exit 1, naming each op, if a column differs
"""
import os
import re
import sys
import tempfile

import onnx
import onnx.defs

INF = 1 << 30
LIST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "ops", "op_list.h")
ROW = re.compile(r"^(KN_OP\(([^,]+), ([^,]+), \d+, \w+, \w+), (-?\d+), (-?\d+), (-?\d+), (-?\d+)\)$")


def onnx_arity():
    rows = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain not in ("", "ai.onnx") or schema.deprecated:
            continue
        if schema.since_version > 28:
            continue
        lo_in, hi_in = schema.min_input, min(schema.max_input, INF)
        lo_out, hi_out = schema.min_output, min(schema.max_output, INF)
        if schema.name in rows:
            a, b, c, d = rows[schema.name]
            rows[schema.name] = (min(a, lo_in), max(b, hi_in), min(c, lo_out), max(d, hi_out))
        else:
            rows[schema.name] = (lo_in, hi_in, lo_out, hi_out)
    return {n: tuple(-1 if v >= INF else v for v in r) for n, r in rows.items()}


def main():
    check = "--check" in sys.argv[1:]
    arity = onnx_arity()
    with open(LIST) as f:
        lines = f.read().split("\n")
    out, wrong = [], []
    for line in lines:
        m = ROW.match(line)
        if m:
            domain, name = m.group(2), m.group(3).strip('"')
            want = arity.get(name, (-1,) * 4) if domain == '""' else (-1,) * 4
            have = tuple(int(m.group(i)) for i in range(4, 8))
            if have != want:
                wrong.append("%s: %s in op_list.h, %s in onnx %s" % (name, have, want, onnx.__version__))
            line = "%s, %d, %d, %d, %d)" % ((m.group(1),) + want)
        out.append(line)
    if check:
        for w in wrong:
            print(w)
        sys.exit(1 if wrong else 0)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(LIST))
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(out))
    os.chmod(tmp, 0o644)
    os.replace(tmp, LIST)


if __name__ == "__main__":
    main()
