#!/usr/bin/env bash
# The commit subjects' check on a scratch repository: after a base commit, a subject of 73
# characters and one of exactly 72, each with a character of more than one byte (so that counting
# bytes would get both wrong): the check must fail naming the first only. Then its two fallbacks: a
# base missing from the history checks HEAD alone (72: passes), and no repository passes.
#   tests/apps/commit_subjects_catches.sh CHECK
set -u
check=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "commit_subjects_catches: $*"; exit 1; }
long='Planted subject of 73 characters, one of them ×: over the limit, reported'
limit='Planted subject of 72 characters, one of them →: at the limit, so passed'
commit() { git -C "$work/repo" -c commit.gpgsign=false commit -q --allow-empty -m "$1"; }
git init -q "$work/repo" && git -C "$work/repo" config user.name ember &&
  git -C "$work/repo" config user.email ember@example.invalid || fail "cannot make a git repository"
commit "Base" && base=$(git -C "$work/repo" rev-parse HEAD) && commit "$long" && commit "$limit" || fail "cannot commit"

out=$("$check" --repo "$work/repo" "$base")
status=$?
echo "$out"
[ $status -eq 1 ] || fail "the check exited $status on a subject of 73 characters, not 1"
long_hash=$(git -C "$work/repo" rev-parse --short HEAD~1)
limit_hash=$(git -C "$work/repo" rev-parse --short HEAD)
echo "$out" | grep -qF "$long_hash: a subject of 73 characters, over 72: $long" || fail "the subject of 73 went unreported"
echo "$out" | grep -qF "$limit_hash" && fail "the subject of exactly 72 characters was reported"

out=$("$check" --repo "$work/repo" 0123456789abcdef0123456789abcdef01234567) || fail "a missing base: HEAD's subject of 72 failed"
echo "$out" | grep -q "warning: .* only HEAD's subject is checked" || fail "a missing base gave no warning"
mkdir "$work/tarball"
out=$("$check" --repo "$work/tarball") || fail "a tree that is no repository failed"
echo "$out" | grep -q "warning: .* is not a git repository" || fail "a tree that is no repository gave no warning"
echo "commit_subjects_catches: ok"
