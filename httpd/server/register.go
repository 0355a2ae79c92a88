package server

import (
	"errors"
	"math"
	"strconv"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
)

// Registration keys (slot indexes), in the order /register validates them
// (reference §1.1 steps 1-13; additionalsalt is ours and goes after tenant_id).
const (
	rEndpoint = iota
	rType
	rModel
	rInstance
	rBlockSize
	rReplay
	rLora
	rTenant
	rSalt
	rCacheGroup
	rProfile
	rDPRank
	// Ours, JSON dialect only: what a gap no replay heals does to the
	// registration's blocks, and its bound on held blocks.
	rGapPolicy
	rMaxBlocks
	numRegKeys
)

// Dialect sets, for the key tables.
const (
	inMsgpack = 1 << DialectMsgpack
	inJSON    = 1 << DialectJSON
	inRPC     = 1 << DialectRPC
	inAll     = inMsgpack | inJSON | inRPC
)

// regKeys are the /register keys: each name, its slot and the dialects that
// take it. msgpack takes exactly the C++ conductor's keys (additionalsalt is
// unknown_field there, as in the C++ dialect); JSON also takes model_name /
// model, additionalsalt / additional_salt, gap_policy and max_blocks; RPC takes the Python
// register() names (model_name, publisher_type) and refuses the HTTP ones
// (modelname, type, additionalsalt). A new key is one line here. An unknown
// key's error names the nearest key of the dialect (TestRegisterTypos).
var regKeys = [...]struct {
	name     string
	id       int
	dialects uint8
}{
	{"endpoint", rEndpoint, inAll},
	{"type", rType, inMsgpack | inJSON},
	{"publisher_type", rType, inRPC},
	{"modelname", rModel, inMsgpack | inJSON},
	{"model_name", rModel, inJSON | inRPC},
	{"model", rModel, inJSON},
	{"instance_id", rInstance, inAll},
	{"block_size", rBlockSize, inAll},
	{"replay_endpoint", rReplay, inAll},
	{"lora_name", rLora, inAll},
	{"tenant_id", rTenant, inAll},
	{"additionalsalt", rSalt, inJSON},
	{"additional_salt", rSalt, inJSON},
	{"cache_group", rCacheGroup, inAll},
	{"hash_profile", rProfile, inAll},
	{"dp_rank", rDPRank, inAll},
	{"gap_policy", rGapPolicy, inJSON},
	{"max_blocks", rMaxBlocks, inJSON},
}

// regKey maps a /register key to its slot in dialect d (-1: unknown).
func regKey(key []byte, d Dialect) int {
	for i := range regKeys {
		if k := &regKeys[i]; k.dialects&(1<<d) != 0 && k.name == string(key) {
			return k.id
		}
	}
	return -1
}

// regKeyNames lists the /register keys dialect d takes, for suggestions.
func regKeyNames(d Dialect) []string {
	var names []string
	for i := range regKeys {
		if regKeys[i].dialects&(1<<d) != 0 {
			names = append(names, regKeys[i].name)
		}
	}
	return names
}

// DecodeOptions adjust DecodeRegistration for configuration-file entries.
type DecodeOptions struct {
	// DefaultInstanceID applies when instance_id is absent (the key of a
	// kvevent_instance entry). Default "" (instance_id required).
	DefaultInstanceID string
}

// regSlot is one decoded registration key.
type regSlot struct {
	set  bool
	name string // the key as sent (an alias names itself in errors)
	v    Value
}

// DecodeRegistration decodes and validates one /register body (JSON when json
// is set, else msgpack) with the rules of reference §1.1: unknown keys first
// (in map order), then endpoint, type, modelname, instance_id, block_size,
// replay_endpoint, lora_name, tenant_id, additionalsalt, cache_group,
// hash_profile (optional: absent means the xxh3 default profile, resolved by
// hash.Resolve when given), the publisher type's value, dp_rank. Errors are
// *RequestError. The returned strings are copies: the body may be reused.
// The configuration file and the state file are read with it.
func DecodeRegistration(body []byte, json bool, opts DecodeOptions) (core.Registration, error) {
	var scratch []byte
	r := &Reader{}
	r.reset(body, json, &scratch)
	reg, rerr := decodeRegistration(r, DialectOf(json), opts)
	if rerr != nil {
		return core.Registration{}, rerr
	}
	return reg, nil
}

