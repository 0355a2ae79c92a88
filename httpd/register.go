package httpd

import (
	"errors"
	"math"
	"strconv"

	"github.com/valyala/fasthttp"

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
	numRegKeys
)

// regKey maps a /register key to its slot. msgpack takes exactly the C++
// conductor's keys (additionalsalt is unknown_field there, as in the C++
// dialect); JSON also takes model_name / model and additionalsalt /
// additional_salt; RPC takes the Python register() names (model_name,
// publisher_type) and refuses the HTTP ones (modelname, type, additionalsalt).
func regKey(key []byte, d dialect) int {
	switch string(key) {
	case "endpoint":
		return rEndpoint
	case "instance_id":
		return rInstance
	case "block_size":
		return rBlockSize
	case "replay_endpoint":
		return rReplay
	case "lora_name":
		return rLora
	case "tenant_id":
		return rTenant
	case "cache_group":
		return rCacheGroup
	case "hash_profile":
		return rProfile
	case "dp_rank":
		return rDPRank
	}
	if d == dialectRPC {
		switch string(key) {
		case "model_name":
			return rModel
		case "publisher_type":
			return rType
		}
		return -1
	}
	switch string(key) {
	case "type":
		return rType
	case "modelname":
		return rModel
	}
	if d == dialectJSON {
		switch string(key) {
		case "model_name", "model":
			return rModel
		case "additionalsalt", "additional_salt":
			return rSalt
		}
	}
	return -1
}

// DecodeOptions adjust DecodeRegistration for configuration-file entries.
type DecodeOptions struct {
	// IgnoreUnknown skips unknown keys instead of rejecting them with
	// unknown_field (config files may carry Go-era fields). Default false.
	IgnoreUnknown bool
	// DefaultInstanceID applies when instance_id is absent (the key of a
	// kvevent_instance entry). Default "" (instance_id required).
	DefaultInstanceID string
}

// regSlot is one decoded registration key.
type regSlot struct {
	set  bool
	name string // the key as sent (an alias names itself in errors)
	v    value
}

// DecodeRegistration decodes and validates one /register body (JSON when json
// is set, else msgpack) with the rules of reference §1.1: unknown keys first
// (in map order), then endpoint, type, modelname, instance_id, block_size,
// replay_endpoint, lora_name, tenant_id, additionalsalt, cache_group,
// hash_profile (optional: absent means the xxh3 default profile, resolved by
// hash.Resolve when given), the publisher type's value, dp_rank. Errors are
// *RequestError. The returned strings are copies: the body may be reused.
func DecodeRegistration(body []byte, json bool, opts DecodeOptions) (core.Registration, error) {
	var scratch []byte
	var r reader
	if json {
		jr := &jsonReader{}
		jr.init(body, &scratch, true)
		r = jr
	} else {
		mr := &mpReader{}
		mr.init(body, true)
		r = mr
	}
	reg, rerr := decodeRegistration(r, dialectOf(json), opts)
	if rerr != nil {
		return core.Registration{}, rerr
	}
	return reg, nil
}

