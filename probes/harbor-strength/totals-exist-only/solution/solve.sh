#!/bin/bash
# Reference solution: what a perfect agent would do.
set -euo pipefail
python3 - <<'PY'
import csv
from collections import defaultdict

totals: dict[str, int] = defaultdict(int)
with open("/app/sales.csv", newline="") as f:
    for row in csv.DictReader(f):
        totals[row["region"]] += int(row["amount"])
with open("/app/totals.csv", "w", newline="") as f:
    out = csv.writer(f, lineterminator="\n")
    out.writerow(["region", "total"])
    for region in sorted(totals):
        out.writerow([region, totals[region]])
PY
