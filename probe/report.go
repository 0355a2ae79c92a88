package probe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/wire"
)

// Report is what a probe found: WriteJSON writes it as is, WriteText
// renders the same fields for a person.
type Report struct {
	Endpoint     string    `json:"endpoint"`
	Seconds      float64   `json:"seconds"`
	StoppedEarly bool      `json:"stopped_early"`
	Interrupted  bool      `json:"interrupted,omitempty"`
	Connected    bool      `json:"connected"`
	Messages     int       `json:"messages"`
	Malformed    int       `json:"malformed_messages"`
	OverLimit    int       `json:"messages_over_limit"`
	Sequence     SeqReport `json:"sequence"`

	Dialect     string   `json:"dialect"` // the registration's type
	DialectSure bool     `json:"dialect_sure"`
	DialectBy   string   `json:"dialect_by"`
	Era         string   `json:"era"`
	EraText     string   `json:"era_text"`
	Envelopes   []string `json:"envelopes"`

	Events     EventReport `json:"events"`
	DPRanks    []int64     `json:"dp_ranks"`
	NilRank    int         `json:"batches_without_rank"`
	Media      []string    `json:"media"`
	BlockSizes []int64     `json:"block_sizes"`
	TokenIDs   TokenReport `json:"token_ids"`
	LoraNames  []string    `json:"lora_names"`
	CacheSalts []string    `json:"cache_salts"`
	ModelNames []string    `json:"model_names"`
	TenantIDs  []string    `json:"tenant_ids"`

	Replay     *ReplayResult `json:"replay"`
	ReplayText string        `json:"replay_text,omitempty"`
	Hash       HashReport    `json:"hash"`

	// Registration is the POST /register body (also the configuration
	// file's entry); nil when the block size is unknown.
	Registration *Registration `json:"registration"`
	Curl         string        `json:"curl,omitempty"`
	// Python is the Python client's call; "" for standard publishers, which
	// its RPC surface does not register, and for a Mooncake master, which it
	// registers only with the engines' hash_profile.
	Python string   `json:"python,omitempty"`
	Config *Config  `json:"config,omitempty"`
	Notes  []string `json:"notes"`
}

type SeqReport struct {
	First     uint64 `json:"first"`
	Last      uint64 `json:"last"`
	Gaps      int    `json:"gaps"`
	Missing   uint64 `json:"missing"`
	Backwards int    `json:"backwards"`
}

type EventReport struct {
	Stored  int `json:"stored"`
	Removed int `json:"removed"`
	Cleared int `json:"cleared"`
	// Standard counts RFC #1527 event maps inside an engine's batches.
	Standard     int    `json:"standard_in_engine_batches"`
	Dropped      int    `json:"dropped_by_decoder"`
	DecodeErrors int    `json:"messages_with_errors"`
	FirstError   string `json:"first_error,omitempty"`
}

type TokenReport struct {
	Stored           int `json:"stored_events"`
	StoredWithTokens int `json:"stored_with_token_ids"`
	Roots            int `json:"root_events"`
	RootsWithTokens  int `json:"root_events_with_token_ids"`
}

type HashReport struct {
	// Profile reproduces the engine's hashes (nil: none does, or the
	// dialect's blocks cannot be checked); the registration's may differ
	// (KeysFromTokenIDs).
	Profile  *Profile `json:"profile"`
	WithLora bool     `json:"lora_name_hashed,omitempty"`
	Checked  int      `json:"root_events_checked"`
	Matched  int      `json:"root_events_reproduced"`
	// KeysFromTokenIDs: the registration has the xxh3 profile, under which
	// conductor computes block keys from token_ids itself.
	KeysFromTokenIDs bool   `json:"keys_from_token_ids"`
	Text             string `json:"text"`
}

// Profile is a hash_profile as /register takes it.
type Profile struct {
	Strategy        string `json:"strategy"`
	Algorithm       string `json:"algorithm"`
	PythonHashSeed  string `json:"python_hash_seed"`
	IndexProjection string `json:"index_projection"`
}

func profileOf(s hash.Spec) *Profile {
	return &Profile{s.Strategy, s.Algorithm, s.PythonHashSeed, s.IndexProjection}
}