// Registration decodes st.Body as a /register body in dialect d (its syntax
// is d's: msgpack, or JSON for the others), as DecodeRegistration does. The
// RPC dialect (the Python register()) runs the same steps with its own key
// names and the Python API's defaults: publisher_type defaults to "vLLM" and
// takes only vLLM, SGLang or Mooncake; dp_rank defaults to 0; hash_profile is
// required.
func (st *State) Registration(d Dialect) (core.Registration, *RequestError) {
	return decodeRegistration(st.Reader(d.JSON()), d, DecodeOptions{})
}

// regFields are one /register body's keys, read but not yet validated.
type regFields struct {
	slots     [numRegKeys]regSlot
	canon     [numRegKeys]string // the names a missing key is reported by
	json, rpc bool
}

// scanRegistration reads every key of a /register body into its slot.
func scanRegistration(r *Reader, d Dialect) (*regFields, *RequestError) {
	f := &regFields{json: d.JSON(), rpc: d == DialectRPC}
	var seen [numRegKeys]bool
	if fe := ScanFields(r, "", seen[:], func(key []byte) (int, bool) {
		return regKey(key, d), false
	}, func(id int, key []byte) {
		f.slots[id] = regSlot{set: true, name: string(key), v: r.Value()}
	}); fe != nil {
		return nil, SuggestKey(fe, regKeyNames(d))
	}
	f.canon = [numRegKeys]string{rEndpoint: "endpoint", rType: "type", rModel: "modelname", rInstance: "instance_id",
		rBlockSize: "block_size", rReplay: "replay_endpoint", rLora: "lora_name", rTenant: "tenant_id",
		rSalt: "additionalsalt", rCacheGroup: "cache_group", rProfile: "hash_profile", rDPRank: "dp_rank",
		rGapPolicy: "gap_policy", rMaxBlocks: "max_blocks"}
	if f.rpc {
		f.canon[rType], f.canon[rModel] = "publisher_type", "model_name"
	}
	return f, nil
}

// name is the key as sent, or its canonical name when absent.
func (f *regFields) name(id int) string {
	if f.slots[id].set {
		return f.slots[id].name
	}
	return f.canon[id]
}

// required reads a required non-empty string.
func (f *regFields) required(id int) (string, *RequestError) {
	if !f.slots[id].set {
		return "", NewError(ErrMissing, f.canon[id], f.canon[id]+" is required")
	}
	b, err := StrField(&f.slots[id].v, f.name(id))
	return string(b), err
}

// optional reads an optional string ("" when absent).
func (f *regFields) optional(id int) (string, *RequestError) {
	if !f.slots[id].set {
		return "", nil
	}
	b, err := OptStrField(&f.slots[id].v, f.name(id), f.json)
	return string(b), err
}

// decodeRegistration is DecodeRegistration over a reader, in any dialect,
// step by step: the identity (steps 1-5), the optional strings and the
// cache group (steps 6-9), the hash profile (step 10), the publisher type
// and dp_rank (steps 12-13).
func decodeRegistration(r *Reader, d Dialect, opts DecodeOptions) (core.Registration, *RequestError) {
	var reg core.Registration
	f, err := scanRegistration(r, d)
	if err != nil {
		return reg, err
	}
	typeName, err := f.identity(&reg, opts)
	if err != nil {
		return reg, err
	}
	if err = f.options(&reg); err != nil {
		return reg, err
	}
	if err = f.profile(r, &reg); err != nil {
		return reg, err
	}
	if err = f.publisher(&reg, typeName); err != nil {
		return reg, err
	}
	return reg, f.limits(&reg)
}

