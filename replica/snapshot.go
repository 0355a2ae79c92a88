package replica

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/seed-c7a81618/conductor/wire/dump"
)

// Warm start. A replica with SnapshotInterval > 0 writes its index to the
// JetStream object store (bucket Options.Bucket) between two messages, so the
// snapshot holds exactly the stream up to the sequence it records. An object
// is one JSON header line,
//
//	{"format":"conductor-replica-snapshot/1","stream":S,"filter":F,
//	 "stream_seq":N,"registrations":[...]}
//
// then the main API's /dump of the index (standardized-event form, one
// section per registration with the ZMQ sequence it holds). Objects are
// named snap.<stream>.<filter>.<N as 20 digits>, so a shard finds its own,
// and only the newest SnapshotKeep of a shard are kept.
//
// A starting replica (any, not only the writer) loads the newest snapshot of
// its stream and filter, registers the header's registrations, restores the
// dump (dump.Restore), takes each stream's ZMQ sequence into its own
// sequence checks (core's restored-dump skipping ends: Subscription.EndSkip)
// and consumes from N+1: start-up reads one snapshot and the messages since,
// however long the history.

const snapshotFormat = "conductor-replica-snapshot/1"

type snapshotHeader struct {
	Format        string            `json:"format"`
	Stream        string            `json:"stream"`
	Filter        string            `json:"filter"`
	StreamSeq     uint64            `json:"stream_seq"`
	Written       string            `json:"written"`
	Registrations []registrationDoc `json:"registrations"`
}

func (r *Replica) snapshotPrefix() string {
	return "snap." + r.opts.Stream + "." + r.filter() + "."
}

// snapshotSeq parses the stream sequence out of an object name of prefix.
func snapshotSeq(name, prefix string) (uint64, bool) {
	if !strings.HasPrefix(name, prefix) {
		return 0, false
	}
	n, err := strconv.ParseUint(name[len(prefix):], 10, 64)
	return n, err == nil
}

func (r *Replica) objectStore(ctx context.Context, js jetstream.JetStream, create bool) (jetstream.ObjectStore, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if create {
		st := jetstream.FileStorage
		if r.opts.MemoryStorage {
			st = jetstream.MemoryStorage
		}
		return js.CreateOrUpdateObjectStore(cctx, jetstream.ObjectStoreConfig{Bucket: r.opts.Bucket,
			Description: "conductor index snapshots", Storage: st, Replicas: r.opts.Replicas})
	}
	return js.ObjectStore(cctx, r.opts.Bucket)
}

// snapshots lists this shard's snapshots, oldest first.
func (r *Replica) snapshots(ctx context.Context, store jetstream.ObjectStore) ([]string, []uint64, error) {
	infos, err := store.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	prefix := r.snapshotPrefix()
	type snap struct {
		name string
		seq  uint64
	}
	var ss []snap
	for _, in := range infos {
		if seq, ok := snapshotSeq(in.Name, prefix); ok && !in.Deleted {
			ss = append(ss, snap{in.Name, seq})
		}
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].seq < ss[j].seq })
	names, seqs := make([]string, len(ss)), make([]uint64, len(ss))
	for i, s := range ss {
		names[i], seqs[i] = s.name, s.seq
	}
	return names, seqs, nil
}

// writeSnapshot writes the index as of the last applied message, then
// prunes old snapshots. It runs on the consumer goroutine (nothing is applied
// meanwhile).
func (r *Replica) writeSnapshot(ctx context.Context, js jetstream.JetStream) error {
	start := time.Now()
	seq := r.applied.Load()
	store, err := r.objectStore(ctx, js, true)
	if err != nil {
		return fmt.Errorf("object store %s: %w", r.opts.Bucket, err)
	}
	regs := r.ix.Services()
	h := snapshotHeader{Format: snapshotFormat, Stream: r.opts.Stream, Filter: r.filter(), StreamSeq: seq,
		Written: time.Now().UTC().Format(time.RFC3339Nano), Registrations: make([]registrationDoc, len(regs))}
	for i := range regs {
		h.Registrations[i] = docOf(&regs[i])
	}
	pr, pw := io.Pipe()
	go func() {
		bw := bufio.NewWriterSize(pw, 1<<20)
		err := json.NewEncoder(bw).Encode(&h) // one line
		if err == nil {
			err = dump.Write(r.ix, bw)
		}
		pw.CloseWithError(err)
	}()
	name := fmt.Sprintf("%s%020d", r.snapshotPrefix(), seq)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	info, err := store.Put(wctx, jetstream.ObjectMeta{Name: name, Metadata: map[string]string{"stream_seq": fmtSeq(seq)}}, pr)
	pr.CloseWithError(err)
	if err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	r.snapSeq.Store(seq)
	r.snapWrites.Inc()
	d := time.Since(start)
	r.snapWriteSeconds.Store(math.Float64bits(d.Seconds()))
	r.opts.Logger.Info("replica snapshot written", "name", name, "stream_seq", seq, "bytes", info.Size,
		"registrations", len(regs), "duration", d)
	// Pruning finishes even when the replica is closing (a stored snapshot
	// is not left over the bound).
	pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer pcancel()
	names, _, err := r.snapshots(pctx, store)
	if err != nil {
		return fmt.Errorf("list snapshots: %w", err)
	}
	for i := 0; i+r.opts.SnapshotKeep < len(names); i++ {
		if err := store.Delete(pctx, names[i]); err != nil {
			return fmt.Errorf("prune %s: %w", names[i], err)
		}
	}
	return nil
}