// decodeRegistration is DecodeRegistration over a reader, in any dialect. The
// RPC dialect (the Python register()) runs the same steps with its own key
// names and the Python API's defaults: publisher_type defaults to "vLLM" and
// takes only vLLM, SGLang or Mooncake; dp_rank defaults to 0; hash_profile is
// required.
func decodeRegistration(r reader, d dialect, opts DecodeOptions) (core.Registration, *RequestError) {
	json, rpc := d.json(), d == dialectRPC
	var slots [numRegKeys]regSlot
	var seen [numRegKeys]bool
	if fe := scanFields(r, "", seen[:], func(key []byte) (int, bool) {
		id := regKey(key, d)
		return id, id < 0 && opts.IgnoreUnknown
	}, func(id int, key []byte) {
		slots[id] = regSlot{set: true, name: string(key), v: r.value()}
	}); fe != nil {
		return core.Registration{}, fe
	}

	var reg core.Registration
	canon := [numRegKeys]string{rEndpoint: "endpoint", rType: "type", rModel: "modelname", rInstance: "instance_id",
		rBlockSize: "block_size", rReplay: "replay_endpoint", rLora: "lora_name", rTenant: "tenant_id",
		rSalt: "additionalsalt", rCacheGroup: "cache_group", rProfile: "hash_profile", rDPRank: "dp_rank"}
	if rpc {
		canon[rType], canon[rModel] = "publisher_type", "model_name"
	}
	name := func(id int) string {
		if slots[id].set {
			return slots[id].name
		}
		return canon[id]
	}
	required := func(id int) (string, *RequestError) {
		if !slots[id].set {
			return "", reqErr(ErrMissing, canon[id], canon[id]+" is required")
		}
		b, err := strField(&slots[id].v, name(id))
		return string(b), err
	}
	optional := func(id int) (string, *RequestError) {
		if !slots[id].set {
			return "", nil
		}
		b, err := optStrField(&slots[id].v, name(id), json)
		return string(b), err
	}

	// Steps 1-4: required strings.
	var err *RequestError
	if reg.Endpoint, err = required(rEndpoint); err != nil {
		return reg, err
	}
	typeName := "vLLM" // the Python API's default
	if slots[rType].set || !rpc {
		if typeName, err = required(rType); err != nil {
			return reg, err
		}
	}
	if reg.ModelName, err = required(rModel); err != nil {
		return reg, err
	}
	if !slots[rInstance].set && opts.DefaultInstanceID != "" {
		reg.InstanceID = opts.DefaultInstanceID
	} else if reg.InstanceID, err = required(rInstance); err != nil {
		return reg, err
	}

	// Step 5: block_size.
	if !slots[rBlockSize].set {
		return reg, reqErr(ErrMissing, "block_size", "block_size is required")
	}
	bs := &slots[rBlockSize].v
	switch {
	case !bs.isInt() || bs.kind == kindUint || (bs.kind == kindBigInt && !bs.neg):
		return reg, reqErr(ErrInvalidType, "block_size", "block_size must be an integer")
	case bs.kind == kindBigInt || bs.i <= 0:
		return reg, reqErr(ErrOutOfRange, "block_size", "block_size must be greater than zero")
	case bs.i > math.MaxInt:
		return reg, reqErr(ErrOutOfRange, "block_size", "block_size is too large")
	}
	reg.BlockSize = int(bs.i)

	// Steps 6-8 (+ additionalsalt): optional strings.
	if reg.ReplayEndpoint, err = optional(rReplay); err != nil {
		return reg, err
	}
	if reg.LoraName, err = optional(rLora); err != nil {
		return reg, err
	}
	if reg.TenantID, err = optional(rTenant); err != nil {
		return reg, err
	}
	if reg.TenantID == "" {
		reg.TenantID = "default"
	}
	if reg.AdditionalSalt, err = optional(rSalt); err != nil {
		return reg, err
	}

	// Step 9: cache_group.
	if s := &slots[rCacheGroup]; s.set && s.v.kind != kindNil {
		switch {
		case !s.v.isInt():
			return reg, reqErr(ErrInvalidType, "cache_group", "cache_group must be an integer or null")
		case s.v.kind != kindInt || s.v.i != 0:
			return reg, reqErr(ErrUnsupported, "cache_group", "only cache group zero is supported")
		}
		zero := int64(0)
		reg.CacheGroup = &zero
	}

	// Step 10: hash_profile.
	if s := &slots[rProfile]; s.set && !(json && s.v.kind == kindNil) {
		if s.v.kind != kindMap {
			msg := "hash_profile must be a map"
			if json {
				msg = "hash_profile must be an object"
			}
			return reg, reqErr(ErrInvalidType, "hash_profile", msg)
		}
		p, perr := decodeProfile(r.sub(s.v.s))
		if perr != nil {
			return reg, perr
		}
		reg.Profile, reg.ProfileExplicit = p, true
	} else if rpc {
		return reg, reqErr(ErrMissing, "hash_profile", "hash_profile is required")
	} else {
		reg.Profile = hash.DefaultProfile()
	}

	// Step 12: the publisher type's value.
	t, terr := core.ParsePublisherType(typeName)
	switch {
	case rpc && (terr != nil || t == core.PublisherStandard):
		return reg, reqErr(ErrInvalidValue, name(rType), "publisher_type must be vLLM, SGLang or Mooncake")
	case terr != nil:
		return reg, reqErr(ErrInvalidValue, name(rType), "type must be vLLM, SGLang, Mooncake or standard")
	}
	reg.Type = t

	// Step 13: dp_rank (the Python API defaults it to 0).
	if !slots[rDPRank].set {
		if rpc {
			return reg, nil
		}
		return reg, reqErr(ErrMissing, "dp_rank", "dp_rank is required")
	}
	dp := &slots[rDPRank].v
	switch {
	case !dp.isInt():
		return reg, reqErr(ErrInvalidType, "dp_rank", "dp_rank must be an integer")
	case dp.kind != kindInt || dp.i < 0 || dp.i > math.MaxInt32:
		return reg, reqErr(ErrOutOfRange, "dp_rank", "dp_rank must be a non-negative int")
	}
	reg.DPRank = int32(dp.i)
	return reg, nil
}

