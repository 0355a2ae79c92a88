package ingest

import (
	"fmt"
	"testing"

	zmq "github.com/pebbe/zmq4"
)

// BenchmarkRecvPath isolates the receive path the listeners use (one whole
// live message: topic, 8-byte sequence, payload) from the rest of ingest:
// "recv=own" is frameReader on a socket of this package's binding (one cgo call per
// message, into a reused buffer), "recv=pebbe" is pebbe/zmq4's RecvMessageBytes
// (several cgo calls and an allocation per frame) on a pebbe socket. Messages
// are queued on an inproc PAIR in blocks of 1024 with the timer stopped, so
// only receiving is timed. The payload is the size of a 16-block vLLM batch.
// Run (BENCHMARKS.md, "ingest: receive path"):
//
//	go test -run '^$' -bench BenchmarkRecvPath -count 6 ./wire/ingest/
func BenchmarkRecvPath(b *testing.B) {
	topic, seq, payload := []byte("kv-events"), []byte{0, 0, 0, 0, 0, 0, 0, 1}, make([]byte, 1200)
	const block = 1024
	b.Run("recv=own", func(b *testing.B) {
		tx, rx := pairSockets(b)
		for _, s := range []*zsocket{tx, rx} {
			if err := setInts(s, optRcvHWM, 0, optSndHWM, 0); err != nil {
				b.Fatal(err)
			}
		}
		r := newFrameReader(initialFrameBuf)
		defer r.free()
		b.ReportAllocs()
		b.SetBytes(int64(len(topic) + len(seq) + len(payload)))
		for i := 0; i < b.N; i++ {
			if i%block == 0 {
				b.StopTimer()
				for j := 0; j < min(block, b.N-i); j++ {
					sendMsg(b, tx, topic, seq, payload)
				}
				b.StartTimer()
			}
			if f, err := r.read(rx); err != nil || len(f) != 3 || len(f[2]) != len(payload) {
				b.Fatalf("read: %d frames, %v", len(f), err)
			}
		}
	})
	b.Run("recv=pebbe", func(b *testing.B) {
		ctx, err := zmq.NewContext()
		if err != nil {
			b.Fatal(err)
		}
		defer ctx.Term()
		rx, _ := ctx.NewSocket(zmq.PAIR)
		tx, _ := ctx.NewSocket(zmq.PAIR)
		defer rx.Close()
		defer tx.Close()
		addr := fmt.Sprintf("inproc://recv-bench-%p", b)
		for _, err := range []error{rx.SetRcvhwm(0), tx.SetSndhwm(0), rx.Bind(addr), tx.Connect(addr)} {
			if err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		b.SetBytes(int64(len(topic) + len(seq) + len(payload)))
		for i := 0; i < b.N; i++ {
			if i%block == 0 {
				b.StopTimer()
				for j := 0; j < min(block, b.N-i); j++ {
					if _, err := tx.SendMessage(topic, seq, payload); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}
			if f, err := rx.RecvMessageBytes(zmq.DONTWAIT); err != nil || len(f) != 3 || len(f[2]) != len(payload) {
				b.Fatalf("read: %d frames, %v", len(f), err)
			}
		}
	})
}
