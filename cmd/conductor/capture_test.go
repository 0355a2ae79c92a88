package main

// Captures of real publishers (wire/testdata/captures: the bytes upstream
// vLLM's and SGLang's ZmqEventPublisher put on the wire, with the answers
// worked out from them independently of conductor, in their .expect.json
// files) replayed into a conductor process over ZMQ. Every expected value
// below comes from the expect files, and the media names map to the JSON
// dialect's keys by the table of docs/http-api.md; nothing is taken from
// conductor's own output.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/probe"
)

var captureDir = filepath.Join("..", "..", "wire", "testdata", "captures")

// capture is one capture file and its expectations.
type capture struct {
	name    string
	live    []captureMsg // the messages the SUB socket received, in order
	req     captureMsg   // the replay request the DEALER sent
	replies []captureMsg // the replies the DEALER received, the end marker last
	expect  captureExpect
}

type captureMsg struct {
	Dir    string   `json:"dir"`
	Frames [][]byte `json:"frames_b64"`
	Seq    *int64   `json:"seq"`
}

type captureExpect struct {
	Registration struct {
		Type        string            `json:"type"`
		BlockSize   int               `json:"block_size"`
		DPRank      int               `json:"dp_rank"`
		LoraName    *string           `json:"lora_name"`
		HashProfile map[string]string `json:"hash_profile"`
	} `json:"registration"`
	Wire struct {
		Envelope      string `json:"envelope"`
		EventEncoding string `json:"event_encoding"`
	} `json:"wire"`
	Prompts map[string]capturePrompt `json:"prompts"`
	Steps   []captureStep            `json:"steps"`
	Replay  struct {
		RequestFramesHex []string `json:"request_frames_hex"`
		StartSeq         int64    `json:"start_seq"`
		ReplySeqs        []int64  `json:"reply_seqs"`
	} `json:"replay"`
}

type capturePrompt struct {
	TokenIDs     []int64  `json:"token_ids"`
	BlockSize    int      `json:"block_size"`
	LoraName     *string  `json:"lora_name"`
	CacheSalt    *string  `json:"cache_salt"`
	IndexKeysHex []string `json:"index_keys_hex"`
	PageSizes    []int    `json:"page_sizes"` // SGLang: a final partial page is shorter
}

type captureStep struct {
	Seq           int64                     `json:"seq"`
	Action        string                    `json:"action"`
	Payload       json.RawMessage           `json:"payload"`
	LongestPrefix map[string]int            `json:"longest_prefix"`
	ByMedium      map[string]map[string]int `json:"longest_prefix_by_medium"`
}

// loadCaptures reads every capture in captureDir.
func loadCaptures(t *testing.T) []*capture {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(captureDir, "*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no captures in %s: %v", captureDir, err)
	}
	var out []*capture
	for _, f := range files {
		c := &capture{name: strings.TrimSuffix(filepath.Base(f), ".jsonl")}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
			var m captureMsg
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatalf("%s:%d: %v", f, i+1, err)
			}
			switch m.Dir {
			case "pub":
				c.live = append(c.live, m)
			case "replay_req":
				c.req = m
			case "replay_rep":
				c.replies = append(c.replies, m)
			default:
				t.Fatalf("%s:%d: dir %q", f, i+1, m.Dir)
			}
		}
		raw, err = os.ReadFile(strings.TrimSuffix(f, ".jsonl") + ".expect.json")
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &c.expect); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(c.live) != len(c.expect.Steps) || len(c.replies) == 0 || c.req.Dir == "" {
			t.Fatalf("%s: %d live messages for %d steps, %d replies", c.name, len(c.live), len(c.expect.Steps), len(c.replies))
		}
		out = append(out, c)
	}
	return out
}

// endMarker is the replay end marker's frames as the capture has them.
func (c *capture) endMarker() [][]byte { return c.replies[len(c.replies)-1].Frames }

