package wire

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
)

// The captures in testdata/captures are real publishers' bytes (upstream
// vLLM's and SGLang's ZmqEventPublisher, see its README); their expect files
// give every payload decoded by another msgpack implementation. The
// expectations here are built from those decoded forms with vecEvent, never
// from this decoder. cmd/conductor's TestCaptureReplay replays the same files
// into a conductor process.

const captureDir = "testdata/captures"

// captureLine is one message of a .jsonl capture; frames are base64 in the
// file, which encoding/json decodes into []byte.
type captureLine struct {
	Dir    string   `json:"dir"`
	Frames [][]byte `json:"frames_b64"`
	Seq    *int64   `json:"seq"`
}

type captureFile struct {
	name   string
	lines  []captureLine
	expect struct {
		Registration struct {
			Type string `json:"type"`
		} `json:"registration"`
		Wire struct {
			Envelope      string `json:"envelope"`
			EventEncoding string `json:"event_encoding"`
		} `json:"wire"`
		Steps []struct {
			Seq     int64 `json:"seq"`
			Payload any   `json:"payload"`
		} `json:"steps"`
		Replay struct {
			StartSeq  uint64  `json:"start_seq"`
			ReplySeqs []int64 `json:"reply_seqs"`
		} `json:"replay"`
	}
}

func loadCaptureFiles(t *testing.T) []captureFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(captureDir, "*.jsonl"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no captures: %v", err)
	}
	var out []captureFile
	for _, p := range paths {
		c := captureFile{name: strings.TrimSuffix(filepath.Base(p), ".jsonl")}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l captureLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			c.lines = append(c.lines, l)
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		loadJSON(t, filepath.Join("captures", c.name+".expect.json"), &c.expect)
		out = append(out, c)
	}
	return out
}

// TestCaptureFiles: the directory holds the nine captures, each with its
// expect file, byte-identical to the copies its README lists.
func TestCaptureFiles(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(captureDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\| `([0-9a-f]{64})` \\|$").FindAllSubmatch(readme, -1) {
		listed[string(m[1])] = string(m[2])
	}
	files, err := os.ReadDir(captureDir)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range files {
		if f.Name() == "README.md" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(captureDir, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if want, ok := listed[f.Name()]; !ok || hex.EncodeToString(sum[:]) != want {
			t.Errorf("%s: sha256 %x, README lists %q", f.Name(), sum, want)
		}
		seen++
	}
	if seen != 18 || len(listed) != 18 {
		t.Errorf("%d files, %d listed; want the 9 captures and their 9 expect files", seen, len(listed))
	}
}

// TestCaptures: every live payload decodes, with the dialect of the expect
// file's registration, to the step's decoded payload; every replay reply
// parses to its sequence and the live payload of that sequence, the last to
// the end marker; the request a listener builds for the captured start
// sequence is the captured request; and the evidence of the whole capture
// names its dialect (surely) and era, as a probe watching it would.
func TestCaptures(t *testing.T) {
	var d Decoder
	var b core.Batch
	for _, c := range loadCaptureFiles(t) {
		t.Run(c.name, func(t *testing.T) {
			dialect, err := ParseDialect(c.expect.Registration.Type)
			if err != nil {
				t.Fatal(err)
			}
			live := map[int64][]byte{}
			var ev Evidence
			steps := c.expect.Steps
			replies := 0
			for i, l := range c.lines {
				switch l.Dir {
				case "pub":
					topic, seq, payload, err := ParseLive(l.Frames)
					if err != nil || len(topic) != 0 || l.Seq == nil || int64(seq) != *l.Seq {
						t.Fatalf("line %d: topic %q seq %d (line says %v): %v", i+1, topic, seq, l.Seq, err)
					}
					k := len(live)
					if k >= len(steps) || steps[k].Seq != *l.Seq {
						t.Fatalf("line %d: seq %d has no step", i+1, seq)
					}
					live[*l.Seq] = payload
					if err := d.Decode(dialect, payload, &b); err != nil {
						t.Fatalf("seq %d: %v", seq, err)
					}
					checkCapturePayload(t, dialect, steps[k].Payload, &b)
					ev |= d.evidence(t, payload)
				case "replay_req":
					want := AppendReplayRequest(nil, c.expect.Replay.StartSeq)
					if len(l.Frames) != len(want) || !bytes.Equal(l.Frames[0], want[0]) || !bytes.Equal(l.Frames[1], want[1]) {
						t.Errorf("captured request %x, AppendReplayRequest(%d) = %x", l.Frames, c.expect.Replay.StartSeq, want)
					}
				case "replay_rep":
					seq, payload, end, err := ParseReplayReply(l.Frames)
					if err != nil || replies >= len(c.expect.Replay.ReplySeqs) {
						t.Fatalf("reply %d: %v", replies, err)
					}
					want := c.expect.Replay.ReplySeqs[replies]
					replies++
					if want < 0 {
						if !end || seq != ReplayEndSeq {
							t.Errorf("reply %d: seq %d end %v, want the end marker", replies, seq, end)
						}
						continue
					}
					if end || int64(seq) != want || !bytes.Equal(payload, live[want]) {
						t.Errorf("reply %d: seq %d end %v, want seq %d with its live payload", replies, seq, end, want)
					}
				default:
					t.Fatalf("line %d: dir %q", i+1, l.Dir)
				}
			}
			if len(live) != len(steps) || replies != len(c.expect.Replay.ReplySeqs) {
				t.Fatalf("%d live messages for %d steps, %d replies", len(live), len(steps), replies)
			}
			era := map[string]Era{"map with tag key 'type'": EraMap, "array, tag first, fields by position": EraArray}[c.expect.Wire.EventEncoding]
			if got, sure := ev.Dialect(); got != dialect || !sure || ev.Era() != era {
				t.Errorf("evidence %#x: %v sure=%v era %v; want %v, sure, era %v", ev, got, sure, ev.Era(), dialect, era)
			}
		})
	}
}

// evidence returns what detection finds in payload.
func (d *Decoder) evidence(t *testing.T, payload []byte) Evidence {
	t.Helper()
	var b core.Batch
	s, err := d.DecodeAny(payload, &b)
	if err != nil {
		t.Fatal(err)
	}
	return s.Evidence
}

// checkCapturePayload compares a decoded batch with an expect file's decoded
// payload: a vLLM batch map or SGLang's [ts, events, attn_dp_rank], with ts
// null (the capture's wall-clock time is not in the file).
func checkCapturePayload(t *testing.T, dialect Dialect, payload any, got *core.Batch) {
	t.Helper()
	var events []any
	var rank any
	switch p := payload.(type) {
	case map[string]any:
		events, _ = p["events"].([]any)
		rank = p["data_parallel_rank"]
	case []any:
		if len(p) != 3 {
			t.Fatalf("payload %v", p)
		}
		events, _ = p[1].([]any)
		rank = p[2]
	default:
		t.Fatalf("payload of type %T", payload)
	}
	want := make([]core.Event, 0, len(events))
	for _, e := range events {
		want = append(want, vecEvent(t, dialect, e))
	}
	checkBatch(t, got, nil, rank, want)
	if got.TimestampF <= 0 {
		t.Errorf("ts %v, want the capture's wall-clock time", got.TimestampF)
	}
	if slices.ContainsFunc(got.Events, func(e core.Event) bool { return e.Standard }) {
		t.Error("an engine event decoded as a standardized one")
	}
}
