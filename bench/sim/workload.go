package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
)

// TraceRecord is one line of a Mooncake-format trace
// (FAST'25 Mooncake traces: {timestamp, input_length, output_length, hash_ids}).
// Each hash id names one TraceBlockTokens-token block of the prompt, and the
// ids are prefix-chained: equal leading ids mean equal prompt prefixes.
type TraceRecord struct {
	Timestamp    int64    `json:"timestamp"` // milliseconds from the trace start
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// TraceBlockTokens is the block size of the Mooncake traces' hash ids.
const TraceBlockTokens = 512

// ReadTrace reads up to limit records (0 = all) from a JSON-lines trace.
func ReadTrace(r io.Reader, limit int) ([]TraceRecord, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 16<<20)
	var out []TraceRecord
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var rec TraceRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("sim: trace line %d: %w", line, err)
		}
		if rec.InputLength < 0 || rec.InputLength > len(rec.HashIDs)*TraceBlockTokens {
			return nil, fmt.Errorf("sim: trace line %d: input_length %d does not fit %d hash ids", line, rec.InputLength, len(rec.HashIDs))
		}
		out = append(out, rec)
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out, sc.Err()
}

// Vocab bounds expanded token ids: [0, Vocab), a plausible tokenizer size, and
// non-negative so every hash strategy accepts them.
const Vocab = 128000

// AppendBlockTokens appends the TraceBlockTokens tokens of hash id h: a
// deterministic function of h alone (a PCG stream seeded by h), so equal hash
// ids expand to equal tokens and any re-blocking (16, 64, 128 divide 512)
// keeps prefixes shared exactly where the trace shares them.
func AppendBlockTokens(dst []int32, h uint64) []int32 {
	r := rand.New(rand.NewPCG(h, 0x636f6e647563746f)) // "conducto"
	for i := 0; i < TraceBlockTokens; i++ {
		dst = append(dst, int32(r.IntN(Vocab)))
	}
	return dst
}

// Expand returns the prompt tokens of rec: its hash ids' blocks, cut to
// input_length.
func (rec *TraceRecord) Expand() []int32 {
	toks := make([]int32, 0, len(rec.HashIDs)*TraceBlockTokens)
	for _, h := range rec.HashIDs {
		toks = AppendBlockTokens(toks, h)
	}
	return toks[:rec.InputLength]
}

// SyntheticOptions shape the built-in workload. Zero fields take the defaults.
type SyntheticOptions struct {
	Seed uint64
	// SystemPrompts shared across conversations (default 8), each
	// SystemTokens long (default 1024).
	SystemPrompts, SystemTokens int
	// Conversations alive at once (default 64); each lasts up to Turns turns
	// (default 6) and then a new one replaces it.
	Conversations, Turns int
	// TurnTokens: user tokens added per turn (default 256); the previous
	// answer (AnswerTokens, default 128) is part of the next prompt.
	TurnTokens, AnswerTokens int
}

func (o *SyntheticOptions) ensureDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.SystemPrompts, 8)
	def(&o.SystemTokens, 1024)
	def(&o.Conversations, 64)
	def(&o.Turns, 6)
	def(&o.TurnTokens, 256)
	def(&o.AnswerTokens, 128)
}

// Synthetic generates multi-turn chat prompts with the statistics of the
// conversation trace: a few shared system prompts (cross-user prefix reuse)
// and growing conversations (each turn's prompt extends the previous one, so
// the previous turn's blocks are a prefix hit where that turn ran). It is
// deterministic for a seed and not safe for concurrent use.
type Synthetic struct {
	o     SyntheticOptions
	r     *rand.Rand
	sys   [][]int32
	convs []synthConv
}

type synthConv struct {
	toks  []int32
	turns int
}

// NewSynthetic builds a generator.
func NewSynthetic(o SyntheticOptions) *Synthetic {
	o.ensureDefaults()
	s := &Synthetic{o: o, r: rand.New(rand.NewPCG(o.Seed, 0x73796e7468))}
	for i := 0; i < o.SystemPrompts; i++ {
		s.sys = append(s.sys, s.tokens(nil, o.SystemTokens))
	}
	s.convs = make([]synthConv, o.Conversations)
	return s
}

func (s *Synthetic) tokens(dst []int32, n int) []int32 {
	for i := 0; i < n; i++ {
		dst = append(dst, int32(s.r.IntN(Vocab)))
	}
	return dst
}

// Next returns the next prompt. The slice is the generator's; it stays valid
// and unchanged (later turns copy before extending).
func (s *Synthetic) Next() []int32 {
	c := &s.convs[s.r.IntN(len(s.convs))]
	if c.toks == nil || c.turns >= s.o.Turns {
		sys := s.sys[s.r.IntN(len(s.sys))]
		c.toks, c.turns = append([]int32(nil), sys...), 0
	} else {
		c.toks = s.tokens(append([]int32(nil), c.toks...), s.o.AnswerTokens)
	}
	c.toks = s.tokens(c.toks, 1+s.r.IntN(2*s.o.TurnTokens))
	c.turns++
	return c.toks
}

// Source yields prompts; ok=false ends the workload.
type Source interface {
	Next() (tokens []int32, ok bool)
}

// TraceSource replays trace records in order (timestamps are not honoured;
// the driver paces requests itself).
type TraceSource struct {
	Records []TraceRecord
	i       int
}

func (s *TraceSource) Next() ([]int32, bool) {
	if s.i >= len(s.Records) {
		return nil, false
	}
	s.i++
	return s.Records[s.i-1].Expand(), true
}

// SyntheticSource adapts a Synthetic generator to Source.
type SyntheticSource struct{ *Synthetic }

func (s SyntheticSource) Next() ([]int32, bool) { return s.Synthetic.Next(), true }
