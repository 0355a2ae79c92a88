// Package harness holds the fuzz targets of the load harness's parsers
// (bench/sim: the /query answer readers its verify mode trusts, and the trace
// reader). They live apart from package fuzz because bench/sim drives its
// simulated engines over ZMQ and so links libzmq through cgo, while the
// decoder and request-parser targets in fuzz/ must build without cgo
// (fuzz/run.sh checks that, and runs the targets of both packages).
package harness
