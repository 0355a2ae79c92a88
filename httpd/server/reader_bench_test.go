package server

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/tinylib/msgp/msgp"
	"github.com/valyala/fastjson"
)

// BenchmarkJSONTokens compares the JSON reader with encoding/json (the
// baseline it replaces) and valyala/fastjson (zero-allocation, exact uint64)
// on the real /query shape at 1k, 8k and 131k tokens: every reader must
// produce the int32 token slice the hasher needs.
func BenchmarkJSONTokens(b *testing.B) {
	for _, n := range []int{1024, 8192, 131072} {
		tokens := seqTokens(n, 100000)
		body := []byte(jsonEnc(obj{"model", "deepseek", "block_size", 16, "token_ids", tokens}))
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) { benchJSONTokens(b, body, len(tokens)) })
	}
}

func benchJSONTokens(b *testing.B, body []byte, n int) {
	b.Run("reader", func(b *testing.B) {
		var r Reader
		var scratch []byte
		buf := make([]int32, 0, n)
		var toks []int32
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			r.reset(body, true, &scratch)
			toks = toks[:0]
			for {
				k, ok := r.NextKey()
				if !ok {
					break
				}
				if string(k) == "token_ids" {
					var fe *RequestError
					if toks, fe = r.Int32s(&buf, "token_ids", 1<<20); fe != nil {
						b.Fatal(fe)
					}
				} else {
					r.Value()
				}
			}
			if len(toks) != n {
				b.Fatal(len(toks))
			}
		}
	})
	b.Run("fastjson", func(b *testing.B) {
		var p fastjson.Parser
		buf := make([]int32, 0, n)
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			v, err := p.ParseBytes(body)
			if err != nil {
				b.Fatal(err)
			}
			arr, err := v.Get("token_ids").Array()
			if err != nil {
				b.Fatal(err)
			}
			buf = buf[:0]
			for _, e := range arr {
				x, err := e.Int()
				if err != nil || x < math.MinInt32 || x > math.MaxInt32 {
					b.Fatal(err)
				}
				buf = append(buf, int32(x))
			}
			if len(buf) != n {
				b.Fatal(len(buf))
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		var v struct {
			TokenIDs []int32 `json:"token_ids"`
		}
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			v.TokenIDs = v.TokenIDs[:0]
			if err := json.Unmarshal(body, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecodeInt32Array decodes 131072 token ids in the encodings clients
// use: tinylib/msgp (signed int16/int32 forms) and Python msgpack (unsigned).
func BenchmarkDecodeInt32Array(b *testing.B) {
	tokens := seqTokens(131072, 1000)
	signed := mp(tokens)
	unsigned := msgp.AppendArrayHeader(nil, uint32(len(tokens)))
	for _, t := range tokens {
		unsigned = msgp.AppendUint32(unsigned, uint32(t))
	}
	for _, c := range []struct {
		name string
		body []byte
	}{{"msgp_signed", signed}, {"python_unsigned", unsigned}} {
		b.Run(c.name, func(b *testing.B) {
			var r Reader
			buf := make([]int32, 0, len(tokens))
			body := mp(obj{"t", mpRaw(c.body)})
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				r.reset(body, false, nil)
				r.NextKey()
				if _, fe := r.Int32s(&buf, "token_ids", 1<<20); fe != nil || r.Err() != nil {
					b.Fatal(fe, r.Err())
				}
			}
		})
	}
}