// scanFields reads every key of the map r is in, strictly: lookup maps a key
// to its slot (id < 0: unknown; skip: accepted and ignored); the first unknown
// or repeated key becomes the error ("unknown "/"duplicate " + what + "field
// K") and every later value is skipped; store receives the others, with
// seen[id] already set. A syntax error anywhere (r.err) wins.
func scanFields(r reader, what string, seen []bool, lookup func(key []byte) (id int, skip bool), store func(id int, key []byte)) *RequestError {
	var fe *RequestError
	for {
		key, ok := r.nextKey()
		if !ok {
			break
		}
		id, skip := lookup(key)
		switch {
		case skip || fe != nil:
			r.skip()
		case id < 0:
			fe = reqErr(ErrUnknownField, string(key), "unknown "+what+"field "+string(key))
			r.skip()
		case seen[id]:
			fe = reqErr(ErrInvalidValue, string(key), "duplicate "+what+"field "+string(key))
			r.skip()
		default:
			seen[id] = true
			store(id, key)
		}
	}
	if err := r.err(); err != nil {
		return err
	}
	return fe
}

// Profile sub-keys, in the order their presence and types are checked.
var profileKeys = [...]string{hash.FieldStrategy, hash.FieldAlgorithm, hash.FieldSeed, hash.FieldProjection}

// decodeProfile validates a hash_profile map and resolves it. Unknown sub-keys
// (e.g. the legacy root_digest) are unknown_field; present sub-keys must be
// non-empty strings; for vllm_v1 all four are required (missing), for the other
// strategies hash.Resolve supplies defaults where it has them. Resolution
// failures are invalid_value naming the field hash.Resolve reports.
func decodeProfile(r reader) (hash.Profile, *RequestError) {
	var vals [len(profileKeys)]value
	var set [len(profileKeys)]bool
	if fe := scanFields(r, "hash_profile ", set[:], func(key []byte) (int, bool) {
		for i, k := range profileKeys {
			if string(key) == k {
				return i, false
			}
		}
		return -1, false
	}, func(id int, _ []byte) { vals[id] = r.value() }); fe != nil {
		return hash.Profile{}, fe
	}
	if !set[0] {
		return hash.Profile{}, reqErr(ErrMissing, hash.FieldStrategy, "hash_profile.strategy is required")
	}
	var text [len(profileKeys)]string
	strict := vals[0].kind == kindStr && string(vals[0].s) == "vllm_v1"
	for i, k := range profileKeys {
		if !set[i] {
			if strict {
				return hash.Profile{}, reqErr(ErrMissing, k, "hash_profile."+k+" is required")
			}
			continue
		}
		b, err := strField(&vals[i], k)
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
			return hash.Profile{}, reqErr(ErrInvalidValue, "hash_profile", err.Error())
		}
		if errors.Is(pe.Err, hash.ErrEmptyField) {
			// present keys were checked non-empty above, so the key is absent
			return hash.Profile{}, reqErr(ErrMissing, pe.Field, "hash_profile."+pe.Field+" is required")
		}
		return hash.Profile{}, reqErr(ErrInvalidValue, pe.Field, pe.Error())
	}
	return p, nil
}