// TestCaptureReplay replays each capture into one conductor process (the
// test binary running conductor, as the fault suite does) over ZMQ, from a
// publisher that sends the captured frames byte for byte:
//
//   - live: after every step, each prompt's longest prefix by tokens (and by
//     the block keys the expect file lists), per medium where the file gives
//     it, and the hash-profile self-check: verified for the expect file's
//     registration once a root store with token_ids went by, and a mismatch
//     naming that profile for a registration with another one;
//   - replay: a second registration takes the live steps up to the captured
//     request's start; the publisher socket then goes away and comes back,
//     the listener's replay request must equal the captured request frames,
//     the captured replies are sent back, and what they carry is applied;
//   - probe: `conductor probe` run against a publisher of the capture
//     identifies its dialect, era, envelope and hash profile as the expect
//     file names them.
func TestCaptureReplay(t *testing.T) {
	caps := loadCaptures(t)
	c := startChild(t, 0)
	for _, cp := range caps {
		t.Run(cp.name, func(t *testing.T) {
			t.Run("live", func(t *testing.T) { captureLive(t, c, cp) })
			t.Run("replay", func(t *testing.T) { captureReplayExchange(t, c, cp) })
			t.Run("probe", func(t *testing.T) { captureProbe(t, cp) })
		})
	}
}

// register registers the capture's registration under model and instance,
// on pub's endpoints, with profile.
func (cp *capture) register(t *testing.T, c *child, pub *capturePub, model, instance string, profile map[string]string) {
	t.Helper()
	r := cp.expect.Registration
	body := map[string]any{"endpoint": pub.endpoint, "replay_endpoint": pub.replayEP, "type": r.Type,
		"modelname": model, "instance_id": instance, "block_size": r.BlockSize, "dp_rank": r.DPRank, "hash_profile": profile}
	if r.LoraName != nil {
		body["lora_name"] = *r.LoraName
	}
	b, _ := json.Marshal(body)
	code, _, resp := httpDo(t, "POST", "http://"+c.addr+"/register", "application/json", b)
	if code != 200 {
		t.Fatalf("register %s: %d %s", instance, code, resp)
	}
}

// otherProfile is a profile the capture's engine does not hash with: another
// vLLM algorithm, or SGLang's bigram chain.
func otherProfile(p map[string]string) map[string]string {
	o := map[string]string{}
	for k, v := range p {
		o[k] = v
	}
	switch p["strategy"] {
	case "sglang":
		o["strategy"] = "sglang_bigram"
	default:
		o["algorithm"] = map[string]string{"sha256": "sha256_cbor", "sha256_cbor": "sha256",
			"xxhash": "xxhash_cbor", "xxhash_cbor": "xxhash"}[p["algorithm"]]
	}
	return o
}

// captureLive sends the live messages one at a time and checks everything
// after each.
func captureLive(t *testing.T, c *child, cp *capture) {
	right, wrong := newCapturePub(t, cp.endMarker()), newCapturePub(t, cp.endMarker())
	model, rightID, wrongID := cp.name, cp.name, cp.name+"-other-profile"
	cp.register(t, c, right, model, rightID, cp.expect.Registration.HashProfile)
	cp.register(t, c, wrong, model+"-other-profile", wrongID, otherProfile(cp.expect.Registration.HashProfile))
	for _, p := range []*capturePub{right, wrong} {
		p.awaitSubscribers(1)
		// A listener asks for the publisher's ring once connected; it is
		// empty, so the answer is the end marker alone.
		if reqs := p.awaitRequests(1); !framesEqual(reqs[0], [][]byte{{}, make([]byte, 8)}) {
			t.Fatalf("first replay request %x, want [\"\", seq 0]", reqs[0])
		}
	}
	rooted := false
	for k, m := range cp.live {
		step := &cp.expect.Steps[k]
		if m.Seq == nil || *m.Seq != step.Seq {
			t.Fatalf("message %d has seq %v, its step %d", k, m.Seq, step.Seq)
		}
		right.send(m.Frames)
		wrong.send(m.Frames)
		for _, id := range []string{rightID, wrongID} {
			c.awaitStream(t, id, cp.expect.Registration.DPRank, k+1)
		}
		rooted = rooted || rootStoreWithTokens(t, step.Payload)
		what := fmt.Sprintf("after seq %d (%s)", step.Seq, step.Action)
		cp.checkAnswers(t, c, model, rightID, step, what)
		state, found := c.hashCheck(t, rightID)
		if want := map[bool]string{false: "unverified", true: "verified"}[rooted]; state != want || found != nil {
			t.Errorf("%s: self-check %s found %v, want %s", what, state, found, want)
		}
		state, found = c.hashCheck(t, wrongID)
		if want := map[bool]string{false: "unverified", true: "mismatch"}[rooted]; state != want ||
			(rooted && !sameProfile(found, cp.expect.Registration.HashProfile)) {
			t.Errorf("%s: other profile's self-check %s found %v, want %s found %v", what, state, found, want,
				cp.expect.Registration.HashProfile)
		}
	}
}

