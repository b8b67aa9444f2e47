#!/bin/bash
# Reference solution: add up the numbers, one per line.
set -euo pipefail
awk '{ s += $1 } END { print s }' /app/numbers.txt > /app/sum.txt
