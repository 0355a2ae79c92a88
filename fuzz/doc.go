// Package fuzz holds the property-checking fuzz targets of every decoder and
// request parser: the wire event decoders and framing, the hash chains, the
// HTTP, RPC and Dynamo request surfaces and the dump reader. It builds without
// cgo (no libzmq): fuzz/run.sh checks that with CGO_ENABLED=0 before running
// each target briefly (make fuzz-smoke, part of make test). The load harness's
// targets, which need libzmq, are in fuzz/harness.
package fuzz
