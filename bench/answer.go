package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tinylib/msgp/msgp"
)

// Expect is what every /query response of a load run must say: the instance's
// longest_matched, in tokens. A load run that only checked the HTTP status
// would score a server answering 200 `{}`.
type Expect struct {
	// Instance is the instance id whose row is checked.
	Instance string
	// LongestMatched is the row's longest_matched (tokens).
	LongestMatched int64
}

// ErrLoadAnswer is returned when a response body does not say what
// LoadOptions.Expect says it must (or cannot be decoded).
var ErrLoadAnswer = errors.New("bench: wrong /query answer")

// Check decodes a Mooncake /query response body (msgpack
// `{"instances": {id: {"longest_matched": n, …}}}` when contentType names
// msgpack, JSON `{tenant: {id: {"longest_matched": n, …}}}` otherwise) and
// returns an error wrapping ErrLoadAnswer unless the row of e.Instance has
// longest_matched e.LongestMatched. It allocates for JSON; RunLoad calls it
// only for a body that differs from the last one it checked. FuzzExpectCheck
// (fuzz/harness) compares it with bench/sim's answer parser.
func (e *Expect) Check(contentType string, body []byte) error {
	var got int64
	var found bool
	var err error
	if strings.Contains(contentType, "msgpack") {
		got, found, err = msgpackLongest(body, e.Instance)
	} else {
		got, found, err = jsonLongest(body, e.Instance)
	}
	switch {
	case err != nil:
		return fmt.Errorf("%w: %v (body %.80q)", ErrLoadAnswer, err, body)
	case !found:
		return fmt.Errorf("%w: no row for instance %q (body %.80q)", ErrLoadAnswer, e.Instance, body)
	case got != e.LongestMatched:
		return fmt.Errorf("%w: instance %q longest_matched %d, want %d", ErrLoadAnswer, e.Instance, got, e.LongestMatched)
	}
	return nil
}

// msgpackLongest reads instances[id].longest_matched with tinylib/msgp's
// zero-copy readers; other keys are skipped.
func msgpackLongest(b []byte, id string) (longest int64, found bool, err error) {
	err = msgpackRows(b, func(k []byte, l int64, ok bool) {
		if string(k) == id {
			longest, found = l, ok
		}
	})
	if err != nil {
		return 0, false, err
	}
	return longest, found, nil
}

// msgpackRows calls row for each row of a msgpack /query answer's
// "instances" map, with the row's longest_matched (ok false when the row has
// none); other keys are skipped.
func msgpackRows(b []byte, row func(id []byte, longest int64, ok bool)) error {
	n, b, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return err
	}
	for ; n > 0; n-- {
		var k []byte
		if k, b, err = msgp.ReadStringZC(b); err != nil {
			return err
		}
		if string(k) != "instances" {
			if b, err = msgp.Skip(b); err != nil {
				return err
			}
			continue
		}
		var rows uint32
		if rows, b, err = msgp.ReadMapHeaderBytes(b); err != nil {
			return err
		}
		for ; rows > 0; rows-- {
			var id []byte
			if id, b, err = msgp.ReadStringZC(b); err != nil {
				return err
			}
			var fields uint32
			if fields, b, err = msgp.ReadMapHeaderBytes(b); err != nil {
				return err
			}
			var longest int64
			ok := false
			for ; fields > 0; fields-- {
				if k, b, err = msgp.ReadStringZC(b); err != nil {
					return err
				}
				if string(k) == "longest_matched" {
					if longest, b, err = msgp.ReadInt64Bytes(b); err != nil {
						return err
					}
					ok = true
				} else if b, err = msgp.Skip(b); err != nil {
					return err
				}
			}
			row(id, longest, ok)
		}
	}
	if len(b) != 0 {
		return errors.New("trailing bytes")
	}
	return nil
}

// jsonLongest reads the longest_matched of id under the answer's only tenant.
func jsonLongest(b []byte, id string) (longest int64, found bool, err error) {
	var top map[string]map[string]struct {
		LongestMatched *int64 `json:"longest_matched"`
	}
	if err := json.Unmarshal(b, &top); err != nil {
		return 0, false, err
	}
	if len(top) > 1 {
		return 0, false, fmt.Errorf("%d tenants, want at most 1", len(top))
	}
	for _, rows := range top {
		if r, ok := rows[id]; ok && r.LongestMatched != nil {
			return *r.LongestMatched, true, nil
		}
	}
	return 0, false, nil
}
