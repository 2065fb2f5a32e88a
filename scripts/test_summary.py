#!/usr/bin/env python3
"""The test command's last lines: every `cargo test` binary's counts summed from its log, and the checks the tests
skipped (the lines tests/src/lib.rs's `skipped` appends to $CUFLIGHT_SKIP_LOG), grouped by why, so that a run
without the shared traces, root or tmux says so instead of passing in silence.

usage: scripts/test_summary.py TEST_LOG SKIP_LOG
"""
import collections, re, sys


def main(log_path, skip_path):
    passed = failed = ignored = 0
    for line in open(log_path, errors="replace"):
        m = re.search(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored", line)
        if m:
            passed += int(m[1])
            failed += int(m[2])
            ignored += int(m[3])
    by_reason = collections.defaultdict(set)
    try:
        for line in open(skip_path, errors="replace"):
            test, _, why = line.rstrip("\n").partition("\t")
            by_reason[why].add(test)
    except FileNotFoundError:
        pass
    tests = set().union(*by_reason.values()) if by_reason else set()
    for why, names in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(sorted(names)[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        print(f"skipped in {len(names)} test(s): {why} ({shown})")
    skipped = f", {len(tests)} skipped a check (above)" if tests else ", none skipped"
    print(f"cuflight tests: {passed} passed{skipped}, {failed} failed, {ignored} ignored")


if __name__ == "__main__":
    main(*sys.argv[1:3])
