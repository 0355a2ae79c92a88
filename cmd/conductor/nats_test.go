package main

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/replica/natstest"
)

// settleNATS waits, with publishing paused, until the directly subscribed
// conductors received the last batch of every engine (ingest last_seq), the
// relay published all it queued, state transfers included (its queue empty
// once transfers caught up with reorders), and every replica applied the
// stream to its last message (applied_stream_seq, set after the message is
// applied) and so every engine's last batch (replica last_seq). A direct
// conductor's last_seq gauge moves just before the batch applies:
// compareReplicas re-asks a differing query while that lands.
func settleNATS(t *testing.T, engines []*replicaEngine, relay *replicaChild, direct, replicas []*replicaChild, natsURL string) {
	t.Helper()
	reach := func(p *replicaChild, series string, want uint64) {
		t.Helper()
		waitWithin(t, waitBound, fmt.Sprintf("%s on %s to reach %d", series, p.main, want), func() bool {
			v, ok := seriesValue(t, p.main, series)
			return ok && uint64(v) >= want
		})
	}
	for i, e := range engines {
		for _, p := range direct {
			reach(p, fmt.Sprintf(`conductor_ingest_last_seq{instance="%d",tenant="default",dp_rank="0"}`, i+1), e.pub.NextSeq()-1)
		}
	}
	waitWithin(t, waitBound, "the relay to publish its queue and its state transfers", func() bool {
		// Counters first: a transfer counted before the queue is seen empty
		// has been published.
		reordered, _ := seriesValue(t, relay.main, "conductor_relay_reordered_total")
		transfers, _ := seriesValue(t, relay.main, "conductor_relay_state_transfers_total")
		queued, ok := seriesValue(t, relay.main, "conductor_relay_queued_messages")
		return transfers >= reordered && ok && queued == 0
	})
	last := streamLastSeq(t, natsURL, "CONDUCTOR")
	for _, p := range replicas {
		reach(p, "conductor_replica_applied_stream_seq", last)
		for i, e := range engines {
			reach(p, fmt.Sprintf(`conductor_replica_last_seq{instance="%d",tenant="default",dp_rank="0"}`, i+1), e.pub.NextSeq()-1)
		}
	}
}

