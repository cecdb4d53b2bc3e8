"""The docs' claims about GPUs against the ledger (docs/results/gpu-checks.md) and the committed
reports (docs/results/gpu-check-*.md), for scripts/check_docs.py.

The ledger's "Items" table gives each GPU check a stable id, its status ("verified on a GPU" or
"owed") and the words the docs use for it. Two rules follow from it:

- A stale claim: a sentence that names an item verified on a GPU and has a clause that says
  something is owed or has not run ("owed", "not yet run", "has run nowhere", "never run on a
  GPU", ...) without naming an item still owed in that clause (such a clause is about the owed
  item). A sentence that says nothing at all has run on a GPU is stale once any item is verified.
- A GPU figure: every number in a sentence that names an H100, an H200 or "on a GPU" appears in a
  committed report, at the precision the sentence gives it (2.07M matches 2071k; 0.9092 matches
  0.9092). Ratios and sums that no report prints cannot be checked, so the docs give the report's
  own figures.

Reports are history and are not checked; neither are the ledger's own tables (its rows are
annotated, never rewritten), nor fenced code."""
import bisect
import glob
import os
import re

LEDGER = os.path.join("docs", "results", "gpu-checks.md")
REPORTS = os.path.join("docs", "results", "gpu-check-*.md")

STALE = re.compile(r"\bowed\b|\bowes?\b|not yet run|run nowhere|never (?:been )?run on a|untested on a (?:real )?GPU|"
                   r"has not run on a|none of (?:it|them) has run|unverified", re.I)
# Where a sentence's clauses part: the stale words and the owed item they excuse share a clause.
CLAUSE = re.compile(r";|:\s|,\s(?:and|but|while)\s|\s[—–]\s|\(|\)")
NOTHING_RAN = re.compile(r"nothing (?:has )?(?:yet )?run on a (?:real )?GPU|no (?:real )?GPU has (?:yet )?run|"
                         r"not(?:hing)? (?:yet )?(?:been )?run on a real GPU yet", re.I)
NAMES_GPU = re.compile(r"\bH100s?\b|\bH200s?\b|\bon a GPU\b", re.I)
# Numbers, with the thousands' commas and a k/M suffix; not inside words (H200, sm_90, cuda:0), not
# parts of dash-joined names (784-512-256-10), dates or versions (13.0.1), not hexadecimal hashes.
NUMBER = re.compile(r"(?<![\w.,:/#^−-])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?:\s?([kM])\b)?(?![\w.-]*\d-)(?![\w:/])")
NOT_FIGURES = re.compile(r"`[^`]*`|\]\([^)]*\)|\b\d{4}-\d{2}-\d{2}\b|\b\d+(?:[-–]\d+)+\b|\b\d+\.\d+\.\d+\b|"
                         r"\bcalls? \d+(?:\s?(?:and|–|-|,)\s?\d+)*|\b[0-9a-f]{7,40}\b|\d+\s?(?:×|x)\s?\d+|\d+³|"
                         r"\bsm_\d+|\b(?:CUDA|cuDNN|PyTorch|torch|driver|nvcc) \d+(?:\.\d+)*", re.I)
SCALE = {"k": 1e3, "M": 1e6}


def _cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def read_items(root):
    """{id: (status, [terms])} from the ledger's "Items" table."""
    items = {}
    in_items = False
    with open(os.path.join(root, LEDGER), encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                in_items = line.strip() == "## Items"
            elif in_items and line.startswith("| `"):
                cells = _cells(line)
                terms = [t.strip().strip("`") for t in re.split(r";\s*", cells[2]) if t.strip()]
                items[cells[0].strip("`")] = (cells[1].lower(), terms)
    if not items:
        raise SystemExit(f"check_docs: {LEDGER} has no '## Items' table of ids")
    return items


def _names(sentence, term):
    return re.search(r"(?<![\w-])" + re.escape(term) + r"(?![\w])", sentence, re.I) is not None


def units(text):
    """(line number, text) for each sentence of prose, list item, table row and heading."""
    fenced = False
    paragraph = []  # (line number, text) of the lines joined so far
    for number, line in enumerate(text.splitlines() + [""], 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            continue
        new_unit = not stripped or stripped.startswith(("|", "#", "- ", "* ")) or re.match(r"\d+\. ", stripped)
        if fenced or new_unit:
            yield from _sentences(paragraph)
            paragraph = []
            if fenced or not stripped:
                continue
            if stripped.startswith(("|", "#")):
                yield number, stripped
                continue
        paragraph.append((number, stripped))


def _sentences(paragraph):
    if not paragraph:
        return
    joined, starts, at = "", [], 0
    for number, text in paragraph:
        starts.append((at, number))
        joined += text + " "
        at = len(joined)
    at = 0
    for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z*`(\[])", joined.strip()):
        at = joined.index(sentence, at)
        yield max(n for offset, n in starts if offset <= at), sentence
        at += len(sentence)


def report_values(root):
    values = []
    for path in glob.glob(os.path.join(root, REPORTS)):
        with open(path, encoding="utf-8") as f:
            for m in NUMBER.finditer(f.read()):
                values.append(_value(m))
    return sorted(values)


def _value(m):
    return float(m.group(1).replace(",", "") + (m.group(2) or "")) * SCALE.get(m.group(3) or "", 1)


def _in_reports(m, values):
    decimals = len(m.group(2) or "") - 1 if m.group(2) else 0
    scale = SCALE.get(m.group(3) or "", 1)
    half_step = 0.5 * 10 ** -decimals * scale * (1 + 1e-9)
    value = _value(m)
    i = bisect.bisect_left(values, value - half_step)
    return i < len(values) and values[i] <= value + half_step


def problems(root, path, text, items, values):
    """FILE:LINE problems of one page."""
    where = os.path.relpath(path, root)
    if re.fullmatch(r"gpu-check-.*\.md", os.path.basename(path)):
        return []
    is_ledger = os.path.normpath(where) == os.path.normpath(LEDGER)
    verified = {i: terms for i, (status, terms) in items.items() if status.startswith("verified on a gpu")}
    owed_terms = [t for status, terms in items.values() if status == "owed" for t in terms]
    found = []
    for number, sentence in units(text):
        if is_ledger and sentence.startswith("|"):
            continue
        plain = re.sub(r"`", "", sentence)
        if verified and NOTHING_RAN.search(plain):
            found.append((where, number, "says nothing has run on a GPU, but the ledger lists "
                          f"{', '.join(sorted(verified))} as verified on a GPU ({LEDGER})"))
        elif any(STALE.search(c) and not any(_names(c, t) for t in owed_terms) for c in CLAUSE.split(plain)):
            named = sorted(i for i, terms in verified.items() if any(_names(plain, t) for t in terms))
            if named:
                found.append((where, number, f"calls owed or not run what the ledger lists as verified on a GPU "
                              f"({', '.join(named)}): say what ran, or name the part still owed"))
        if NAMES_GPU.search(plain):
            bare = NOT_FIGURES.sub(" ", sentence)
            missing = [m.group(0) for m in NUMBER.finditer(bare) if not _in_reports(m, values)]
            if missing:
                found.append((where, number, f"GPU figure(s) {', '.join(missing)} appear in no committed "
                              "gpu-check-*.md report: quote the report's own figures"))
    return found
