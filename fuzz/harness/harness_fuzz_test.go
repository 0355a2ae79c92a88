package harness

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/bench"
	"github.com/seed-c7a81618/conductor/bench/sim"
)

// Fuzz targets for the load harness's parsers (bench/sim, bench): the /query
// answer readers its verify mode and bench.RunLoad trust, and the trace reader.

// FuzzParseAnswer: no input panics either reader; an accepted msgpack answer
// has rows sorted by instance and ranks sorted, and re-encoding it with the
// reference encoder parses back to an equal answer (round trip).
func FuzzParseAnswer(f *testing.F) {
	f.Add(sim.AppendMsgpackAnswer(nil, &sim.Answer{Rows: []sim.Row{{Instance: "a", Longest: 32,
		Ranks: []sim.RankRow{{Rank: 0}, {Rank: 2}}}}}), false)
	f.Add([]byte(`{"default":{"e":{"longest_matched":16,"device":16,"cpu_local":16,"cpu_share":16,"disk":16,"rank_matches":{"0":{"device":16,"cpu_local":16,"cpu_share":16,"disk":16}}}}}`), true)
	f.Add([]byte(`{}`), true)
	f.Fuzz(func(t *testing.T, body []byte, json bool) {
		if len(body) > 1<<14 {
			return
		}
		surface := "msgpack"
		if json {
			surface = "json"
		}
		var a sim.Answer
		if err := sim.ParseAnswer(surface, body, &a); err != nil {
			return
		}
		if !slices.IsSortedFunc(a.Rows, func(x, y sim.Row) int { return strings.Compare(x.Instance, y.Instance) }) {
			t.Fatalf("rows not sorted: %+v", a.Rows)
		}
		for _, r := range a.Rows {
			if !slices.IsSortedFunc(r.Ranks, func(x, y sim.RankRow) int { return int(x.Rank) - int(y.Rank) }) {
				t.Fatalf("ranks not sorted: %+v", r)
			}
		}
		var b sim.Answer
		enc := sim.AppendMsgpackAnswer(nil, &a)
		if err := sim.ParseAnswer("msgpack", enc, &b); err != nil {
			t.Fatalf("re-encoded answer rejected: %v", err)
		}
		if d := sim.Diff(&a, &b); d != "" {
			t.Fatalf("round trip: %s", d)
		}
	})
}

// FuzzExpectCheck: bench.Expect.Check (the answer check of every request of
// bench.RunLoad) agrees with bench/sim's answer parser, an independent reader
// of the same bodies. Whenever Check accepts a body that sim also accepts,
// sim's rows hold the instance with that longest_matched; whenever sim
// accepts a body holding exactly one row for the instance with a non-zero
// longest_matched, Check accepts it with that value. (sim reads a missing
// longest_matched as 0, where Check refuses the row: hence non-zero.) Check
// never panics and fails only with ErrLoadAnswer.
func FuzzExpectCheck(f *testing.F) {
	f.Add(sim.AppendMsgpackAnswer(nil, &sim.Answer{Rows: []sim.Row{{Instance: "engine-a", Longest: 32,
		Ranks: []sim.RankRow{{Rank: 0}}}}}), false, "engine-a", int64(32))
	f.Add([]byte(`{"default":{"engine-a":{"longest_matched":16,"device":16,"cpu_local":16,"cpu_share":16,"disk":16,"rank_matches":{"0":{"device":16,"cpu_local":16,"cpu_share":16,"disk":16}}}}}`), true, "engine-a", int64(16))
	f.Add([]byte(`{}`), true, "engine-a", int64(0))
	f.Fuzz(func(t *testing.T, body []byte, json bool, id string, longest int64) {
		if len(body) > 1<<14 {
			return
		}
		ct, surface := "application/msgpack", "msgpack"
		if json {
			ct, surface = "application/json", "json"
		}
		err := (&bench.Expect{Instance: id, LongestMatched: longest}).Check(ct, body)
		if err != nil && !errors.Is(err, bench.ErrLoadAnswer) {
			t.Fatalf("error %v does not wrap ErrLoadAnswer", err)
		}
		var a sim.Answer
		if sim.ParseAnswer(surface, body, &a) != nil {
			return
		}
		var rows []sim.Row
		for _, r := range a.Rows {
			if r.Instance == id {
				rows = append(rows, r)
			}
		}
		if err == nil && !slices.ContainsFunc(rows, func(r sim.Row) bool { return r.Longest == longest }) {
			t.Fatalf("Check accepted %s longest %d; sim reads %+v", id, longest, rows)
		}
		if len(rows) == 1 && rows[0].Longest != 0 {
			if err := (&bench.Expect{Instance: id, LongestMatched: rows[0].Longest}).Check(ct, body); err != nil {
				t.Fatalf("sim reads %+v; Check: %v", rows[0], err)
			}
		}
	})
}

// FuzzReadTrace: no input panics the reader, and every accepted record's
// prompt fits its hash ids and expands to exactly input_length tokens.
func FuzzReadTrace(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [0, 1]}` + "\n"))
	f.Add([]byte("{\"input_length\":1,\"hash_ids\":[7]}\n\n{\"input_length\":0,\"hash_ids\":[]}"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 1<<12 {
			return
		}
		recs, err := sim.ReadTrace(bytes.NewReader(in), 0)
		if err != nil {
			return
		}
		for _, r := range recs {
			if r.InputLength < 0 || r.InputLength > len(r.HashIDs)*sim.TraceBlockTokens {
				t.Fatalf("accepted %+v", r)
			}
			if len(r.HashIDs) <= 8 && len(r.Expand()) != r.InputLength {
				t.Fatalf("expand %+v", r)
			}
		}
	})
}
