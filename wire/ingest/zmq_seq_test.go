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
					tr.consumed(s.seq, msgSum{})
				}
			}
		})
	}
}

// TestSeqTrackerConflicts: the checksum ring tells a late duplicate (same
// payload) from a new incarnation's message under an already-consumed
// sequence, and forgets everything on rebase.
func TestSeqTrackerConflicts(t *testing.T) {
	sum := func(h uint64) msgSum { return msgSum{n: 100, hash: h, hashed: true} }
	var tr seqTracker
	tr.threshold = 10000
	for s := uint64(0); s < 300; s++ {
		tr.consumed(s, sum(s*7+1))
	}
	cases := []struct {
		seq  uint64
		sum  msgSum
		want bool
	}{
		{299, sum(299*7 + 1), false}, // same payload: duplicate
		{299, sum(5), true},          // other payload under a consumed sequence
		{100, sum(5), true},          // still within the ring
		{40, sum(5), false},          // fell out of the ring (overwritten by 296): unknown
		{400, sum(5), false},         // never consumed
		{299, msgSum{n: 100}, false}, // refused copy of the same length: cannot differ
		{299, msgSum{n: 99}, true},   // refused copy of another length
	}
	for _, c := range cases {
		if got := tr.conflicts(c.seq, c.sum); got != c.want {
			t.Errorf("conflicts(%d, %+v) = %v, want %v", c.seq, c.sum, got, c.want)
		}
	}
	tr.rebase()
	if tr.conflicts(299, sum(5)) {
		t.Error("rebase must forget checksums")
	}
}

// TestMsgSumSame: two fingerprints of one sequence match when their payload
// lengths agree and, where both copies were read whole, their hashes do; a
// copy refused for its size (read without its payload, no hash) matches any
// copy of its length, whichever side was refused.
func TestMsgSumSame(t *testing.T) {
	whole := func(n int, h uint64) msgSum { return msgSum{n: n, hash: h, hashed: true} }
	refused := func(n int) msgSum { return msgSum{n: n} }
	cases := []struct {
		a, b msgSum
		want bool
	}{
		{whole(10, 1), whole(10, 1), true},
		{whole(10, 1), whole(10, 2), false},
		{whole(10, 1), whole(11, 1), false},
		{refused(10), refused(10), true},
		{refused(10), refused(11), false},
		{refused(10), whole(10, 7), true},
		{whole(10, 7), refused(10), true},
		{whole(11, 7), refused(10), false},
	}
	for _, c := range cases {
		if got := c.a.same(c.b); got != c.want {
			t.Errorf("%+v.same(%+v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
