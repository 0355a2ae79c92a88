package replica

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
)

// The message body. Every message starts with a version byte and a kind
// byte; the rest depends on the kind:
//
//	'B' batch:      key, batch     one batch a subscription applied
//	'C' clear:      key            the subscription's blocks were dropped
//	'F' flush:      key            its held RFC events were resolved (idle)
//	'G' gap:        key, policy    events were lost for good; the policy (a byte, core.GapPolicy) applied
//	'E' expire:     key            its oldest pending gap expiry was applied
//	'R' register:   registration   (JSON, registrationDoc)
//	'U' unregister: key
//
// key = str instance, str tenant, zigzag-varint dp_rank; str = uvarint
// length, bytes. A batch is the decoded, dialect-independent core.Batch
// (what every dialect's decoder produces), so a replica applies exactly what
// the relay applied, with the same code: its index is the relay's by
// construction. Numbers are varints except block hashes (8 bytes little
// endian: they are uniformly random) and the float timestamp (IEEE bits).

const codecVersion = 1

// Kind is a message's kind.
type Kind byte

const (
	KindBatch      Kind = 'B'
	KindClear      Kind = 'C'
	KindFlush      Kind = 'F'
	KindRegister   Kind = 'R'
	KindUnregister Kind = 'U'
	KindGap        Kind = 'G'
	KindExpire     Kind = 'E'
)

// ErrMessage wraps a message that cannot be decoded (counted and skipped by
// the replica, never a crash).
var ErrMessage = errors.New("conductor: malformed replication message")

// Message is one decoded message. Slices alias the decoder's scratch and the
// input: valid until the next Decode.
type Message struct {
	Kind    Kind
	Key     core.ServiceKey
	Batch   core.Batch
	Reg     core.Registration
	Section *Section // KindSection (section.go)
	// Policy is a KindGap's gap policy.
	Policy core.GapPolicy
}

// limits on decoded sizes (a relay never produces more; bounds what a
// hostile message can make the replica allocate).
const (
	maxEvents      = 1 << 16
	maxStringBytes = 1 << 16
)

func appendStr(b []byte, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendKey(b []byte, k core.ServiceKey) []byte {
	b = appendStr(b, []byte(k.InstanceID))
	b = appendStr(b, []byte(k.TenantID))
	return binary.AppendVarint(b, int64(k.DPRank))
}

// AppendGap appends a gap message: the relay applied gap policy p to k.
func AppendGap(b []byte, k core.ServiceKey, p core.GapPolicy) []byte {
	b = AppendKeyMessage(b, KindGap, k)
	return append(b, byte(p))
}

// AppendKeyMessage appends a clear, flush, expire or unregister message.
func AppendKeyMessage(b []byte, kind Kind, k core.ServiceKey) []byte {
	b = append(b, codecVersion, byte(kind))
	return appendKey(b, k)
}

// Event flag bits.
const (
	fStandard = 1 << iota
	fHasParent
	fHasTokens
	fBigram
	fPartial
	fHasLoraID
	fHasGroupIdx
	fHasSlidingWindow
	fExtraKeys
	fHasEventID
	fHasModelName
	fHasBlockSize
	fHasDPRank
	fHasBaseIdx
	// presence (non-nil) of the byte fields, in byteFields order
	fBytes0
)

// byteFields lists an event's byte-slice fields in wire order.
func byteFields(e *core.Event) [9]*[]byte {
	return [9]*[]byte{&e.Medium, &e.LoraName, &e.SpecKind, &e.CacheSalt, &e.ModelName,
		&e.AdditionalSalt, &e.TenantID, &e.BackendID, &e.ObjectKey}
}

// AppendBatch appends a batch message for the subscription k.
func AppendBatch(b []byte, k core.ServiceKey, bt *core.Batch) []byte {
	b = append(b, codecVersion, byte(KindBatch))
	b = appendKey(b, k)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(bt.TimestampF))
	b = binary.AppendUvarint(b, bt.TimestampU)
	var bf uint64
	if bt.HasDPRank {
		bf |= 1
	}
	if bt.HasSeq {
		bf |= 2
	}
	b = binary.AppendUvarint(b, bf)
	b = binary.AppendUvarint(b, uint64(bt.DPRank))
	b = binary.AppendUvarint(b, bt.Seq)
	b = binary.AppendUvarint(b, uint64(bt.Skipped))
	b = binary.AppendUvarint(b, uint64(len(bt.Events)))
	for i := range bt.Events {
		b = appendEvent(b, &bt.Events[i])
	}
	return b
}

