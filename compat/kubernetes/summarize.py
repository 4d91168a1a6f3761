"""Counts go test -json results per package and lists the failures.

Per package it prints the leaf tests (tests without subtests, and the
subtests that have none: the cases that check something) that passed,
out of those that ran, then the skipped ones, then every test and
subtest counted. It fails if any test failed or if a package named
after the file ran no test."""
import collections
import json
import sys

results = collections.defaultdict(dict)
with open(sys.argv[1]) as f:
    for line in f:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if ev.get("Test") and ev.get("Action") in ("pass", "fail", "skip"):
            results[ev["Package"]][ev["Test"]] = ev["Action"]
failed = []
for pkg, tests in sorted(results.items()):
    leaves = [t for t in tests if not any(o.startswith(t + "/") for o in tests)]
    c = collections.Counter(tests[t] for t in leaves)
    a = collections.Counter(tests.values())
    print(f"{pkg}: {c['pass']}/{c['pass'] + c['fail']} leaf tests passed, {c['skip']} skipped "
          f"({a['pass']}/{a['pass'] + a['fail']} tests and subtests)")
    failed += [f"{pkg} {t}" for t in tests if tests[t] == "fail"]
for name in failed:
    print("FAIL", name)
missing = [p for p in sys.argv[2:] if not any(a != "skip" for a in results[p].values())]
for pkg in missing:
    print(f"{pkg}: no test ran")
sys.exit(1 if failed or missing else 0)
