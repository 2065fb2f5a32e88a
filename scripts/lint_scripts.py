#!/usr/bin/env python3
"""Reads every Python and shell script of the repository with pyflakes and ShellCheck (warnings and errors).

Some scripts run only where a GPU is lent (tests/gpu/*.py, scripts/gpu-validate), for minutes a session: a
misspelt name found there costs the session. CI cannot run them, so it reads them, and every other script with
them. Both tools come from scripts/setup-tests (.venv-test); a missing one fails with how to get it.
"""
import os
import shutil
import subprocess
import sys


def tracked_files(root):
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    return [f for f in out.decode().split("\0") if f]


def is_shell_script(path):
    try:
        with open(path, "rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    # A file sourced by a script (scripts/gpu-validate.d) names its shell as ShellCheck reads it.
    if first.strip() in (b"# shellcheck shell=bash", b"# shellcheck shell=sh"):
        return True
    if not first.startswith(b"#!"):
        return False
    interpreter = first.split(b"/")[-1].split()
    return bool(interpreter) and interpreter[-1] in (b"bash", b"sh")


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = [f for f in tracked_files(root) if os.path.isfile(os.path.join(root, f))]
    python = [f for f in files if f.endswith(".py")]
    shell = [f for f in files if not f.endswith((".py", ".md")) and is_shell_script(os.path.join(root, f))]
    failed = False
    for tool, args, chosen in (("pyflakes", [], python), ("shellcheck", ["-x", "-S", "warning", "-f", "gcc"], shell)):
        exe = shutil.which(tool)
        if exe is None:
            sys.exit(f"lint_scripts: {tool} not found: run scripts/setup-tests (it installs it into .venv-test)")
        if subprocess.run([exe, *args, *chosen], cwd=root).returncode != 0:
            failed = True
    print(f"lint_scripts: {len(python)} Python and {len(shell)} shell scripts read")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