func appendEvent(b []byte, e *core.Event) []byte {
	var f uint64
	for i, set := range [...]bool{e.Standard, e.HasParent, e.HasTokens, e.Bigram, e.Partial, e.HasLoraID,
		e.HasGroupIdx, e.HasSlidingWindow, e.ExtraKeysPresent, e.HasEventID, e.HasModelName, e.HasBlockSize,
		e.HasDPRank, e.HasBaseIdx} {
		if set {
			f |= 1 << i
		}
	}
	bfs := byteFields(e)
	for i, p := range bfs {
		if *p != nil {
			f |= fBytes0 << i
		}
	}
	b = append(b, byte(e.Kind))
	b = binary.AppendUvarint(b, f)
	b = binary.AppendUvarint(b, uint64(len(e.Hashes)))
	for _, h := range e.Hashes {
		b = binary.LittleEndian.AppendUint64(b, h)
	}
	b = binary.LittleEndian.AppendUint64(b, e.Parent)
	b = binary.AppendUvarint(b, uint64(len(e.Tokens)))
	for _, t := range e.Tokens {
		b = binary.AppendVarint(b, int64(t))
	}
	b = binary.AppendVarint(b, int64(e.BlockSize))
	b = binary.AppendVarint(b, e.LoraID)
	b = binary.AppendVarint(b, e.GroupIdx)
	b = binary.AppendUvarint(b, e.EventID)
	b = binary.AppendUvarint(b, e.Timestamp)
	b = binary.AppendUvarint(b, uint64(e.DPRank))
	b = binary.AppendUvarint(b, uint64(e.BaseBlockIdx))
	for _, p := range bfs {
		if *p != nil {
			b = appendStr(b, *p)
		}
	}
	return b
}

// registrationDoc is a registration on the wire (register messages and
// snapshots): every field, the hash profile as its registered text.
type registrationDoc struct {
	Endpoint        string    `json:"endpoint"`
	ReplayEndpoint  string    `json:"replay_endpoint,omitempty"`
	Type            string    `json:"type"`
	ModelName       string    `json:"model_name"`
	LoraName        string    `json:"lora_name,omitempty"`
	TenantID        string    `json:"tenant_id"`
	InstanceID      string    `json:"instance_id"`
	BlockSize       int       `json:"block_size"`
	DPRank          int32     `json:"dp_rank"`
	AdditionalSalt  string    `json:"additional_salt,omitempty"`
	CacheGroup      *int64    `json:"cache_group,omitempty"`
	Profile         hash.Spec `json:"hash_profile"`
	ProfileExplicit bool      `json:"profile_explicit,omitempty"`
	Origin          string    `json:"origin,omitempty"`
	Owner           string    `json:"owner,omitempty"`
	GapPolicy       string    `json:"gap_policy,omitempty"`
	MaxBlocks       int       `json:"max_blocks,omitempty"`
	Adapters        bool      `json:"adapters_from_events,omitempty"`
}

func docOf(r *core.Registration) registrationDoc {
	return registrationDoc{Endpoint: r.Endpoint, ReplayEndpoint: r.ReplayEndpoint, Type: r.Type.String(),
		ModelName: r.ModelName, LoraName: r.LoraName, TenantID: r.TenantID, InstanceID: r.InstanceID,
		BlockSize: r.BlockSize, DPRank: r.DPRank, AdditionalSalt: r.AdditionalSalt, CacheGroup: r.CacheGroup,
		Profile: r.Profile.Spec, ProfileExplicit: r.ProfileExplicit, Origin: r.Origin, Owner: r.Owner,
		GapPolicy: gapName(r.GapPolicy), MaxBlocks: r.MaxBlocks, Adapters: r.AdaptersFromEvents}
}

// gapName is a policy's name in a registration document ("" for the default).
func gapName(p core.GapPolicy) string {
	if p == core.GapDefault {
		return ""
	}
	return p.String()
}

