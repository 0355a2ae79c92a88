package server

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seed-c7a81618/conductor/core"
)

// EndpointPolicy is the allowlist a registration's endpoint and
// replay_endpoint must pass before any socket is created: /register makes
// conductor connect wherever it is told, so without it anyone who can reach
// the port can aim conductor at internal services.
//
// Rules are comma-separated patterns:
//
//	tcp://HOST:PORT   HOST: * | an IP | a CIDR (10.0.0.0/8, [fd00::]/8) |
//	                  a DNS name | *.suffix;  PORT: * | N | N-M
//	ipc://GLOB        a path.Match pattern over the socket path
//	inproc://GLOB     a path.Match pattern over the name
//
// The default is "tcp://*:*". Whatever the rules say, these are always
// refused: link-local and cloud-metadata addresses (169.254.0.0/16,
// fe80::/10, fd00:ec2::254, and the metadata DNS names), conductor's own
// listeners (its ports on a loopback, unspecified or local address), and
// conductor's own inproc sockets (conductor-*).
//
// A tcp destination (the part after the last ';'; the source before it is
// bound, not connected to) is judged by the address libzmq will connect to.
// libzmq strips [brackets] and a %zone, then resolves the host with
// getaddrinfo, which reads any number inet_aton accepts (127.1, 2130706433,
// 0x7f000001, 0177.0.0.1) as an IPv4 address before it tries DNS. So:
//   - a host with a zone id (%...) is refused;
//   - a numeric host (a digit, then only hex digits, x and dots) must be a
//     dotted quad of four decimal octets without leading zeros; every other
//     spelling is refused, naming the address libzmq would read;
//   - a host with a colon must be an IPv6 address (any spelling; its value
//     is checked);
//   - any other host is a DNS name. One that names a network interface of
//     this host is refused. The rest are resolved (2 s bound) and every
//     address must pass; localhost and *.localhost also count as loopback
//     (RFC 6761). A name that does not resolve yet is let through by a rule
//     that matches it by name (a pod whose DNS record appears later), since
//     there is nothing to check.
//
// Every address checked, literal or resolved, is also judged by the IPv4
// address it embeds: IPv4-mapped, IPv4-compatible and IPv4-translated
// addresses, NAT64 (64:ff9b::/96, 64:ff9b:1::/48), 6to4 (2002::/16) and a
// Teredo client (2001::/32). DNS may change after the check (rebinding); the
// tcp rules should name networks, not only names, where that matters.
// TestEndpointPolicy and TestEndpointPolicyHosts list the cases.
//
// An EndpointPolicy is safe for concurrent use; a nil one allows everything.
type EndpointPolicy struct {
	spec  string
	rules []endpointRule

	mu   sync.RWMutex
	own  map[uint16]bool // conductor's listening ports
	self []netip.Addr    // this host's interface addresses

	// lookup resolves a DNS name (tests replace it).
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
}

type endpointRule struct {
	text   string
	scheme string
	any    bool         // host *
	prefix netip.Prefix // host IP or CIDR (valid when set)
	name   string       // host DNS name, or ".suffix" for *.suffix
	lo, hi uint16       // port range
	glob   string       // ipc / inproc
}

// DefaultEndpointRules is the policy when none is given.
const DefaultEndpointRules = "tcp://*:*"

var (
	linkLocal4 = netip.MustParsePrefix("169.254.0.0/16")
	linkLocal6 = netip.MustParsePrefix("fe80::/10")
	awsMeta6   = netip.MustParseAddr("fd00:ec2::254")
	localhost4 = netip.MustParseAddr("127.0.0.1")
	localhost6 = netip.IPv6Loopback()
	metaNames  = []string{"metadata.google.internal", "metadata.goog", "metadata", "instance-data", "instance-data.ec2.internal"}
)

// ParseEndpointPolicy parses spec ("" = DefaultEndpointRules).
func ParseEndpointPolicy(spec string) (*EndpointPolicy, error) {
	if strings.TrimSpace(spec) == "" {
		spec = DefaultEndpointRules
	}
	p := &EndpointPolicy{spec: spec, own: map[uint16]bool{}, lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}}
	for _, text := range strings.Split(spec, ",") {
		text = strings.TrimSpace(text)
		if text == "" {
			continue
		}
		r, err := parseEndpointRule(text)
		if err != nil {
			return nil, fmt.Errorf("endpoint rule %q: %w", text, err)
		}
		p.rules = append(p.rules, r)
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if pfx, err := netip.ParsePrefix(a.String()); err == nil {
				p.self = append(p.self, pfx.Addr().Unmap())
			}
		}
	}
	return p, nil
}

