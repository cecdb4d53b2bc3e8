#!/usr/bin/env python3
"""Checks what the comments point at: every repository path a comment names exists, and every
named note that a comment or a page refers to is defined once.

  check_references.py --root REPO [FILE ...]

FILE defaults to the repository's own sources as git ls-files lists them (*.h *.cpp *.cu *.cuh
*.py *.sh *.cmake, CMakeLists.txt, their *.in templates, and scripts without an extension such as
.ci/run; not third_party/ nor the planted mistakes tests/apps/*planted*) and, for notes only, its
*.md pages.

Paths: in comment text (// and /* */ in C++ and CUDA; # elsewhere; Python's docstrings too), a
word that starts with one of the repository's top-level folders (apps/, core/, ...) and ends with
a file extension some tracked file has, or with /, must name a file or folder from the root or
from the commenting file's folder; a :LINE or :LINE-LINE after it is dropped. Not checked: words
with placeholders (*, ?, {, <, ..., a capitalised NAME no tracked file has), and paths .gitignore
ignores, which name files made at run time (data/mnist/...), not sources.

Notes (PyTorch's `Note [...]` style): a comment line that holds nothing but a note's name in that
form defines the note (a line of ~ may underline it); every other mention refers to it. A mention
may wrap across comment lines (in a page, across lines); runs of spaces count as one. Every note
referred to must be defined exactly once; notes are collected from the whole repository whatever
FILE is.

Exits 1 listing each problem as FILE:LINE: ..."""
import argparse
import io
import os
import re
import subprocess
import sys
import tokenize

C_LIKE = (".h", ".cpp", ".cu", ".cuh")
HASH = (".py", ".sh", ".cmake")
NOT_OURS = re.compile(r"third_party/|tests/apps/[^/]*planted")
NOTE = re.compile(r"\bNote\s+\[([^\]]+)\]")
GLOB = re.compile(r"[*?{<]|\.\.\.")
CAPITALS = re.compile(r"[A-Z][A-Z0-9_]+")
# A # that starts a C preprocessor line (a script writing C++) is no comment.
DIRECTIVE = re.compile(r"#\s*(?:include|pragma|define|undef|if|ifdef|ifndef|elif|else|endif|error|warning)\b")


def tracked_files(root):
    listed = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True)
    if listed.returncode != 0:
        raise SystemExit(f"check_references: {root} is not a git checkout: {listed.stderr.strip()}")
    return [path for path in listed.stdout.splitlines() if os.path.isfile(os.path.join(root, path))]


def first_line(root, path):
    with open(os.path.join(root, path), "rb") as f:
        return f.readline().decode("utf-8", "replace")


def scanned(root, path):
    """Whether path is one of the sources whose comments are read (a page is read for notes)."""
    kind = path.removesuffix(".in")  # a template is read as what it makes (base/config.h.in)
    name = os.path.basename(path)
    if NOT_OURS.match(path):
        return False
    if kind.endswith(C_LIKE + HASH + (".md",)) or name == "CMakeLists.txt":
        return True
    return "." not in name and re.match(r"#!.*\b(?:bash|sh|python3?)\b", first_line(root, path)) is not None


def c_comments(text):
    """{line: (comment text, whether the line holds only comment)} for C++ and CUDA: strings,
    character literals and raw strings are skipped; a ' after a digit is a digit separator."""
    found, code, line, i, n = {}, set(), 1, 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line, i = line + 1, i + 1
        elif text.startswith("//", i):
            end = n if text.find("\n", i) < 0 else text.find("\n", i)
            found.setdefault(line, []).append(text[i + 2:end])
            i = end
        elif text.startswith("/*", i):
            end = n if text.find("*/", i + 2) < 0 else text.find("*/", i + 2)
            for k, piece in enumerate(text[i + 2:end].split("\n")):
                found.setdefault(line + k, []).append(re.sub(r"^\s*\*", "", piece) if k else piece)
            line, i = line + text.count("\n", i, end), end + 2
        elif text.startswith('R"', i) and not re.match(r"\w", text[i - 1:i]):
            close = ")" + text[i + 2:text.find("(", i)] + '"'
            end = n if text.find(close, i) < 0 else text.find(close, i) + len(close)
            code.add(line)
            line, i = line + text.count("\n", i, end), end
        elif c in "\"'" and not (c == "'" and re.search(r"\b\d\w*$", text[max(0, i - 40):i])):
            i += 1
            while i < n and text[i] not in (c, "\n"):
                i += 2 if text[i] == "\\" else 1
            code.add(line)
            i += 1
        else:
            if not c.isspace():
                code.add(line)
            i += 1
    return {k: (" ".join(v), k not in code) for k, v in found.items()}


def hash_comments(text):
    """The same for shell and CMake: a # that starts a word, outside quotes (these scripts close a
    quote on the line that opens it)."""
    found = {}
    for number, row in enumerate(text.splitlines(), 1):
        quote, escaped = None, False
        for k, c in enumerate(row):
            if escaped:
                escaped = False
            elif c == "\\" and quote != "'":
                escaped = True
            elif quote:
                quote = None if c == quote else quote
            elif c in "\"'":
                quote = c
            elif c == "#" and (k == 0 or row[k - 1].isspace()) and not DIRECTIVE.match(row, k):
                found[number] = (row[k + 1:], not row[:k].strip())
                break
    return found