func (d *registrationDoc) registration() (core.Registration, error) {
	t, err := core.ParsePublisherType(d.Type)
	if err != nil {
		return core.Registration{}, err
	}
	p, err := hash.Resolve(d.Profile)
	if err != nil {
		return core.Registration{}, err
	}
	gp, err := core.ParseGapPolicy(d.GapPolicy)
	if err != nil {
		return core.Registration{}, err
	}
	return core.Registration{Endpoint: d.Endpoint, ReplayEndpoint: d.ReplayEndpoint, Type: t,
		ModelName: d.ModelName, LoraName: d.LoraName, TenantID: d.TenantID, InstanceID: d.InstanceID,
		BlockSize: d.BlockSize, DPRank: d.DPRank, AdditionalSalt: d.AdditionalSalt, CacheGroup: d.CacheGroup,
		Profile: p, ProfileExplicit: d.ProfileExplicit, Origin: d.Origin, Owner: d.Owner,
		GapPolicy: gp, MaxBlocks: d.MaxBlocks, AdaptersFromEvents: d.Adapters}, nil
}

// AppendRegister appends a register message for r.
func AppendRegister(b []byte, r *core.Registration) []byte {
	b = append(b, codecVersion, byte(KindRegister))
	j, _ := json.Marshal(docOf(r)) // plain strings and numbers: cannot fail
	return append(b, j...)
}

// Decoder decodes messages, reusing its scratch across calls. Not safe for
// concurrent use.
type Decoder struct {
	m   Message
	sec Section
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%s at byte %d: %w", what, len(r.b), ErrMessage)
	}
	r.b = nil
}

// Varints must be minimal (no trailing zero group): every message has one
// encoding (FuzzReplicaMessage re-encodes what it accepts).
func (r *reader) uvarint(what string) uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 || n > 1 && r.b[n-1] == 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// varint is the zig-zag signed form of uvarint (as encoding/binary's).
func (r *reader) varint(what string) int64 {
	u := r.uvarint(what)
	return int64(u>>1) ^ -int64(u&1)
}

