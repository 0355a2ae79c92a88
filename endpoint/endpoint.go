// Package endpoint reads the addresses conductor connects to for a
// registration (a publisher's PUB socket and its replay ROUTER), in libzmq's
// connect forms: tcp://host:port (with libzmq's optional source address,
// tcp://source;host:port), ipc://path and inproc://name.
//
// Parse accepts the forms a connect can use and refuses the rest with a
// reason (bind-only forms, the spellings libzmq would read as another
// address). String is the canonical form: a tcp host literal written as
// netip writes it (an IPv4-mapped IPv6 address as its IPv4 address), the
// port as a decimal number. Resolve turns a tcp host name into one address,
// once, so that what a policy checked is what is connected to. Keys tells
// which endpoints reach the same publisher socket: every address of this
// host on one port is one publisher, since a publisher bound to a wildcard
// answers on all of them.
//
// Nothing here connects, and only Resolve looks a name up.
package endpoint

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Errors, wrapped with the reason by every function that refuses an endpoint.
var (
	// ErrInvalid: not an endpoint conductor connects to (malformed, a bind
	// form, or a spelling libzmq reads as another address).
	ErrInvalid = errors.New("conductor: invalid endpoint")
	// ErrUnresolved: a tcp host name that resolves to no address.
	ErrUnresolved = errors.New("conductor: endpoint host does not resolve")
)

// Endpoint is a parsed connect endpoint.
type Endpoint struct {
	// Scheme is "tcp", "ipc" or "inproc".
	Scheme string
	// Source is a tcp endpoint's source address as written, the part before
	// the last ';' ("" when there is none): libzmq binds it before it
	// connects.
	Source string
	// Host is a tcp endpoint's host: a DNS name as written, lowercased, or
	// Addr's text once Addr is known.
	Host string
	// Addr is a tcp endpoint's destination address: the literal, IPv4-mapped
	// addresses unmapped, or the address Resolve chose for a name; the zero
	// Addr for a name not resolved yet.
	Addr netip.Addr
	// Port is a tcp endpoint's port, 1..65535.
	Port uint16
	// Path is an ipc endpoint's path or an inproc endpoint's name.
	Path string
}

// IsName reports whether e is a tcp endpoint whose host is a DNS name not
// resolved yet.
func (e Endpoint) IsName() bool { return e.Scheme == "tcp" && !e.Addr.IsValid() }

// String is e's canonical form.
func (e Endpoint) String() string {
	switch e.Scheme {
	case "tcp":
		b := make([]byte, 0, 64)
		b = append(b, "tcp://"...)
		if e.Source != "" {
			b = append(b, e.Source...)
			b = append(b, ';')
		}
		switch {
		case e.Addr.Is6():
			b = append(b, '[')
			b = e.Addr.AppendTo(b)
			b = append(b, ']')
		case e.Addr.IsValid():
			b = e.Addr.AppendTo(b)
		default:
			b = append(b, e.Host...)
		}
		b = append(b, ':')
		b = strconv.AppendUint(b, uint64(e.Port), 10)
		return string(b)
	case "":
		return ""
	}
	return e.Scheme + "://" + e.Path
}

