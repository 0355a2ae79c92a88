package dump

import (
	"bufio"
	"fmt"
	"io"

	"github.com/seed-c7a81618/conductor/codec"
)

// scanner splits a streamed dump into its envelope tokens and whole
// values without holding the document: the envelope (root object, indexer
// or stream objects, events arrays) is walked token by token, and each event
// is read whole into a reused buffer and parsed with object (exact
// integers, no encoding/json). Nesting inside one value is bounded by
// codec.MaxDepth and its size by maxValue.
type scanner struct {
	r      *bufio.Reader
	buf    []byte // the current value
	keyBuf []byte // unescaped keys
	err    error
}

// maxValue bounds one event of a dump (a writer emits at most 256 keys
// per event, a few KiB to ~30 KiB).
const maxValue = 16 << 20

func (s *scanner) fail(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("%w: "+format, append([]any{ErrFormat}, args...)...)
	}
}

func (s *scanner) readByte() byte {
	if s.err != nil {
		return 0
	}
	c, err := s.r.ReadByte()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		s.fail("%v", err)
		return 0
	}
	return c
}

// peek returns the next non-space byte without consuming it.
func (s *scanner) peek() byte {
	for s.err == nil {
		c := s.readByte()
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		if s.err == nil {
			_ = s.r.UnreadByte()
		}
		return c
	}
	return 0
}

func (s *scanner) expect(c byte) bool {
	if got := s.peek(); got != c {
		s.fail("expected %q, got %q", c, got)
		return false
	}
	s.readByte()
	return s.err == nil
}

// more reports whether another member or element follows in the container
// closed by end, consuming a ',' (or the closing byte, then false). first is
// true before the first element.
func (s *scanner) more(end byte, first bool) bool {
	c := s.peek()
	if c == end {
		s.readByte()
		return false
	}
	if !first {
		if c != ',' {
			s.fail("expected ',' or %q, got %q", end, c)
			return false
		}
		s.readByte()
	}
	return s.err == nil
}

// key reads a member name and its ':'.
func (s *scanner) key() string {
	raw := s.value()
	if s.err != nil {
		return ""
	}
	k, rest, err := codec.JSONString(raw, &s.keyBuf)
	s.keyBuf = s.keyBuf[:0]
	if err != nil || len(rest) != 0 {
		s.fail("expected a string key")
		return ""
	}
	s.expect(':')
	return string(k)
}

// value reads one whole JSON value into s.buf and returns it (valid until
// the next call). Strings are matched with their escapes; containers by
// bracket depth; the content is validated by whoever parses it. It scans the
// reader's buffered bytes in place and copies each scanned run once.
func (s *scanner) value() []byte {
	s.buf = s.buf[:0]
	c := s.peek()
	if s.err != nil {
		return nil
	}
	if c != '{' && c != '[' && c != '"' {
		return s.scalar()
	}
	depth, inStr, esc := 0, false, false
	for {
		chunk, err := s.r.Peek(max(s.r.Buffered(), 1))
		if len(chunk) == 0 {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			s.fail("%v", err)
			return nil
		}
		end := -1
	scan:
		for i, c := range chunk {
			switch {
			case inStr:
				switch {
				case esc:
					esc = false
				case c == '\\':
					esc = true
				case c == '"':
					inStr = false
					if depth == 0 {
						end = i
						break scan
					}
				}
			case c == '"':
				inStr = true
			case c == '{' || c == '[':
				depth++
				if depth > codec.MaxDepth {
					s.fail("nesting deeper than %d", codec.MaxDepth)
					return nil
				}
			case c == '}' || c == ']':
				depth--
				if depth < 0 {
					s.fail("unbalanced %q", c)
					return nil
				}
				if depth == 0 {
					end = i
					break scan
				}
			}
		}
		n := len(chunk)
		if end >= 0 {
			n = end + 1
		}
		if len(s.buf)+n > maxValue {
			s.fail("a value exceeds %d bytes", maxValue)
			return nil
		}
		s.buf = append(s.buf, chunk[:n]...)
		_, _ = s.r.Discard(n)
		if end >= 0 {
			return s.buf
		}
	}
}

// scalar reads a number or literal up to the byte that ends it.
func (s *scanner) scalar() []byte {
	s.buf = s.buf[:0]
	s.peek()
	for s.err == nil {
		c := s.readByte()
		if s.err != nil {
			return nil
		}
		switch c {
		case ',', '}', ']', ' ', '\n', '\t', '\r':
			_ = s.r.UnreadByte()
			return s.buf
		}
		s.buf = append(s.buf, c)
		if len(s.buf) > 64 {
			s.fail("scalar too long")
			return nil
		}
	}
	return nil
}
