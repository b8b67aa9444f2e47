#!/bin/bash
# Harbor verifier: reward 1 if /app/greeting.txt holds what the api service answers now.
expected=$(python3 -c 'import urllib.request; print(urllib.request.urlopen("http://api:8080/greeting", timeout=10).read().decode(), end="")') || { echo "api unreachable"; echo 0 > /logs/verifier/reward.txt; exit 0; }
if [ -n "$expected" ] && [ "$(cat /app/greeting.txt 2>/dev/null)" = "$expected" ]; then r=1; else r=0; fi
echo $r > /logs/verifier/reward.txt