// limits reads the JSON dialect's gap_policy (keep, clear or expire; absent
// or null: the process's --gap-policy) and max_blocks (an integer: 0 or
// absent, the process's --max-blocks-per-registration; negative, no bound).
func (f *regFields) limits(reg *core.Registration) *RequestError {
	if s := &f.slots[rGapPolicy]; s.set && s.v.Kind != KindNil {
		name, err := StrField(&s.v, "gap_policy")
		if err != nil {
			return err
		}
		p, perr := core.ParseGapPolicy(string(name))
		if perr != nil || p == core.GapDefault {
			return NewError(ErrInvalidValue, "gap_policy", "gap_policy must be keep, clear or expire")
		}
		reg.GapPolicy = p
	}
	if s := &f.slots[rMaxBlocks]; s.set && s.v.Kind != KindNil {
		switch {
		case !s.v.IsInt():
			return NewError(ErrInvalidType, "max_blocks", "max_blocks must be an integer")
		case s.v.Kind != KindInt || s.v.Int > math.MaxInt32 || s.v.Int < math.MinInt32:
			return NewError(ErrOutOfRange, "max_blocks", "max_blocks must be within ±2147483647")
		}
		reg.MaxBlocks = int(s.v.Int)
	}
	return nil
}

// identity runs steps 1-5: endpoint, type (returned: its value is checked at
// step 12), modelname, instance_id, block_size.
func (f *regFields) identity(reg *core.Registration, opts DecodeOptions) (typeName string, err *RequestError) {
	if reg.Endpoint, err = f.required(rEndpoint); err != nil {
		return "", err
	}
	typeName = "vLLM" // the Python API's default
	if f.slots[rType].set || !f.rpc {
		if typeName, err = f.required(rType); err != nil {
			return "", err
		}
	}
	if reg.ModelName, err = f.required(rModel); err != nil {
		return "", err
	}
	switch {
	case !f.slots[rInstance].set && opts.DefaultInstanceID != "":
		reg.InstanceID = opts.DefaultInstanceID
	case !f.slots[rInstance].set && f.rpc && typeName == "Mooncake":
		// The Python API requires instance_id for vLLM and SGLang only: a
		// store master is named by its endpoint, which no other
		// registration may hold (it is what unregister takes).
		reg.InstanceID = reg.Endpoint
	default:
		if reg.InstanceID, err = f.required(rInstance); err != nil {
			return "", err
		}
	}
	if !f.slots[rBlockSize].set {
		return "", NewError(ErrMissing, "block_size", "block_size is required")
	}
	bs := &f.slots[rBlockSize].v
	switch {
	case !bs.IsInt() || bs.Kind == KindUint || (bs.Kind == KindBigInt && !bs.Neg):
		return "", NewError(ErrInvalidType, "block_size", "block_size must be an integer")
	case bs.Kind == KindBigInt || bs.Int <= 0:
		return "", NewError(ErrOutOfRange, "block_size", "block_size must be greater than zero")
	case bs.Int > math.MaxInt:
		return "", NewError(ErrOutOfRange, "block_size", "block_size is too large")
	}
	reg.BlockSize = int(bs.Int)
	return typeName, nil
}

// options runs steps 6-9: replay_endpoint, lora_name, tenant_id
// ("default" when absent or ""), additionalsalt, cache_group (only zero).
func (f *regFields) options(reg *core.Registration) (err *RequestError) {
	if reg.ReplayEndpoint, err = f.optional(rReplay); err != nil {
		return err
	}
	if reg.LoraName, err = f.optional(rLora); err != nil {
		return err
	}
	if reg.TenantID, err = f.optional(rTenant); err != nil {
		return err
	}
	if reg.TenantID == "" {
		reg.TenantID = "default"
	}
	if reg.AdditionalSalt, err = f.optional(rSalt); err != nil {
		return err
	}
	if s := &f.slots[rCacheGroup]; s.set && s.v.Kind != KindNil {
		switch {
		case !s.v.IsInt():
			return NewError(ErrInvalidType, "cache_group", "cache_group must be an integer or null")
		case s.v.Kind != KindInt || s.v.Int != 0:
			return NewError(ErrUnsupported, "cache_group", "only cache group zero is supported")
		}
		zero := int64(0)
		reg.CacheGroup = &zero
	}
	return nil
}

