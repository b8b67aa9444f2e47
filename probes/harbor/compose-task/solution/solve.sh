#!/bin/bash
# Reference solution: what a perfect agent would do.
set -euo pipefail
python3 -c 'import urllib.request, sys; sys.stdout.write(urllib.request.urlopen("http://api:8080/greeting", timeout=10).read().decode())' > /app/greeting.txt