// captureReplayExchange brings a listener to the captured request's start
// sequence, makes it reconnect, and answers its replay request with the
// captured replies.
func captureReplayExchange(t *testing.T, c *child, cp *capture) {
	var req [][]byte
	for _, h := range cp.expect.Replay.RequestFramesHex {
		b, err := hex.DecodeString(h)
		if err != nil {
			t.Fatal(err)
		}
		req = append(req, b)
	}
	if !framesEqual(req, cp.req.Frames) {
		t.Fatalf("the expect file's request %x differs from the capture's %x", req, cp.req.Frames)
	}
	start := int(cp.expect.Replay.StartSeq)
	var replies [][][]byte
	last := start
	for i, r := range cp.replies {
		if want := cp.expect.Replay.ReplySeqs[i]; r.Seq == nil || *r.Seq != want {
			t.Fatalf("reply %d has seq %v, want %d", i, r.Seq, want)
		}
		if *r.Seq >= 0 {
			last = int(*r.Seq)
		}
		replies = append(replies, r.Frames)
	}
	pub := newCapturePub(t, cp.endMarker())
	model, id := cp.name+"-replay", cp.name+"-replay"
	rank := cp.expect.Registration.DPRank
	cp.register(t, c, pub, model, id, cp.expect.Registration.HashProfile)
	pub.awaitSubscribers(1)
	pub.awaitRequests(1)
	for k := 0; k <= start; k++ {
		pub.send(cp.live[k].Frames)
		c.awaitStream(t, id, rank, k+1)
	}
	step := &cp.expect.Steps[start]
	cp.checkAnswers(t, c, model, id, step, fmt.Sprintf("live up to seq %d", start))

	before := c.streamMetrics(t, id, rank)
	pub.script(req, replies)
	pub.reconnect()
	reqs := pub.awaitRequests(2)
	if !framesEqual(reqs[1], req) {
		t.Fatalf("replay request after the reconnect %x, want the captured %x", reqs[1], req)
	}
	applied := last - start // the reply at start is the baseline, checked, not applied
	c.awaitStream(t, id, rank, start+1+applied)
	waitFor(t, "the replay to end", func() bool {
		m := c.streamMetrics(t, id, rank)
		return m["conductor_ingest_replays_succeeded_total"] > before["conductor_ingest_replays_succeeded_total"]
	})
	after := c.streamMetrics(t, id, rank)
	for _, name := range []string{"conductor_ingest_replays_failed_total", "conductor_ingest_restarts_total",
		"conductor_ingest_stale_clears_total", "conductor_ingest_gaps_total"} {
		if after[name] != before[name] {
			t.Errorf("%s went from %d to %d", name, before[name], after[name])
		}
	}
	cp.checkAnswers(t, c, model, id, &cp.expect.Steps[last], fmt.Sprintf("the replay from seq %d", start))
}