// Registration is a POST /register body and a configuration file entry
// (docs/http-api.md, docs/configuration.md).
type Registration struct {
	Endpoint       string `json:"endpoint"`
	ReplayEndpoint string `json:"replay_endpoint,omitempty"`
	Type           string `json:"type"`
	ModelName      string `json:"modelname"`
	InstanceID     string `json:"instance_id"`
	BlockSize      int64  `json:"block_size"`
	DPRank         int64  `json:"dp_rank"`
	LoraName       string `json:"lora_name,omitempty"`
	// HashProfile is nil for a Mooncake master: the context's applies.
	HashProfile *Profile `json:"hash_profile,omitempty"`
}

// PythonRegistration is the Python client's register() config
// (docs/python.md).
type PythonRegistration struct {
	InstanceID     string   `json:"instance_id"`
	Endpoint       string   `json:"endpoint"`
	ReplayEndpoint string   `json:"replay_endpoint,omitempty"`
	PublisherType  string   `json:"publisher_type"`
	ModelName      string   `json:"model_name"`
	BlockSize      int64    `json:"block_size"`
	DPRank         int64    `json:"dp_rank"`
	LoraName       string   `json:"lora_name,omitempty"`
	HashProfile    *Profile `json:"hash_profile"`
}

type Config struct {
	Services []Registration `json:"services"`
}

// placeholderModel is the registration's modelname when neither --model nor
// the events name one.
const placeholderModel = "my-model"

// buildReport turns the observation into the report.
func buildReport(ps *Options, o *observation, rx *listenRun) *Report {
	r := &Report{Endpoint: ps.Endpoint, Seconds: float64(rx.elapsed.Milliseconds()) / 1000,
		StoppedEarly: rx.early, Interrupted: rx.interrupted, Connected: rx.connected,
		Messages: o.messages, Malformed: o.malformed, OverLimit: rx.tooBig,
		Sequence: SeqReport{o.firstSeq, o.last, o.gaps, o.missing, o.backwards},
		Events: EventReport{Stored: o.stored, Removed: o.removed, Cleared: o.cleared, Dropped: o.dropped,
			DecodeErrors: o.decodeErrs, FirstError: o.firstErr},
		NilRank: o.nilRank, Media: mediaList(&o.media), BlockSizes: o.blockSizes.sorted(),
		TokenIDs:  TokenReport{o.stored, o.storedTokens, o.roots, o.rootsTokens},
		LoraNames: tallyList(&o.loras), CacheSalts: tallyList(&o.salts), ModelNames: tallyList(&o.models),
		TenantIDs: tallyList(&o.tenants), Replay: rx.replay, Envelopes: []string{}, Notes: []string{}}
	for env, n := range o.envelopes {
		if n > 0 && env != 0 {
			r.Envelopes = append(r.Envelopes, wire.Envelope(env).String())
		}
	}
	d, sure := o.evidence.Dialect()
	by := evidenceReason(o.evidence, d, sure)
	engine := o.evidence&wire.EvEngineEvents != 0
	best, total, found := o.engineProfile()
	if engine && found {
		fam := wire.DialectVLLM
		if best.spec.Strategy != "vllm_v1" {
			fam = wire.DialectSGLang
		}
		switch {
		case !sure:
			d, sure, by = fam, true, "its block hashes are "+fam.String()+"'s (the events alone fit vLLM and SGLang)"
		case fam != d:
			r.note("its events look like %s's but its hashes are %s's: check the registration's type", d, fam)
		}
	}
	if engine {
		r.Events.Standard = o.standard
	}
	r.Dialect, r.DialectSure, r.DialectBy = d.String(), sure, by
	r.Era, r.EraText = o.evidence.Era().String(), eraText(d, o.evidence.Era())
	if o.evidence.Era() == 0 {
		r.Era = ""
	}
	r.DPRanks = o.batchRanks.sorted()
	if len(r.DPRanks) == 0 {
		r.DPRanks = o.eventRanks.sorted()
	}
	r.Hash = r.hashProfile(ps, o, d, engine, best, total, found)
	if r.Replay != nil {
		r.ReplayText = replayText(r.Replay)
	}
	r.registration(ps, o, d)
	return r
}

