package httpd

import (
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/tinylib/msgp/msgp"
)

// maxEncDepth bounds container nesting of responses (the deepest, /query JSON,
// is 5 levels).
const maxEncDepth = 8

// encoder appends one response document in either dialect. Containers are
// declared with their element count up front, as msgpack needs; the JSON writer
// uses the counts to place commas and close brackets, so one code path writes
// both dialects. Reuse it by calling reset; buf keeps its capacity.
//
// Usage errors (more items than declared, nesting deeper than maxEncDepth) are
// programmer errors and panic with "BUG:".
type encoder struct {
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

func (e *encoder) reset(json bool) {
	e.json = json
	e.buf = e.buf[:0]
	e.root = false
	e.depth = 0
}

// pre writes the separator before the next item of the enclosing container.
func (e *encoder) pre() {
	if e.depth == 0 {
		if e.root {
			panic("BUG: httpd encoder: more than one root value")
		}
		e.root = true
		return
	}
	f := &e.stack[e.depth-1]
	if f.i >= f.n {
		panic("BUG: httpd encoder: more items than declared")
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
func (e *encoder) post() {
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

func (e *encoder) push(n int, isMap bool) {
	if e.depth == maxEncDepth {
		panic("BUG: httpd encoder: nesting too deep")
	}
	items := n
	if isMap {
		items = 2 * n
	}
	e.stack[e.depth] = encFrame{n: items, isMap: isMap}
	e.depth++
	e.post()
}

// mapHeader opens a map of n entries; write n key/value pairs next.
func (e *encoder) mapHeader(n int) {
	e.pre()
	if e.json {
		e.buf = append(e.buf, '{')
	} else {
		e.buf = msgp.AppendMapHeader(e.buf, uint32(n))
	}
	e.push(n, true)
}

// arrayHeader opens an array of n elements.
func (e *encoder) arrayHeader(n int) {
	e.pre()
	if e.json {
		e.buf = append(e.buf, '[')
	} else {
		e.buf = msgp.AppendArrayHeader(e.buf, uint32(n))
	}
	e.push(n, false)
}

func (e *encoder) str(s string) {
	e.pre()
	if e.json {
		e.buf = appendJSONString(e.buf, s)
	} else {
		e.buf = msgp.AppendString(e.buf, s)
	}
	e.post()
}

func (e *encoder) strBytes(s []byte) {
	e.pre()
	if e.json {
		e.buf = appendJSONString(e.buf, b2s(s))
	} else {
		e.buf = msgp.AppendStringFromBytes(e.buf, s)
	}
	e.post()
}

// decKey writes an integer as a decimal-string map key (rank keys).
func (e *encoder) decKey(v int64) {
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

func (e *encoder) int(v int64) {
	e.pre()
	if e.json {
		e.buf = strconv.AppendInt(e.buf, v, 10)
	} else {
		e.buf = msgp.AppendInt64(e.buf, v)
	}
	e.post()
}

func (e *encoder) uint(v uint64) {
	e.pre()
	if e.json {
		e.buf = strconv.AppendUint(e.buf, v, 10)
	} else {
		e.buf = msgp.AppendUint64(e.buf, v)
	}
	e.post()
}

// float writes v; JSON gets the shortest decimal, NaN/Inf become null.
func (e *encoder) float(v float64) {
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

func (e *encoder) null() {
	e.pre()
	if e.json {
		e.buf = append(e.buf, "null"...)
	} else {
		e.buf = msgp.AppendNil(e.buf)
	}
	e.post()
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Control characters, quotes and
// backslashes are escaped; invalid UTF-8 becomes U+FFFD (as encoding/json
// does), so the output is always valid JSON.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\\ufffd"...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