// probeEra and probeEnvelope name the expect files' encodings as the probe
// reports them (docs/operations.md, "Probing an engine").
var (
	probeEra = map[string]string{
		"map with tag key 'type'":              "map",
		"array, tag first, fields by position": "array",
	}
	probeEnvelope = map[string]string{
		"map {ts, events, data_parallel_rank}":   "batch map",
		"map {ts, events, attn_dp_rank}":         "batch map",
		"array [ts, events, attn_dp_rank]":       "[ts, events, rank]",
		"array [ts, events, data_parallel_rank]": "[ts, events, rank]",
	}
)

// captureProbe runs `conductor probe` (the test binary as conductor) against
// a publisher sending the capture's live messages.
func captureProbe(t *testing.T, cp *capture) {
	pub := newCapturePub(t, cp.endMarker())
	cmd := exec.Command(os.Args[0], "probe", pub.endpoint, "--json", "--seconds", "20")
	// A race-instrumented binary sleeps a second at exit by default
	// (atexit_sleep_ms) for late reports of goroutines still running; the
	// probe has finished its work when it exits.
	cmd.Env = append(os.Environ(), "CONDUCTOR_TEST_CHILD=1", "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	t.Cleanup(func() {
		if !exited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	pub.awaitSubscribers(1)
	for _, m := range cp.live {
		pub.send(m.Frames)
	}
	err := cmd.Wait()
	exited = true
	if err != nil {
		t.Fatalf("conductor probe: %v\n%s%s", err, out.String(), errb.String())
	}
	var r probe.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("probe --json: %v\n%s", err, out.String())
	}
	e := cp.expect
	era, env := probeEra[e.Wire.EventEncoding], probeEnvelope[e.Wire.Envelope]
	if era == "" || env == "" {
		t.Fatalf("no probe name for the wire encodings %+v", e.Wire)
	}
	if r.Dialect != e.Registration.Type || !r.DialectSure || r.Era != era || !slices.Equal(r.Envelopes, []string{env}) {
		t.Errorf("probe: dialect %s sure=%v (%s), era %s, envelopes %v; want %s, sure, era %s, envelope %s",
			r.Dialect, r.DialectSure, r.DialectBy, r.Era, r.Envelopes, e.Registration.Type, era, env)
	}
	var found map[string]any
	if r.Hash.Profile != nil {
		found = map[string]any{"strategy": r.Hash.Profile.Strategy, "algorithm": r.Hash.Profile.Algorithm,
			"python_hash_seed": r.Hash.Profile.PythonHashSeed, "index_projection": r.Hash.Profile.IndexProjection}
	}
	if !sameProfile(found, e.Registration.HashProfile) || r.Hash.WithLora != (e.Registration.LoraName != nil) {
		t.Errorf("probe: hash profile %v (LoRA name hashed %v), want %v (%v): %s", found, r.Hash.WithLora,
			e.Registration.HashProfile, e.Registration.LoraName != nil, r.Hash.Text)
	}
	reg := r.Registration
	if reg == nil || reg.Type != e.Registration.Type || reg.BlockSize != int64(e.Registration.BlockSize) ||
		reg.DPRank != int64(e.Registration.DPRank) || (e.Registration.LoraName != nil && reg.LoraName != *e.Registration.LoraName) {
		t.Errorf("probe: registration %+v, want %+v", reg, e.Registration)
	}
}

// sameProfile compares a reported profile with an expect file's: the keys
// the file gives must match, the others be empty, except python_hash_seed
// under the SGLang strategies, which do not use it (docs/engines.md: any
// value is accepted).
func sameProfile(got map[string]any, want map[string]string) bool {
	if got == nil {
		return false
	}
	for _, k := range []string{"strategy", "algorithm", "python_hash_seed", "index_projection"} {
		if k == "python_hash_seed" && strings.HasPrefix(want["strategy"], "sglang") {
			continue
		}
		if g, _ := got[k].(string); g != want[k] {
			return false
		}
	}
	return true
}