// profile runs step 10: hash_profile, resolved (decodeProfile); absent (or
// JSON null) is the xxh3 default, except in the RPC dialect, which requires
// it.
func (f *regFields) profile(r *Reader, reg *core.Registration) *RequestError {
	s := &f.slots[rProfile]
	switch {
	case s.set && !(f.json && s.v.Kind == KindNil):
		if s.v.Kind != KindMap {
			msg := "hash_profile must be a map"
			if f.json {
				msg = "hash_profile must be an object"
			}
			return NewError(ErrInvalidType, "hash_profile", msg)
		}
		p, perr := decodeProfile(r.Sub(s.v.Bytes))
		if perr != nil {
			return perr
		}
		reg.Profile, reg.ProfileExplicit = p, true
	case f.rpc:
		return NewError(ErrMissing, "hash_profile", "hash_profile is required")
	default:
		reg.Profile = hash.DefaultProfile()
	}
	return nil
}

// publisher runs steps 12-13: the publisher type's value, then dp_rank (the
// Python API defaults it to 0).
func (f *regFields) publisher(reg *core.Registration, typeName string) *RequestError {
	t, terr := core.ParsePublisherType(typeName)
	switch {
	case f.rpc && (terr != nil || t == core.PublisherStandard):
		return NewError(ErrInvalidValue, f.name(rType), "publisher_type must be vLLM, SGLang or Mooncake")
	case terr != nil:
		return NewError(ErrInvalidValue, f.name(rType), "type must be vLLM, SGLang, Mooncake or standard")
	}
	reg.Type = t
	if !f.slots[rDPRank].set {
		if f.rpc {
			return nil
		}
		return NewError(ErrMissing, "dp_rank", "dp_rank is required")
	}
	dp := &f.slots[rDPRank].v
	switch {
	case !dp.IsInt():
		return NewError(ErrInvalidType, "dp_rank", "dp_rank must be an integer")
	case dp.Kind != KindInt || dp.Int < 0 || dp.Int > math.MaxInt32:
		return NewError(ErrOutOfRange, "dp_rank", "dp_rank must be a non-negative int")
	}
	reg.DPRank = int32(dp.Int)
	return nil
}

// Profile sub-keys, in the order their presence and types are checked.
var profileKeys = [...]string{hash.FieldStrategy, hash.FieldAlgorithm, hash.FieldSeed, hash.FieldProjection}

// decodeProfile validates a hash_profile map and resolves it. Unknown sub-keys
// (e.g. the legacy root_digest) are unknown_field; present sub-keys must be
// non-empty strings; for vllm_v1 all four are required (missing), for the other
// strategies hash.Resolve supplies defaults where it has them. Resolution
// failures are invalid_value naming the field hash.Resolve reports.
func decodeProfile(r *Reader) (hash.Profile, *RequestError) {
	var vals [len(profileKeys)]Value
	var set [len(profileKeys)]bool
	if fe := ScanFields(r, "hash_profile ", set[:], func(key []byte) (int, bool) {
		for i, k := range profileKeys {
			if string(key) == k {
				return i, false
			}
		}
		return -1, false
	}, func(id int, _ []byte) { vals[id] = r.Value() }); fe != nil {
		return hash.Profile{}, SuggestKey(fe, profileKeys[:])
	}
	if !set[0] {
		return hash.Profile{}, NewError(ErrMissing, hash.FieldStrategy, "hash_profile.strategy is required")
	}
	var text [len(profileKeys)]string
	strict := vals[0].Kind == KindStr && string(vals[0].Bytes) == "vllm_v1"
	for i, k := range profileKeys {
		if !set[i] {
			if strict {
				return hash.Profile{}, NewError(ErrMissing, k, "hash_profile."+k+" is required")
			}
			continue
		}
		b, err := StrField(&vals[i], k)
		if err != nil {
			err.Msg = "hash_profile." + err.Msg
			return hash.Profile{}, err
		}
		text[i] = string(b)
	}
	p, err := hash.Resolve(hash.Spec{Strategy: text[0], Algorithm: text[1], PythonHashSeed: text[2], IndexProjection: text[3]})
	if err != nil {
		var pe *hash.ProfileError
		if !errors.As(err, &pe) {
			return hash.Profile{}, NewError(ErrInvalidValue, "hash_profile", err.Error())
		}
		if errors.Is(pe.Err, hash.ErrEmptyField) {
			// present keys were checked non-empty above, so the key is absent
			return hash.Profile{}, NewError(ErrMissing, pe.Field, "hash_profile."+pe.Field+" is required")
		}
		return hash.Profile{}, NewError(ErrInvalidValue, pe.Field, pe.Error())
	}
	return p, nil
}