def python_comments(text):
    """The same for Python, from its tokenizer: comments and docstrings."""
    found, previous = {}, tokenize.NEWLINE
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = (token.string[1:], not token.line[:token.start[1]].strip())
        elif token.type == tokenize.STRING and previous in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            for k, piece in enumerate(token.string.split("\n")):
                found[token.start[0] + k] = (piece, False)
        if token.type not in (tokenize.NL, tokenize.COMMENT):
            previous = token.type
    return found


def comment_lines(root, path):
    """{line: text} of path's comments (a page's non-blank lines), and the comment-only lines."""
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        text = f.read()
    kind = path.removesuffix(".in")
    if kind.endswith(".md"):
        return {k: row for k, row in enumerate(text.splitlines(), 1) if row.strip()}, set()
    if kind.endswith(C_LIKE):
        found = c_comments(text)
    elif kind.endswith(".py") or "python" in first_line(root, path):
        try:
            found = python_comments(text)
        except (tokenize.TokenError, SyntaxError) as error:
            raise SystemExit(f"check_references: {path} is not Python that tokenizes: {error}")
    else:
        found = hash_comments(text)
    return {k: v[0] for k, v in found.items()}, {k for k, v in found.items() if v[1]}


def mentions(rows):
    """(line, name) of each mention of a note in rows ({line: text}), read across consecutive lines."""
    found, run = [], []
    for number in sorted(rows) + [None]:
        if run and number != run[-1] + 1:
            joined, starts = "", []  # starts: (offset in joined, line)
            for at in run:
                starts.append((len(joined), at))
                joined += rows[at] + " "
            for match in NOTE.finditer(joined):
                at = max(line for offset, line in starts if offset <= match.start())
                found.append((at, " ".join(match.group(1).split())))
            run = []
        if number is not None:
            run.append(number)
    return found


def path_words(tracked):
    """A function giving the words of a comment that name paths to check."""
    folders = sorted({path.split("/")[0] for path in tracked if "/" in path})
    extensions = sorted({os.path.splitext(path)[1] for path in tracked} - {""})
    word = re.compile(r"(?<![\w./~$-])(?:" + "|".join(map(re.escape, folders)) + r")/[^\s`'\"()\[\]]*")
    ending = re.compile(r"(?:" + "|".join(map(re.escape, extensions)) + r"|/)$")
    names = {os.path.basename(path).split(".")[0] for path in tracked}  # README, LICENSE: real names

    def placeholder(path):
        return GLOB.search(path) or any(CAPITALS.fullmatch(part.split(".")[0]) and part.split(".")[0] not in names
                                        for part in path.split("/"))

    def words(text):
        for found in word.findall(text):
            path = re.sub(r":\d+(?:-\d+)?$", "", found.rstrip(".,;:)'\""))
            if ending.search(path) and not placeholder(path):
                yield path
    return words


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True)
    parser.add_argument("files", nargs="*")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    tracked = tracked_files(root)
    everything = [path for path in tracked if scanned(root, path)]
    checked = [os.path.relpath(os.path.abspath(f), root) for f in args.files] or everything
    words = path_words(tracked)

    notes, references, paths, problems = {}, [], [], []  # notes: name → (file, line) defining it
    for path in dict.fromkeys(everything + checked):
        rows, comment_only = comment_lines(root, path)
        defining = set()
        for number in sorted(comment_only):
            match = re.fullmatch(r"Note \[([^\]]+)\]", rows[number].strip())
            if match:
                name = " ".join(match.group(1).split())
                defining.add(number)
                if name in notes and path in checked:
                    first = notes[name]
                    problems.append((path, number, f"Note [{name}] is defined twice (first at {first[0]}:{first[1]})"))
                notes.setdefault(name, (path, number))
        if path in checked:
            references += [(path, at, name) for at, name in mentions(rows) if at not in defining and name != "..."]
            if not path.endswith(".md"):
                paths += [(path, number, word) for number, text in sorted(rows.items()) for word in words(text)]

    missing = [(path, number, word) for path, number, word in paths if not os.path.exists(os.path.join(root, word))
               and not os.path.exists(os.path.join(root, os.path.dirname(path), word))]
    ignored = subprocess.run(["git", "-C", root, "check-ignore", "--no-index", "--stdin"], capture_output=True,
                             text=True, input="\n".join(word for _, _, word in missing)).stdout.splitlines()
    problems += [(path, number, f"comment names {word}, which does not exist")
                 for path, number, word in missing if word not in ignored]
    problems += [(path, number, f"Note [{name}] is referenced but defined nowhere")
                 for path, number, name in references if name not in notes]
    for where, number, what in sorted(problems):
        print(f"{where}:{number}: {what}")
    if problems:
        print(f"check_references: {len(checked)} files, {len(problems)} problem(s)")
        return 1
    print(f"check_references: ok: {len(checked)} files, {len(paths)} paths, "
          f"{len(references)} references to {len(notes)} notes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
