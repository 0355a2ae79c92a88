package httpd

import (
	"errors"
	"sort"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
)

// Dynamo /register, /unregister and /workers.

// registerFields are the /register body keys.
const (
	drInstance = iota
	drEndpoint
	drModel
	drBlockSize
	drGroup
	drRank
	drReplay
	drType
	drIgnored
	numDynReg
)

func dynRegKey(key []byte) (int, bool) {
	switch string(key) {
	case "instance_id":
		return drInstance, false
	case "endpoint":
		return drEndpoint, false
	case "model_name":
		return drModel, false
	case "block_size":
		return drBlockSize, false
	case "routing_group":
		return drGroup, false
	case "dp_rank":
		return drRank, false
	case "replay_endpoint":
		return drReplay, false
	case "type":
		return drType, false
	case "additional_salt", "additionalsalt", "tenant_id":
		return drIgnored, true
	}
	return -1, false
}

// instanceField accepts a u64 as a JSON number or a string of digits.
func instanceField(v *value) (uint64, *RequestError) {
	switch v.kind {
	case kindInt:
		if v.i >= 0 {
			return uint64(v.i), nil
		}
	case kindUint:
		return v.u, nil
	case kindStr:
		if u, err := strconv.ParseUint(string(v.s), 10, 64); err == nil {
			return u, nil
		}
		return 0, reqErr(ErrInvalidValue, "instance_id", "instance_id must be an unsigned 64-bit integer")
	}
	if v.isInt() {
		return 0, reqErr(ErrOutOfRange, "instance_id", "instance_id must be an unsigned 64-bit integer")
	}
	return 0, reqErr(ErrInvalidType, "instance_id", "instance_id must be a number or a string")
}

// decodeDynamoRegister reads a /register body. Unknown keys are ignored (as
// serde does by default); the known ones are checked strictly.
func decodeDynamoRegister(r reader) (DynamoWorker, *RequestError) {
	var vals [numDynReg]value
	var seen [numDynReg]bool
	var w DynamoWorker
	if fe := scanFields(r, "", seen[:], func(key []byte) (int, bool) {
		id, skip := dynRegKey(key)
		return id, skip || id < 0
	}, func(id int, _ []byte) { vals[id] = r.value() }); fe != nil {
		return w, fe
	}
	for _, f := range []struct {
		id   int
		name string
	}{{drInstance, "instance_id"}, {drEndpoint, "endpoint"}, {drModel, "model_name"}, {drBlockSize, "block_size"}} {
		if !seen[f.id] {
			return w, reqErr(ErrMissing, f.name, f.name+" is required")
		}
	}
	var fe *RequestError
	if w.InstanceID, fe = instanceField(&vals[drInstance]); fe != nil {
		return w, fe
	}
	var b []byte
	if b, fe = strField(&vals[drEndpoint], "endpoint"); fe != nil {
		return w, fe
	}
	w.Endpoint = string(b)
	if b, fe = strField(&vals[drModel], "model_name"); fe != nil {
		return w, fe
	}
	w.ModelName = string(b)
	bs, fe := blockSizeField(&vals[drBlockSize], "block_size")
	if fe != nil {
		return w, fe
	}
	if bs > 1<<31-1 {
		return w, reqErr(ErrOutOfRange, "block_size", "block_size is too large")
	}
	w.BlockSize = int(bs)
	if seen[drGroup] {
		if b, fe = optStrField(&vals[drGroup], "routing_group", true); fe != nil {
			return w, fe
		}
		w.RoutingGroup = string(b)
	}
	if seen[drRank] && vals[drRank].kind != kindNil {
		v := &vals[drRank]
		if v.kind != kindInt || v.i < 0 || v.i > 1<<31-1 {
			return w, reqErr(ErrInvalidValue, "dp_rank", "dp_rank must be a non-negative 32-bit integer")
		}
		w.DPRank = uint32(v.i)
	}
	if seen[drReplay] {
		if b, fe = optStrField(&vals[drReplay], "replay_endpoint", true); fe != nil {
			return w, fe
		}
		w.ReplayEndpoint = string(b)
	}
	if seen[drType] && vals[drType].kind != kindNil {
		b, fe = strField(&vals[drType], "type")
		if fe != nil {
			return w, fe
		}
		t, err := core.ParsePublisherType(string(b))
		if err != nil || (t != core.PublisherVLLM && t != core.PublisherSGLang) {
			return w, reqErr(ErrInvalidValue, "type", "type must be vLLM or SGLang")
		}
		w.Type = t
	}
	return w, nil
}

