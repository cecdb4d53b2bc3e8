#!/usr/bin/env python3
"""docs/ops.md against the op table (tests/support/op_table.h): the page lists exactly the table's
ops, and its counts are the table's.

  check_op_docs.py TABLE_PROGRAM PAGE

TABLE_PROGRAM --op-names prints one op a line: `name gradcheck=0|1 cuda=0|1 torch=0|1`
(ops_tool, tests/interop/ops_tool.cpp). On the page, an op is named in the first cell of a row of a
table whose header starts `| op |`: every code span there that is a name or a call — `relu(x)`,
`fill_`, `fused::linear_relu(...)`, `ember::std(...)` (`ember::` dropped) — names one. The counts
are the sentence "N ops: G gradchecked, C compared CPU↔CUDA ..., T compared with PyTorch".
Exits 1 naming every op in one but not the other and every count that differs."""
import re
import subprocess
import sys

NAME = re.compile(r"^(?:ember::)?((?:fused::)?[a-z_][a-z0-9_]*)(?:\(.*\))?$")
# The words may wrap across lines; CPU↔CUDA may be followed by a remark without a comma.
COUNTS = re.compile(r"(\d+)\s+ops:\s+(\d+)\s+gradchecked,\s+(\d+)\s+compared\s+CPU↔CUDA[^,]*,\s+(\d+)\s+compared"
                    r"\s+with\s+PyTorch")


def table_ops(program):
    lines = subprocess.run([program, "--op-names"], check=True, capture_output=True, text=True).stdout.splitlines()
    ops = {}
    for line in lines:
        name, *flags = line.split()
        ops[name] = dict(flag.split("=") for flag in flags)
    return ops


def page_ops(text):
    names, in_op_table = [], False
    for line in text.splitlines():
        if not line.startswith("|"):
            in_op_table = False
            continue
        first = line.split("|")[1].strip()
        if first == "op":
            in_op_table = True
            continue
        if in_op_table:
            for span in re.findall(r"`([^`]+)`", first):
                match = NAME.match(span.strip())
                if match and match.group(1) not in names:
                    names.append(match.group(1))
    return names


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    program, page = sys.argv[1:]
    with open(page, encoding="utf-8") as f:
        text = f.read()
    table, listed = table_ops(program), page_ops(text)
    problems = [f"{name} is in {page} but not in the op table" for name in listed if name not in table]
    problems += [f"{name} is in the op table but not in {page}" for name in table if name not in listed]
    counted = COUNTS.search(text)
    actual = (len(table), sum(op["gradcheck"] == "1" for op in table.values()),
              sum(op["cuda"] == "1" for op in table.values()), sum(op["torch"] == "1" for op in table.values()))
    if not counted:
        problems.append(f"{page} has no sentence \"N ops: G gradchecked, C compared CPU↔CUDA, T compared with "
                        f"PyTorch\" (the table: {actual[0]}, {actual[1]}, {actual[2]}, {actual[3]})")
    else:
        for what, said, count in zip(("ops", "gradchecked", "compared CPU↔CUDA", "compared with PyTorch"),
                                     map(int, counted.groups()), actual):
            if said != count:
                problems.append(f"{page} says {said} {what}, the table has {count}")
    for problem in problems:
        print(f"check_op_docs: {problem}")
    print(f"check_op_docs: {len(table)} ops in the table, {len(listed)} on the page: "
          f"{len(problems)} problem{'s' if len(problems) != 1 else ''}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
