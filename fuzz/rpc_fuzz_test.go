package fuzz

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"strconv"
	"testing"

	"github.com/tinylib/msgp/msgp"
	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/httpd/rpc"
)

// Fuzz targets for the Python client's RPC surface (rpc.Server), through
// the real handler over the httpd fixture's index. Properties: no panic; a
// known method answers 200 and an unknown one 404; the body is one JSON object
// whose integer "ret" is a code the server may produce; a failure carries the
// method's empty payload and an error text (with a known reason when any); a
// successful query row is cumulative (device ≤ cpu_local ≤ cpu_share ≤ disk =
// longest_matched ≤ the prompt's complete blocks). token_ids as base64 of
// little-endian int32s, and as a msgpack bin of them, must answer exactly as
// the same tokens as a JSON array.

var rpcMethods = []string{"Query", "Register", "Unregister", "GetGlobalView", "ListServices", "Nope"}

var rpcRets = map[int64]bool{rpc.RetOK: true, rpc.RetInternalError: true, rpc.RetInvalidParams: true,
	rpc.RetRPCFail: true, rpc.RetServiceNotFound: true}

// rpcOpReasons are the reasons of RPC failures no request field caused: an
// unknown method, another HTTP method, an internal failure, an unknown
// subscription.
var rpcOpReasons = map[string]bool{"not_found": true, "method_not_allowed": true, "internal": true}

func rpcServe(r *rpc.Server, method string, body []byte) *fasthttp.RequestCtx {
	return rpcServeCT(r, method, "application/json", body)
}

func rpcServeCT(r *rpc.Server, method, ct string, body []byte) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.SetRequestURI("/rpc/" + method)
	req.Header.SetContentType(ct)
	req.SetBody(body)
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, nil, nil)
	r.Handler(ctx)
	return ctx
}

func checkRPCResponse(t *testing.T, method string, ctx *fasthttp.RequestCtx) map[string]any {
	t.Helper()
	m := decodeResponse(t, ctx, "application/json")
	wantStatus := 200
	if method == "Nope" {
		wantStatus = 404
	}
	if s := ctx.Response.StatusCode(); s != wantStatus {
		t.Fatalf("%s: status %d, want %d: %v", method, s, wantStatus, m)
	}
	ret, ok := num(m["ret"])
	if !ok || !rpcRets[ret] {
		t.Fatalf("%s: ret %v", method, m["ret"])
	}
	if ret == rpc.RetOK {
		return m
	}
	if _, ok := m["error"].(string); !ok {
		t.Fatalf("%s: failure without error text: %v", method, m)
	}
	if reason, ok := m["reason"]; ok && !httpdReasons[reason.(string)] && !rpcOpReasons[reason.(string)] {
		t.Fatalf("%s: unknown reason %v", method, reason)
	}
	switch method {
	case "Query":
		if h, ok := m["hits"].(map[string]any); !ok || len(h) != 0 {
			t.Fatalf("failed query hits %v", m["hits"])
		}
	case "GetGlobalView":
		if c, ok := m["contexts"].([]any); !ok || len(c) != 0 || m["context_count"] == nil {
			t.Fatalf("failed view %v", m)
		}
	case "ListServices":
		if c, ok := m["services"].([]any); !ok || len(c) != 0 || m["count"] == nil {
			t.Fatalf("failed list %v", m)
		}
	}
	return m
}

func checkRPCHits(t *testing.T, hits map[string]any, limit int64) {
	t.Helper()
	for id, v := range hits {
		row, _ := v.(map[string]any)
		d, _ := num(row["device"])
		cl, _ := num(row["cpu_local"])
		cs, _ := num(row["cpu_share"])
		dk, _ := num(row["disk"])
		lm, _ := num(row["longest_matched"])
		if len(row) != 7 || !(0 <= d && d <= cl && cl <= cs && cs <= dk && dk == lm && lm <= limit) {
			t.Fatalf("row %s not cumulative or beyond %d tokens: %v", id, limit, row)
		}
	}
}

