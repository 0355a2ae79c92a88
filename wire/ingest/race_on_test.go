//go:build race

package ingest_test

// raceEnabled: the race detector is on (tests that size themselves by it
// scale down: it slows libzmq-heavy tests tenfold).
const raceEnabled = true
