#!/usr/bin/env python3
"""Per-call instructions from two callgrind profiles of one benchmark, run
at N and 2N iterations: cgself.py N at-N.out at-2N.out [PREFIX]

Prints the total per call ((2N total - N total) / N) and, with PREFIX,
the per-call self instructions of the functions whose names start with it
(the wrapper's own work: PREFIX github.com/sqlretry/sqlretry.), which the
Go scheduler's idle loop and the network's syscalls, moving the totals by
+-1,500 between runs, do not touch."""
import collections, re, subprocess, sys

def self_costs(path):
    out = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=no", "--auto=no", path],
                         capture_output=True, text=True, check=True).stdout
    costs, total = collections.Counter(), 0
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(.*)$", line)
        if not m:
            continue
        v, name = int(m.group(1).replace(",", "")), m.group(2)
        if "PROGRAM TOTALS" in name:
            total = v
            continue
        fn = name.split(":", 1)[1] if ":" in name else name
        costs[fn.split(" [")[0]] += v
    return costs, total

n = int(sys.argv[1])
a, ta = self_costs(sys.argv[2])
b, tb = self_costs(sys.argv[3])
out = ["total %d" % ((tb - ta) // n)]
if len(sys.argv) > 4:
    own = sum(b[k] - a[k] for k in set(a) | set(b) if k.startswith(sys.argv[4]))
    out.append("own %d" % (own // n))
print(" ".join(out))
