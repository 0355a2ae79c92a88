package statedir

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/zeebo/xxh3"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire/dump"
)

// Warm restarts. With --state-dir set, conductor writes an index snapshot to
// DIR/index.snapshot on graceful shutdown and every --snapshot-interval (0:
// only at shutdown; negative: never; a snapshot already there is restored at
// start whatever the interval). The snapshot is one file: the main
// API's /dump (standardized-event form, one section per registration with the
// sequence of the last batch it holds) followed by a 64-byte trailer:
//
//	[0:16]  "conductor-snap/1"
//	[16:24] the dump's length in bytes, big-endian
//	[24:32] when it was written, Unix nanoseconds, big-endian
//	[32:64] SHA-256 of everything before it (the dump and trailer[0:32])
//
// It is written as a generation of the file (generations.go): to
// index.snapshot.tmp, fsynced, the current one renamed to index.snapshot.prev,
// the new one renamed into place, DIR fsynced. A crash at any point leaves a
// complete snapshot at index.snapshot or index.snapshot.prev that verifies on
// its own (TestGenerationsCrash, TestSnapshotCrashWindow). At start, after the registrations are
// restored and before any event is applied (the index's apply gate is held),
// the newest snapshot that verifies is restored with the same code as peer
// recovery (dump.Restore), then the gate opens. A torn or corrupt
// snapshot is reported at ERROR, moved aside to FILE.corrupt-<unix time>, and
// the previous generation is used (TestSnapshotTornFallsBack); with none left
// the index refills from the engines' replay rings as without snapshots.
//
// A snapshot of the earlier two-file form (no trailer; its SHA-256 and size
// in index.snapshot.meta) is restored when it matches that file, and reported
// and moved aside like a torn one when it does not; the meta file is removed
// once no generation needs it (TestSnapshotLegacyForm).
//
// Staleness: a restored section holds the stream as of the snapshot. Live
// batches at or below its sequence are skipped (the snapshot holds them);
// the next ones, replayed from the engine's ring or live, apply on top, so
// nothing restored overrides a newer event of the same stream. When the
// engine's ring no longer holds the batches after the snapshot's sequence
// (the process was down too long), the stream's restored blocks are cleared
// as for any unhealable gap. An engine that restarted meanwhile shows it by a
// first live sequence at or below the snapshot's: the sections are restored
// as prior (dump.RestorePrior), so its restored blocks are cleared and the
// new incarnation's ring applied
// (core.Subscription.FirstLive). Proved by TestSnapshotWarmRestart and
// TestSnapshotWarmRestartEngineRestarted.
const (
	// SnapshotFile is the index snapshot's file in the directory.
	SnapshotFile       = "index.snapshot"
	snapshotLegacyMeta = "index.snapshot.meta"
	snapshotMagic      = "conductor-snap/1"
	snapshotTrailerLen = 64
)

// ErrSnapshotCorrupt: a snapshot file that does not verify.
var ErrSnapshotCorrupt = errors.New("conductor: index snapshot torn or corrupt")

// snapshotInfo describes a snapshot that verified.
type snapshotInfo struct {
	path    string
	bytes   int64 // the dump's length: the file less its trailer
	written time.Time
	legacy  bool // the earlier two-file form
}

