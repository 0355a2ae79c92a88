package server

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
)

// testPolicy parses spec, answers DNS from dns (anything else does not
// resolve; nothing is looked up on the network) and denies conductor's own
// ports as 13333 and 50052.
func testPolicy(t *testing.T, spec string, dns map[string][]netip.Addr) *EndpointPolicy {
	t.Helper()
	p, err := ParseEndpointPolicy(spec)
	if err != nil {
		t.Fatal(err)
	}
	p.lookup = func(_ context.Context, h string) ([]netip.Addr, error) {
		if a, ok := dns[h]; ok {
			return a, nil
		}
		return nil, errors.New("no such host")
	}
	p.DenyOwn(13333, 50052)
	return p
}

// Why a policy refuses an endpoint it cannot read (400 invalid_value), as
// opposed to one it reads and refuses (403 forbidden).
const (
	numeric    = "not a dotted-quad IPv4 address"
	zone       = "zone id"
	unspec     = "the unspecified address"
	unresolved = "does not resolve"
	notIPv6    = "not an IPv6 address"
)

// checkPolicy asserts p's decision on ep; a refusal must be a *core.FieldError
// naming field whose text names the field, the endpoint and contains why,
// wrapping core.ErrInvalid for an endpoint the policy cannot read (why one
// of the reasons above) and ErrForbidden for one it refuses.
func checkPolicy(t *testing.T, p *EndpointPolicy, field, ep string, ok bool, why string) {
	t.Helper()
	err := p.Check(field, ep)
	if (err == nil) != ok {
		t.Errorf("policy %q, %s=%s: err %v, want ok=%v", p, field, ep, err, ok)
		return
	}
	if err == nil {
		return
	}
	kind := ErrForbidden
	for _, w := range []string{numeric, zone, unspec, unresolved, notIPv6} {
		if why == w {
			kind = core.ErrInvalid
		}
	}
	var fe *core.FieldError
	if !errors.Is(err, kind) || !errors.As(err, &fe) || fe.Field != field {
		t.Errorf("%s: error %v is not a field error for %s wrapping %v", ep, err, field, kind)
		return
	}
	if msg := err.Error(); !strings.HasPrefix(msg, field+" ") || !strings.Contains(msg, ep) || !strings.Contains(msg, why) {
		t.Errorf("%s: error %q does not name the field, the endpoint and %q", ep, msg, why)
	}
}

// TestEndpointPolicy: what the allowlist lets through, with DNS answered by a
// fixed table.
func TestEndpointPolicy(t *testing.T) {
	dns := map[string][]netip.Addr{
		"engine.svc":    {netip.MustParseAddr("10.1.2.3")},
		"evil.example":  {netip.MustParseAddr("169.254.169.254")},
		"loop.example":  {netip.MustParseAddr("127.0.0.1")},
		"mixed.example": {netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("192.168.1.1")},
	}
	f := func(p *EndpointPolicy, ep string, ok bool) {
		t.Helper()
		checkPolicy(t, p, "endpoint", ep, ok, "")
	}
	def := testPolicy(t, "", dns)
	f(def, "tcp://10.0.0.5:5557", true)
	f(def, "tcp://engine.svc:5557", true)
	checkPolicy(t, def, "endpoint", "tcp://unresolvable.example:5557", false, unresolved)
	f(def, "tcp://169.254.169.254:80", false)
	f(def, "tcp://[fe80::1]:5557", false)
	f(def, "tcp://[fd00:ec2::254]:80", false)
	f(def, "tcp://metadata.google.internal:80", false)
	f(def, "tcp://evil.example:80", false) // resolves to the metadata address
	f(def, "tcp://127.0.0.1:13333", false) // conductor's own HTTP port
	f(def, "tcp://loop.example:50052", false)
	checkPolicy(t, def, "endpoint", "tcp://0.0.0.0:13333", false, unspec)
	f(def, "tcp://127.0.0.1:13334", true)
	checkPolicy(t, def, "endpoint", "tcp://127.0.0.1;10.0.0.5:5557", false, "--allow-source-endpoints")
	f(def, "ipc:///tmp/engine.sock", false)
	f(def, "inproc://x", false)

	nets := testPolicy(t, "tcp://10.0.0.0/8:5550-5560, tcp://*.svc:*, ipc:///run/engines/*, inproc://test-*", dns)
	f(nets, "tcp://10.9.9.9:5555", true)
	f(nets, "tcp://10.9.9.9:5561", false)
	f(nets, "tcp://192.168.1.1:5555", false)
	f(nets, "tcp://engine.svc:9", true)
	checkPolicy(t, nets, "endpoint", "tcp://pending.svc:9", false, unresolved) // a name rule does not let an unresolved name through
	f(nets, "tcp://mixed.example:5555", false)                                 // one address outside 10/8
	f(nets, "ipc:///run/engines/a.sock", true)
	f(nets, "ipc:///etc/passwd", false)
	// Matched as written, opened resolved: a path that climbs out is refused.
	nested := testPolicy(t, "ipc:///run/eng/*/*.sock", dns)
	f(nested, "ipc:///run/eng/a/x.sock", true)
	f(nested, "ipc:///run/eng/../x.sock", false)
	f(nested, "ipc:///run/eng/a/../x.sock", false)
	f(nested, "ipc:///run/eng//a/x.sock", false)
	f(nets, "inproc://test-1", true)
	f(nets, "inproc://conductor-ingest-wake-1", false)

	for _, bad := range []string{"udp://*:*", "tcp://*", "tcp://10.0.0.0/33:1", "tcp://*:0", "tcp://*:9-3", "ipc://[", "tcp://a b:1"} {
		if _, err := ParseEndpointPolicy(bad); err == nil {
			t.Errorf("rule %q accepted", bad)
		}
	}
	var nilPolicy *EndpointPolicy
	f(nilPolicy, "tcp://169.254.169.254:80", true)

	// The source-address form, once allowed, is judged by its destination.
	src := testPolicy(t, "", dns)
	src.AllowSourceAddresses(true)
	f(src, "tcp://127.0.0.1:0;10.0.0.5:5557", true)
	f(src, "tcp://127.0.0.1;169.254.1.1:5557", false)
	f(src, "tcp://127.0.0.1:7;127.0.0.1:13333", false)
}

