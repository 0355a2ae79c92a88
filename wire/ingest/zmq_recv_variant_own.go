//go:build !pebberecv

package ingest

// pebbeRecv selects pebbe/zmq4's RecvMessageBytes over frameReader (build tag
// pebberecv; the receive-path measurement of issue 10, BENCHMARKS.md).
const pebbeRecv = false