// hashingWriter counts and hashes what it writes.
type hashingWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (h *hashingWriter) Write(p []byte) (int, error) {
	n, err := h.w.Write(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

// writeSnapshotFile writes the next generation of g: dump's output, then the
// trailer. It returns the dump's length.
func writeSnapshotFile(g *generations, dump func(w *bufio.Writer) error) (int64, error) {
	var n int64
	err := g.replace(func(f *os.File) error {
		hw := &hashingWriter{w: f, h: sha256.New()}
		bw := bufio.NewWriterSize(hw, 1<<20)
		if err := dump(bw); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		n = hw.n
		var t [snapshotTrailerLen]byte
		copy(t[:16], snapshotMagic)
		binary.BigEndian.PutUint64(t[16:24], uint64(n))
		binary.BigEndian.PutUint64(t[24:32], uint64(time.Now().UnixNano()))
		if _, err := hw.Write(t[:32]); err != nil {
			return err
		}
		_, err := f.Write(hw.h.Sum(t[:32])[32:])
		return err
	})
	if err != nil {
		return 0, err
	}
	dropLegacyMeta(g.path)
	return n, nil
}

// dropLegacyMeta removes the earlier form's meta file once the previous
// generation has a trailer (or there is none): no file needs it any more.
func dropLegacyMeta(path string) {
	meta := filepath.Join(filepath.Dir(path), snapshotLegacyMeta)
	if _, err := os.Stat(meta); err != nil {
		return
	}
	if f, err := os.Open(path + ".prev"); err == nil {
		_, legacy, _ := readSnapshotTrailer(f)
		f.Close()
		if legacy {
			return
		}
	}
	_ = os.Remove(meta)
}

// readSnapshotTrailer reads f's trailer; legacy reports a file without one.
func readSnapshotTrailer(f *os.File) (t [snapshotTrailerLen]byte, legacy bool, err error) {
	st, err := f.Stat()
	if err != nil {
		return t, false, err
	}
	if st.Size() < snapshotTrailerLen {
		return t, true, nil
	}
	if _, err := f.ReadAt(t[:], st.Size()-snapshotTrailerLen); err != nil {
		return t, false, err
	}
	return t, string(t[:16]) != snapshotMagic, nil
}

// checkSnapshot verifies the snapshot at path: its trailer's length and
// SHA-256, or, for a file without a trailer, the earlier form's meta file.
func checkSnapshot(path string) (snapshotInfo, error) {
	info := snapshotInfo{path: path}
	f, err := os.Open(path)
	if err != nil {
		return info, err
	}
	defer f.Close()
	t, legacy, err := readSnapshotTrailer(f)
	if err != nil {
		return info, err
	}
	if legacy {
		return checkLegacySnapshot(f, info)
	}
	st, err := f.Stat()
	if err != nil {
		return info, err
	}
	info.bytes = int64(binary.BigEndian.Uint64(t[16:24]))
	info.written = time.Unix(0, int64(binary.BigEndian.Uint64(t[24:32])))
	if info.bytes != st.Size()-snapshotTrailerLen {
		return info, fmt.Errorf("%w: trailer says %d dump bytes, file holds %d", ErrSnapshotCorrupt, info.bytes, st.Size()-snapshotTrailerLen)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, st.Size()-32)); err != nil {
		return info, err
	}
	if !bytes.Equal(h.Sum(nil), t[32:]) {
		return info, fmt.Errorf("%w: checksum mismatch", ErrSnapshotCorrupt)
	}
	return info, nil
}

// legacyMeta is index.snapshot.meta of the earlier two-file form.
type legacyMeta struct {
	Version int    `json:"version"`
	SHA256  string `json:"sha256"`
	Bytes   int64  `json:"bytes"`
	Written string `json:"written"`
}

func checkLegacySnapshot(f *os.File, info snapshotInfo) (snapshotInfo, error) {
	data, err := os.ReadFile(filepath.Join(filepath.Dir(info.path), snapshotLegacyMeta))
	if errors.Is(err, os.ErrNotExist) {
		return info, fmt.Errorf("%w: no trailer (and no %s of the earlier form)", ErrSnapshotCorrupt, snapshotLegacyMeta)
	}
	var m legacyMeta
	if err == nil {
		err = json.Unmarshal(data, &m)
	}
	if err != nil || m.Version != 1 {
		return info, fmt.Errorf("%w: no trailer, and %s is unreadable (version %d, err %v)", ErrSnapshotCorrupt, snapshotLegacyMeta, m.Version, err)
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return info, err
	}
	if n != m.Bytes || hex.EncodeToString(h.Sum(nil)) != m.SHA256 {
		return info, fmt.Errorf("%w: earlier two-file form that does not match its %s (torn, or interrupted between its two renames)",
			ErrSnapshotCorrupt, snapshotLegacyMeta)
	}
	info.bytes, info.legacy = n, true
	info.written, _ = time.Parse(time.RFC3339Nano, m.Written)
	return info, nil
}

// loadSnapshot finds the newest snapshot of g that verifies (ok false when
// none does); bad lists the files that did not (moved aside).
func loadSnapshot(g *generations) (info snapshotInfo, ok bool, bad []string) {
	from, bad := g.load(func(p string) (err error) {
		info, err = checkSnapshot(p)
		return err
	})
	return info, from != "", bad
}

// Snapshots writes the index snapshot periodically and at shutdown, and
// restores it at start. Start and Stop are called once each, from one
// goroutine (the process's start and stop).
type Snapshots struct {
	dir      string
	interval time.Duration
	ix       *core.Index
	log      *slog.Logger
	stop     chan struct{}
	done     chan struct{}
	// written is when the last snapshot was written (Unix nanoseconds, 0:
	// none yet), took how long its write took (nanoseconds), and failures
	// counts writes that failed; read by Metrics.
	written, took atomic.Int64
	failures      atomic.Uint64
	// stretched: the loop's wait is above the interval (next).
	stretched bool
	// version is indexVersion at the last snapshot written.
	version uint64
}

// indexVersion changes whenever what a snapshot holds may have: every
// event applied and every block cleared (unregistrations included),
// expired or evicted moves a counter, and the registrations are hashed in.
// A periodic snapshot is skipped when it has not changed since the last.
func indexVersion(ix *core.Index) uint64 {
	c := ix.Counters()
	h := xxh3.New()
	var b [8]byte
	for _, n := range [...]uint64{c.Events.Load(), c.Cleared.Load(), c.ClearedBlocks.Load(), c.ExpiredBlocks.Load(),
		c.EvictedBlocks.Load(), c.BlocksStored.Load(), c.BlocksRemoved.Load()} {
		binary.LittleEndian.PutUint64(b[:], n)
		_, _ = h.Write(b[:])
	}
	for _, r := range ix.Services() {
		_, _ = h.WriteString(r.Key().String())
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}

// DefaultSnapshotInterval is how often conductor writes its index snapshot
// by default (--snapshot-interval). A SIGKILL loses what streams without a
// replay ring announced since the last snapshot (docs/operations.md, "Gaps
// that cannot be replayed", measures it per interval), so the interval is
// the bound on that loss; SnapshotDuty keeps its cost bounded on large
// indexes.
const DefaultSnapshotInterval = 10 * time.Second

// SnapshotDuty bounds the time spent writing periodic snapshots: the next
// one starts no sooner than SnapshotDuty times the last write's duration
// after it ended, so writes take at most 1/(1+SnapshotDuty) of the time
// (a 10M-block index writes in ~8 s: one snapshot every 75 s at most).
const SnapshotDuty = 9

// NewSnapshots keeps ix's snapshot in dir: written every interval when it is
// > 0 (stretched to SnapshotDuty times the last write's duration when that
// is longer) and at shutdown when it is >= 0; a negative interval writes
// none. The newest snapshot there is restored at start whatever the
// interval (Hold). log receives one line per snapshot written or restored.
func NewSnapshots(dir string, interval time.Duration, ix *core.Index, log *slog.Logger) *Snapshots {
	return &Snapshots{dir: dir, interval: interval, ix: ix, log: log}
}

// Metrics is conductor_snapshot_last_written_timestamp_seconds (0 until
// one is written), conductor_snapshot_last_write_seconds and
// conductor_snapshot_failures_total. Safe on a nil Snapshots (none).
func (s *Snapshots) Metrics() *metrics.Set {
	set := metrics.NewSet()
	if s == nil {
		return set
	}
	set.NewGauge("conductor_snapshot_last_written_timestamp_seconds", func() float64 { return float64(s.written.Load()) / 1e9 })
	set.NewGauge("conductor_snapshot_last_write_seconds", func() float64 { return float64(s.took.Load()) / 1e9 })
	set.NewGauge("conductor_snapshot_failures_total", func() float64 { return float64(s.failures.Load()) })
	return set
}

func (s *Snapshots) file() *generations {
	return &generations{path: filepath.Join(s.dir, SnapshotFile)}
}

// Save writes one snapshot and logs the outcome; why names the occasion in
// the log ("interval", "shutdown").
func (s *Snapshots) Save(why string) {
	start := time.Now()
	v := indexVersion(s.ix)
	g := s.file()
	n, err := writeSnapshotFile(g, func(w *bufio.Writer) error { return dump.Write(s.ix, w) })
	took := time.Since(start)
	s.took.Store(int64(took))
	if err != nil {
		s.failures.Add(1)
		s.log.Error("index snapshot not written", "reason", why, "path", g.path, "err", err)
		return
	}
	s.written.Store(time.Now().UnixNano())
	s.version = v
	s.log.Info("index snapshot written", "reason", why, "path", g.path, "bytes", n, "took", took.Round(time.Millisecond))
}

// next is the wait before the next periodic snapshot: the interval, or
// SnapshotDuty times the last write's duration when that is longer (logged
// when the wait starts or stops being stretched).
func (s *Snapshots) next() time.Duration {
	d := max(s.interval, SnapshotDuty*time.Duration(s.took.Load()))
	if stretched := d > s.interval; stretched != s.stretched {
		s.stretched = stretched
		if stretched {
			s.log.Info("index snapshots spaced out to keep their writes under a tenth of the time; a crash loses up to this much of what streams without a replay ring announced",
				"snapshot_interval", s.interval, "every", d.Round(time.Second), "last_write", time.Duration(s.took.Load()).Round(time.Millisecond))
		} else {
			s.log.Info("index snapshots back at their interval", "snapshot_interval", s.interval)
		}
	}
	return d
}

// Start runs the periodic snapshot loop (when an interval is set). Safe on
// a nil Snapshots (no snapshots).
func (s *Snapshots) Start() {
	if s == nil || s.interval <= 0 {
		return
	}
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.done)
		t := time.NewTimer(s.interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				if s.written.Load() == 0 || indexVersion(s.ix) != s.version {
					s.Save("interval")
				}
				t.Reset(s.next())
			}
		}
	}()
}

