#!/usr/bin/env python3
"""Checks README.md and docs/*.md: every relative link and image resolves to a file of the
checkout (and a `#fragment` to a heading of the Markdown file it names, as GitHub makes anchors),
and every repository path the prose names in backticks (`tests/pytorch/variants.py`,
`include/qkv/kernels/attention.h`, ...) exists, so a moved or renamed file cannot leave the
documentation pointing at nothing. Python's standard library only.

  check_links.py [--source-dir .] [FILE.md ...]

Exit status 0 when everything resolves, 1 otherwise (each failure printed as file:line: what).
"""
import argparse
import glob
import os
import re
import sys
import unicodedata

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# top-level folders of the checkout whose paths the prose names
TOP = ("src/", "include/", "tests/", "bench/", "scripts/", "fuzz/", "examples/", "docs/", "python/", "cmake/", ".ci/")
PATH = re.compile(r"^(?:\./)?((?:" + "|".join(re.escape(t) for t in TOP) + r")[A-Za-z0-9_./-]*)$")


def slug(heading):
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    text = text.replace("`", "").lower()
    out = []
    for ch in text:
        if ch in " -_" or unicodedata.category(ch)[0] in "LN":
            out.append("-" if ch == " " else ch)
    return "".join(out)


def prose_lines(path):
    """(line number, text, in a fenced block) for each line of a Markdown file."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    fence = None
    for n, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            yield n, line, True
            continue
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip()[len(m.group(1)):].strip():
                fence = None
            yield n, line, True
            continue
        yield n, line, False


def anchors(path, cache={}):
    if path not in cache:
        seen, out = {}, set()
        for _, line, fenced in prose_lines(path):
            m = None if fenced else HEADING.match(line)
            if m:
                s = slug(m.group(2))
                k = seen.get(s, 0)
                seen[s] = k + 1
                out.add(s if k == 0 else f"{s}-{k}")
        cache[path] = out
    return cache[path]


def check_file(path, source_dir):
    problems = []
    here = os.path.dirname(path)
    name = os.path.relpath(path, source_dir)
    for n, line, fenced in prose_lines(path):
        if fenced:
            continue
        targets = [m.group(1) for m in LINK.finditer(CODE_SPAN.sub("", line))]
        m = REF_DEF.match(line)
        if m:
            targets.append(m.group(1))
        for target in targets:
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:, file: ...
                continue
            file_part, _, fragment = target.partition("#")
            dest = os.path.normpath(os.path.join(here, file_part)) if file_part else path
            if not os.path.exists(dest):
                problems.append(f"{name}:{n}: link to '{target}': {os.path.relpath(dest, source_dir)} does not exist")
                continue
            if fragment:
                if not dest.endswith(".md"):
                    problems.append(f"{name}:{n}: link to '{target}': a fragment into a file that is not Markdown")
                elif fragment not in anchors(dest):
                    problems.append(f"{name}:{n}: link to '{target}': {os.path.relpath(dest, source_dir)} has no heading "
                                    f"with the anchor '#{fragment}'")
        for span in CODE_SPAN.finditer(line):
            for word in span.group(2).split():
                word = word.rstrip(".,;:)").lstrip("(")
                m = PATH.match(word)
                if not m or any(c in word for c in "*<>{}$") or re.search(r"\bN\b|\.\.\.", word):
                    continue
                rel = m.group(1).rstrip("/")
                if not os.path.exists(os.path.join(source_dir, rel)):
                    problems.append(f"{name}:{n}: names `{rel}`, which does not exist")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source-dir", default=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    source_dir = os.path.abspath(args.source_dir)
    files = [os.path.abspath(f) for f in args.files] or \
        [os.path.join(source_dir, "README.md")] + sorted(glob.glob(os.path.join(source_dir, "docs", "*.md")))
    problems = [p for f in files for p in check_file(f, source_dir)]
    for p in problems:
        print(p)
    print(f"{len(files)} files checked: {len(problems)} broken link(s) or path(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
