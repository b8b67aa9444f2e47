#!/bin/bash
# Harbor verifier: reward 1 when /app/answer.txt holds the count of primes below 100, else 0.
# No reward file of the agent's stands: both are removed first.
rm -f /logs/verifier/reward.json /logs/verifier/reward.txt || exit 2
if [ "$(cat /app/answer.txt 2>/dev/null)" = "25" ]; then echo 1; else echo 0; fi \
  > /logs/verifier/reward.txt
