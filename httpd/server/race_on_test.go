//go:build race

package server_test

// raceEnabled: the race detector shadows memory, so RSS bounds do not apply.
const raceEnabled = true
