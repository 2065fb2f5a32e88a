"""Module circles in a Rust crate, from its source: which files use which (`crate::a::b`, `super::x`,
`self::x`, and a parent's `mod` children it names), and the groups of files that reach each other.

A file's module is its path (`src/model/source.rs` is `model::source`, `src/export/mod.rs` is `export`). A reference
to a path counts as an edge to the deepest file module the path names. A child using its own parent's items
(`super::x` from `export/table.rs`) and the parent using them back is the usual parent/child pair of Rust, and
counts too unless --siblings-only is given.

Usage: module_cycles.py [--siblings-only] [--allow FILE] CRATE_SRC_DIR...
Prints each circle (its files, sorted) and exits 1 if there is one not listed in the --allow file (one circle a
line, files separated by spaces: what is still to be opened, so that no new circle appears), or if a listed one is
gone (so the list only shrinks).
"""
import os
import re
import sys

PATH_RE = re.compile(r"\b(crate|super|self)((?:::\w+)+)")
USE_GROUP_RE = re.compile(r"\buse\s+(crate|super|self)((?:::\w+)*)::\{([^;]*)\};", re.S)


def modules(src):
    """Module path -> file, for every .rs file under src."""
    found = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)[:-3].split(os.sep)
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            found["::".join(rel)] = os.path.join(dirpath, f)
    return found


def strip_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def resolve(mod, head, rest, mods):
    """The deepest file module that `head::rest` (as written in module `mod`) names, or None."""
    base = [] if head == "crate" else mod.split("::") if mod else []
    if head == "super":
        base = base[:-1]
    parts = [p for p in rest.split("::") if p]
    while parts and parts[0] == "super":
        base, parts = base[:-1], parts[1:]
    path = base + parts
    for n in range(len(path), -1, -1):
        cand = "::".join(path[:n])
        if cand in mods:
            return cand
    return None


def edges(mods):
    out = {m: set() for m in mods}
    for mod, file in mods.items():
        text = strip_comments(open(file, encoding="utf-8").read())
        # Tests are not part of the module's dependencies.
        text = text.split("#[cfg(test)]")[0]
        refs = [(h, r) for h, r in PATH_RE.findall(text)]
        for head, prefix, group in USE_GROUP_RE.findall(text):
            for item in re.split(r"[,\s{}]+", group):
                item = item.split(" as ")[0].strip()
                if item and item != "self":
                    refs.append((head, f"{prefix}::{item}"))
        # `mod child;` makes the parent depend on nothing by itself; its uses of the child are found above.
        for head, rest in refs:
            target = resolve(mod, head, rest, mods)
            if target is not None and target != mod:
                out[mod].add(target)
    return out


def circles(graph):
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def is_ancestor(a, b):
    return a == "" or b.startswith(a + "::")


def main(argv):
    siblings_only = "--siblings-only" in argv
    allow = set()
    if "--allow" in argv:
        path = argv[argv.index("--allow") + 1]
        allow = {line.strip() for line in open(path) if line.strip() and not line.startswith("#")}
        argv = [a for a in argv if a not in ("--allow", path)]
    dirs = [a for a in argv if not a.startswith("--")]
    new, seen = 0, set()
    for src in dirs:
        crate = os.path.basename(os.path.dirname(os.path.abspath(src)))
        mods = modules(src)
        graph = edges(mods)
        if siblings_only:
            graph = {m: {t for t in ts if not is_ancestor(t, m) and not is_ancestor(m, t)} for m, ts in graph.items()}
        for comp in circles(graph):
            line = f"{crate}: " + " ".join(c or "(root)" for c in comp)
            known = line in allow
            seen.add(line)
            new += not known
            print(("known  " if known else "CIRCLE ") + line)
    # A listed circle that is gone: the list must say so, so that it cannot come back unnoticed.
    gone = sorted(allow - seen)
    for line in gone:
        print(f"OPENED {line} (remove it from the --allow file)")
    return 1 if new or gone else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