// Register subscribes a decoded registration through the Gate on behalf of
// who (the Mooncake /register and the RPC Register). A refusal the client
// caused is a *RequestError: ErrForbidden → 403 forbidden (naming the field
// of a core.FieldError), ErrStateWrite → 500 state_not_saved, core.ErrLimit
// → limit_exceeded, a core.FieldError → invalid_value naming the field,
// core.ErrConflict or core.ErrInvalid → invalid_registration (naming the
// field of a core.FieldError: "endpoint" when another registration holds
// the publisher). Any other failure is logged and returned as err.
func (c *Core) Register(who Principal, reg core.Registration) (*RequestError, error) {
	created, err := c.gate.Register(who, reg)
	key := ServiceKey(reg.InstanceID, reg.TenantID, reg.DPRank)
	if err != nil {
		var fe *core.FieldError
		switch {
		case errors.Is(err, ErrForbidden):
			field := ""
			if errors.As(err, &fe) {
				field = fe.Field
			}
			return &RequestError{Err: ErrForbidden, Field: field, Index: noIndex, Status: 403, Msg: err.Error()}, nil
		case errors.Is(err, ErrStateWrite):
			c.opts.Logger.Error("register not saved", "service", key, "err", err)
			return &RequestError{Err: ErrStateWrite, Index: noIndex, Status: 500, Msg: err.Error()}, nil
		case errors.Is(err, core.ErrLimit):
			return NewError(ErrLimitExceeded, "", err.Error()), nil
		case errors.As(err, &fe) && !errors.Is(err, core.ErrConflict):
			return NewError(ErrInvalidValue, fe.Field, err.Error()), nil
		case errors.Is(err, core.ErrConflict), errors.Is(err, core.ErrInvalid):
			field := ""
			if errors.As(err, &fe) {
				field = fe.Field
			}
			return NewError(ErrInvalidRegistration, field, err.Error()), nil
		}
		c.opts.Logger.Error("register failed", "service", key, "endpoint", reg.Endpoint, "err", err)
		return nil, err
	}
	// The registration as the index holds it: the Gate set its owner and
	// resolved its endpoints (the audit line says who registered what).
	if sub, ok := c.ix.Lookup(reg.Key()); ok {
		reg = sub.Registration()
	}
	c.opts.Logger.Info("registered", "service", key, "endpoint", reg.Endpoint, "type", reg.Type.String(),
		"model", reg.ModelName, "block_size", reg.BlockSize, "profile", reg.Profile.Spec.Strategy+"/"+reg.Profile.Spec.Algorithm,
		"owner", reg.Owner, "created", created)
	return nil, nil
}

// ServiceKey renders "instance|tenant|rank".
func ServiceKey(instance, tenant string, rank int32) string {
	return instance + "|" + tenant + "|" + strconv.Itoa(int(rank))
}