// TestEndpointPolicyResolve: what a registration connects to is the
// canonical form of its endpoint, a name resolved to the address the
// policy judged.
func TestEndpointPolicyResolve(t *testing.T) {
	dns := map[string][]netip.Addr{
		"engine.svc": {netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("10.1.2.4")},
		"dual.svc":   {netip.MustParseAddr("fd00::7"), netip.MustParseAddr("10.1.2.5")},
		"v6.svc":     {netip.MustParseAddr("fd00::7"), netip.MustParseAddr("fd00::8")},
		"localhost":  {netip.MustParseAddr("::1"), netip.MustParseAddr("127.0.0.1")},
	}
	p := testPolicy(t, "tcp://10.0.0.0/8:*, tcp://[fd00::]/8:*, tcp://*.svc:*, tcp://localhost:5557, ipc:///run/*", dns)
	p.AllowSourceAddresses(true)
	f := func(in, want string) {
		t.Helper()
		got, err := p.Resolve("endpoint", in)
		if err != nil || got != want {
			t.Errorf("Resolve(%s) = %q, %v; want %s", in, got, err, want)
		}
	}
	f("tcp://engine.svc:5557", "tcp://10.1.2.3:5557")
	f("tcp://ENGINE.SVC:05557", "tcp://10.1.2.3:5557")
	f("tcp://dual.svc:5557", "tcp://10.1.2.5:5557") // IPv4 first
	f("tcp://v6.svc:5557", "tcp://[fd00::7]:5557")
	f("tcp://localhost:5557", "tcp://127.0.0.1:5557")
	f("tcp://[::ffff:10.0.0.5]:5557", "tcp://10.0.0.5:5557")
	f("tcp://10.0.0.5:0005557", "tcp://10.0.0.5:5557")
	f("tcp://[FD00:0::5]:1", "tcp://[fd00::5]:1")
	f("tcp://10.9.9.9:1;engine.svc:5557", "tcp://10.9.9.9:1;10.1.2.3:5557")
	f("ipc:///run/kv.sock", "ipc:///run/kv.sock")
	var nilPolicy *EndpointPolicy
	if got, err := nilPolicy.Resolve("endpoint", "tcp://ENGINE:05557"); err != nil || got != "tcp://ENGINE:05557" {
		t.Errorf("nil policy: %q %v", got, err)
	}
}

// loopbackInterface is the name of this host's loopback interface ("" if it
// has none).
func loopbackInterface() string {
	ifs, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 {
			return i.Name
		}
	}
	return ""
}