func FuzzRPCRequest(f *testing.F) {
	fx := newHTTPDFixture(f)
	r := rpc.New(fx.c)
	q := func(s string) []byte { return []byte(s) }
	f.Add(uint8(0), q(`{"model_name":"m","block_size":16,"token_ids":[1,2,3]}`))
	f.Add(uint8(0), q(`{"model_name":"m","block_size":16,"token_ids":"AQAAAAIAAAA="}`))
	f.Add(uint8(0), q(`{"model_name":"m","block_size":16,"token_ids":"AQAAAAIAAA"}`))
	f.Add(uint8(1), q(`{"instance_id":"x","endpoint":"tcp://127.0.0.1:9","model_name":"m","block_size":16,"hash_profile":{"strategy":"vllm_v1","algorithm":"sha256_cbor","python_hash_seed":"0","index_projection":"low64_be"}}`))
	f.Add(uint8(1), q(`{"instance_id":"y","endpoint":"tcp://127.0.0.1:8","publisher_type":"SGLang","model_name":"s","block_size":2,"hash_profile":{"strategy":"sglang","algorithm":"sha256_raw","index_projection":"first64_be"}}`))
	f.Add(uint8(2), q(`{"instance_id":"x","tenant_id":"","dp_rank":0}`))
	f.Add(uint8(3), q(``))
	f.Add(uint8(4), q(`{}`))
	f.Add(uint8(5), q(`{}`))
	f.Fuzz(func(t *testing.T, mi uint8, body []byte) {
		if len(body) > httpdMaxInput {
			return
		}
		method := rpcMethods[int(mi)%len(rpcMethods)]
		m := checkRPCResponse(t, method, rpcServe(r, method, body))
		if ret, _ := num(m["ret"]); method == "Query" && ret == rpc.RetOK {
			checkRPCHits(t, m["hits"].(map[string]any), int64(len(fx.prompt)))
		}
	})
}

func FuzzRPCQueryTokenForms(f *testing.F) {
	fx := newHTTPDFixture(f)
	r := rpc.New(fx.c)
	prefix := make([]byte, 4*16*3)
	for i := 0; i < len(prefix)/4; i++ {
		binary.LittleEndian.PutUint32(prefix[4*i:], uint32(fx.prompt[i]))
	}
	f.Add(prefix, uint8(16), true)
	f.Add([]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, uint8(1), false)
	f.Add([]byte{}, uint8(4), false)
	f.Fuzz(func(t *testing.T, raw []byte, bs uint8, usePrompt bool) {
		if len(raw) > httpdMaxInput {
			return
		}
		raw = raw[:len(raw)/4*4]
		if usePrompt && len(raw) <= len(prefix) { // steer toward hits
			raw = append(prefix[:len(prefix)-len(raw):len(prefix)-len(raw)], raw...)
		}
		var arr bytes.Buffer
		arr.WriteByte('[')
		for i := 0; i+4 <= len(raw); i += 4 {
			if i > 0 {
				arr.WriteByte(',')
			}
			arr.WriteString(strconv.Itoa(int(int32(binary.LittleEndian.Uint32(raw[i:])))))
		}
		arr.WriteByte(']')
		head := `{"model_name":"m","block_size":` + strconv.Itoa(int(bs)) + `,"token_ids":`
		viaArray := rpcServe(r, "Query", []byte(head+arr.String()+`}`))
		viaB64 := rpcServe(r, "Query", []byte(head+`"`+base64.StdEncoding.EncodeToString(raw)+`"}`))
		mpBody := msgp.AppendMapHeader(nil, 3)
		mpBody = msgp.AppendString(mpBody, "model_name")
		mpBody = msgp.AppendString(mpBody, "m")
		mpBody = msgp.AppendString(mpBody, "block_size")
		mpBody = msgp.AppendInt(mpBody, int(bs))
		mpBody = msgp.AppendString(mpBody, "token_ids")
		mpBody = msgp.AppendBytes(mpBody, raw)
		viaBin := rpcServeCT(r, "Query", "application/msgpack", mpBody)
		m := checkRPCResponse(t, "Query", viaB64)
		if !bytes.Equal(viaArray.Response.Body(), viaB64.Response.Body()) || !bytes.Equal(viaArray.Response.Body(), viaBin.Response.Body()) {
			t.Fatalf("token forms differ:\narray  %s\nbase64 %s\nbin    %s", viaArray.Response.Body(), viaB64.Response.Body(), viaBin.Response.Body())
		}
		if ret, _ := num(m["ret"]); ret == rpc.RetOK {
			checkRPCHits(t, m["hits"].(map[string]any), int64(len(raw)/4))
		}
	})
}
