package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/seed-c7a81618/conductor/httpd"
)

// Warm restarts. With --state-dir set, conductor writes an index snapshot to
// DIR/index.snapshot on graceful shutdown and every --snapshot-interval (0:
// only at shutdown; negative: never). The snapshot is the main API's /dump
// (standardized-event form, one section per registration with the sequence of
// the last batch it holds), written to a temporary file and renamed into
// place after fsync; DIR/index.snapshot.meta carries its SHA-256 and size,
// written the same way after it. At start, after the registrations are
// restored and before any event is applied (the index's apply gate is held),
// a snapshot whose checksum matches is restored with the same code as peer
// recovery (httpd.RestoreDump), then the gate opens.
//
// Staleness: a restored section holds the stream as of the snapshot. Live
// batches at or below its sequence are skipped (the snapshot holds them);
// the next ones, replayed from the engine's ring or live, apply on top, so
// nothing restored overrides a newer event of the same stream. When the
// engine's ring no longer holds the batches after the snapshot's sequence
// (the process was down too long), the stream's restored blocks are cleared
// as for any unhealable gap; an engine that restarted meanwhile is detected
// and cleared as today. A torn or mismatched snapshot is reported and
// ignored: the index then refills from the engines' replay rings as without
// snapshots. Proved by TestSnapshotWarmRestart and TestSnapshotTornIgnored.
const (
	snapshotFile = "index.snapshot"
	snapshotMeta = "index.snapshot.meta"
)

type snapshotInfo struct {
	Version int    `json:"version"`
	SHA256  string `json:"sha256"`
	Bytes   int64  `json:"bytes"`
	Written string `json:"written"`
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

// writeSnapshot writes the index's dump to dir atomically.
func (a *app) writeSnapshot(dir string) (snapshotInfo, error) {
	var info snapshotInfo
	tmp := filepath.Join(dir, snapshotFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return info, err
	}
	hw := &hashingWriter{w: f, h: sha256.New()}
	bw := bufio.NewWriterSize(hw, 1<<20)
	err = httpd.WriteDump(a.ix, bw)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return info, err
	}
	info = snapshotInfo{Version: 1, SHA256: hex.EncodeToString(hw.h.Sum(nil)), Bytes: hw.n,
		Written: time.Now().UTC().Format(time.RFC3339Nano)}
	if err := os.Rename(tmp, filepath.Join(dir, snapshotFile)); err != nil {
		return info, err
	}
	meta, _ := json.Marshal(info)
	if err := writeFileSync(filepath.Join(dir, snapshotMeta), meta); err != nil {
		return info, err
	}
	return info, syncDir(dir)
}

// writeFileSync writes data to path through a temporary file, fsynced and renamed.
func writeFileSync(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// validSnapshot returns the snapshot's path when its meta and checksum agree.
func validSnapshot(dir string) (string, snapshotInfo, error) {
	var info snapshotInfo
	meta, err := os.ReadFile(filepath.Join(dir, snapshotMeta))
	if err != nil {
		return "", info, err
	}
	if err := json.Unmarshal(meta, &info); err != nil || info.Version != 1 {
		return "", info, fmt.Errorf("snapshot meta unreadable: %v", err)
	}
	path := filepath.Join(dir, snapshotFile)
	f, err := os.Open(path)
	if err != nil {
		return "", info, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", info, err
	}
	if n != info.Bytes || hex.EncodeToString(h.Sum(nil)) != info.SHA256 {
		return "", info, errors.New("snapshot checksum or size does not match its meta (torn or replaced)")
	}
	return path, info, nil
}

// snapshotter writes the index snapshot periodically and at shutdown.
type snapshotter struct {
	dir      string
	interval time.Duration // > 0: also every interval
	stop     chan struct{}
	done     chan struct{}
}

// saveSnapshot writes one snapshot and logs the outcome.
func (a *app) saveSnapshot(why string) {
	start := time.Now()
	info, err := a.writeSnapshot(a.snap.dir)
	if err != nil {
		a.log.Error("index snapshot not written", "reason", why, "dir", a.snap.dir, "err", err)
		return
	}
	a.log.Info("index snapshot written", "reason", why, "bytes", info.Bytes, "took", time.Since(start).Round(time.Millisecond))
}

// startSnapshots runs the periodic snapshot loop (when an interval is set).
func (a *app) startSnapshots() {
	if a.snap == nil || a.snap.interval <= 0 {
		return
	}
	a.snap.stop, a.snap.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(a.snap.done)
		t := time.NewTicker(a.snap.interval)
		defer t.Stop()
		for {
			select {
			case <-a.snap.stop:
				return
			case <-t.C:
				a.saveSnapshot("interval")
			}
		}
	}()
}

// stopSnapshots ends the loop and writes the shutdown snapshot.
func (a *app) stopSnapshots() {
	if a.snap == nil {
		return
	}
	if a.snap.stop != nil {
		close(a.snap.stop)
		<-a.snap.done
	}
	a.saveSnapshot("shutdown")
}

// snapshotGate checks for a valid snapshot and, when there is one, holds the
// index's apply gate (called before the registrations are restored, so no
// event applies before the snapshot); restore then restores it and releases
// the gate. Without a valid snapshot it holds nothing (ok false).
func (a *app) snapshotGate() (restore func(), ok bool) {
	if a.snap == nil {
		return func() {}, false
	}
	path, info, err := validSnapshot(a.snap.dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			a.log.Error("index snapshot ignored; the index refills from the engines' replay rings", "dir", a.snap.dir, "err", err)
		} else {
			a.log.Info("no index snapshot yet", "dir", a.snap.dir)
		}
		return func() {}, false
	}
	release := a.ix.HoldApplies()
	return func() {
		defer release()
		f, err := os.Open(path)
		if err != nil {
			a.log.Error("index snapshot unreadable", "err", err)
			return
		}
		defer f.Close()
		start := time.Now()
		st, err := httpd.RestoreDump(a.ix, f, a.dp.dyn)
		if err != nil {
			a.log.Error("index snapshot restored only in part", "err", err)
		}
		a.log.Info("index snapshot restored", "written", info.Written, "bytes", st.Bytes, "streams", st.Streams,
			"took", time.Since(start).Round(time.Millisecond))
	}, true
}
