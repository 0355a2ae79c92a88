package main

import (
	"bytes"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/replica/natstest"
)

// settleNATS waits until the directly subscribed conductors received the last
// batch of every engine (ingest last_seq) and the replicas applied it from the
// stream (replica last_seq), then lets the last batch land.
func settleNATS(t *testing.T, engines []*replicaEngine, direct, replicas []*replicaChild) {
	t.Helper()
	for i, e := range engines {
		last := e.pub.NextSeq() - 1
		labels := fmt.Sprintf(`{instance="%d",tenant="default",dp_rank="0"}`, i+1)
		for _, set := range []struct {
			series string
			procs  []*replicaChild
		}{{"conductor_ingest_last_seq" + labels, direct}, {"conductor_replica_last_seq" + labels, replicas}} {
			for _, p := range set.procs {
				deadline := time.Now().Add(30 * time.Second)
				for {
					if v, ok := seriesValue(t, p.main, set.series); ok && uint64(v) >= last {
						break
					}
					if time.Now().After(deadline) {
						v, _ := seriesValue(t, p.main, set.series)
						t.Fatalf("%s on %s is %v, not %d\n%s", set.series, p.main, v, last, p.logs)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}
	}
	// A direct conductor's last_seq gauge moves just before the batch
	// applies (a replica's just after): compareNATS re-asks a differing
	// query while that lands.
}

// compareNATS asks ref and rep n random queries over every surface
// (Dynamo /query and /query_by_hash, Mooncake JSON /query) and requires
// identical answers. Publishing is paused: a difference may only be the
// direct conductor's last batch still being applied, so a differing query is
// asked again for up to 5 s before it fails. It returns how many answers had
// device hits.
// diagRelay is the relay whose metrics a failing comparison logs.
var diagRelay *replicaChild

func compareNATS(t *testing.T, rng *rand.Rand, engines []*replicaEngine, n int, ref, rep *replicaChild) int {
	t.Helper()
	hits := 0
	for q := 0; q < n; q++ {
		addrA, addrB, path, body := replicaQuery(rng, engines, q, ref, rep)
		for deadline := time.Now().Add(5 * time.Second); ; {
			ca, _, ra := httpDo(t, "POST", "http://"+addrA+path, "application/json", []byte(body))
			cb, _, rb := httpDo(t, "POST", "http://"+addrB+path, "application/json", []byte(body))
			if ca == 200 && cb == 200 && bytes.Equal(ra, rb) {
				if bytes.Contains(ra, []byte(`"gpu":`)) && !bytes.Contains(ra, []byte(`"gpu":0`)) {
					hits++
				}
				break
			}
			if time.Now().After(deadline) {
				for _, p := range []*replicaChild{ref, rep, diagRelay} {
					_, _, m := httpDo(t, "GET", "http://"+p.main+"/metrics", "", nil)
					for _, line := range strings.Split(string(m), "\n") {
						if strings.HasPrefix(line, "conductor_replica_") || strings.HasPrefix(line, "conductor_relay_") ||
							strings.HasPrefix(line, "conductor_ingest_gaps") || strings.HasPrefix(line, "conductor_ingest_last_seq") {
							t.Logf("%s %s", p.main, line)
						}
					}
				}
				t.Fatalf("query %d %s %s:\n ref     %d %s\n replica %d %s", q, path, body, ca, ra, cb, rb)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return hits
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
// the relay buffers and resends, and the replicas converge again.
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
	diagRelay = relay
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
	batches := func() (n uint64) {
		for _, e := range engines {
			n += e.pub.NextSeq()
		}
		return n
	}
	// a few thousand events (1-3 per batch) before the first comparison
	deadline := time.Now().Add(60 * time.Second)
	for batches() < 1500 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d batches published before the first comparison", batches())

	check := func(name string, reps ...*replicaChild) {
		t.Helper()
		fl.mu.Lock()
		defer fl.mu.Unlock()
		settleNATS(t, engines, []*replicaChild{relay, ref}, reps)
		for i, r := range reps {
			hits := compareNATS(t, rng, engines, 1500, ref, r)
			t.Logf("%s: replica %d: 1500 answers identical to the directly subscribed conductor, %d with device hits", name, i+1, hits)
			if hits < 100 {
				t.Fatalf("%s: only %d answers had hits; the comparison is vacuous", name, hits)
			}
			for _, series := range []string{"conductor_replica_decode_errors_total", "conductor_replica_seq_gaps_total",
				"conductor_replica_duplicates_total", "conductor_replica_orphan_messages_total"} {
				if v, ok := seriesValue(t, r.main, series); !ok || v != 0 {
					t.Fatalf("%s: replica %d: %s = %v", name, i+1, series, v)
				}
			}
			code, _, body := httpDo(t, "GET", "http://"+r.main+"/health", "", nil)
			if code != 200 {
				t.Fatalf("%s: caught-up replica's /health: %d %s", name, code, body)
			}
		}
	}
	check("live", r1, r2)

	// Warm start: SIGKILL r2 while events flow; a new replica loads r1's
	// newest snapshot and consumes the rest.
	r2.kill()
	time.Sleep(700 * time.Millisecond)
	r3 := startReplica(t, `{}`, repArgs...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("r3's log:\n%s", r3.logs)
		}
	})
	waitFor(t, "r3's snapshot load", func() bool { return strings.Contains(r3.logs.String(), "replica snapshot loaded") })
	time.Sleep(300 * time.Millisecond)
	check("after SIGKILL and a warm start", r1, r3)
	if v, _ := seriesValue(t, r3.main, "conductor_replica_snapshots_loaded_total"); v != 1 {
		t.Fatalf("r3 loaded %v snapshots", v)
	}

	// NATS restarts while events flow: the relay buffers, the replicas keep
	// serving, and after the restart everything converges.
	ns.Shutdown()
	ns.WaitForShutdown()
	before := batches()
	waitFor(t, "the relay and the replica to notice the outage", func() bool {
		c, _ := seriesValue(t, relay.main, "conductor_relay_connected")
		st, _ := seriesValue(t, r1.main, "conductor_replica_stale_seconds")
		return c == 0 && st > 0
	})
	time.Sleep(500 * time.Millisecond)
	code, _, _ := httpDo(t, "POST", "http://"+r1.main+"/query", "application/json",
		[]byte(`{"model":"m","block_size":4,"token_ids":[1,2,3,4]}`))
	if code != 200 {
		t.Fatalf("replica stopped answering while NATS was down: %d", code)
	}
	t.Logf("%d batches published while NATS was down", batches()-before)
	natstest.Start(t, natsDir, port)
	time.Sleep(500 * time.Millisecond)
	check("after a NATS restart", r1, r3)
	if v, _ := seriesValue(t, relay.main, "conductor_relay_dropped_total"); v != 0 {
		t.Fatalf("relay dropped %v messages across a short NATS outage", v)
	}
}
