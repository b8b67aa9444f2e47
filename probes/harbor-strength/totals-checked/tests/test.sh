#!/bin/bash
# Checks the content: every row of /app/totals.csv against the totals expected, in order,
# nothing more and nothing less. Reward 1 only for exactly that table.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
/usr/bin/python3 -I -S - > /logs/verifier/reward.txt <<'PY'
import csv

expected = [["region", "total"], ["east", "215"], ["north", "150"], ["south", "91"],
            ["west", "144"]]
try:
    with open("/app/totals.csv", newline="") as f:
        rows = [row for row in csv.reader(f)]
except OSError:
    rows = []
print(1 if rows == expected else 0)
PY