func parseEndpointRule(text string) (endpointRule, error) {
	r := endpointRule{text: text}
	scheme, rest, ok := strings.Cut(text, "://")
	if !ok || rest == "" {
		return r, fmt.Errorf("want scheme://pattern")
	}
	r.scheme = scheme
	switch scheme {
	case "ipc", "inproc":
		if _, err := path.Match(rest, ""); err != nil {
			return r, err
		}
		r.glob = rest
		return r, nil
	case "tcp":
	default:
		return r, fmt.Errorf("scheme must be tcp, ipc or inproc")
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return r, fmt.Errorf("tcp pattern needs :PORT (or :*)")
	}
	host, port := rest[:i], rest[i+1:]
	switch lo, hi, found := strings.Cut(port, "-"); {
	case port == "*":
		r.lo, r.hi = 1, 65535
	case found:
		a, err1 := strconv.ParseUint(lo, 10, 16)
		b, err2 := strconv.ParseUint(hi, 10, 16)
		if err1 != nil || err2 != nil || a == 0 || a > b {
			return r, fmt.Errorf("port range %q: want N-M with 1 <= N <= M <= 65535", port)
		}
		r.lo, r.hi = uint16(a), uint16(b)
	default:
		a, err := strconv.ParseUint(port, 10, 16)
		if err != nil || a == 0 {
			return r, fmt.Errorf("port %q: want 1..65535, N-M or *", port)
		}
		r.lo, r.hi = uint16(a), uint16(a)
	}
	unbr := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if j := strings.Index(host, "]/"); j >= 0 { // [v6]/bits
		unbr = host[1:j] + host[j+1:]
	}
	switch {
	case host == "*":
		r.any = true
	case strings.Contains(unbr, "/"):
		pfx, err := netip.ParsePrefix(unbr)
		if err != nil {
			return r, fmt.Errorf("CIDR %q: %w", host, err)
		}
		r.prefix = pfx.Masked()
	default:
		if a, err := netip.ParseAddr(unbr); err == nil {
			r.prefix = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		} else if strings.HasPrefix(host, "*.") && len(host) > 2 {
			r.name = strings.ToLower(host[1:])
		} else if host != "" && !strings.ContainsAny(host, "*/ []") {
			r.name = strings.ToLower(host)
		} else {
			return r, fmt.Errorf("host %q: want *, an IP, a CIDR, a DNS name or *.suffix", host)
		}
	}
	return r, nil
}

// String is the policy's rules as given.
func (p *EndpointPolicy) String() string {
	if p == nil {
		return "(any)"
	}
	return p.spec
}

// DenyOwn adds conductor's own listening ports (call it once they are bound).
func (p *EndpointPolicy) DenyOwn(ports ...int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, port := range ports {
		if port > 0 && port < 65536 {
			p.own[uint16(port)] = true
		}
	}
}

