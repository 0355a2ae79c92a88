package server

import (
	"errors"
	"strings"
	"testing"
)

// TestRegisterTypos: a mistyped key of a registration, of its hash_profile
// or of an unregistration is unknown_field naming the key, and its message
// names the nearest key the dialect takes (the Python names in the RPC
// dialect, the C++ conductor's in msgpack); a key near none gets no
// suggestion. Every key the seeds' clients send is still accepted.
func TestRegisterTypos(t *testing.T) {
	const base = `"endpoint":"tcp://127.0.0.1:5557","instance_id":"i","block_size":16,"dp_rank":0`
	const profile = `"hash_profile":{"strategy":"vllm_v1","algorithm":"sha256_cbor","python_hash_seed":"0","index_projection":"low64_be"}`
	msgpackOf := func(keys ...string) []byte { // a map of the keys, each with a string value
		var e Encoder
		e.Reset(false)
		e.MapHeader(len(keys))
		for _, k := range keys {
			e.Str(k)
			e.Str("x")
		}
		return e.Bytes()
	}
	decode := func(d Dialect, body []byte) *RequestError {
		var scratch []byte
		r := &Reader{}
		r.reset(body, d.JSON(), &scratch)
		_, err := decodeRegistration(r, d, DecodeOptions{})
		return err
	}
	for _, c := range []struct {
		name  string
		d     Dialect
		body  []byte
		field string
		want  string // "": no suggestion
	}{
		{"json replay", DialectJSON, []byte(`{` + base + `,"type":"vLLM","modelname":"m","replay_endpont":"tcp://127.0.0.1:5558"}`),
			"replay_endpont", "did you mean replay_endpoint?"},
		{"json block size", DialectJSON, []byte(`{"endpoint":"tcp://127.0.0.1:5557","instance_id":"i","blocksize":16,"dp_rank":0,"type":"vLLM","modelname":"m"}`),
			"blocksize", "did you mean block_size?"},
		{"json far", DialectJSON, []byte(`{` + base + `,"type":"vLLM","modelname":"m","qqqqqqqq":1}`), "qqqqqqqq", ""},
		{"json hash_profile", DialectJSON, []byte(`{` + base + `,"type":"vLLM","modelname":"m","hash_profile":{"strategi":"vllm_v1"}}`),
			"strategi", "did you mean strategy?"},
		{"rpc http name", DialectRPC, []byte(`{` + base + `,"modelname":"m",` + profile + `}`), "modelname", "did you mean model_name?"},
		{"rpc python typo", DialectRPC, []byte(`{` + base + `,"model_name":"m","publisher_typ":"vLLM",` + profile + `}`),
			"publisher_typ", "did you mean publisher_type?"},
		{"msgpack json alias", DialectMsgpack, msgpackOf("model_name"), "model_name", "did you mean modelname?"},
	} {
		err := decode(c.d, c.body)
		switch {
		case err == nil || !errors.Is(err.Err, ErrUnknownField) || err.Field != c.field:
			t.Errorf("%s: %v, want unknown_field %q", c.name, err, c.field)
		case c.want == "" && strings.Contains(err.Msg, "did you mean"):
			t.Errorf("%s: %q suggests a key for a name near none", c.name, err.Msg)
		case c.want != "" && !strings.HasSuffix(err.Msg, "; "+c.want):
			t.Errorf("%s: message %q, want it to end %q", c.name, err.Msg, "; "+c.want)
		}
	}
	st := &State{Body: []byte(`{"instance_id":"i","dp_rnk":0}`)}
	if _, err := st.UnregisterKey(DialectJSON); err == nil || err.Field != "dp_rnk" || !strings.HasSuffix(err.Msg, "; did you mean dp_rank?") {
		t.Errorf("unregister typo: %v", err)
	}
	// What the seeds' clients send: the C++ dialect's keys, the JSON
	// aliases, the Python register() names, the Go-era unregister keys.
	for _, c := range []struct {
		d    Dialect
		body string
	}{
		{DialectJSON, `{` + base + `,"type":"vLLM","modelname":"m","replay_endpoint":"tcp://127.0.0.1:5558","lora_name":"l","tenant_id":"t","additionalsalt":"s","cache_group":0,` + profile + `}`},
		{DialectJSON, `{` + base + `,"type":"vLLM","model_name":"m","additional_salt":"s"}`},
		{DialectJSON, `{` + base + `,"type":"vLLM","model":"m"}`},
		{DialectRPC, `{` + base + `,"model_name":"m","publisher_type":"vLLM","replay_endpoint":"","lora_name":"","tenant_id":"","cache_group":null,` + profile + `}`},
	} {
		if err := decode(c.d, []byte(c.body)); err != nil {
			t.Errorf("%s: %v", c.body, err)
		}
	}
	st = &State{Body: []byte(`{"instance_id":"i","tenant_id":"t","dp_rank":0,"type":"vLLM","modelname":"m","lora_name":"","block_size":16}`)}
	if _, err := st.UnregisterKey(DialectJSON); err != nil {
		t.Errorf("the seed's unregister body: %v", err)
	}
}
