package ingest

import "testing"

// TestSeqTracker walks the tracker through scripted sequences; each step names the
// path (live or replay) and the verdict the receive loop must act on.
func TestSeqTracker(t *testing.T) {
	type step struct {
		replay bool
		seq    uint64
		want   seqVerdict
		// consume records the message as applied (what the loop does for first,
		// next and — after a stale rebase — gap).
		consume bool
		// rebase forgets the baseline (what the loop does on restart and stale).
		rebase bool
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"in order", []step{
			{seq: 0, want: seqFirst, consume: true},
			{seq: 1, want: seqNext, consume: true},
			{seq: 2, want: seqNext, consume: true},
		}},
		{"first message mid-stream", []step{
			{seq: 41, want: seqFirst, consume: true},
			{seq: 42, want: seqNext, consume: true},
		}},
		{"gap", []step{
			{seq: 5, want: seqFirst, consume: true},
			{seq: 9, want: seqGap},
		}},
		{"gap healed by replay, late live copies are duplicates", []step{
			{seq: 5, want: seqFirst, consume: true},
			{seq: 9, want: seqGap},
			{replay: true, seq: 5, want: seqDuplicate},
			{replay: true, seq: 6, want: seqNext, consume: true},
			{replay: true, seq: 7, want: seqNext, consume: true},
			{replay: true, seq: 8, want: seqNext, consume: true},
			{replay: true, seq: 9, want: seqNext, consume: true},
			{replay: true, seq: 10, want: seqNext, consume: true},
			// the live 9 was handled already (it triggered the replay); 10 arrives late
			{seq: 10, want: seqDuplicate},
			{seq: 11, want: seqNext, consume: true},
		}},
		{"slow joiner: replay first, then live copies", []step{
			{replay: true, seq: 0, want: seqFirst, consume: true},
			{replay: true, seq: 1, want: seqNext, consume: true},
			{replay: true, seq: 2, want: seqNext, consume: true},
			{seq: 0, want: seqDuplicate}, // no live history: not a regression
			{seq: 1, want: seqDuplicate},
			{seq: 3, want: seqNext, consume: true},
		}},
		{"live regression is a restart", []step{
			{seq: 7, want: seqFirst, consume: true},
			{seq: 8, want: seqNext, consume: true},
			{seq: 3, want: seqRestart, rebase: true},
		}},
		{"restart to zero", []step{
			{seq: 0, want: seqFirst, consume: true},
			{seq: 1, want: seqNext, consume: true},
			{seq: 0, want: seqRestart, rebase: true},
		}},
		{"after a restart the stream starts over", []step{
			{seq: 100, want: seqFirst, consume: true},
			{seq: 2, want: seqRestart, rebase: true},
			{seq: 3, want: seqFirst, consume: true},
			{seq: 4, want: seqNext, consume: true},
		}},
		{"drop far below a replayed baseline is a restart (threshold 10)", []step{
			{replay: true, seq: 0, want: seqFirst, consume: true},
			{replay: true, seq: 50, want: seqGap, consume: true},
			{seq: 40, want: seqDuplicate},
			{seq: 39, want: seqRestart, rebase: true},
		}},
		{"replay never reports a restart", []step{
			{seq: 100, want: seqFirst, consume: true},
			{replay: true, seq: 1, want: seqDuplicate},
		}},
		{"stale rebase keeps the live cursor", []step{
			{seq: 10, want: seqFirst, consume: true},
			{seq: 20, want: seqGap, rebase: true},
			{seq: 21, want: seqFirst, consume: true},
			{seq: 15, want: seqRestart, rebase: true},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := seqTracker{threshold: 10}
			for i, s := range tc.steps {
				var got seqVerdict
				if s.replay {
					got = tr.replayed(s.seq)
				} else {
					got = tr.live(s.seq)
				}
				if got != s.want {
					t.Fatalf("step %d (replay=%v seq=%d): got %v, want %v", i, s.replay, s.seq, got, s.want)
				}
				if s.rebase {
					tr.rebase()
				}
				if s.consume {
					tr.consumed(s.seq, 0)
				}
			}
		})
	}
}

// TestSeqTrackerConflicts: the checksum ring tells a late duplicate (same
// payload) from a new incarnation's message under an already-consumed
// sequence, and forgets everything on rebase.
func TestSeqTrackerConflicts(t *testing.T) {
	var tr seqTracker
	tr.threshold = 10000
	for s := uint64(0); s < 300; s++ {
		tr.consumed(s, s*7+1)
	}
	cases := []struct {
		seq, sum uint64
		want     bool
	}{
		{299, 299*7 + 1, false}, // same payload: duplicate
		{299, 5, true},          // other payload under a consumed sequence
		{100, 5, true},          // still within the ring
		{40, 5, false},          // fell out of the ring (overwritten by 296): unknown
		{400, 5, false},         // never consumed
	}
	for _, c := range cases {
		if got := tr.conflicts(c.seq, c.sum); got != c.want {
			t.Errorf("conflicts(%d, %d) = %v, want %v", c.seq, c.sum, got, c.want)
		}
	}
	tr.rebase()
	if tr.conflicts(299, 5) {
		t.Error("rebase must forget checksums")
	}
}