// TestEndpointPolicyHosts: every spelling of a host that libzmq resolves to a
// forbidden address is refused, whatever the rules say, and canonical
// spellings of allowed addresses still pass. The policy only decides; nothing
// here connects or resolves on the network.
func TestEndpointPolicyHosts(t *testing.T) {
	const (
		own   = "conductor's own listener"
		meta  = "link-local and cloud-metadata addresses are never allowed"
		iface = "network interface of this host"
	)
	dns := map[string][]netip.Addr{
		"engine-0.svc":        {netip.MustParseAddr("10.1.2.3")},
		"nat64.example":       {netip.MustParseAddr("64:ff9b::a9fe:a9fe")},
		"sixtofour.example":   {netip.MustParseAddr("2002:a9fe:a9fe::1")},
		"mapped-loop.example": {netip.MustParseAddr("::ffff:127.0.0.1")},
		"v6-engine.example":   {netip.MustParseAddr("fd00::5"), netip.MustParseAddr("10.1.2.4")},
		"zoned.example":       {netip.MustParseAddr("fe80::1%eth0")},
		"1e100.example":       {netip.MustParseAddr("10.1.2.5")},
		"deadbeef":            {netip.MustParseAddr("10.1.2.6")},
		"localhost":           {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")},
		"localhost.":          {netip.MustParseAddr("127.0.0.1")},
		"engine.localhost":    {netip.MustParseAddr("10.1.2.7")}, // loopback whatever DNS says
	}
	cases := []struct {
		ep  string
		ok  bool
		why string
	}{
		// Canonical spellings of allowed addresses.
		{"tcp://10.0.0.5:5557", true, ""},
		{"tcp://[fd00::5]:5557", true, ""},
		{"tcp://[FD00:0:0:0:0:0:0:5]:5557", true, ""}, // any IPv6 spelling: its value is checked
		{"tcp://engine-0.svc:5557", true, ""},
		{"tcp://v6-engine.example:5557", true, ""},
		{"tcp://unresolvable.example:5557", false, unresolved},
		{"tcp://1e100.example:5557", true, ""}, // a digit first, but a DNS name
		{"tcp://deadbeef:5557", true, ""},      // hex digits, but a DNS name
		{"tcp://127.0.0.1:13334", true, ""},    // loopback, not an own port
		{"tcp://[::1]:13334", true, ""},
		{"tcp://localhost:13334", true, ""},
		{"tcp://[64:ff9b::a00:5]:5557", true, ""},                        // NAT64 of 10.0.0.5
		{"tcp://[2002:a00:5::1]:5557", true, ""},                         // 6to4 of 10.0.0.5
		{"tcp://127.1;10.0.0.5:5557", false, "--allow-source-endpoints"}, // the source address would be bound

		// Conductor's own ports, spelled as inet_aton (and so getaddrinfo) reads them.
		{"tcp://127.1:13333", false, numeric},
		{"tcp://2130706433:13333", false, numeric},
		{"tcp://0x7f000001:13333", false, numeric},
		{"tcp://0X7F000001:13333", false, numeric},
		{"tcp://127.000.000.001:13333", false, numeric},
		{"tcp://0177.0.0.1:13333", false, numeric},
		{"tcp://0x7f.1:13333", false, numeric},
		{"tcp://0:13333", false, numeric}, // 0.0.0.0
		{"tcp://127.0.0.1.:13333", false, numeric},
		{"tcp://[127.1]:50052", false, numeric}, // libzmq strips the brackets
		{"tcp://[127.0.0.1]:13333", false, own},
		{"tcp://10.0.0.5;127.1:13333", false, numeric},
		{"tcp://127.0.0.1:013333", false, own}, // the port as atoi reads it
		// ... through IPv6 forms of loopback and unspecified.
		{"tcp://[::ffff:127.0.0.1]:13333", false, own},
		{"tcp://[::ffff:7f00:1]:50052", false, own},
		{"tcp://[::127.0.0.1]:13333", false, own}, // IPv4-compatible
		{"tcp://[::]:13333", false, unspec},
		{"tcp://0.0.0.0:5557", false, unspec},
		{"tcp://[0:0:0:0:0:0:0:1]:13333", false, own},
		{"tcp://[64:ff9b::7f00:1]:13333", false, own},
		// ... through names.
		{"tcp://LOCALHOST.:13333", false, own}, // RFC 6761: loopback whatever DNS says
		{"tcp://engine.localhost:50052", false, own},
		{"tcp://mapped-loop.example:13333", false, own},
		// ... through zone ids, which libzmq strips before resolving.
		{"tcp://127.0.0.1%1:13333", false, zone},
		{"tcp://127.0.0.1%lo:13333", false, zone},
		{"tcp://[::1%lo]:13333", false, zone},

		// The metadata address in inet_aton's spellings.
		{"tcp://2852039166:80", false, numeric},
		{"tcp://0xa9fea9fe:80", false, numeric},
		{"tcp://0251.0376.0251.0376:80", false, numeric},
		{"tcp://169.254.43518:80", false, numeric},
		{"tcp://169.16689662:80", false, numeric},
		{"tcp://0xa9.0xfe.0xa9.0xfe:80", false, numeric},
		{"tcp://[169.254.43518]:80", false, numeric},
		// ... in IPv6 addresses that embed it.
		{"tcp://[::ffff:169.254.169.254]:80", false, meta},
		{"tcp://[::ffff:a9fe:a9fe]:80", false, meta},
		{"tcp://[::a9fe:a9fe]:80", false, meta},        // IPv4-compatible
		{"tcp://[::169.254.169.254]:80", false, meta},  // IPv4-compatible
		{"tcp://[::ffff:0:a9fe:a9fe]:80", false, meta}, // IPv4-translated (SIIT)
		{"tcp://[64:ff9b::a9fe:a9fe]:80", false, meta}, // NAT64 well-known prefix
		{"tcp://[64:ff9b::169.254.169.254]:80", false, meta},
		{"tcp://[64:ff9b:1::a9fe:a9fe]:80", false, meta},                 // NAT64 local-use prefix, /96
		{"tcp://[64:ff9b:1:a9fe:a9:fe00::]:80", false, meta},             // ... /48 layout
		{"tcp://[2002:a9fe:a9fe::1]:80", false, meta},                    // 6to4
		{"tcp://[2001:0:4136:e378:8000:63bf:5601:5601]:80", false, meta}, // Teredo client
		{"tcp://nat64.example:80", false, meta},
		{"tcp://sixtofour.example:80", false, meta},
		{"tcp://zoned.example:80", false, meta},
		// ... and other link-local and metadata spellings.
		{"tcp://[FE80::1]:5557", false, meta},
		{"tcp://[fe80::1%lo]:5557", false, zone},
		{"tcp://[fe80::1%1]:5557", false, zone},
		{"tcp://[fd00:ec2:0:0:0:0:0:254]:80", false, meta},
		{"tcp://METADATA.GOOGLE.INTERNAL.:80", false, "cloud metadata service"},

		// Non-canonical numbers are refused even when they stand for an allowed address.
		{"tcp://10.1:5557", false, numeric},
		{"tcp://010.0.0.5:5557", false, numeric},
		{"tcp://10.0.0.5.:5557", false, numeric},
		{"tcp://10.0.0.5%eth0:5557", false, zone},
		{"tcp://engine-0.svc%lo:5557", false, zone},
		{"tcp://[not:an:address]:5557", false, notIPv6},
	}
	def := testPolicy(t, "", dns)
	for _, c := range cases {
		checkPolicy(t, def, "endpoint", c.ep, c.ok, c.why)
		checkPolicy(t, def, "replay_endpoint", c.ep, c.ok, c.why)
	}
	if lo := loopbackInterface(); lo != "" {
		// libzmq does not resolve interface names on the connect side, but a
		// name that is one is no DNS name anyone means.
		checkPolicy(t, def, "endpoint", "tcp://"+lo+":13333", false, iface)
		checkPolicy(t, def, "endpoint", "tcp://"+lo+":5557", false, iface)
	}

	// A rule that names a network does not let a non-canonical spelling of
	// one of its addresses through, and judges a mapped address by its IPv4.
	nets := testPolicy(t, "tcp://10.0.0.0/8:5550-5560", dns)
	checkPolicy(t, nets, "endpoint", "tcp://10.9.9.9:5555", true, "")
	checkPolicy(t, nets, "endpoint", "tcp://[::ffff:10.9.9.9]:5555", true, "")
	checkPolicy(t, nets, "endpoint", "tcp://10.1:5555", false, numeric)
	checkPolicy(t, nets, "endpoint", "tcp://167772161:5555", false, numeric)
}