func (r *Report) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// hashProfile says which profile reproduces the engine's hashes and picks
// the registration's.
func (r *Report) hashProfile(ps *Options, o *observation, d wire.Dialect, engine bool,
	best profileVote, total int, found bool) HashReport {
	std := hash.DefaultProfile().Spec
	h := HashReport{Checked: total}
	switch {
	case d == wire.DialectStandard:
		h.Profile, h.KeysFromTokenIDs = profileOf(std), true
		tot, follow := o.standardSamples()
		h.Checked, h.Matched = tot, follow
		if o.storedTokens == 0 {
			h.Text = "xxh3 (the RFC #1527 standard, seed 1337): the events carry no token_ids, so conductor keys blocks by their seq_hashes, which must follow the standard"
			break
		}
		h.Text = "xxh3 (the RFC #1527 standard, seed 1337): conductor computes the keys from token_ids itself"
		if tot > 0 {
			h.Text += fmt.Sprintf("; the publisher's seq_hashes follow the standard on %d of %s", follow, plural(tot, "distinct root event"))
		}
	case d == wire.DialectMooncake:
		h.Text = "none needed: a Mooncake master's seq_hashes are keys of the engines whose blocks it stores, " +
			"so it is registered without a hash_profile and the profile of those engines' registrations applies"
	case engine && found:
		h.Profile, h.WithLora, h.Matched = profileOf(best.spec), best.withLora, best.n
		h.Text = fmt.Sprintf("%s reproduces %d of %s with token_ids", best.spec.Describe(), best.n, plural(total, "distinct root event"))
		if best.withLora {
			h.Text += ", the LoRA name among the extra keys"
		}
		if best.n < total {
			h.Text += "; the others hash keys the events do not carry (salted or multimodal prompts)"
		}
		if !best.withLora && len(o.loras.keys) > 0 {
			h.KeysFromTokenIDs = true
			h.Text += "; the engine leaves the LoRA name out of its hashes, which conductor's queries for an adapter hash, " +
				"so the registration has conductor compute keys from token_ids itself (xxh3)"
		}
	default:
		h.Text = noProfileReason(ps, o, total)
		if o.storedTokens > 0 {
			h.KeysFromTokenIDs = true
			h.Text += "; the registration below has conductor compute keys from token_ids itself (xxh3): queries by token_ids hit, queries by the engine's own hashes do not"
		} else {
			h.Text += "; without token_ids conductor cannot compute keys itself"
			r.note("hash_profile is a placeholder (xxh3): replace it with the engine's, or its blocks are dropped")
		}
	}
	return h
}

// noProfileReason says, in words, why no profile reproduces an engine's
// hashes.
func noProfileReason(ps *Options, o *observation, checked int) string {
	switch {
	case checked > 0:
		seeds := "0"
		if ps.Seed != "0" {
			seeds = ps.Seed + " or 0"
		}
		return fmt.Sprintf("no known profile reproduces its hashes (vllm_v1 sha256, sha256_cbor, xxhash or xxhash_cbor with PYTHONHASHSEED=%s; sglang; sglang_bigram) "+
			"over %s with token_ids: vLLM without PYTHONHASHSEED seeds its root hash at random (set it on the engine and pass it with --seed), "+
			"and salted prompts (cache_salt) hash a salt the events do not carry", seeds, plural(checked, "distinct root event"))
	case o.noBlockSize > 0:
		return "no profile checked: the root events with token_ids carry no block size (pass --block-size)"
	case o.roots == 0 && o.stored > 0:
		return "no profile checked: every stored event continued a chain (a parent hash), and only a chain's root can be checked: probe while the engine serves new prompts"
	case o.roots > 0 && o.rootsTokens == 0:
		return "no profile checked: no root event carries token_ids"
	}
	return "no profile checked: no stored event"
}