// spool copies an object into an unlinked temporary file (in os.TempDir, the
// snapshot's size: ~21 MB per 1M blocks) and returns it rewound. The object
// store delivers an object's chunks to a subscription as fast as the server
// sends them; read at the pace of the restore, a large snapshot overflowed the
// subscription's pending limit ("slow consumer", chunks dropped, the read
// restarted from the gap) and a 10M-block load took 128 s instead of ~40.
// The object's digest is checked when the copy reaches its end.
func spool(obj io.Reader) (*os.File, error) {
	f, err := os.CreateTemp("", "conductor-snapshot-*")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(f.Name()) // unlinked: freed on Close, or if the process dies
	if _, err := io.Copy(f, obj); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// loadSnapshot restores the newest snapshot of this shard, if any, and
// returns the stream sequence it holds (0: none, consume from the start).
// A snapshot that fails to load part-way leaves what was restored (the
// stream's later messages converge it) and returns its sequence only when
// the dump was read whole.
func (r *Replica) loadSnapshot(ctx context.Context, js jetstream.JetStream) uint64 {
	log := r.opts.Logger
	store, err := r.objectStore(ctx, js, false)
	if err != nil {
		if !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
			log.Warn("replica: snapshot store not readable; consuming from the start", "err", err)
		}
		return 0
	}
	names, seqs, err := r.snapshots(ctx, store)
	if err != nil || len(names) == 0 {
		if err != nil {
			log.Warn("replica: cannot list snapshots; consuming from the start", "err", err)
		}
		return 0
	}
	name, seq := names[len(names)-1], seqs[len(seqs)-1]
	start := time.Now()
	// A deadline of our own: without one the object store bounds the whole
	// read by JetStream's default timeout (5s), too short for a large index.
	gctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	res, err := store.Get(gctx, name)
	if err != nil {
		log.Warn("replica: cannot read the snapshot; consuming from the start", "name", name, "err", err)
		return 0
	}
	src, err := spool(res)
	res.Close()
	if err != nil {
		log.Warn("replica: cannot read the snapshot; consuming from the start", "name", name, "err", err)
		return 0
	}
	defer src.Close()
	br := bufio.NewReaderSize(src, 1<<20)
	line, err := br.ReadBytes('\n')
	var h snapshotHeader
	if err == nil {
		err = json.Unmarshal(line, &h)
	}
	if err == nil && (h.Format != snapshotFormat || h.StreamSeq != seq) {
		err = fmt.Errorf("header: format %q, stream_seq %d (name says %d)", h.Format, h.StreamSeq, seq)
	}
	if err != nil {
		log.Warn("replica: snapshot header unreadable; consuming from the start", "name", name, "err", err)
		return 0
	}
	for i := range h.Registrations {
		reg, err := h.Registrations[i].registration()
		if err != nil {
			r.regErrs.Inc()
			continue
		}
		r.register(reg)
	}
	st, err := dump.Restore(r.ix, br, nil)
	d := time.Since(start)
	r.snapLoadSeconds.Store(math.Float64bits(d.Seconds()))
	// The replica orders the stream itself: each restored stream's sequence
	// goes to seqs, and core's skipping of a restored dump ends, or it would
	// defer the relay's next Clear or clearing Gap to a batch that may never
	// come (TestReplicaClearAfterWarmStart).
	for _, reg := range r.ix.Services() {
		sub, ok := r.ix.Lookup(reg.Key())
		if !ok {
			continue
		}
		seq, has := sub.EndSkip()
		if err != nil {
			sub.Clear("snapshot restore failed")
			continue
		}
		if has {
			ss := r.seqState(normKey(reg.Key()))
			ss.last.Store(seq)
			ss.has = true
		}
	}
	if err != nil {
		// What was restored stays; consuming from the start re-applies
		// the history on top, which would double it: cleared above.
		log.Error("replica: snapshot restore failed part-way; cleared, consuming from the start", "name", name, "err", err)
		return 0
	}
	r.snapLoads.Inc()
	r.snapSeq.Store(seq)
	r.applied.Store(seq)
	log.Info("replica snapshot loaded", "name", name, "stream_seq", seq, "streams", st.Streams,
		"holdings", st.Holdings, "engine_entries", st.Engine, "skipped", st.Skipped, "duration", d)
	return seq
}