// Check reports whether ep may be connected to; the refusal is a
// *core.FieldError naming field and wrapping ErrForbidden.
func (p *EndpointPolicy) Check(field, ep string) error {
	if p == nil {
		return nil
	}
	refuse := func(why string) error {
		return &core.FieldError{Field: field, Err: fmt.Errorf("%s %q refused: %s: %w", field, ep, why, ErrForbidden)}
	}
	scheme, rest, ok := strings.Cut(ep, "://")
	if !ok {
		return nil // malformed: the registrar's own check says why
	}
	switch scheme {
	case "ipc", "inproc":
		if scheme == "inproc" && strings.HasPrefix(rest, "conductor-") {
			return refuse("conductor's own inproc sockets are never allowed")
		}
		for i := range p.rules {
			if p.rules[i].scheme == scheme {
				if m, _ := path.Match(p.rules[i].glob, rest); m {
					return nil
				}
			}
		}
		return refuse(fmt.Sprintf("no rule of --allow-endpoints %q allows %s endpoints like it", p.spec, scheme))
	case "tcp":
	default:
		return nil
	}
	if i := strings.LastIndexByte(rest, ';'); i >= 0 {
		rest = rest[i+1:] // the source address is bound, not connected to
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return nil
	}
	host := rest[:i]
	port64, err := strconv.ParseUint(rest[i+1:], 10, 16)
	if err != nil {
		return nil
	}
	port := uint16(port64)
	if strings.IndexByte(host, '%') >= 0 {
		return refuse(fmt.Sprintf("host %q has a zone id, which is never allowed: "+
			"libzmq drops it and connects to what precedes it", host))
	}
	if len(host) >= 2 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	lname := strings.ToLower(strings.TrimSuffix(host, "."))
	for _, m := range metaNames {
		if lname == m {
			return refuse("cloud metadata service")
		}
	}
	var addrs []netip.Addr
	literal := false
	switch {
	case strings.IndexByte(host, ':') >= 0:
		a, err := netip.ParseAddr(host)
		if err != nil {
			return refuse(fmt.Sprintf("host %q is not an IPv6 address", host))
		}
		addrs, literal = []netip.Addr{a.Unmap()}, true
	case numericHost(host):
		a, err := netip.ParseAddr(host)
		if err != nil {
			if v4, ok := inetAton(host); ok {
				return refuse(fmt.Sprintf("host %q is not a dotted-quad IPv4 address (libzmq would read it as %s); "+
					"write four decimal octets", host, v4))
			}
			return refuse(fmt.Sprintf("host %q is not a dotted-quad IPv4 address, and not a DNS name", host))
		}
		addrs, literal = []netip.Addr{a}, true
	default:
		if _, err := net.InterfaceByName(host); err == nil {
			return refuse(fmt.Sprintf("host %q names a network interface of this host, not a DNS name", host))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		res, err := p.lookup(ctx, host)
		cancel()
		if err == nil {
			for _, a := range res {
				addrs = append(addrs, a.Unmap().WithZone("")) // a zone from the hosts file
			}
		}
	}
	deny := addrs
	if lname == "localhost" || strings.HasSuffix(lname, ".localhost") {
		deny = append(deny[:len(deny):len(deny)], localhost4, localhost6) // RFC 6761
	}
	for _, a := range deny {
		if why := p.denied(a, port); why != "" {
			return refuse(why)
		}
	}
	for i := range p.rules {
		r := &p.rules[i]
		if r.scheme != "tcp" || port < r.lo || port > r.hi {
			continue
		}
		switch {
		case r.any:
			return nil
		case r.name != "" && !literal && (lname == r.name || (r.name[0] == '.' && strings.HasSuffix(lname, r.name))):
			return nil
		case r.prefix.IsValid() && len(addrs) > 0 && allIn(addrs, r.prefix):
			return nil
		}
	}
	return refuse(fmt.Sprintf("not allowed by --allow-endpoints %q", p.spec))
}

// denied says why address a on port may never be connected to ("" if it
// may): a itself, or an IPv4 address it embeds.
func (p *EndpointPolicy) denied(a netip.Addr, port uint16) string {
	if why := p.deniedAddr(a, port); why != "" {
		return why
	}
	var buf [4]netip.Addr
	for _, e := range appendEmbeddedIPv4(buf[:0], a) {
		if why := p.deniedAddr(e, port); why != "" {
			return fmt.Sprintf("%s (%s embeds %s)", why, a, e)
		}
	}
	return ""
}

// deniedAddr is denied for a alone.
func (p *EndpointPolicy) deniedAddr(a netip.Addr, port uint16) string {
	switch {
	case linkLocal4.Contains(a) || linkLocal6.Contains(a) || a == awsMeta6:
		return "link-local and cloud-metadata addresses are never allowed"
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if !p.own[port] {
		return ""
	}
	if a.IsLoopback() || a.IsUnspecified() {
		return "conductor's own listener"
	}
	for _, s := range p.self {
		if s == a {
			return "conductor's own listener"
		}
	}
	return ""
}

func allIn(addrs []netip.Addr, pfx netip.Prefix) bool {
	for _, a := range addrs {
		if !pfx.Contains(a) {
			return false
		}
	}
	return true
}
