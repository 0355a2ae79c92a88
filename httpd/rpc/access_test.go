package rpc

import (
	"fmt"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/httpd/server"
)

// TestAccessRPC: the RPC surface applies the same access classes: Register
// and Unregister need a registering identity, GetGlobalView and ListServices
// the admin, Query the query token; refusals are RPC_FAIL with 401/403.
func TestAccessRPC(t *testing.T) {
	a, err := server.NewAccess(server.AccessOptions{AdminToken: adminTok, QueryToken: queryTok,
		ClientTokens: map[string]string{"team-a": teamATok}})
	if err != nil {
		t.Fatal(err)
	}
	env := newRPCEnv(t, Options{Access: a})
	call := func(method, token, body string) response {
		t.Helper()
		var req fasthttp.Request
		req.Header.SetMethod("POST")
		req.SetRequestURI("/rpc/" + method)
		req.Header.SetContentType("application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		req.SetBody([]byte(body))
		ctx := &fasthttp.RequestCtx{}
		ctx.Init(&req, nil, nil)
		env.r.Handler(ctx)
		return response{status: ctx.Response.StatusCode(), ct: string(ctx.Response.Header.ContentType()),
			body: append([]byte(nil), ctx.Response.Body()...)}
	}
	query := jsonEnc(obj{"model_name", "my-model", "block_size", 16, "token_ids", seqTokens(16, 0)})
	for _, c := range []struct {
		method, token, body string
		status, ret         int
	}{
		{"Register", "", jsonEnc(pyReg()), 401, RetRPCFail},
		{"Register", queryTok, jsonEnc(pyReg()), 403, RetRPCFail},
		{"Register", teamATok, jsonEnc(pyReg()), 200, RetOK},
		{"Query", "", query, 401, RetRPCFail},
		{"Query", queryTok, query, 200, RetOK},
		{"ListServices", teamATok, "", 403, RetRPCFail},
		{"ListServices", adminTok, "", 200, RetOK},
		{"GetGlobalView", "", "", 401, RetRPCFail},
		{"Unregister", "", jsonEnc(obj{"instance_id", "vllm-0"}), 401, RetRPCFail},
		{"Unregister", teamATok, jsonEnc(obj{"instance_id", "vllm-0"}), 200, RetOK},
	} {
		r := call(c.method, c.token, c.body)
		m := decodeMap(t, r)
		if ret := fmt.Sprint(m["ret"]); r.status != c.status || ret != fmt.Sprint(c.ret) {
			t.Fatalf("%s with %q: %d %s, want %d ret %d", c.method, c.token, r.status, r.body, c.status, c.ret)
		}
	}
}
