package server

import (
	"errors"
	"strconv"
)

// Sentinel errors, one per error reason of the indexer API. A rejected request
// yields a *RequestError that wraps one of them; test with errors.Is. The reason
// token a client sees is ReasonOf(err).
var (
	ErrUnsupportedContentType = errors.New("conductor: unsupported content type")
	ErrInvalidMsgpack         = errors.New("conductor: invalid msgpack")
	ErrInvalidJSON            = errors.New("conductor: invalid JSON")
	ErrUnknownField           = errors.New("conductor: unknown field")
	ErrMissing                = errors.New("conductor: missing field")
	ErrInvalidType            = errors.New("conductor: invalid type")
	ErrInvalidValue           = errors.New("conductor: invalid value")
	ErrOutOfRange             = errors.New("conductor: out of range")
	ErrUnsupported            = errors.New("conductor: unsupported")
	ErrInvalidRegistration    = errors.New("conductor: invalid registration")
	ErrLimitExceeded          = errors.New("conductor: limit exceeded")
	ErrInvalidRequest         = errors.New("conductor: malformed HTTP request")
	ErrUnauthorized           = errors.New("conductor: unauthorized")
	ErrForbidden              = errors.New("conductor: forbidden")
	ErrStateWrite             = errors.New("conductor: registration state not saved")
	ErrNotFound               = errors.New("conductor: not found")
	ErrMethodNotAllowed       = errors.New("conductor: method not allowed")
	ErrNotReady               = errors.New("conductor: not ready")
	ErrInternal               = errors.New("conductor: internal error")
)

// reasons maps each sentinel to its stable wire token: reference §1.1's
// validation reasons, then conductor's own. Every error answer of every HTTP
// surface carries one (AppendErrorEnvelope).
var reasons = [...]struct {
	err    error
	reason string
}{
	{ErrUnsupportedContentType, "unsupported_content_type"},
	{ErrInvalidMsgpack, "invalid_msgpack"},
	{ErrInvalidJSON, "invalid_json"},
	{ErrUnknownField, "unknown_field"},
	{ErrMissing, "missing"},
	{ErrInvalidType, "invalid_type"},
	{ErrInvalidValue, "invalid_value"},
	{ErrOutOfRange, "out_of_range"},
	{ErrUnsupported, "unsupported"},
	{ErrInvalidRegistration, "invalid_registration"},
	{ErrLimitExceeded, "limit_exceeded"},
	{ErrInvalidRequest, "invalid_request"},
	{ErrUnauthorized, "unauthorized"},
	{ErrForbidden, "forbidden"},
	{ErrStateWrite, "state_not_saved"},
	{ErrNotFound, "not_found"},
	{ErrMethodNotAllowed, "method_not_allowed"},
	{ErrNotReady, "not_ready"},
	{ErrInternal, "internal"},
}

// NumReasons is the number of reason tokens (ReasonIndex's range).
const NumReasons = len(reasons)

// ReasonIndex returns the position of err's reason among the NumReasons
// reasons (a dense index for per-reason metric slots), or -1 when err
// carries none.
func ReasonIndex(err error) int {
	for i := range reasons {
		if errors.Is(err, reasons[i].err) {
			return i
		}
	}
	return -1
}

// ReasonOf returns the wire reason token of err ("" when err carries none).
func ReasonOf(err error) string {
	if i := ReasonIndex(err); i >= 0 {
		return reasons[i].reason
	}
	return ""
}

// noIndex marks a RequestError that names no array element.
const noIndex = -1

// RequestError is a rejected request: its HTTP status with the error
// envelope {"error", "reason", "field"?, "index"?}.
type RequestError struct {
	// Err is one of the sentinels above.
	Err error
	// Field names the offending request key ("" when none), e.g. "token_ids" or
	// the hash_profile sub-key.
	Field string
	// Index is the offending array element, or -1.
	Index int
	// Msg is the human text sent as "error".
	Msg string
	// Status is the HTTP status; 0 means 400.
	Status int
}

func (e *RequestError) Error() string {
	b := make([]byte, 0, 64)
	if e.Field != "" {
		b = append(b, "field="...)
		b = strconv.AppendQuote(b, e.Field)
		if e.Index >= 0 {
			b = append(b, " index="...)
			b = strconv.AppendInt(b, int64(e.Index), 10)
		}
		b = append(b, ": "...)
	}
	b = append(b, e.Msg...)
	b = append(b, ": "...)
	b = append(b, e.Err.Error()...)
	return string(b)
}

func (e *RequestError) Unwrap() error { return e.Err }

// HTTPStatus is the status the error is answered with (Status, or 400).
func (e *RequestError) HTTPStatus() int {
	if e.Status == 0 {
		return 400
	}
	return e.Status
}

// NewError builds a field error without an element index.
func NewError(sentinel error, field, msg string) *RequestError {
	return &RequestError{Err: sentinel, Field: field, Index: noIndex, Msg: msg}
}

// StatusError builds an error that names no field: an operational failure (404,
// 405, 409, 500, ...) with its status.
func StatusError(sentinel error, status int, msg string) *RequestError {
	return &RequestError{Err: sentinel, Index: noIndex, Msg: msg, Status: status}
}

// elemErr builds a field error naming array element i.
func elemErr(sentinel error, field string, i int, msg string) *RequestError {
	return &RequestError{Err: sentinel, Field: field, Index: i, Msg: msg}
}
