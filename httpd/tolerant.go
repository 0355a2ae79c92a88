package httpd

// looksJSON reports whether body is, after leading whitespace, a JSON object:
// a request sent without a JSON Content-Type (curl -d sends
// application/x-www-form-urlencoded) is read as JSON when it is one. A body
// that only starts like an object and is not valid JSON is then answered 400
// invalid_json by the parser, with the position.
func looksJSON(body []byte) bool {
	for _, c := range body {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return true
		}
		return false
	}
	return false
}