// handleRegister serves POST /register.
func (s *Server) handleRegister(ctx *fasthttp.RequestCtx, ep endpoint, st *reqState) {
	json, rerr := requestDialect(ctx, st.in)
	if rerr != nil {
		s.writeError(ctx, ep, st, json, rerr)
		return
	}
	reg, rerr := decodeRegistration(st.reader(st.in, json), dialectOf(json), DecodeOptions{})
	if rerr != nil {
		s.writeError(ctx, ep, st, json, rerr)
		return
	}
	if rerr, err := s.register(st.who, reg); rerr != nil {
		s.writeError(ctx, ep, st, json, rerr)
		return
	} else if err != nil {
		s.writeOpError(ctx, ep, st, json, 500, ErrInternal, "Failed to subscribe: "+err.Error())
		return
	}
	e := &st.enc
	e.reset(json)
	e.mapHeader(2)
	e.str("status")
	e.str("registered successfully")
	e.str("instance_id")
	e.str(reg.InstanceID)
	s.writeBody(ctx, 200, json, e.buf)
}

// register subscribes a decoded registration through the Registrar (shared by
// /register and the RPC Register). A refusal the client caused is a
// *RequestError: core.ErrLimit → limit_exceeded, a core.FieldError →
// invalid_value naming the field, core.ErrConflict or core.ErrInvalid →
// invalid_registration. Any other failure is logged and returned as err.
func (s *Server) register(who Principal, reg core.Registration) (*RequestError, error) {
	created, err := s.gate.Register(who, reg)
	key := serviceKey(reg.InstanceID, reg.TenantID, reg.DPRank)
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
			s.opts.Logger.Error("register not saved", "service", key, "err", err)
			return &RequestError{Err: ErrStateWrite, Index: noIndex, Status: 500, Msg: err.Error()}, nil
		case errors.Is(err, core.ErrLimit):
			return reqErr(ErrLimitExceeded, "", err.Error()), nil
		case errors.As(err, &fe) && !errors.Is(err, core.ErrConflict):
			return reqErr(ErrInvalidValue, fe.Field, err.Error()), nil
		case errors.Is(err, core.ErrConflict), errors.Is(err, core.ErrInvalid):
			return reqErr(ErrInvalidRegistration, "", err.Error()), nil
		}
		s.opts.Logger.Error("register failed", "service", key, "endpoint", reg.Endpoint, "err", err)
		return nil, err
	}
	s.opts.Logger.Info("registered", "service", key, "endpoint", reg.Endpoint, "type", reg.Type.String(),
		"model", reg.ModelName, "block_size", reg.BlockSize, "profile", reg.Profile.Spec.Strategy+"/"+reg.Profile.Spec.Algorithm,
		"owner", reg.Owner, "created", created)
	return nil, nil
}

