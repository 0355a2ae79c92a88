#!/usr/bin/env bash
# Runs each fuzz target in ./fuzz for $FUZZTIME (go test accepts one -fuzz target per run).
set -euo pipefail
cd "$(dirname "$0")"
FUZZTIME=${FUZZTIME:-3s}
targets=$(go test -list '^Fuzz' . | grep '^Fuzz' || true)
if [ -z "$targets" ]; then echo "no fuzz targets"; exit 0; fi
for t in $targets; do
  echo "fuzz $t ($FUZZTIME)"
  go test -run='^$' -fuzz="^${t}\$" -fuzztime="$FUZZTIME" -parallel=2 . >/tmp/fuzz-$t.log 2>&1 || { cat /tmp/fuzz-$t.log; exit 1; }
done
