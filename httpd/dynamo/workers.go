package dynamo

import (
	"errors"
	"sort"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/server"
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
func instanceField(v *server.Value) (uint64, *server.RequestError) {
	switch v.Kind {
	case server.KindInt:
		if v.Int >= 0 {
			return uint64(v.Int), nil
		}
	case server.KindUint:
		return v.Uint, nil
	case server.KindStr:
		if u, err := strconv.ParseUint(string(v.Bytes), 10, 64); err == nil {
			return u, nil
		}
		return 0, server.NewError(server.ErrInvalidValue, "instance_id", "instance_id must be an unsigned 64-bit integer")
	}
	if v.IsInt() {
		return 0, server.NewError(server.ErrOutOfRange, "instance_id", "instance_id must be an unsigned 64-bit integer")
	}
	return 0, server.NewError(server.ErrInvalidType, "instance_id", "instance_id must be a number or a string")
}

// decodeDynamoRegister reads a /register body. Unknown keys are ignored (as
// serde does by default; the first is noted in st.Ignored); the known ones
// are checked strictly.
func decodeDynamoRegister(r *server.Reader, st *server.State) (Worker, *server.RequestError) {
	var vals [numDynReg]server.Value
	var seen [numDynReg]bool
	var w Worker
	if fe := server.ScanFields(r, "", seen[:], func(key []byte) (int, bool) {
		id, skip := dynRegKey(key)
		if id < 0 {
			ignore(st, key)
		}
		return id, skip || id < 0
	}, func(id int, _ []byte) { vals[id] = r.Value() }); fe != nil {
		return w, fe
	}
	for _, f := range []struct {
		id   int
		name string
	}{{drInstance, "instance_id"}, {drEndpoint, "endpoint"}, {drModel, "model_name"}, {drBlockSize, "block_size"}} {
		if !seen[f.id] {
			return w, server.NewError(server.ErrMissing, f.name, f.name+" is required")
		}
	}
	var fe *server.RequestError
	if w.InstanceID, fe = instanceField(&vals[drInstance]); fe != nil {
		return w, fe
	}
	var b []byte
	if b, fe = server.StrField(&vals[drEndpoint], "endpoint"); fe != nil {
		return w, fe
	}
	w.Endpoint = string(b)
	if b, fe = server.StrField(&vals[drModel], "model_name"); fe != nil {
		return w, fe
	}
	w.ModelName = string(b)
	bs, fe := server.BlockSizeField(&vals[drBlockSize], "block_size")
	if fe != nil {
		return w, fe
	}
	if bs > 1<<31-1 {
		return w, server.NewError(server.ErrOutOfRange, "block_size", "block_size is too large")
	}
	w.BlockSize = int(bs)
	if seen[drGroup] {
		if b, fe = server.OptStrField(&vals[drGroup], "routing_group", true); fe != nil {
			return w, fe
		}
		w.RoutingGroup = string(b)
	}
	if seen[drRank] && vals[drRank].Kind != server.KindNil {
		v := &vals[drRank]
		if v.Kind != server.KindInt || v.Int < 0 || v.Int > 1<<31-1 {
			return w, server.NewError(server.ErrInvalidValue, "dp_rank", "dp_rank must be a non-negative 32-bit integer")
		}
		w.DPRank = uint32(v.Int)
	}
	if seen[drReplay] {
		if b, fe = server.OptStrField(&vals[drReplay], "replay_endpoint", true); fe != nil {
			return w, fe
		}
		w.ReplayEndpoint = string(b)
	}
	if seen[drType] && vals[drType].Kind != server.KindNil {
		b, fe = server.StrField(&vals[drType], "type")
		if fe != nil {
			return w, fe
		}
		t, err := core.ParsePublisherType(string(b))
		if err != nil || (t != core.PublisherVLLM && t != core.PublisherSGLang) {
			return w, server.NewError(server.ErrInvalidValue, "type", "type must be vLLM or SGLang")
		}
		w.Type = t
	}
	return w, nil
}

func (d *Server) handleRegister(ctx *fasthttp.RequestCtx, st *server.State) {
	r, ok := d.jsonBody(ctx, st)
	if !ok {
		return
	}
	w, fe := decodeDynamoRegister(r, st)
	st.Model = append(st.Model, w.ModelName...)
	if fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	if err := d.register(st.Who, w); err != nil {
		switch {
		case errors.Is(err, server.ErrForbidden):
			d.opError(ctx, st, 403, server.ErrForbidden, err.Error())
		case errors.Is(err, core.ErrConflict):
			d.opError(ctx, st, 409, server.ErrInvalidRegistration, err.Error())
		case errors.Is(err, core.ErrInvalid):
			d.opError(ctx, st, 400, server.ErrInvalidRegistration, err.Error())
		case errors.Is(err, core.ErrLimit):
			d.opError(ctx, st, 429, server.ErrLimitExceeded, err.Error())
		case errors.Is(err, server.ErrStateWrite):
			d.opts.Logger.Error("dynamo register not saved", "instance", w.InstanceID, "err", err)
			d.opError(ctx, st, 500, server.ErrStateWrite, err.Error())
		default:
			d.opts.Logger.Error("dynamo register failed", "instance", w.InstanceID, "err", err)
			d.opError(ctx, st, 500, server.ErrInternal, err.Error())
		}
		return
	}
	d.opts.Logger.Info("dynamo worker registered", "instance", w.InstanceID, "dp_rank", w.DPRank,
		"model", w.ModelName, "routing_group", w.RoutingGroup, "endpoint", w.Endpoint)
	d.ok(ctx, st, 201)
}

func (d *Server) handleUnregister(ctx *fasthttp.RequestCtx, st *server.State) {
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
	var vals [nU]server.Value
	var seen [nU]bool
	if fe := server.ScanFields(r, "", seen[:], func(key []byte) (int, bool) {
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
		ignore(st, key)
		return uX, true
	}, func(id int, _ []byte) { vals[id] = r.Value() }); fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	if !seen[uI] {
		d.reqError(ctx, st, 400, server.NewError(server.ErrMissing, "instance_id", "instance_id is required"))
		return
	}
	if !seen[uM] {
		d.reqError(ctx, st, 400, server.NewError(server.ErrMissing, "model_name", "model_name is required"))
		return
	}
	inst, fe := instanceField(&vals[uI])
	if fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	model, fe := server.StrField(&vals[uM], "model_name")
	if fe != nil {
		d.reqError(ctx, st, 400, fe)
		return
	}
	st.Model = append(st.Model, model...)
	var group []byte
	if seen[uG] {
		if group, fe = server.OptStrField(&vals[uG], "routing_group", true); fe != nil {
			d.reqError(ctx, st, 400, fe)
			return
		}
	}
	var rank *uint32
	if seen[uR] && vals[uR].Kind != server.KindNil {
		v := &vals[uR]
		if v.Kind != server.KindInt || v.Int < 0 || v.Int > 1<<31-1 {
			d.reqError(ctx, st, 400, server.NewError(server.ErrInvalidValue, "dp_rank", "dp_rank must be a non-negative 32-bit integer"))
			return
		}
		r := uint32(v.Int)
		rank = &r
	}
	if _, err := d.unregister(st.Who, inst, string(model), string(group), rank); err != nil {
		if errors.Is(err, server.ErrForbidden) {
			d.opError(ctx, st, 403, server.ErrForbidden, err.Error())
			return
		}
		if errors.Is(err, core.ErrNotFound) {
			d.opError(ctx, st, 404, server.ErrNotFound, err.Error())
			return
		}
		if errors.Is(err, server.ErrStateWrite) {
			d.opts.Logger.Error("dynamo unregister not saved", "instance", inst, "err", err)
			d.opError(ctx, st, 500, server.ErrStateWrite, err.Error())
			return
		}
		d.opts.Logger.Error("dynamo unregister failed", "instance", inst, "err", err)
		d.opError(ctx, st, 500, server.ErrInternal, err.Error())
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

func (d *Server) listenerStates() map[core.ServiceKey]ListenerInfo {
	out := map[core.ServiceKey]ListenerInfo{}
	if d.opts.Listeners != nil {
		for _, l := range d.opts.Listeners() {
			out[l.Key] = l
		}
	}
	return out
}

// workerKey is the service key of a worker's rank.
func workerKey(id uint64, group string, rank uint32) core.ServiceKey {
	return core.ServiceKey{InstanceID: strconv.FormatUint(id, 10), TenantID: group, DPRank: int32(rank)}
}

func (d *Server) handleWorkers(ctx *fasthttp.RequestCtx, st *server.State) {
	args := ctx.QueryArgs()
	model, group := args.Peek("model_name"), args.Peek("routing_group")
	hasModel, hasGroup := args.Has("model_name"), args.Has("routing_group")
	st.Model = append(st.Model, model...)
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
	e := &st.Enc
	e.Reset(true)
	e.ArrayHeader(len(rows))
	for _, rw := range rows {
		ranks := make([]uint32, 0, len(rw.w.ranks))
		for r := range rw.w.ranks {
			ranks = append(ranks, r)
		}
		sort.Slice(ranks, func(i, j int) bool { return ranks[i] < ranks[j] })
		agg := ""
		infos := make([]ListenerInfo, len(ranks))
		for i, r := range ranks {
			li, ok := states[workerKey(rw.id, rw.w.key.group, r)]
			if !ok {
				li.State = "pending"
			}
			infos[i] = li
			if agg == "" || statusRank(li.State) > statusRank(agg) {
				agg = li.State
			}
		}
		e.MapHeader(8)
		e.Str("instance_id")
		e.Uint(rw.id)
		e.Str("source")
		e.Str("zmq")
		e.Str("status")
		e.Str(agg)
		e.Str("model_name")
		e.Str(rw.w.key.model)
		e.Str("routing_group")
		e.Str(rw.w.key.group)
		e.Str("block_size")
		e.Int(int64(rw.bs))
		e.Str("endpoints")
		e.MapHeader(len(ranks))
		for _, r := range ranks {
			e.DecKey(int64(r))
			e.Str(rw.w.ranks[r].endpoint)
		}
		e.Str("listeners")
		e.MapHeader(len(ranks))
		for i, r := range ranks {
			e.DecKey(int64(r))
			n := 3
			if infos[i].LastError != "" {
				n++
			}
			e.MapHeader(n)
			e.Str("endpoint")
			e.Str(rw.w.ranks[r].endpoint)
			e.Str("status")
			e.Str(infos[i].State)
			if infos[i].LastError != "" {
				e.Str("last_error")
				e.Str(infos[i].LastError)
			}
			e.Str("hash_check")
			var hc core.HashCheck
			if sub, ok := d.ix.Lookup(workerKey(rw.id, rw.w.key.group, r)); ok {
				hc = sub.HashCheck()
			}
			server.AppendHashCheck(e, &hc)
		}
	}
	d.body(ctx, 200, e.Bytes())
}