// Stop ends the loop and writes the shutdown snapshot (none with a
// negative interval). Safe on a nil Snapshots.
func (s *Snapshots) Stop() {
	if s == nil {
		return
	}
	if s.stop != nil {
		close(s.stop)
		<-s.done
	}
	if s.interval >= 0 {
		s.Save("shutdown")
	}
}

// Hold finds the newest snapshot that verifies and, when there is one,
// holds the index's apply gate (called before the registrations are
// restored, so no event applies before the snapshot); restore then restores
// it, handing Dynamo-form sections' indexers to idx (dump.Restore), and
// releases the gate. Without one it holds nothing (ok false). Safe on a nil
// Snapshots.
func (s *Snapshots) Hold(idx dump.Indexers) (restore func(), ok bool) {
	if s == nil {
		return func() {}, false
	}
	g := s.file()
	info, ok, bad := loadSnapshot(g)
	for _, b := range bad {
		s.log.Error("index snapshot is torn or corrupt; trying the previous generation", "problem", b)
	}
	if !ok {
		if len(bad) > 0 {
			s.log.Error("no good index snapshot left; the index refills from the engines' replay rings", "path", g.path)
		} else {
			s.log.Info("no index snapshot yet", "path", g.path)
		}
		return func() {}, false
	}
	if info.legacy {
		s.log.Info("index snapshot of the earlier two-file form (with "+snapshotLegacyMeta+"); the next one is written as one file",
			"path", info.path)
	}
	release := s.ix.HoldApplies()
	return func() {
		defer release()
		f, err := os.Open(info.path)
		if err != nil {
			s.log.Error("index snapshot unreadable", "path", info.path, "err", err)
			return
		}
		defer f.Close()
		start := time.Now()
		st, err := dump.RestorePrior(s.ix, io.NewSectionReader(f, 0, info.bytes), idx)
		if err != nil {
			s.log.Error("index snapshot restored only in part", "path", info.path, "err", err)
		}
		// blocks: block holdings (a block two streams hold counts twice)
		s.log.Info("index snapshot restored", "path", info.path, "blocks", st.Holdings, "streams", st.Streams,
			"engine_entries", st.Engine, "missing_streams", st.MissingStream, "skipped", st.Skipped,
			"written", info.written.UTC().Format(time.RFC3339), "bytes", st.Bytes, "took", time.Since(start).Round(time.Millisecond))
	}, true
}
