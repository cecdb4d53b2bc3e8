#!/usr/bin/env python3
"""Checks the commands the docs show against what exists: every flag given to one of ember's
programs is in that program's --help, every flag given to a script appears in the script (or, for
scripts that pass their flags on, in the program's --help), every scripts/NAME exists, every
relative link points at a file of the repository, and the README's first C++ block is
examples/mnist_mlp/main.cpp's code (its lines appear there in the same order, spaces aside), which
the tests compile and run. And what the docs say of GPUs agrees with the ledger and the committed
reports (scripts/gpu_claims.py: no check the ledger lists as verified on a GPU is called owed, and
every figure in a sentence naming an H100, an H200 or "on a GPU" is in a report).

  check_docs.py --root REPO --program mnist_train=PATH [--program NAME=PATH ...] [FILE ...]

FILE defaults to README.md, docs/**/*.md and examples/*/README.md. Commands are read from code:
fenced blocks line by line, and inline `code` spans. A flag belongs to the last command named
before it in the same line or span; a flag after no command must be an option of some program or
script. Flags of other tools (cmake, ctest, mpirun, pip, perf, python, ...) are not checked.
Exits 1 listing each problem as FILE:LINE: ..."""
import argparse
import glob
import os
import re
import subprocess
import sys

import gpu_claims

PROGRAMS = ("mnist_train", "mnist_predict", "bench_kernels", "bench_loader", "bench_devices", "ember_info")
# Scripts that hand the flags they do not know to a program.
PASSES_ON = {"train_mnist.sh": "mnist_train"}
OTHER_TOOLS = ("cmake", "ctest", "mpirun", "pip", "perf", "python", "python3", "git", "nvcc", "apt-get", "sudo",
               "torchrun", "clang++", "g++", "debootstrap", "chroot", "mount", "valgrind", "curl", "nsys", "ncu")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
COMMAND = re.compile(r"(?:^|(?<=[\s/`(]))(" + "|".join(map(re.escape, PROGRAMS + OTHER_TOOLS)) +
                     r")(?=[\s`)]|$)|scripts/[\w./-]+")


def help_flags(path):
    out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60)
    flags = set(FLAG.findall(out.stdout + out.stderr))
    if not flags:
        raise SystemExit(f"check_docs: {path} --help printed no options")
    return flags


def code_units(text):
    """(line number, code) for each line of a fenced block and each inline span."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            yield number, line
        else:
            for span in re.findall(r"`([^`]+)`", line):
                yield number, span


def squeeze(line):
    return " ".join(line.split())


def example_problems(root, readme):
    """The README's first ```cpp block, line by line, in examples/mnist_mlp/main.cpp in order."""
    with open(readme, encoding="utf-8") as f:
        text = f.read().splitlines()
    start = next((i for i, line in enumerate(text) if line.strip() == "```cpp"), None)
    if start is None:
        return [("README.md", 1, "no ```cpp block: the example examples/mnist_mlp is compared with it")]
    example_path = os.path.join(root, "examples", "mnist_mlp", "main.cpp")
    with open(example_path, encoding="utf-8") as f:
        example = [squeeze(line) for line in f]
    at = 0
    for number in range(start + 2, len(text) + 1):
        line = text[number - 1]
        if line.strip() == "```":
            return []
        if not line.strip():
            continue
        try:
            at = example.index(squeeze(line), at) + 1
        except ValueError:
            return [("README.md", number, "this line of the example is not in examples/mnist_mlp/main.cpp "
                     "(in this order), which the tests run: change both")]
    return []


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True)
    parser.add_argument("--program", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("files", nargs="*")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    programs = {}
    for item in args.program:
        name, _, path = item.partition("=")
        programs[name] = help_flags(path)
    scripts_dir = os.path.join(root, "scripts")
    script_text = {}  # path under scripts/ → text
    for folder, _, names in os.walk(scripts_dir):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                script_text[os.path.relpath(path, scripts_dir)] = f.read()
    known_anywhere = set().union(*programs.values()) | {f for t in script_text.values() for f in FLAG.findall(t)}

    files = args.files or sorted(
        [os.path.join(root, "README.md")] + glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True) +
        glob.glob(os.path.join(root, "examples", "*", "README.md")))
    problems = []
    items, report_values = gpu_claims.read_items(root), gpu_claims.report_values(root)
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        where = os.path.relpath(path, root)
        problems += gpu_claims.problems(root, path, text, items, report_values)
        for number, line in enumerate(text.splitlines(), 1):
            for script in re.findall(r"(?<![\w.])scripts/([\w./-]+\.(?:sh|py))", line):
                if script not in script_text:
                    problems.append((where, number, f"scripts/{script} does not exist"))
            for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", line):
                if "://" in target or target.startswith("mailto:"):
                    continue
                if not os.path.exists(os.path.join(os.path.dirname(path), target)):
                    problems.append((where, number, f"the link {target} points at nothing"))
        for number, code in code_units(text):
            # A command given as an option's value (--train build/apps/mnist_train) is not the one
            # the options after it belong to.
            commands = [(m.start(), m.group(1) or m.group(0)) for m in COMMAND.finditer(code)
                        if not re.search(r"(?:^|\s)--?[\w-]+[\s=][\w./-]*$", code[:m.start()])]
            for flag_match in FLAG.finditer(code):
                flag = flag_match.group(0)
                before = [c for at, c in commands if at < flag_match.start()]
                command = before[-1] if before else None
                if command is None:
                    if flag not in known_anywhere:
                        problems.append((where, number, f"{flag} is an option of no program or script"))
                elif command in programs:
                    if flag not in programs[command]:
                        problems.append((where, number, f"{flag} is not an option of {command} (see its --help)"))
                elif command.startswith("scripts/"):
                    name = command[len("scripts/"):]
                    passed = programs.get(PASSES_ON.get(name, ""), set())
                    if name in script_text and flag not in script_text[name] and flag not in passed:
                        problems.append((where, number, f"{flag} is not an option of {command}"))
    readme = os.path.join(root, "README.md")
    if readme in files:
        problems += example_problems(root, readme)
    for where, number, what in sorted(problems):
        print(f"{where}:{number}: {what}")
    print(f"check_docs: {len(files)} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