// rootStoreWithTokens reports whether a step's payload (the expect file's
// decoded form: a vLLM batch map of event maps, or SGLang's array batch of
// array events) has a BlockStored without parent that carries token_ids: the
// event the self-check samples.
func rootStoreWithTokens(t *testing.T, payload json.RawMessage) bool {
	t.Helper()
	var events []json.RawMessage
	var batchMap struct {
		Events []json.RawMessage `json:"events"`
	}
	var batchArr []json.RawMessage
	if json.Unmarshal(payload, &batchMap) == nil {
		events = batchMap.Events
	} else if err := json.Unmarshal(payload, &batchArr); err == nil && len(batchArr) == 3 {
		if err := json.Unmarshal(batchArr[1], &events); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Fatalf("payload %s", payload)
	}
	for _, ev := range events {
		var m struct {
			Type   string          `json:"type"`
			Parent json.RawMessage `json:"parent_block_hash"`
			Tokens []int64         `json:"token_ids"`
		}
		var a []json.RawMessage
		if json.Unmarshal(ev, &m) != nil {
			if err := json.Unmarshal(ev, &a); err != nil || len(a) < 4 {
				t.Fatalf("event %s", ev)
			}
			_ = json.Unmarshal(a[0], &m.Type)
			m.Parent = a[2]
			_ = json.Unmarshal(a[3], &m.Tokens)
		}
		if m.Type == "BlockStored" && string(m.Parent) == "null" && len(m.Tokens) > 0 {
			return true
		}
	}
	return false
}

// mediumKey is the JSON dialect's key of each medium the captures name
// (docs/http-api.md: GPU is G1 device, CPU_PINNED G2 host memory).
var mediumKey = map[string]string{"GPU": "GPU", "CPU_PINNED": "CPU", "CPU": "CPU", "DISK": "DISK"}

// checkAnswers queries every prompt of the expect file for instance's row
// and compares it with step's answers: longest_matched with longest_prefix,
// GPU, CPU and DISK with the per-medium prefixes (0 for a medium the step
// does not name), and /query_by_hash with the prompt's full-block keys.
func (cp *capture) checkAnswers(t *testing.T, c *child, model, instance string, step *captureStep, what string) {
	t.Helper()
	names := make([]string, 0, len(cp.expect.Prompts))
	for n := range cp.expect.Prompts {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		p := cp.expect.Prompts[name]
		want, ok := step.LongestPrefix[name]
		if !ok {
			t.Fatalf("%s: no longest_prefix for %s", what, name)
		}
		wantMedia := map[string]int{"GPU": 0, "CPU": 0, "DISK": 0}
		for medium, n := range step.ByMedium[name] {
			key, ok := mediumKey[medium]
			if !ok {
				t.Fatalf("%s: medium %q has no JSON key here", what, medium)
			}
			wantMedia[key] = max(wantMedia[key], n)
		}
		q := map[string]any{"model": model, "block_size": p.BlockSize, "token_ids": p.TokenIDs}
		if p.LoraName != nil {
			q["lora_name"] = *p.LoraName
		}
		if p.CacheSalt != nil {
			q["cache_salt"] = *p.CacheSalt
		}
		row := c.queryRow(t, "/query", q, instance)
		if row["longest_matched"] != want || row["GPU"] != wantMedia["GPU"] || row["CPU"] != wantMedia["CPU"] || row["DISK"] != wantMedia["DISK"] {
			t.Errorf("%s: prompt %s: longest_matched %d GPU %d CPU %d DISK %d; want %d, %v",
				what, name, row["longest_matched"], row["GPU"], row["CPU"], row["DISK"], want, wantMedia)
		}
		// By the keys: the leading full blocks held, as block_size × blocks.
		var keys []uint64
		for i, h := range p.IndexKeysHex {
			if i < len(p.PageSizes) && p.PageSizes[i] != p.BlockSize {
				break // a partial page: by hash it would count as a whole block
			}
			k, err := strconv.ParseUint(h, 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
		q = map[string]any{"model": model, "block_size": p.BlockSize, "block_hash": keys}
		if p.LoraName != nil {
			q["lora_name"] = *p.LoraName
		}
		wantByHash := min(want/p.BlockSize, len(keys)) * p.BlockSize
		if got := c.queryRow(t, "/query_by_hash", q, instance)["longest_matched"]; got != wantByHash {
			t.Errorf("%s: prompt %s by its %d full-block keys: longest_matched %d, want %d", what, name, len(keys), got, wantByHash)
		}
	}
}

// queryRow posts a JSON query and returns instance's row in the default
// tenant (zeros when the answer has none).
func (c *child) queryRow(t *testing.T, path string, q map[string]any, instance string) map[string]int {
	t.Helper()
	b, _ := json.Marshal(q)
	code, _, resp := httpDo(t, "POST", "http://"+c.addr+path, "application/json", b)
	if code != 200 {
		t.Fatalf("%s %s: %d %s", path, b, code, resp)
	}
	var ans map[string]map[string]map[string]any
	if err := json.Unmarshal(resp, &ans); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, resp)
	}
	row := map[string]int{}
	for _, k := range []string{"longest_matched", "GPU", "CPU", "DISK"} {
		v, _ := ans["default"][instance][k].(float64)
		row[k] = int(v)
	}
	return row
}

