#!/bin/bash
# Harbor verifier: reward 1 when /app/sum.txt holds the sum of the task's numbers, else 0.
# No reward file of the agent's stands: both are removed first.
rm -f /logs/verifier/reward.json /logs/verifier/reward.txt || exit 2
if [ "$(cat /app/sum.txt 2>/dev/null)" = "1237" ]; then echo 1; else echo 0; fi \
  > /logs/verifier/reward.txt
