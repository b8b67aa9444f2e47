#!/bin/bash
# Harbor verifier: never reached here, as the task's services never come up; envcheck reports
# the service that failed instead (see the compose file).
if [ -s /app/greeting.txt ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
