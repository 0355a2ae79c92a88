package server

import "github.com/seed-c7a81618/conductor/codec"

// looksJSON reports whether body is, after leading whitespace, a JSON object:
// a request sent without a JSON Content-Type (curl -d sends
// application/x-www-form-urlencoded) is read as JSON when it is one. A body
// that only starts like an object and is not valid JSON is then answered 400
// invalid_json by the parser, with the position.
func looksJSON(body []byte) bool {
	b := codec.JSONWS(body)
	return len(b) != 0 && b[0] == '{'
}
