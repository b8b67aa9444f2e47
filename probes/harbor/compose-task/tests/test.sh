#!/bin/bash
# Harbor verifier: reward 1 if /app/greeting.txt holds what the api service answers now (its
# token is drawn when the service starts: only an agent that asked it knows it). Hardened as
# hello-world's is: the verifier's own PATH, the interpreter by absolute path and isolated,
# and no reward file already there (Harbor reads reward.json first).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
reward=/logs/verifier/reward.txt
rm -f /logs/verifier/reward.json "$reward" || exit 2
expected=$(/usr/bin/python3 -I -S -c '
import urllib.request
print(urllib.request.urlopen("http://api:8080/greeting", timeout=10).read().decode(), end="")
') || { echo "the api service did not answer"; echo 0 > "$reward"; exit 0; }
if [ -n "$expected" ] && [ "$(cat /app/greeting.txt 2>/dev/null)" = "$expected" ]; then
  echo 1 > "$reward"
else
  echo 0 > "$reward"
fi
