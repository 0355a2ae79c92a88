#!/usr/bin/env bash
# Runs each fuzz target in ./fuzz (the decoder and request-parser targets,
# built without cgo) and ./fuzz/harness (the load harness's parsers, which link
# libzmq through bench/sim) for $FUZZTIME (go test accepts one -fuzz target per
# run). FUZZMINIMIZE sets -fuzzminimizetime (empty: Go's default);
# the smoke run in `make test` sets it to 0 because minimising a new corpus
# entry while -fuzztime runs out makes Go report "context deadline exceeded".
set -euo pipefail
cd "$(dirname "$0")"
FUZZTIME=${FUZZTIME:-3s}
extra=()
if [ -n "${FUZZMINIMIZE:-}" ]; then extra+=("-test.fuzzminimizetime=${FUZZMINIMIZE}"); fi
# The decoder and request-parser targets must build and run without cgo (and
# so without libzmq): wire holds no transport (the ZMQ transport is
# wire/ingest). A cgo import creeping back fails here.
CGO_ENABLED=0 go test -count=1 -run '^Fuzz' . >/dev/null || {
  echo "fuzz: the decoder targets no longer build or pass without cgo" >&2
  CGO_ENABLED=0 go test -count=1 -run '^Fuzz' . >&2; exit 1
}
# Each package's fuzzing-instrumented test binary is built once and run once
# per target (linking it per target cost more than the smoke run's fuzzing);
# it runs in the package's directory, as go test runs it, with go test's
# corpus cache, so a finding lands in testdata/fuzz/NAME either way.
bindir=$(mktemp -d)
trap 'rm -rf "$bindir"' EXIT
cache=$(go env GOCACHE)/fuzz
for pkg in . ./harness; do
  ipath=$(go list "$pkg")
  bin=$bindir/${ipath//\//_}.test
  go test -c -fuzz=. -o "$bin" "$pkg"
  targets=$(cd "$pkg" && "$bin" -test.list '^Fuzz' | grep '^Fuzz' || true)
  if [ -z "$targets" ]; then echo "no fuzz targets in $pkg"; exit 1; fi
  for t in $targets; do
    echo "fuzz $pkg $t ($FUZZTIME)"
    log=$(mktemp)
    for attempt in 1 2 3; do
      if (cd "$pkg" && "$bin" -test.run='^$' -test.fuzz="^${t}\$" -test.fuzztime="$FUZZTIME" \
        -test.fuzzcachedir="$cache/$ipath" -test.parallel=2 "${extra[@]}") >"$log" 2>&1; then
        break
      fi
      # A real finding writes its input under testdata/fuzz; a shutdown race of
      # the fuzzing engine does not, and is retried (twice at most).
      if grep -q 'Failing input written' "$log" || [ "$attempt" = 3 ] || ! grep -q 'context deadline exceeded' "$log"; then
        cat "$log"; rm -f "$log"; exit 1
      fi
      echo "  fuzzing engine timed out at shutdown; retrying"
    done
    rm -f "$log"
  done
done
