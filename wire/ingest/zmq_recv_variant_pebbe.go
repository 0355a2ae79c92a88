//go:build pebberecv

package ingest

const pebbeRecv = true