func (d *Dynamo) handleRegister(ctx *fasthttp.RequestCtx, st *dynState) {
	r, ok := d.jsonBody(ctx, st)
	if !ok {
		return
	}
	w, fe := decodeDynamoRegister(r)
	st.model = append(st.model, w.ModelName...)
	if fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	if err := d.register(st.who, w); err != nil {
		switch {
		case errors.Is(err, ErrForbidden):
			d.opError(ctx, st, 403, ErrForbidden, err.Error())
		case errors.Is(err, core.ErrConflict):
			d.opError(ctx, st, 409, ErrInvalidRegistration, err.Error())
		case errors.Is(err, core.ErrInvalid):
			d.opError(ctx, st, 400, ErrInvalidRegistration, err.Error())
		case errors.Is(err, core.ErrLimit):
			d.opError(ctx, st, 429, ErrLimitExceeded, err.Error())
		case errors.Is(err, ErrStateWrite):
			d.opts.Logger.Error("dynamo register not saved", "instance", w.InstanceID, "err", err)
			d.opError(ctx, st, 500, ErrStateWrite, err.Error())
		default:
			d.opts.Logger.Error("dynamo register failed", "instance", w.InstanceID, "err", err)
			d.opError(ctx, st, 500, ErrInternal, err.Error())
		}
		return
	}
	d.opts.Logger.Info("dynamo worker registered", "instance", w.InstanceID, "dp_rank", w.DPRank,
		"model", w.ModelName, "routing_group", w.RoutingGroup, "endpoint", w.Endpoint)
	d.ok(ctx, st, 201)
}

func (d *Dynamo) handleUnregister(ctx *fasthttp.RequestCtx, st *dynState) {
	r, ok := d.jsonBody(ctx, st)
	if !ok {
		return
	}
	const (
		uI = iota
		uM
		uG
		uR
		uX
		nU
	)
	var vals [nU]value
	var seen [nU]bool
	if fe := scanFields(r, "", seen[:], func(key []byte) (int, bool) {
		switch string(key) {
		case "instance_id":
			return uI, false
		case "model_name":
			return uM, false
		case "routing_group":
			return uG, false
		case "dp_rank":
			return uR, false
		}
		return uX, true
	}, func(id int, _ []byte) { vals[id] = r.value() }); fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	if !seen[uI] {
		d.reqError(ctx, st, 400, reqErr(ErrMissing, "instance_id", "instance_id is required"))
		return
	}
	if !seen[uM] {
		d.reqError(ctx, st, 400, reqErr(ErrMissing, "model_name", "model_name is required"))
		return
	}
	inst, fe := instanceField(&vals[uI])
	if fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	model, fe := strField(&vals[uM], "model_name")
	if fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	st.model = append(st.model, model...)
	var group []byte
	if seen[uG] {
		if group, fe = optStrField(&vals[uG], "routing_group", true); fe != nil {
			d.reqError(ctx, st, 400, fe)
			return
		}
	}
	var rank *uint32
	if seen[uR] && vals[uR].kind != kindNil {
		v := &vals[uR]
		if v.kind != kindInt || v.i < 0 || v.i > 1<<31-1 {
			d.reqError(ctx, st, 400, reqErr(ErrInvalidValue, "dp_rank", "dp_rank must be a non-negative 32-bit integer"))
			return
		}
		r := uint32(v.i)
		rank = &r
	}
	if _, err := d.unregister(st.who, inst, string(model), string(group), rank); err != nil {
		if errors.Is(err, ErrForbidden) {
			d.opError(ctx, st, 403, ErrForbidden, err.Error())
			return
		}
		if errors.Is(err, core.ErrNotFound) {
			d.opError(ctx, st, 404, ErrNotFound, err.Error())
			return
		}
		if errors.Is(err, ErrStateWrite) {
			d.opts.Logger.Error("dynamo unregister not saved", "instance", inst, "err", err)
			d.opError(ctx, st, 500, ErrStateWrite, err.Error())
			return
		}
		d.opts.Logger.Error("dynamo unregister failed", "instance", inst, "err", err)
		d.opError(ctx, st, 500, ErrInternal, err.Error())
		return
	}
	d.opts.Logger.Info("dynamo worker unregistered", "instance", inst, "model", string(model), "routing_group", string(group))
	d.ok(ctx, st, 200)
}