// registration builds the registration in its three forms.
func (r *Report) registration(ps *Options, o *observation, d wire.Dialect) {
	reg := Registration{Endpoint: ps.Endpoint, Type: d.String(), InstanceID: ps.InstanceID, ModelName: ps.Model}
	switch bs, ok := o.blockSizes.most(); {
	case ps.BlockSize > 0:
		reg.BlockSize = int64(ps.BlockSize)
		if ok && bs != reg.BlockSize {
			r.note("block_size is --block-size's %d; the events show %v", ps.BlockSize, r.BlockSizes)
		}
	case ok:
		reg.BlockSize = bs
		if len(r.BlockSizes) > 1 {
			r.note("block_size %d is the events' most common; they show %v", bs, r.BlockSizes)
		}
	default:
		r.note("no registration: no event carried a block size; rerun with --block-size N")
	}
	if reg.ModelName == "" {
		if m, ok := o.models.most(); ok && m != "" {
			reg.ModelName = m
		} else {
			reg.ModelName = placeholderModel
			r.note("modelname %q is a placeholder: pass --model with the name queries use", placeholderModel)
		}
	}
	if reg.InstanceID == "" {
		reg.InstanceID = defaultInstanceID(d, ps.Endpoint)
	}
	if len(r.DPRanks) > 0 {
		reg.DPRank = r.DPRanks[0]
		if len(r.DPRanks) > 1 {
			r.note("dp_rank is the lowest of the ranks its batches carry, %v; conductor admits the others under the same registration", r.DPRanks)
		}
	}
	if l, ok := o.loras.most(); ok {
		reg.LoraName = l
		if len(o.loras.keys) > 1 {
			r.note("lora_name is the most frequent of %d adapters; a registration serves one, and events of the others are dropped", len(o.loras.keys))
		}
	}
	if d == wire.DialectMooncake {
		r.note("a Mooncake master's blocks extend the prompts of the engines registered with the same model and block size " +
			"(the shared tier, cpu_share): queries see them in those engines' rows, so register the engines too")
	}
	switch {
	case ps.Replay == "":
		if d != wire.DialectMooncake {
			r.note("no --replay: without a replay endpoint a sequence gap clears the stream's blocks instead of being replayed")
		}
	case r.Replay != nil && r.Replay.Answered:
		reg.ReplayEndpoint = ps.Replay
	default:
		r.note("replay_endpoint left out: %s did not answer", ps.Replay)
	}
	reg.HashProfile = r.Hash.Profile
	if r.Hash.KeysFromTokenIDs || (reg.HashProfile == nil && d != wire.DialectMooncake) {
		reg.HashProfile = profileOf(hash.DefaultProfile().Spec)
	}
	if reg.BlockSize == 0 {
		return
	}
	r.Registration = &reg
	body := marshalCompact(reg)
	r.Curl = "curl -s localhost:13333/register -H 'Content-Type: application/json' -d '" +
		strings.ReplaceAll(body, "'", `'\''`) + "'"
	r.Config = &Config{Services: []Registration{reg}}
	switch d {
	case wire.DialectStandard:
		r.note("the Python client registers vLLM, SGLang and Mooncake publishers: register a standard one over HTTP or in the configuration file")
		return
	case wire.DialectMooncake:
		r.note("the Python client requires a hash_profile: register the master through it with the engines' hash_profile")
		return
	}
	r.Python = "client.register(" + marshalCompact(PythonRegistration{InstanceID: reg.InstanceID, Endpoint: reg.Endpoint,
		ReplayEndpoint: reg.ReplayEndpoint, PublisherType: reg.Type, ModelName: reg.ModelName, BlockSize: reg.BlockSize,
		DPRank: reg.DPRank, LoraName: reg.LoraName, HashProfile: reg.HashProfile}) + ")"
}

// defaultInstanceID names an instance after its dialect and endpoint:
// "vllm-10.0.0.5-5557".
func defaultInstanceID(d wire.Dialect, endpoint string) string {
	_, addr, _ := strings.Cut(endpoint, "://")
	addr = strings.NewReplacer("[", "", "]", "", ":", "-", "/", "-", ";", "-").Replace(addr)
	return strings.ToLower(d.String()) + "-" + strings.Trim(addr, "-")
}

// marshalCompact is one line of JSON, with <, > and & as themselves (they
// are for the shell and Python, not for HTML).
func marshalCompact(v any) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	_ = e.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