// waitWithin polls cond until it holds, for at most d.
func waitWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// streamLastSeq is the sequence of the last message stream holds.
func streamLastSeq(t *testing.T, url, stream string) uint64 {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// TestNATSReplicas: two vLLM publishers over real ZMQ; a relay conductor
// subscribed to them publishes to JetStream (an embedded NATS server); a
// reference conductor subscribes to the same publishers directly; two query
// replicas build their index from the stream only. At quiescent checkpoints
// every replica answers thousands of random queries (Dynamo /query and
// /query_by_hash, Mooncake JSON /query) byte for byte as the reference. Then
// one replica is SIGKILLed and restarted while events flow: it loads the
// other's newest snapshot from the object store and converges. Then the NATS
// server is shut down and restarted (same port and store) while events flow:
// the relay buffers and resends, and the replicas converge again (a
// subscription whose messages the outage reordered converges by the relay's
// state transfer; check says what is allowed).
func TestNATSReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("separate processes, real ZMQ and NATS; run without -short")
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	natsDir := t.TempDir()
	ns := natstest.Start(t, natsDir, -1)
	natsURL := ns.ClientURL()
	natsPort := ns.Addr().(interface{ String() string }).String()
	port, _ := strconv.Atoi(natsPort[strings.LastIndex(natsPort, ":")+1:])

	const bs = 4
	shared := make([]int32, 4*bs)
	for i := range shared {
		shared[i] = int32(rng.Intn(1000))
	}
	engines := []*replicaEngine{
		newReplicaEngine(t, seed+1, bs, shared, bench.PublisherOptions{}),
		newReplicaEngine(t, seed+2, bs, shared, bench.PublisherOptions{}),
	}
	config, direct := twoEngineArgs(engines, bs)

	relay := startReplica(t, config, append(append([]string(nil), direct...), "--nats-url", natsURL, "--nats-publish")...)
	ref := startReplica(t, config, direct...)
	for _, p := range []*replicaChild{relay, ref} {
		waitReceiving(t, p, engines)
	}
	// The relay and the reference joined at different moments, so their
	// first batches differ (worker 1 has no replay endpoint to heal from): an
	// AllBlocksCleared from each engine, which both receive, starts them from
	// the same empty state.
	for i, e := range engines {
		if _, err := e.pub.Publish(bench.AppendVLLMBatch(nil, bench.EraArray, float64(time.Now().UnixNano())/1e9, 0, bench.EngineCleared{})); err != nil {
			t.Fatal(err)
		}
		e.cached, e.order = map[uint64]int{}, nil
		last := e.pub.NextSeq() - 1
		series := fmt.Sprintf(`conductor_ingest_last_seq{instance="%d",tenant="default",dp_rank="0"}`, i+1)
		for _, p := range []*replicaChild{relay, ref} {
			waitFor(t, "the clear to arrive", func() bool {
				v, ok := seriesValue(t, p.main, series)
				return ok && uint64(v) >= last
			})
		}
	}
	repArgs := append([]string{"--block-size", strconv.Itoa(bs), "--model-name", "m"}, "--nats-url", natsURL, "--nats-consume", "--nats-max-lag", "50")
	r1 := startReplica(t, `{}`, append(repArgs, "--nats-snapshot-interval", "300ms", "--nats-snapshot-keep", "2")...)
	r2 := startReplica(t, `{}`, repArgs...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay's log:\n%s\nr1's log:\n%s", relay.logs, r1.logs)
		}
	})
	fl := startFlow(t, engines)
	// a few thousand events (1-3 per batch) before the first comparison
	flowFor(t, engines, 1500)
	t.Logf("%d batches published before the first comparison", published(engines))

	// check compares the replicas with the reference. Without a NATS outage
	// a replica sees every subscription's batches in order: no sequence gap,
	// no duplicate. Across an outage a publish window the connection loss cut
	// may store a subscription's later batch before an earlier one that is
	// resent (replica/relay.go, reorderedAfterFailure): a replica then counts
	// a gap and duplicates, and the relay, having counted the reorder, sends
	// the subscription's state, which replaces the replica's copy. So after
	// the outage gaps and duplicates are allowed only with as many reorders
	// at the relay, their transfers done and applied, and the answers
	// identical.
	check := func(name string, outage bool, reps ...*replicaChild) {
		t.Helper()
		fl.mu.Lock()
		defer fl.mu.Unlock()
		settleNATS(t, engines, relay, []*replicaChild{relay, ref}, reps, natsURL)
		reordered, _ := seriesValue(t, relay.main, "conductor_relay_reordered_total")
		transfers, _ := seriesValue(t, relay.main, "conductor_relay_state_transfers_total")
		if outage {
			t.Logf("%s: the relay counted %v reorders and made %v state transfers", name, reordered, transfers)
		}
		for i, r := range reps {
			hits := compareReplicas(t, rng, engines, 1500, ref, r, relay)
			t.Logf("%s: replica %d: 1500 answers identical to the directly subscribed conductor, %d with device hits", name, i+1, hits)
			if hits < 100 {
				t.Fatalf("%s: only %d answers had hits; the comparison is vacuous", name, hits)
			}
			for _, series := range []string{"conductor_replica_decode_errors_total", "conductor_replica_orphan_messages_total"} {
				if v, ok := seriesValue(t, r.main, series); !ok || v != 0 {
					t.Fatalf("%s: replica %d: %s = %v", name, i+1, series, v)
				}
			}
			gaps, ok1 := seriesValue(t, r.main, "conductor_replica_seq_gaps_total")
			dups, ok2 := seriesValue(t, r.main, "conductor_replica_duplicates_total")
			sections, _ := seriesValue(t, r.main, `conductor_replica_messages_total{kind="section"}`)
			switch {
			case !ok1 || !ok2:
				t.Fatalf("%s: replica %d: no gap or duplicate counter", name, i+1)
			case gaps+dups == 0:
			case !outage:
				t.Fatalf("%s: replica %d: %v sequence gaps, %v duplicates without a NATS outage", name, i+1, gaps, dups)
			case reordered == 0 || gaps > reordered || transfers < reordered || sections == 0:
				t.Fatalf("%s: replica %d: %v sequence gaps, %v duplicates, %v sections applied; the relay counted %v reorders and %v state transfers",
					name, i+1, gaps, dups, sections, reordered, transfers)
			default:
				t.Logf("%s: replica %d: %v sequence gaps and %v duplicates healed by the relay's state transfers (%v reorders, %v transfers, %v sections applied)",
					name, i+1, gaps, dups, reordered, transfers, sections)
			}
			code, _, body := httpDo(t, "GET", "http://"+r.main+"/health", "", nil)
			if code != 200 {
				t.Fatalf("%s: caught-up replica's /health: %d %s", name, code, body)
			}
		}
	}
	check("live", false, r1, r2)

	// Warm start: SIGKILL r2 while events flow; once r1 has snapshotted
	// batches r2 never saw, a new replica loads that snapshot and consumes
	// the rest.
	r2.kill()
	applied, _ := seriesValue(t, r1.main, "conductor_replica_applied_stream_seq")
	waitWithin(t, waitBound, "r1 to snapshot what flowed after r2 died", func() bool {
		v, _ := seriesValue(t, r1.main, "conductor_replica_snapshot_stream_seq")
		return v > applied
	})
	r3 := startReplica(t, `{}`, repArgs...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("r3's log:\n%s", r3.logs)
		}
	})
	waitFor(t, "r3's snapshot load", func() bool { return strings.Contains(r3.logs.String(), "replica snapshot loaded") })
	waitWithin(t, waitBound, "r3 to apply messages after its snapshot", func() bool {
		snap, _ := seriesValue(t, r3.main, "conductor_replica_snapshot_stream_seq")
		v, _ := seriesValue(t, r3.main, "conductor_replica_applied_stream_seq")
		return snap > 0 && v > snap
	})
	check("after SIGKILL and a warm start", false, r1, r3)
	if v, _ := seriesValue(t, r3.main, "conductor_replica_snapshots_loaded_total"); v != 1 {
		t.Fatalf("r3 loaded %v snapshots", v)
	}

	// NATS restarts while events flow: the relay buffers, the replicas keep
	// serving, and after the restart everything converges.
	ns.Shutdown()
	ns.WaitForShutdown()
	before := published(engines)
	waitFor(t, "the relay and the replica to notice the outage", func() bool {
		c, _ := seriesValue(t, relay.main, "conductor_relay_connected")
		st, _ := seriesValue(t, r1.main, "conductor_replica_stale_seconds")
		return c == 0 && st > 0
	})
	// Events flow while NATS is down and the relay keeps applying them
	// (buffering what it publishes, or, for a subscription the cut window
	// made dirty, holding it for a state transfer).
	flowFor(t, engines, 200)
	for i, e := range engines {
		last := e.pub.NextSeq() - 1
		series := fmt.Sprintf(`conductor_ingest_last_seq{instance="%d",tenant="default",dp_rank="0"}`, i+1)
		waitWithin(t, waitBound, "the relay to apply what flows while NATS is down", func() bool {
			v, ok := seriesValue(t, relay.main, series)
			return ok && uint64(v) >= last
		})
	}
	code, _, _ := httpDo(t, "POST", "http://"+r1.main+"/query", "application/json",
		[]byte(`{"model":"m","block_size":4,"token_ids":[1,2,3,4]}`))
	if code != 200 {
		t.Fatalf("replica stopped answering while NATS was down: %d", code)
	}
	q, _ := seriesValue(t, relay.main, "conductor_relay_queued_messages")
	sup, _ := seriesValue(t, relay.main, "conductor_relay_suppressed_total")
	t.Logf("%d batches published while NATS was down; the relay holds %v messages and held back %v for state transfers",
		published(engines)-before, q, sup)
	pubBefore, _ := seriesValue(t, relay.main, "conductor_relay_published_total")
	natstest.Start(t, natsDir, port)
	waitWithin(t, waitBound, "the relay to publish again and the replicas to reconnect", func() bool {
		c, _ := seriesValue(t, relay.main, "conductor_relay_connected")
		p, _ := seriesValue(t, relay.main, "conductor_relay_published_total")
		s1, ok1 := seriesValue(t, r1.main, "conductor_replica_stale_seconds")
		s3, ok3 := seriesValue(t, r3.main, "conductor_replica_stale_seconds")
		return c == 1 && p > pubBefore && ok1 && s1 == 0 && ok3 && s3 == 0
	})
	check("after a NATS restart", true, r1, r3)
	if v, _ := seriesValue(t, relay.main, "conductor_relay_dropped_total"); v != 0 {
		t.Fatalf("relay dropped %v messages across a short NATS outage", v)
	}
}