// statusRank orders listener states for aggregation: failed > pending >
// active > paused.
func statusRank(s string) int {
	switch s {
	case "failed":
		return 3
	case "pending":
		return 2
	case "active":
		return 1
	}
	return 0
}

func (d *Dynamo) listenerStates() map[core.ServiceKey]ListenerInfo {
	out := map[core.ServiceKey]ListenerInfo{}
	if d.opts.Listeners != nil {
		for _, l := range d.opts.Listeners() {
			out[l.Key] = l
		}
	}
	return out
}

func (d *Dynamo) handleWorkers(ctx *fasthttp.RequestCtx, st *dynState) {
	args := ctx.QueryArgs()
	model, group := args.Peek("model_name"), args.Peek("routing_group")
	hasModel, hasGroup := args.Has("model_name"), args.Has("routing_group")
	st.model = append(st.model, model...)
	states := d.listenerStates()
	type row struct {
		id uint64
		w  *dynWorker
		bs int
	}
	d.mu.Lock()
	d.pruneLocked()
	var rows []row
	for id, w := range d.workers {
		if (hasModel && w.key.model != string(model)) || (hasGroup && w.key.group != string(group)) {
			continue
		}
		cp := &dynWorker{key: w.key, ranks: make(map[uint32]dynRank, len(w.ranks))}
		for r, v := range w.ranks {
			cp.ranks[r] = v
		}
		rows = append(rows, row{id, cp, d.indexers[w.key]})
	}
	d.mu.Unlock()
	sort.Slice(rows, func(i, j int) bool { return rows[i].id < rows[j].id })
	e := &st.enc
	e.reset(true)
	e.arrayHeader(len(rows))
	for _, rw := range rows {
		ranks := make([]uint32, 0, len(rw.w.ranks))
		for r := range rw.w.ranks {
			ranks = append(ranks, r)
		}
		sort.Slice(ranks, func(i, j int) bool { return ranks[i] < ranks[j] })
		agg := ""
		infos := make([]ListenerInfo, len(ranks))
		for i, r := range ranks {
			li, ok := states[core.ServiceKey{InstanceID: strconv.FormatUint(rw.id, 10), TenantID: rw.w.key.group, DPRank: int32(r)}]
			if !ok {
				li.State = "pending"
			}
			infos[i] = li
			if agg == "" || statusRank(li.State) > statusRank(agg) {
				agg = li.State
			}
		}
		e.mapHeader(8)
		e.str("instance_id")
		e.uint(rw.id)
		e.str("source")
		e.str("zmq")
		e.str("status")
		e.str(agg)
		e.str("model_name")
		e.str(rw.w.key.model)
		e.str("routing_group")
		e.str(rw.w.key.group)
		e.str("block_size")
		e.int(int64(rw.bs))
		e.str("endpoints")
		e.mapHeader(len(ranks))
		for _, r := range ranks {
			e.decKey(int64(r))
			e.str(rw.w.ranks[r].endpoint)
		}
		e.str("listeners")
		e.mapHeader(len(ranks))
		for i, r := range ranks {
			e.decKey(int64(r))
			n := 2
			if infos[i].LastError != "" {
				n++
			}
			e.mapHeader(n)
			e.str("endpoint")
			e.str(rw.w.ranks[r].endpoint)
			e.str("status")
			e.str(infos[i].State)
			if infos[i].LastError != "" {
				e.str("last_error")
				e.str(infos[i].LastError)
			}
		}
	}
	d.body(ctx, 200, e.buf)
}
