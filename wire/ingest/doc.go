// Package ingest is the ZMQ transport of KV events: it subscribes to the
// publishers of registered subscriptions and feeds what package wire decodes
// into the index.
//
// An Ingester owns one libzmq context, one poller and one listener per
// subscription. Each listener's goroutine owns that subscription's sockets (a
// SUB to the publisher, a PAIR reading the SUB's monitor, a DEALER to the
// replay endpoint), waits for them and for the controller's commands through
// the poller (zmq_poller.go: one epoll for every listener's sockets, so a
// waiting listener holds no OS thread), tracks sequence numbers (gap,
// duplicate, restart, stale), replays from the publisher's ring, buffers live
// messages in a bounded receive queue while a replay runs, and is the
// subscription's single writer (core.Subscription). The protocol is written
// down on listener (zmq_listener.go); the control operations (Register,
// Unregister, Pause, Resume, Close) on Ingester. Every stream exports
// conductor_ingest_* series into IngestOptions.Metrics.
//
// A Tap (zmq_tap.go) is a bare subscriber for a one-off look at a publisher
// (conductor probe): a SUB and, on request, one replay request on a DEALER,
// on a context of its own, bounded by the same options, registering nothing.
//
// What a subscription may hold in memory, libzmq's queues included, is bounded
// by IngestOptions (ReceiveQueueBytes, MaxMessageBytes, RcvHWM): a publisher
// that sends faster than the listener applies is pushed back over TCP, and
// what it then drops is replayed. The bound is written down on listener
// ("Memory").
//
// This package needs cgo and libzmq, which it calls through a small binding of
// its own (zmq_sock.go: context, sockets, options, connect, monitor, send;
// zmq_recv.go: one cgo call per whole multipart message into a reused buffer;
// zmq_poller.go: the epoll wait and each listener's readiness check;
// zmq_poll.go: the Tap's zmq_poll). It opens every socket
// it uses itself, so it reads no other module's private fields; pebbe/zmq4 is
// used only by the tests' and benchmarks' publishers. Package wire, which it
// imports for the payload decoders and the multipart framing functions
// (ParseLive, AppendReplayRequest, ParseReplayReply), is pure Go, so decoders
// can be fuzzed and tested without either. Dependencies: ingest → wire → core
// → hash.
//
// All exported methods are safe for concurrent use; frames received from a
// socket are valid until the listener's next receive, and decoded events are
// copied by core before the payload is reused.
package ingest
