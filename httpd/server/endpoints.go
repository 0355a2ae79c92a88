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
	"github.com/seed-c7a81618/conductor/endpoint"
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
// A tcp destination (the part after the last ';') is judged by the address
// conductor connects to (endpoint.Parse, endpoint.Resolve). libzmq strips
// [brackets] and a %zone, then resolves the host with getaddrinfo, which
// reads any number inet_aton accepts (127.1, 2130706433, 0x7f000001,
// 0177.0.0.1) as an IPv4 address before it tries DNS. So:
//   - a host with a zone id (%...) is refused, as is an unspecified address
//     (0.0.0.0, [::]: a bind address, which a connect turns into this host);
//   - a numeric host (a digit, then only hex digits, x and dots) must be a
//     dotted quad of four decimal octets without leading zeros; every other
//     spelling is refused, naming the address libzmq would read;
//   - a host with a colon must be an IPv6 address (any spelling; its value
//     is checked);
//   - any other host is a DNS name. One that names a network interface of
//     this host is refused. The rest are resolved once (2 s bound): every
//     address must pass, localhost and *.localhost also count as loopback
//     (RFC 6761), and the registration connects to one of them, the literal
//     Resolve returns, never to the name, so DNS answering otherwise later
//     (rebinding) cannot move it. A name that does not resolve is refused.
//
// The source-address form (tcp://SOURCE;HOST:PORT), which makes conductor
// bind SOURCE, is refused unless AllowSourceAddresses allows it.
//
// Every address checked, literal or resolved, is also judged by the IPv4
// address it embeds: IPv4-mapped, IPv4-compatible and IPv4-translated
// addresses, NAT64 (64:ff9b::/96, 64:ff9b:1::/48), 6to4 (2002::/16) and a
// Teredo client (2001::/32). TestEndpointPolicy and TestEndpointPolicyHosts
// list the cases.
//
// An EndpointPolicy is safe for concurrent use; a nil one allows everything.
type EndpointPolicy struct {
	spec  string
	rules []endpointRule

	// allowSource lets the tcp source-address form through
	// (AllowSourceAddresses).
	allowSource bool

	mu   sync.RWMutex
	own  map[uint16]bool // conductor's listening ports
	self []netip.Addr    // this host's interface addresses

	// lookup resolves a DNS name (tests replace it).
	lookup endpoint.Lookup
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

// SetLookup replaces the resolver of DNS names (endpoint.DefaultLookup), for
// an embedder with a resolver of its own, and tests. Call it before the
// policy is in use.
func (p *EndpointPolicy) SetLookup(l endpoint.Lookup) { p.lookup = l }

// ParseEndpointPolicy parses spec ("" = DefaultEndpointRules).
func ParseEndpointPolicy(spec string) (*EndpointPolicy, error) {
	if strings.TrimSpace(spec) == "" {
		spec = DefaultEndpointRules
	}
	p := &EndpointPolicy{spec: spec, own: map[uint16]bool{}, lookup: endpoint.DefaultLookup}
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

// AllowSourceAddresses lets registrations use libzmq's source-address form
// tcp://SOURCE;HOST:PORT, which makes conductor bind SOURCE before it
// connects (off by default: a client could make conductor bind an address
// and port of its choosing). Call it before the policy is in use.
func (p *EndpointPolicy) AllowSourceAddresses(allow bool) {
	if p != nil {
		p.allowSource = allow
	}
}

// Check reports whether ep may be connected to (Resolve without its result).
func (p *EndpointPolicy) Check(field, ep string) error {
	_, err := p.Resolve(field, ep)
	return err
}

// Resolve checks ep, the value of the registration field field, and returns
// the endpoint the registration connects to: ep in its canonical form
// (endpoint.Parse), a tcp host name resolved once (2 s bound) to the
// address the checks judged (endpoint.Resolve). Refusals are a
// *core.FieldError naming field: wrapping core.ErrInvalid when ep is
// malformed or its host does not resolve, ErrForbidden when the policy
// refuses it. A nil policy returns ep unchanged (the registrar reads it).
func (p *EndpointPolicy) Resolve(field, ep string) (string, error) {
	if p == nil {
		return ep, nil
	}
	refuse := func(why string) error {
		return &core.FieldError{Field: field, Err: fmt.Errorf("%s %q refused: %s: %w", field, ep, why, ErrForbidden)}
	}
	invalid := func(err error) error {
		return &core.FieldError{Field: field, Err: fmt.Errorf("%s %q refused: %w: %w", field, ep, err, core.ErrInvalid)}
	}
	e, err := endpoint.Parse(ep)
	if err != nil {
		return "", invalid(err)
	}
	switch e.Scheme {
	case "ipc", "inproc":
		if e.Scheme == "inproc" && strings.HasPrefix(e.Path, "conductor-") {
			return "", refuse("conductor's own inproc sockets are never allowed")
		}
		if e.Scheme == "ipc" && path.Clean(e.Path) != e.Path {
			// The rules match the path as written, the kernel opens it
			// resolved: /run/eng/../x.sock would pass /run/eng/*/*.sock.
			return "", refuse("the ipc path must be clean (no ., .. or empty segments)")
		}
		for i := range p.rules {
			if p.rules[i].scheme == e.Scheme {
				if m, _ := path.Match(p.rules[i].glob, e.Path); m {
					return e.String(), nil
				}
			}
		}
		return "", refuse(fmt.Sprintf("no rule of --allow-endpoints %q allows %s endpoints like it", p.spec, e.Scheme))
	}
	if e.Source != "" && !p.allowSource {
		return "", refuse("the source-address form (SOURCE;HOST:PORT) makes conductor bind SOURCE, and is off; " +
			"an operator enables it with --allow-source-endpoints (allow_source_endpoints in the configuration file)")
	}
	port := e.Port
	lname := strings.TrimSuffix(e.Host, ".")
	if e.IsName() {
		for _, m := range metaNames {
			if lname == m {
				return "", refuse("cloud metadata service")
			}
		}
		if _, err := net.InterfaceByName(e.Host); err == nil {
			return "", refuse(fmt.Sprintf("host %q names a network interface of this host, not a DNS name", e.Host))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	r, addrs, err := endpoint.Resolve(ctx, e, p.lookup)
	cancel()
	if err != nil {
		return "", invalid(err)
	}
	deny := addrs
	if e.IsName() && (lname == "localhost" || strings.HasSuffix(lname, ".localhost")) {
		deny = append(deny[:len(deny):len(deny)], localhost4, localhost6) // RFC 6761
	}
	for _, a := range deny {
		if why := p.denied(a, port); why != "" {
			return "", refuse(why)
		}
	}
	for i := range p.rules {
		rule := &p.rules[i]
		if rule.scheme != "tcp" || port < rule.lo || port > rule.hi {
			continue
		}
		switch {
		case rule.any:
			return r.String(), nil
		case rule.name != "" && e.IsName() && (lname == rule.name || (rule.name[0] == '.' && strings.HasSuffix(lname, rule.name))):
			return r.String(), nil
		case rule.prefix.IsValid() && allIn(addrs, rule.prefix):
			return r.String(), nil
		}
	}
	return "", refuse(fmt.Sprintf("not allowed by --allow-endpoints %q", p.spec))
}

// denied says why address a on port may never be connected to ("" if it
// may): a itself, or an IPv4 address it embeds.
func (p *EndpointPolicy) denied(a netip.Addr, port uint16) string {
	if why := p.deniedAddr(a, port); why != "" {
		return why
	}
	var buf [4]netip.Addr
	for _, e := range endpoint.AppendEmbeddedIPv4(buf[:0], a) {
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
