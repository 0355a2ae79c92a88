package codec

import (
	"errors"

	"github.com/tinylib/msgp/msgp"
)

// Categories of every error the readers return. wire re-exports them as its own
// sentinels (wire.ErrTruncated is ErrTruncated), so their texts are wire's.
var (
	ErrTruncated  = errors.New("conductor: truncated payload")
	ErrSyntax     = errors.New("conductor: malformed encoding")
	ErrWrongType  = errors.New("conductor: wrong value type")
	ErrOutOfRange = errors.New("conductor: value out of range")
	ErrTooLarge   = errors.New("conductor: count or nesting over limit")
	ErrBadHash    = errors.New("conductor: binary hash shorter than 8 bytes")
)

// Error is a reader's error with its reason in words (httpd renders it in its
// 400 answer, with the offset, for JSON) and its category: JSON syntax errors
// and the nesting limit of both formats. The readers return preallocated
// *Error values, so a rejected input costs no allocation either.
type Error struct {
	Reason string // "unterminated string", "invalid number", …
	Err    error  // ErrTruncated (the input ended inside the value), ErrSyntax or ErrTooLarge
}

func (e *Error) Error() string { return e.Reason }
func (e *Error) Unwrap() error { return e.Err }

// Cause returns err's category: the Err* sentinel a *Error wraps, or err.
func Cause(err error) error {
	if je, ok := err.(*Error); ok {
		return je.Err
	}
	return err
}

// JSON error reasons; each has a truncated and a malformed form, chosen by
// whether the input ended where the reader needed more.
const (
	rUnexpected = iota
	rLiteral
	rNumber
	rUTF8
	rControl
	rUnterminated
	rUEscape
	rEscape
	rKey
	rColon
	rObjectSep
	rArraySep
	nReasons
)

var jsonErrs = func() (e [nReasons][2]Error) {
	for r, s := range [nReasons]string{
		rUnexpected:   "unexpected character",
		rLiteral:      "invalid literal",
		rNumber:       "invalid number",
		rUTF8:         "invalid UTF-8 in string",
		rControl:      "control character in string",
		rUnterminated: "unterminated string",
		rUEscape:      "invalid \\u escape",
		rEscape:       "invalid escape",
		rKey:          "expected a string key",
		rColon:        "expected ':' after an object key",
		rObjectSep:    "expected ',' or '}' after an object value",
		rArraySep:     "expected ',' or ']' after an array element",
	} {
		e[r] = [2]Error{{Reason: s, Err: ErrSyntax}, {Reason: s, Err: ErrTruncated}}
	}
	return e
}()

// errTooDeep is the nesting limit's error (both formats).
var errTooDeep = &Error{Reason: "nesting deeper than 64 levels", Err: ErrTooLarge}

// jsonErr returns reason's error for the input rest at the failure: truncated
// when nothing is left.
func jsonErr(reason int, rest []byte) error {
	if len(rest) == 0 {
		return &jsonErrs[reason][1]
	}
	return &jsonErrs[reason][0]
}

// mpErr maps an error of msgp's Read*Bytes functions onto the categories. Only
// the error path calls it: the readers dispatch on the lead byte first, so valid
// input never makes msgp build an error value (TypeError and friends allocate).
func mpErr(err error) error {
	if err == msgp.ErrShortBytes {
		return ErrTruncated
	}
	switch err.(type) {
	case msgp.IntOverflow, msgp.UintOverflow, msgp.UintBelowZero:
		return ErrOutOfRange
	case msgp.InvalidPrefixError:
		return ErrSyntax
	}
	return ErrWrongType
}
