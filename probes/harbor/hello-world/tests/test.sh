#!/bin/bash
# Harbor verifier, hardened against reward hacks (docs/how-to/hack-resistant.md).
# The agent is root here and the image is its to change, so: the verifier's own PATH and the
# interpreter by absolute path, isolated (-I: no user site, no PYTHON* variables, no current
# folder on sys.path) and without the site module (-S: no .pth or sitecustomize start-up hook
# from any site-packages; pytest's own folder is put on sys.path by hand), no plugin
# auto-loading, conftest.py files ignored, the JUnit report written in a fresh private folder,
# and the reward (1 or 0, in /logs/verifier/reward.txt) parsed from that report: never an exit
# code, never a reward file already there (both are removed first; as root under Harbor's
# capabilities, even from a folder the agent made read-only).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
reward=/logs/verifier/reward.txt
# Harbor reads reward.json first: one written in advance must not stand beside ours.
rm -f /logs/verifier/reward.json "$reward" || exit 2
report=$(mktemp -d)/report.xml || exit 2
cd /app || exit 2
/usr/bin/python3 -I -S -c '
import sys
sys.path.append("/usr/lib/python3/dist-packages")
import pytest
sys.exit(pytest.main(sys.argv[1:]))
' -p no:cacheprovider --noconftest --rootdir=/tests -rA --junitxml="$report" \
  /tests/test_outputs.py
# 1 only when the report names the test and shows it passed.
/usr/bin/python3 -I -S - "$report" > "$reward" <<'PY'
import sys
import xml.etree.ElementTree as ET

try:
    cases = list(ET.parse(sys.argv[1]).getroot().iter("testcase"))
except (OSError, ET.ParseError):
    cases = []
passed = {c.get("name") for c in cases
          if not any(e.tag in ("failure", "error", "skipped") for e in c)}
print(1 if "test_hello_file_says_hello" in passed else 0)
PY
