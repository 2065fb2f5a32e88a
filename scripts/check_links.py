#!/usr/bin/env python3
"""Fails on a broken link in the README and the docs: every relative Markdown link must name a file (or directory)
of the repository, and a #fragment a heading of its target (GitHub's anchor rule: lower case, punctuation
dropped, spaces to hyphens). Links to the web are not fetched (CI has no network).

usage: scripts/check_links.py [FILE_OR_DIR...]   (default: README.md docs)
"""
import os, re, sys

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def anchors(path):
    found, fenced = set(), False
    for line in open(path, encoding="utf-8"):
        if FENCE.match(line):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
        base, n = slug, 1
        while slug in found:
            slug = f"{base}-{n}"
            n += 1
        found.add(slug)
    return found


def links(path):
    fenced = False
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        if FENCE.match(line):
            fenced = not fenced
        if fenced:
            continue
        line = re.sub(r"`[^`]*`", "", line)  # code spans are not links
        for m in LINK.finditer(line):
            yield number, m.group(1) or m.group(2)


def main(args):
    files = []
    for a in args or ["README.md", "docs"]:
        if os.path.isdir(a):
            files += [os.path.join(d, f) for d, _, fs in os.walk(a) for f in fs if f.endswith(".md")]
        else:
            files.append(a)
    broken = []
    for path in sorted(files):
        for number, target in links(path):
            if re.match(r"^[a-z]+:", target):
                continue  # http:, https:, mailto:
            file, _, fragment = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if not os.path.exists(dest):
                broken.append(f"{path}:{number}: {target}: no such file")
            elif fragment and dest.endswith(".md") and fragment not in anchors(dest):
                broken.append(f"{path}:{number}: {target}: no heading #{fragment} in {dest}")
    for b in broken:
        print(b, file=sys.stderr)
    print(f"check_links: {len(files)} files, {len(broken)} broken link(s)")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