// Unregister keys.
const (
	uInstance = iota
	uTenant
	uDPRank
	uIgnored // Go-era JSON fields accepted and ignored
	numUnregKeys
)

// unregKeys are the /unregister keys, as regKeys: the JSON dialect also
// takes, and ignores, the Go-era type, modelname, lora_name and block_size.
var unregKeys = [...]struct {
	name     string
	id       int
	dialects uint8
}{
	{"instance_id", uInstance, inAll},
	{"tenant_id", uTenant, inAll},
	{"dp_rank", uDPRank, inAll},
	{"type", uIgnored, inJSON},
	{"modelname", uIgnored, inJSON},
	{"lora_name", uIgnored, inJSON},
	{"block_size", uIgnored, inJSON},
}

func unregKey(key []byte, d Dialect) int {
	for i := range unregKeys {
		if k := &unregKeys[i]; k.dialects&(1<<d) != 0 && k.name == string(key) {
			return k.id
		}
	}
	return -1
}

// UnregisterKey decodes st.Body as an /unregister body in dialect d:
// instance_id (required non-empty string), tenant_id (optional; ""/absent →
// "default"), dp_rank (required; a non-integer, negative or > 2^31-1 value
// is invalid_value, as upstream). Unknown keys are unknown_field, except the
// Go-era type, modelname, lora_name and block_size, which the JSON dialect
// ignores (the seed's example sends them). The RPC dialect (the Python
// unregister()) takes only the three keys and defaults dp_rank to 0, as the
// Python signature does.
func (st *State) UnregisterKey(d Dialect) (core.ServiceKey, *RequestError) {
	r := st.Reader(d.JSON())
	var vals [numUnregKeys]Value
	var set [numUnregKeys]bool
	if fe := ScanFields(r, "", set[:], func(key []byte) (int, bool) {
		id := unregKey(key, d)
		return id, id == uIgnored
	}, func(id int, _ []byte) { vals[id] = r.Value() }); fe != nil {
		var names []string
		for _, k := range unregKeys {
			if k.dialects&(1<<d) != 0 && k.id != uIgnored {
				names = append(names, k.name)
			}
		}
		return core.ServiceKey{}, SuggestKey(fe, names)
	}
	var k core.ServiceKey
	if !set[uInstance] {
		return k, NewError(ErrMissing, "instance_id", "instance_id is required")
	}
	b, err := StrField(&vals[uInstance], "instance_id")
	if err != nil {
		return k, err
	}
	k.InstanceID = string(b)
	if set[uTenant] {
		if b, err = OptStrField(&vals[uTenant], "tenant_id", d.JSON()); err != nil {
			return k, err
		}
		k.TenantID = string(b)
	}
	if k.TenantID == "" {
		k.TenantID = "default"
	}
	if !set[uDPRank] {
		if d == DialectRPC {
			return k, nil
		}
		return k, NewError(ErrMissing, "dp_rank", "dp_rank is required")
	}
	dp := &vals[uDPRank]
	if dp.Kind != KindInt || dp.Int < 0 || dp.Int > math.MaxInt32 {
		return k, NewError(ErrInvalidValue, "dp_rank", "dp_rank must be a non-negative int")
	}
	k.DPRank = int32(dp.Int)
	return k, nil
}

// Unregister stops subscription k (rendered as key) on behalf of who
// through the Gate (the Mooncake /unregister and the RPC Unregister). Errors
// wrap core.ErrNotFound, ErrForbidden or ErrStateWrite; other failures are
// logged.
func (c *Core) Unregister(who Principal, k core.ServiceKey, key string) error {
	if _, err := c.gate.Unregister(who, k); err != nil {
		if !errors.Is(err, core.ErrNotFound) && !errors.Is(err, ErrForbidden) {
			c.opts.Logger.Error("unregister failed", "service", key, "err", err)
		}
		return err
	}
	c.opts.Logger.Info("unregistered", "service", key)
	return nil
}