// hashCheck returns instance's self-check state and found profile from
// /services.
func (c *child) hashCheck(t *testing.T, instance string) (string, map[string]any) {
	t.Helper()
	for _, s := range getJSON(t, "http://"+c.addr+"/services")["services"].([]any) {
		m := s.(map[string]any)
		if m["InstanceID"] == instance {
			hc := m["HashCheck"].(map[string]any)
			found, _ := hc["found"].(map[string]any)
			return hc["state"].(string), found
		}
	}
	t.Fatalf("%s not in /services", instance)
	return "", nil
}

var metricLine = regexp.MustCompile(`^(conductor_ingest_[a-z_]+)\{instance="([^"]*)",tenant="default",dp_rank="(\d+)"(,type="([a-z]+)")?\} (\d+)$`)

// streamMetrics returns instance's conductor_ingest_* counters (events by
// type as conductor_ingest_events_total_<type>).
func (c *child) streamMetrics(t *testing.T, instance string, rank int) map[string]int {
	t.Helper()
	code, _, body := httpDo(t, "GET", "http://"+c.addr+"/metrics", "", nil)
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	out := map[string]int{}
	for _, line := range strings.Split(string(body), "\n") {
		m := metricLine.FindStringSubmatch(line)
		if m == nil || m[2] != instance || m[3] != strconv.Itoa(rank) {
			continue
		}
		name := m[1]
		if m[5] != "" {
			name += "_" + m[5]
		}
		out[name], _ = strconv.Atoi(m[6])
	}
	return out
}

// awaitStream waits until instance's listener has applied n batches, then
// checks that none was refused or lost: no decode errors, no dropped
// events, no gaps.
func (c *child) awaitStream(t *testing.T, instance string, rank, n int) {
	t.Helper()
	var m map[string]int
	waitFor(t, fmt.Sprintf("%s to apply %d batches", instance, n), func() bool {
		m = c.streamMetrics(t, instance, rank)
		return m["conductor_ingest_batches_total"] >= n || m["conductor_ingest_decode_errors_total"] > 0
	})
	if m["conductor_ingest_batches_total"] != n || m["conductor_ingest_decode_errors_total"] != 0 ||
		m["conductor_ingest_events_total_dropped"] != 0 || m["conductor_ingest_gaps_total"] != 0 {
		t.Fatalf("%s: %v, want %d batches and nothing refused or lost\n%s", instance, m, n, c.logs)
	}
}