// evidenceReason says what decided the dialect.
func evidenceReason(e wire.Evidence, d wire.Dialect, sure bool) string {
	switch {
	case d == wire.DialectMooncake:
		return "its events name blocks by object_key (the store master's)"
	case d == wire.DialectStandard && sure:
		return "RFC #1527 event maps that name blocks without object keys"
	case d == wire.DialectStandard:
		return "a guess: integer-stamped batches without blocks"
	case !sure && e&wire.EvEngineEvents == 0:
		return "a guess: no event showed its encoding"
	case !sure:
		return "a guess: nothing it sent is only vLLM's or only SGLang's"
	case e&(wire.EvVLLMForm|wire.EvSGLangForm) != 0:
		return "a form only " + d.String() + " sends"
	case d == wire.DialectVLLM:
		return "integer hashes above 2^63-1 (vLLM publishes them unsigned)"
	}
	return "negative integer hashes (SGLang publishes signed int64)"
}

// eraText describes the event encoding.
func eraText(d wire.Dialect, e wire.Era) string {
	switch {
	case d == wire.DialectMooncake:
		return "store master: RFC #1527 event maps in [ts_ms, events, dp_rank], blocks named by object_key"
	case d == wire.DialectStandard:
		return "RFC #1527 standardized event maps (event_type)"
	case e == wire.EraArray && d == wire.DialectVLLM:
		return "array era: events as arrays, tag first (vLLM up to v0.23)"
	case e == wire.EraMap && d == wire.DialectVLLM:
		return `map era: events as maps with a "type" key (vLLM after v0.23)`
	case e == wire.EraArray:
		return "array era: events as arrays, tag first"
	case e == wire.EraArrayMetadata:
		return `array era with metadata: salted stores are BlockStoredWithMetadata, {"cache_salt": ...} at position 7`
	case e == wire.EraMap:
		return `map era: events as maps with a "type" key`
	}
	return "unknown: no event showed its encoding"
}

// replayText describes how the replay endpoint answered.
func replayText(rp *ReplayResult) string {
	if !rp.Answered {
		return fmt.Sprintf("%s did not answer a request from seq %d: %s", rp.Endpoint, rp.From, rp.Error)
	}
	form := `3-frame form ["", seq, payload] (SGLang's and older vLLM's)`
	if rp.Frames == 4 {
		form = `4-frame form ["", topic, seq, payload] (newer vLLM's)`
	}
	s := fmt.Sprintf("%s answered a request from seq %d in the %s: ", rp.Endpoint, rp.From, form)
	switch rp.Replies {
	case 0:
		s += "no batch (its ring holds nothing from there)"
	case 1:
		s += fmt.Sprintf("1 batch (seq %d)", rp.FirstSeq)
	default:
		s += fmt.Sprintf("%d batches (seq %d … %d)", rp.Replies, rp.FirstSeq, rp.LastSeq)
	}
	if rp.EndMarker {
		s += ", then the end marker"
	} else if rp.Error != "" {
		s += "; " + rp.Error
	} else {
		s += fmt.Sprintf("; stopped reading after %d", rp.Replies)
	}
	if rp.SameAsLive {
		s += fmt.Sprintf("; the batch at seq %d is the one seen live", rp.From)
	} else if rp.Replies > 0 && rp.FirstSeq != rp.From {
		s += fmt.Sprintf("; its ring no longer holds seq %d", rp.From)
	}
	return s
}

func tallyList(t *tally) []string {
	out := append([]string{}, t.keys...)
	if t.more > 0 {
		out = append(out, fmt.Sprintf("(%d more)", t.more))
	}
	return out
}

// mediaList lists the media; a store without one shows as "(none)".
func mediaList(t *tally) []string {
	out := tallyList(t)
	for i, m := range t.keys {
		if m == "" {
			out[i] = "(none)"
		}
	}
	return out
}

// WriteJSON writes the report as one indented JSON document (`conductor probe
// --json`).
func (r *Report) WriteJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetEscapeHTML(false)
	e.SetIndent("", "  ")
	return e.Encode(r)
}