func (r *reader) u64(what string) uint64 {
	if len(r.b) < 8 {
		r.fail(what)
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

// bytes returns a sub-slice of the input (non-nil, possibly empty).
func (r *reader) bytes(what string) []byte {
	n := r.uvarint(what)
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) || n > maxStringBytes {
		r.fail(what)
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

func (r *reader) key() core.ServiceKey {
	var k core.ServiceKey
	k.InstanceID = string(r.bytes("instance_id"))
	k.TenantID = string(r.bytes("tenant_id"))
	rank := r.varint("dp_rank")
	if rank < math.MinInt32 || rank > math.MaxInt32 {
		r.fail("dp_rank")
	}
	k.DPRank = int32(rank)
	return k
}

// Decode decodes one message body. The result is valid until the next call.
func (d *Decoder) Decode(body []byte) (*Message, error) {
	m := &d.m
	m.Batch.Reset()
	m.Key, m.Reg, m.Section, m.Policy = core.ServiceKey{}, core.Registration{}, nil, core.GapDefault
	if len(body) < 2 || body[0] != codecVersion {
		return nil, fmt.Errorf("header: %w", ErrMessage)
	}
	m.Kind = Kind(body[1])
	r := reader{b: body[2:]}
	switch m.Kind {
	case KindRegister:
		var doc registrationDoc
		if err := json.Unmarshal(r.b, &doc); err != nil {
			return nil, fmt.Errorf("registration: %v: %w", err, ErrMessage)
		}
		reg, err := doc.registration()
		if err != nil {
			return nil, fmt.Errorf("registration: %v: %w", err, ErrMessage)
		}
		m.Reg = reg
		m.Key = reg.Key()
		return m, nil
	case KindClear, KindFlush, KindUnregister, KindExpire:
		m.Key = r.key()
	case KindGap:
		m.Key = r.key()
		if len(r.b) != 1 || r.b[0] == byte(core.GapDefault) || r.b[0] > byte(core.GapExpire) {
			r.fail("gap policy")
		} else {
			m.Policy, r.b = core.GapPolicy(r.b[0]), r.b[1:]
		}
	case KindBatch:
		m.Key = r.key()
		d.batch(&r)
	case KindSection:
		m.Key = r.key()
		d.section(&r)
		m.Section = &d.sec
	default:
		return nil, fmt.Errorf("kind %q: %w", body[1], ErrMessage)
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return nil, r.err
	}
	return m, nil
}

func (d *Decoder) batch(r *reader) {
	bt := &d.m.Batch
	bt.TimestampF = math.Float64frombits(r.u64("timestamp"))
	bt.TimestampU = r.uvarint("timestamp")
	bf := r.uvarint("batch flags")
	if bf&^3 != 0 {
		r.fail("batch flags")
	}
	bt.HasDPRank, bt.HasSeq = bf&1 != 0, bf&2 != 0
	rank := r.uvarint("dp_rank")
	if rank > math.MaxUint32 {
		r.fail("dp_rank")
	}
	bt.DPRank = uint32(rank)
	bt.Seq = r.uvarint("seq")
	skipped := r.uvarint("skipped")
	if skipped > maxEvents {
		r.fail("skipped")
	}
	bt.Skipped = int(skipped)
	n := r.uvarint("events")
	// Each event takes at least minEventBytes (TestMinimalEvent).
	if r.err != nil || n > maxEvents || n*minEventBytes > uint64(len(r.b)) {
		r.fail("events")
		return
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		decodeEvent(r, bt.NextEvent())
	}
}

// minEventBytes is the smallest encoded event: kind, flags, two counts and
// eight other varints of one byte each, and the 8-byte parent.
const minEventBytes = 19

func decodeEvent(r *reader, e *core.Event) {
	if len(r.b) == 0 {
		r.fail("event kind")
		return
	}
	e.Kind = core.EventKind(r.b[0])
	r.b = r.b[1:]
	f := r.uvarint("event flags")
	if f >= fBytes0<<len(byteFields(e)) {
		r.fail("event flags")
	}
	e.Standard, e.HasParent, e.HasTokens = f&fStandard != 0, f&fHasParent != 0, f&fHasTokens != 0
	e.Bigram, e.Partial, e.HasLoraID = f&fBigram != 0, f&fPartial != 0, f&fHasLoraID != 0
	e.HasGroupIdx, e.HasSlidingWindow, e.ExtraKeysPresent = f&fHasGroupIdx != 0, f&fHasSlidingWindow != 0, f&fExtraKeys != 0
	e.HasEventID, e.HasModelName, e.HasBlockSize = f&fHasEventID != 0, f&fHasModelName != 0, f&fHasBlockSize != 0
	e.HasDPRank, e.HasBaseIdx = f&fHasDPRank != 0, f&fHasBaseIdx != 0
	nh := r.uvarint("hashes")
	if r.err != nil || nh > uint64(len(r.b))/8 {
		r.fail("hashes")
		return
	}
	for i := uint64(0); i < nh; i++ {
		e.Hashes = append(e.Hashes, r.u64("hash"))
	}
	e.Parent = r.u64("parent")
	nt := r.uvarint("tokens")
	if r.err != nil || nt > uint64(len(r.b)) {
		r.fail("tokens")
		return
	}
	for i := uint64(0); i < nt && r.err == nil; i++ {
		v := r.varint("token")
		if v < math.MinInt32 || v > math.MaxInt32 {
			r.fail("token")
		}
		e.Tokens = append(e.Tokens, int32(v))
	}
	bs := r.varint("block_size")
	if bs < 0 || bs > math.MaxInt32 {
		r.fail("block_size")
	}
	e.BlockSize = int(bs)
	e.LoraID = r.varint("lora_id")
	e.GroupIdx = r.varint("group_idx")
	e.EventID = r.uvarint("event_id")
	e.Timestamp = r.uvarint("timestamp")
	dr := r.uvarint("dp_rank")
	bi := r.uvarint("base_block_idx")
	if dr > math.MaxUint32 || bi > math.MaxUint32 {
		r.fail("dp_rank/base_block_idx")
	}
	e.DPRank, e.BaseBlockIdx = uint32(dr), uint32(bi)
	for i, p := range byteFields(e) {
		if f&(fBytes0<<i) != 0 {
			*p = r.bytes("bytes field")
		}
	}
}