// serviceKey renders "instance|tenant|rank".
func serviceKey(instance, tenant string, rank int32) string {
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

func unregKey(key []byte, d dialect) int {
	switch string(key) {
	case "instance_id":
		return uInstance
	case "tenant_id":
		return uTenant
	case "dp_rank":
		return uDPRank
	}
	if d == dialectJSON {
		switch string(key) {
		case "type", "modelname", "lora_name", "block_size":
			return uIgnored
		}
	}
	return -1
}

// decodeUnregister validates an /unregister body: instance_id (required
// non-empty string), tenant_id (optional; ""/absent → "default"), dp_rank
// (required; a non-integer, negative or > 2^31-1 value is invalid_value, as
// upstream). Unknown keys are unknown_field, except the Go-era type, modelname,
// lora_name and block_size, which the JSON dialect ignores (the seed's example
// sends them). The RPC dialect (the Python unregister()) takes only the three
// keys and defaults dp_rank to 0, as the Python signature does.
func decodeUnregister(r reader, d dialect) (core.ServiceKey, *RequestError) {
	json := d.json()
	var vals [numUnregKeys]value
	var set [numUnregKeys]bool
	if fe := scanFields(r, "", set[:], func(key []byte) (int, bool) {
		id := unregKey(key, d)
		return id, id == uIgnored
	}, func(id int, _ []byte) { vals[id] = r.value() }); fe != nil {
		return core.ServiceKey{}, fe
	}
	var k core.ServiceKey
	if !set[uInstance] {
		return k, reqErr(ErrMissing, "instance_id", "instance_id is required")
	}
	b, err := strField(&vals[uInstance], "instance_id")
	if err != nil {
		return k, err
	}
	k.InstanceID = string(b)
	if set[uTenant] {
		if b, err = optStrField(&vals[uTenant], "tenant_id", json); err != nil {
			return k, err
		}
		k.TenantID = string(b)
	}
	if k.TenantID == "" {
		k.TenantID = "default"
	}
	if !set[uDPRank] {
		if d == dialectRPC {
			return k, nil
		}
		return k, reqErr(ErrMissing, "dp_rank", "dp_rank is required")
	}
	dp := &vals[uDPRank]
	if dp.kind != kindInt || dp.i < 0 || dp.i > math.MaxInt32 {
		return k, reqErr(ErrInvalidValue, "dp_rank", "dp_rank must be a non-negative int")
	}
	k.DPRank = int32(dp.i)
	return k, nil
}

// unregister stops subscription k (rendered as key) on behalf of who
// through the Gate (shared by /unregister and the RPC Unregister). Errors wrap
// core.ErrNotFound, ErrForbidden or ErrStateWrite; other failures are logged.
func (s *Server) unregister(who Principal, k core.ServiceKey, key string) error {
	if _, err := s.gate.Unregister(who, k); err != nil {
		if !errors.Is(err, core.ErrNotFound) && !errors.Is(err, ErrForbidden) {
			s.opts.Logger.Error("unregister failed", "service", key, "err", err)
		}
		return err
	}
	s.opts.Logger.Info("unregistered", "service", key)
	return nil
}

// handleUnregister serves POST /unregister.
func (s *Server) handleUnregister(ctx *fasthttp.RequestCtx, ep endpoint, st *reqState) {
	json, rerr := requestDialect(ctx, st.in)
	if rerr != nil {
		s.writeError(ctx, ep, st, json, rerr)
		return
	}
	k, rerr := decodeUnregister(st.reader(st.in, json), dialectOf(json))
	if rerr != nil {
		s.writeError(ctx, ep, st, json, rerr)
		return
	}
	key := serviceKey(k.InstanceID, k.TenantID, k.DPRank)
	if err := s.unregister(st.who, k, key); err != nil {
		switch {
		case errors.Is(err, core.ErrNotFound):
			s.writeOpError(ctx, ep, st, json, 404, ErrNotFound, "service not found: "+key)
			return
		case errors.Is(err, ErrForbidden):
			s.writeError(ctx, ep, st, json, &RequestError{Err: ErrForbidden, Index: noIndex, Status: 403, Msg: err.Error()})
			return
		case errors.Is(err, ErrStateWrite):
			s.opts.Logger.Error("unregister not saved", "service", key, "err", err)
			s.writeError(ctx, ep, st, json, &RequestError{Err: ErrStateWrite, Index: noIndex, Status: 500, Msg: err.Error()})
			return
		}
		s.writeOpError(ctx, ep, st, json, 500, ErrInternal, "Failed to unregister: "+err.Error())
		return
	}
	e := &st.enc
	e.reset(json)
	e.mapHeader(2)
	e.str("status")
	e.str("unregistered successfully")
	e.str("removed_instances")
	e.arrayHeader(1)
	e.str(key)
	s.writeBody(ctx, 200, json, e.buf)
}
