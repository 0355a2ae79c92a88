package sim

import (
	"strings"
	"testing"
)

// TestParseJSONAnswer reads the README's example answer (conductor's JSON
// dialect) and an empty one; only the cumulative lowercase fields count.
func TestParseJSONAnswer(t *testing.T) {
	body := `{"default":{"vllm-node1":{"longest_matched":16,"GPU":16,"CPU":16,"DISK":16,"DP":{"0":16},
	  "device":16,"cpu_local":16,"cpu_share":16,"disk":16,
	  "rank_matches":{"0":{"device":16,"cpu_local":16,"cpu_share":16,"disk":16}}},
	  "b":{"longest_matched":48,"GPU":0,"CPU":0,"DISK":48,"DP":{"0":48,"1":0},"device":0,"cpu_local":32,"cpu_share":32,"disk":48,
	  "rank_matches":{"1":{"device":0,"cpu_local":0,"cpu_share":0,"disk":0},"0":{"device":0,"cpu_local":32,"cpu_share":32,"disk":48}}}}}`
	var a Answer
	if err := ParseAnswer("json", []byte(body), &a); err != nil {
		t.Fatal(err)
	}
	want := Answer{Rows: []Row{
		{Instance: "b", Longest: 48, Tiers: [numTiers]int64{0, 32, 32, 48}, Ranks: []RankRow{
			{Rank: 0, Tiers: [numTiers]int64{0, 32, 32, 48}}, {Rank: 1}}},
		{Instance: "vllm-node1", Longest: 16, Tiers: [numTiers]int64{16, 16, 16, 16}, Ranks: []RankRow{{Rank: 0, Tiers: [numTiers]int64{16, 16, 16, 16}}}},
	}}
	if d := Diff(&want, &a); d != "" {
		t.Fatal(d)
	}
	if err := ParseAnswer("json", []byte(`{}`), &a); err != nil || len(a.Rows) != 0 {
		t.Fatalf("empty: %v %+v", err, a)
	}
	if err := ParseAnswer("json", []byte(`{"default":{"x":{"rank_matches":{"zero":{}}}}}`), &a); err == nil {
		t.Fatal("a non-numeric rank was accepted")
	}
}

// TestParseMsgpackAnswer round-trips answers through the reference encoder
// and rejects an answer whose dp disagrees with rank_matches.
func TestParseMsgpackAnswer(t *testing.T) {
	in := Answer{Rows: []Row{
		{Instance: "a", Longest: 64, Tiers: [numTiers]int64{16, 16, 48, 64}, Ranks: []RankRow{
			{Rank: 0, Tiers: [numTiers]int64{16, 16, 48, 64}}, {Rank: 3, Tiers: [numTiers]int64{0, 0, 48, 48}}}},
		{Instance: "b", Ranks: []RankRow{{Rank: 0}}},
	}}
	var out Answer
	if err := ParseAnswer("msgpack", AppendMsgpackAnswer(nil, &in), &out); err != nil {
		t.Fatal(err)
	}
	if d := Diff(&in, &out); d != "" {
		t.Fatal(d)
	}
	bad := in
	bad.Rows = []Row{{Instance: "a", Ranks: []RankRow{{Rank: 0, Tiers: [numTiers]int64{16}}}}}
	b := AppendMsgpackAnswer(nil, &bad)
	// Corrupt dp["0"] (the first int after "dp" / "0") from 16 to 17.
	i := strings.Index(string(b), "dp")
	j := i + strings.Index(string(b[i:]), "0") + 1
	if b[j] != 16 {
		t.Fatalf("layout: %x", b[j])
	}
	b[j] = 17
	if err := ParseAnswer("msgpack", b, &out); err == nil || !strings.Contains(err.Error(), "dp[0]=17") {
		t.Fatalf("err = %v", err)
	}
	if err := ParseAnswer("msgpack", b[:len(b)-1], &out); err == nil {
		t.Fatal("a truncated answer was accepted")
	}
	// rank_matches naming rank 2 twice, dp ranks 0 and 2: as many ranks on
	// each side, every rank_matches rank in dp, yet not the same ranks. The
	// reference encoder writes ranks 0 and 2; rank_matches' "0" becomes "2".
	two := Answer{Rows: []Row{{Instance: "a", Ranks: []RankRow{{Rank: 0}, {Rank: 2}}}}}
	d := AppendMsgpackAnswer(nil, &two)
	i = strings.Index(string(d), "rank_matches")
	j = i + strings.Index(string(d[i:]), "\xa10") + 1 // the fixstr "0"
	if d[j] != '0' {
		t.Fatalf("layout: %x", d[j])
	}
	d[j] = '2'
	if err := ParseAnswer("msgpack", d, &out); err == nil || !strings.Contains(err.Error(), "rank 2 twice") {
		t.Fatalf("a rank named twice: err = %v", err)
	}
}