// Parse reads s as a connect endpoint. The refusals wrap ErrInvalid with
// the reason:
//   - a transport other than tcp, ipc or inproc; an ipc or inproc address
//     that is empty or "*"; a control character or invalid UTF-8 anywhere;
//   - a tcp address without host or port, a "*" host, port 0 or past 65535,
//     a port that is not decimal digits (leading zeros are read as libzmq
//     reads them: 05557 is 5557);
//   - an unspecified destination (0.0.0.0, [::]): a bind address, which a
//     connect turns into this host;
//   - a host with a zone id (%...), which libzmq drops;
//   - a numeric host that is not a dotted quad of decimal octets without
//     leading zeros (getaddrinfo reads 127.1, 2130706433, 0x7f000001 and
//     0177.0.0.1 as 127.0.0.1), an unbracketed IPv6 address, a bracketed
//     host that is not an address;
//   - a DNS name with a character other than letters, digits, '-', '_' and
//     '.', an empty label, or longer than 253 bytes.
//
// A tcp source address (before the last ';') is kept as written: libzmq
// reads it when it connects. TestParse lists the forms.
func Parse(s string) (Endpoint, error) {
	var e Endpoint
	bad := func(format string, args ...any) (Endpoint, error) {
		return Endpoint{}, fmt.Errorf(format+": %w", append(args, ErrInvalid)...)
	}
	if !utf8.ValidString(s) {
		return bad("not valid UTF-8")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return bad("control character 0x%02x at byte %d", c, i)
		}
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return bad("want transport://address")
	}
	e.Scheme = scheme
	switch scheme {
	case "tcp":
	case "ipc", "inproc":
		if rest == "" || rest == "*" {
			return bad("%s address is empty or a wildcard", scheme)
		}
		e.Path = rest
		return e, nil
	default:
		return bad("transport %q: want tcp, ipc or inproc", scheme)
	}
	if i := strings.LastIndexByte(rest, ';'); i >= 0 {
		e.Source, rest = rest[:i], rest[i+1:]
		if e.Source == "" || strings.ContainsAny(e.Source, " \t/") {
			return bad("source address %q: want host:port before the ';'", e.Source)
		}
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return bad("tcp address lacks a port")
	}
	host, port := rest[:i], rest[i+1:]
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return bad("tcp port %q: want 1..65535", port)
	}
	e.Port = uint16(p)
	if host == "" || host == "*" {
		return bad("tcp address needs a host to connect to")
	}
	if strings.IndexByte(host, '%') >= 0 {
		return bad("host %q has a zone id: libzmq drops it and connects to what precedes it", host)
	}
	bracketed := strings.HasPrefix(host, "[")
	if bracketed != strings.HasSuffix(host, "]") {
		return bad("unbalanced brackets around host %q", host)
	}
	if bracketed {
		host = host[1 : len(host)-1] // libzmq strips them whatever is inside
	}
	switch {
	case strings.IndexByte(host, ':') >= 0:
		if !bracketed {
			return bad("IPv6 address %q must be bracketed", host)
		}
		a, err := netip.ParseAddr(host)
		if err != nil {
			return bad("host [%s] is not an IPv6 address", host)
		}
		e.Addr = a.Unmap()
	case numericHost(host):
		a, err := netip.ParseAddr(host)
		if err != nil {
			if v4, ok := inetAton(host); ok {
				return bad("host %q is not a dotted-quad IPv4 address (libzmq would read it as %s); write four decimal octets", host, v4)
			}
			return bad("host %q is not a dotted-quad IPv4 address, and not a DNS name", host)
		}
		e.Addr = a
	case bracketed:
		return bad("host [%s] is not an IP address", host)
	default:
		if why := checkName(host); why != "" {
			return bad("host %q: %s", host, why)
		}
		e.Host = strings.ToLower(host)
		return e, nil
	}
	if e.Addr.IsUnspecified() {
		return bad("host %s is the unspecified address, a bind address: a connect to it reaches this host; "+
			"name the address the publisher listens on (127.0.0.1 on this host)", e.Addr)
	}
	e.Host = e.Addr.String()
	return e, nil
}

// checkName says what is wrong with a DNS name ("" when nothing).
func checkName(h string) string {
	if len(h) > 254 || (len(h) == 254 && h[253] != '.') {
		return "longer than 253 bytes"
	}
	label := 0
	for i := 0; i < len(h); i++ {
		switch c := h[i]; {
		case c == '.':
			if label == 0 {
				return "empty label"
			}
			label = 0
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			label++
		default:
			return fmt.Sprintf("character %q is not allowed in a DNS name", c)
		}
	}
	return ""
}
