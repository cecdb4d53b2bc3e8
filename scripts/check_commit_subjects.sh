#!/usr/bin/env bash
# Checks that every commit after BASE (default 491dc75, the last commit before the rule) has a
# subject of at most 72 characters — characters, not bytes: subjects may hold → or ×. A fresh
# clone has no remote to compare with, hence the fixed commit. Prints each subject over the limit;
# exits 1 if any. Where BASE is not in the history (a shallow clone) only HEAD's subject is checked,
# and where the tree is no git repository (a source tarball) nothing is, each with a warning.
#   scripts/check_commit_subjects.sh [--repo DIR] [BASE]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = --repo ]; then
  repo=$2
  shift 2
fi
base=${1:-491dc75}
limit=72
if [ ! -e "$repo/.git" ]; then
  echo "check_commit_subjects: warning: $repo is not a git repository (a source tarball?): no subjects checked"
  exit 0
fi
if git -C "$repo" rev-parse -q --verify "$base^{commit}" >/dev/null; then
  range=("$base..HEAD") what="after $base"
else
  echo "check_commit_subjects: warning: $base is not in the history (a shallow clone?): only HEAD's subject is checked"
  range=(-1 HEAD) what="HEAD's"
fi
# Python counts the characters of UTF-8 text whatever the locale; git writes the log in UTF-8.
git -C "$repo" log --format='%h %s' "${range[@]}" | python3 -c '
import sys
limit, over, count = int(sys.argv[1]), 0, 0
for line in sys.stdin.buffer.read().decode("utf-8", "replace").splitlines():
    commit, _, subject = line.partition(" ")
    count += 1
    if len(subject) > limit:
        over += 1
        print(f"check_commit_subjects: {commit}: a subject of {len(subject)} characters, over {limit}: {subject}")
if over:
    print(f"check_commit_subjects: {over} of {count} subject(s) over {limit} characters: reword them before they land")
    sys.exit(1)
print(f"check_commit_subjects: {count} subject(s) {sys.argv[2]}, none over {limit} characters")
' "$limit" "$what"
