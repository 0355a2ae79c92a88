//go:build race

package httpd

// raceEnabled: the race detector shadows memory, so RSS bounds do not apply.
const raceEnabled = true
