package ingest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/seed-c7a81618/conductor/core"
)

// checkConnectEndpoint reports whether ep is an address a SUB or DEALER socket can
// connect to: tcp://host:port (host a name, an IPv4 address or a bracketed IPv6
// address; libzmq's "source;destination" form is accepted), ipc://path or
// inproc://name. Bind-only forms (a "*" host or port, port 0) are refused here
// because libzmq would only refuse them later, or not at all (an ipc wildcard), and
// a subscription that can never connect should fail its registration, not sit
// pending forever. field names the registration field in the error.
//
// TestCheckConnectEndpoint lists the accepted and refused forms.
func checkConnectEndpoint(field, ep string) error {
	bad := func(why string) error {
		return &core.FieldError{Field: field, Err: fmt.Errorf("%s=%q: %s: %w", field, ep, why, ErrBadEndpoint)}
	}
	scheme, rest, ok := strings.Cut(ep, "://")
	if !ok {
		return bad("want transport://address")
	}
	switch scheme {
	case "tcp":
		if i := strings.LastIndexByte(rest, ';'); i >= 0 {
			rest = rest[i+1:] // source address; libzmq checks it on connect
		}
		i := strings.LastIndexByte(rest, ':')
		if i < 0 {
			return bad("tcp address lacks a port")
		}
		host, port := rest[:i], rest[i+1:]
		if host == "" || host == "*" {
			return bad("tcp address needs a host to connect to")
		}
		if strings.HasPrefix(host, "[") != strings.HasSuffix(host, "]") {
			return bad("unbalanced brackets around an IPv6 address")
		}
		if strings.ContainsAny(host, " \t/") {
			return bad("tcp host contains a space or a slash")
		}
		if !strings.HasPrefix(host, "[") && strings.Contains(host, ":") {
			return bad("IPv6 addresses must be bracketed")
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil || p == 0 {
			return bad("tcp port must be 1..65535")
		}
	case "ipc", "inproc":
		if rest == "" || rest == "*" {
			return bad(scheme + " address is empty or a wildcard")
		}
	default:
		return bad("transport must be tcp, ipc or inproc")
	}
	return nil
}