// WriteText writes the report for a person (`conductor probe`).
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	line := func(k, format string, args ...any) { fmt.Fprintf(&b, "  %-14s %s\n", k, fmt.Sprintf(format, args...)) }
	stop := ""
	switch {
	case r.Interrupted:
		stop = ", interrupted"
	case r.StoppedEarly:
		stop = ", stopped once everything was identified"
	}
	fmt.Fprintf(&b, "conductor probe %s: %d messages in %.1f s%s\n", r.Endpoint, r.Messages, r.Seconds, stop)
	seq := fmt.Sprintf("%d … %d", r.Sequence.First, r.Sequence.Last)
	switch {
	case r.Sequence.Gaps > 0:
		seq += fmt.Sprintf(", %d gaps (%d sequences missing)", r.Sequence.Gaps, r.Sequence.Missing)
	default:
		seq += ", no gaps"
	}
	if r.Sequence.Backwards > 0 {
		seq += fmt.Sprintf(", %d steps back (a restart or a duplicate)", r.Sequence.Backwards)
	}
	line("sequence", "%s", seq)
	if r.Malformed+r.OverLimit > 0 {
		line("refused", "%d messages not [topic, seq, payload], %d above the message limit", r.Malformed, r.OverLimit)
	}
	sure := ""
	if !r.DialectSure {
		sure = " (unsure)"
	}
	line("dialect", "%s%s: %s", r.Dialect, sure, r.DialectBy)
	line("era", "%s", r.EraText)
	if len(r.Envelopes) > 1 || (len(r.Envelopes) == 1 && r.Envelopes[0] != wire.EnvelopeArray.String()) {
		line("batches", "%s", strings.Join(r.Envelopes, "; "))
	}
	ev := fmt.Sprintf("%d stored, %d removed, %d cleared", r.Events.Stored, r.Events.Removed, r.Events.Cleared)
	if r.Events.Standard > 0 {
		ev += fmt.Sprintf(" (%d of them RFC #1527 maps)", r.Events.Standard)
	}
	if r.Events.Dropped > 0 || r.Events.DecodeErrors > 0 {
		ev += fmt.Sprintf("; %d dropped by the decoder, first: %s", r.Events.Dropped, r.Events.FirstError)
	}
	line("events", "%s", ev)
	ranks := listOr(intsText(r.DPRanks), "none")
	if r.NilRank > 0 && len(r.DPRanks) > 0 {
		ranks += fmt.Sprintf(" (%d batches without one)", r.NilRank)
	}
	line("dp ranks", "%s", ranks)
	line("media", "%s", listOr(r.Media, "none"))
	line("block sizes", "%s", listOr(intsText(r.BlockSizes), "none"))
	line("token_ids", "on %d of %d stored events; %d of %d root events (no parent) carry them",
		r.TokenIDs.StoredWithTokens, r.TokenIDs.Stored, r.TokenIDs.RootsWithTokens, r.TokenIDs.Roots)
	line("LoRA names", "%s", listOr(quoteAll(r.LoraNames), "none"))
	line("cache salts", "%s", listOr(quoteAll(r.CacheSalts), "none"))
	if len(r.ModelNames) > 0 {
		line("model names", "%s", strings.Join(quoteAll(r.ModelNames), ", "))
	}
	if len(r.TenantIDs) > 0 {
		line("tenants", "%s", strings.Join(quoteAll(r.TenantIDs), ", "))
	}
	if r.Replay != nil {
		line("replay", "%s", r.ReplayText)
	}
	line("hash profile", "%s", r.Hash.Text)
	if r.Registration != nil {
		fmt.Fprintf(&b, "\nRegister it over HTTP (conductor's default port):\n  %s\n", r.Curl)
		if r.Python != "" {
			fmt.Fprintf(&b, "with the Python client:\n  %s\n", r.Python)
		}
		fmt.Fprintf(&b, "or in the configuration file:\n  %s\n", marshalCompact(r.Config))
	}
	if len(r.Notes) > 0 {
		b.WriteString("\nNotes:\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// plural is "1 thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}

func listOr(vs []string, none string) string {
	if len(vs) == 0 {
		return none
	}
	return strings.Join(vs, ", ")
}

func intsText(vs []int64) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = strconv.FormatInt(v, 10)
	}
	return out
}

func quoteAll(vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		if strings.HasPrefix(v, "(") && strings.HasSuffix(v, " more)") {
			out[i] = v
			continue
		}
		out[i] = strconv.Quote(v)
	}
	return out
}
