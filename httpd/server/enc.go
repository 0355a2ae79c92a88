package server

import (
	"math"
	"strconv"

	"github.com/tinylib/msgp/msgp"

	"github.com/seed-c7a81618/conductor/wire/dump"
)

// maxEncDepth bounds container nesting of responses (the deepest, /query JSON,
// is 5 levels).
const maxEncDepth = 8

// Encoder appends one response document in either dialect. Containers are
// declared with their element count up front, as msgpack needs; the JSON writer
// uses the counts to place commas and close brackets, so one code path writes
// both dialects. Reuse it by calling Reset; its buffer keeps its capacity.
//
// Usage errors (more items than declared, nesting deeper than maxEncDepth) are
// programmer errors and panic with "BUG:".
type Encoder struct {
	json  bool
	buf   []byte
	root  bool // the document's root value was started
	depth int
	stack [maxEncDepth]encFrame
}

type encFrame struct {
	n, i  int // items declared / written (a map entry is two items)
	isMap bool
}

// Reset starts a new document in JSON (json) or msgpack.
func (e *Encoder) Reset(json bool) {
	e.json = json
	e.buf = e.buf[:0]
	e.root = false
	e.depth = 0
}

// Bytes is the document written since Reset; valid until the next Reset.
func (e *Encoder) Bytes() []byte { return e.buf }

// pre writes the separator before the next item of the enclosing container.
func (e *Encoder) pre() {
	if e.depth == 0 {
		if e.root {
			panic("BUG: server.Encoder: more than one root value")
		}
		e.root = true
		return
	}
	f := &e.stack[e.depth-1]
	if f.i >= f.n {
		panic("BUG: server.Encoder: more items than declared")
	}
	if e.json {
		switch {
		case f.isMap && f.i%2 == 1:
			e.buf = append(e.buf, ':')
		case f.i > 0:
			e.buf = append(e.buf, ',')
		}
	}
	f.i++
}

// post closes every container whose items are complete.
func (e *Encoder) post() {
	for e.depth > 0 {
		f := &e.stack[e.depth-1]
		if f.i < f.n {
			return
		}
		if e.json {
			if f.isMap {
				e.buf = append(e.buf, '}')
			} else {
				e.buf = append(e.buf, ']')
			}
		}
		e.depth--
	}
}

func (e *Encoder) push(n int, isMap bool) {
	if e.depth == maxEncDepth {
		panic("BUG: server.Encoder: nesting too deep")
	}
	items := n
	if isMap {
		items = 2 * n
	}
	e.stack[e.depth] = encFrame{n: items, isMap: isMap}
	e.depth++
	e.post()
}

// MapHeader opens a map of n entries; write n key/value pairs next.
func (e *Encoder) MapHeader(n int) {
	e.pre()
	if e.json {
		e.buf = append(e.buf, '{')
	} else {
		e.buf = msgp.AppendMapHeader(e.buf, uint32(n))
	}
	e.push(n, true)
}

// ArrayHeader opens an array of n elements.
func (e *Encoder) ArrayHeader(n int) {
	e.pre()
	if e.json {
		e.buf = append(e.buf, '[')
	} else {
		e.buf = msgp.AppendArrayHeader(e.buf, uint32(n))
	}
	e.push(n, false)
}

// Str writes a string.
func (e *Encoder) Str(s string) {
	e.pre()
	if e.json {
		e.buf = dump.AppendJSONString(e.buf, s)
	} else {
		e.buf = msgp.AppendString(e.buf, s)
	}
	e.post()
}

// StrBytes writes a string held in bytes.
func (e *Encoder) StrBytes(s []byte) {
	e.pre()
	if e.json {
		e.buf = dump.AppendJSONString(e.buf, B2S(s))
	} else {
		e.buf = msgp.AppendStringFromBytes(e.buf, s)
	}
	e.post()
}

// DecKey writes an integer as a decimal-string map key (rank keys).
func (e *Encoder) DecKey(v int64) {
	e.pre()
	var tmp [20]byte
	d := strconv.AppendInt(tmp[:0], v, 10)
	if e.json {
		e.buf = append(e.buf, '"')
		e.buf = append(e.buf, d...)
		e.buf = append(e.buf, '"')
	} else {
		e.buf = msgp.AppendStringFromBytes(e.buf, d)
	}
	e.post()
}

// Int writes a signed integer.
func (e *Encoder) Int(v int64) {
	e.pre()
	if e.json {
		e.buf = strconv.AppendInt(e.buf, v, 10)
	} else {
		e.buf = msgp.AppendInt64(e.buf, v)
	}
	e.post()
}

// Uint writes an unsigned integer.
func (e *Encoder) Uint(v uint64) {
	e.pre()
	if e.json {
		e.buf = strconv.AppendUint(e.buf, v, 10)
	} else {
		e.buf = msgp.AppendUint64(e.buf, v)
	}
	e.post()
}

// Float writes v; JSON gets the shortest decimal, NaN/Inf become null.
func (e *Encoder) Float(v float64) {
	e.pre()
	switch {
	case !e.json:
		e.buf = msgp.AppendFloat64(e.buf, v)
	case math.IsNaN(v) || math.IsInf(v, 0):
		e.buf = append(e.buf, "null"...)
	default:
		e.buf = strconv.AppendFloat(e.buf, v, 'f', -1, 64)
	}
	e.post()
}

// Null writes nil (JSON null).
func (e *Encoder) Null() {
	e.pre()
	if e.json {
		e.buf = append(e.buf, "null"...)
	} else {
		e.buf = msgp.AppendNil(e.buf)
	}
	e.post()
}
