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

// checkPolicy asserts p's decision on ep; a refusal must be a forbidden
// *core.FieldError naming field whose text names the field, the endpoint and
// contains why.
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
	var fe *core.FieldError
	if !errors.Is(err, ErrForbidden) || !errors.As(err, &fe) || fe.Field != field {
		t.Errorf("%s: error %v is not a forbidden field error for %s", ep, err, field)
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
	f(def, "tcp://unresolvable.example:5557", true) // nothing to check yet
	f(def, "tcp://169.254.169.254:80", false)
	f(def, "tcp://[fe80::1]:5557", false)
	f(def, "tcp://[fd00:ec2::254]:80", false)
	f(def, "tcp://metadata.google.internal:80", false)
	f(def, "tcp://evil.example:80", false) // resolves to the metadata address
	f(def, "tcp://127.0.0.1:13333", false) // conductor's own HTTP port
	f(def, "tcp://loop.example:50052", false)
	f(def, "tcp://0.0.0.0:13333", false)
	f(def, "tcp://127.0.0.1:13334", true)
	f(def, "tcp://127.0.0.1;169.254.1.1:5557", false) // the destination is what counts
	f(def, "ipc:///tmp/engine.sock", false)
	f(def, "inproc://x", false)

	nets := testPolicy(t, "tcp://10.0.0.0/8:5550-5560, tcp://*.svc:*, ipc:///run/engines/*, inproc://test-*", dns)
	f(nets, "tcp://10.9.9.9:5555", true)
	f(nets, "tcp://10.9.9.9:5561", false)
	f(nets, "tcp://192.168.1.1:5555", false)
	f(nets, "tcp://engine.svc:9", true)
	f(nets, "tcp://mixed.example:5555", false) // one address outside 10/8
	f(nets, "ipc:///run/engines/a.sock", true)
	f(nets, "ipc:///etc/passwd", false)
	f(nets, "inproc://test-1", true)
	f(nets, "inproc://conductor-ingest-wake-1", false)

	for _, bad := range []string{"udp://*:*", "tcp://*", "tcp://10.0.0.0/33:1", "tcp://*:0", "tcp://*:9-3", "ipc://[", "tcp://a b:1"} {
		if _, err := ParseEndpointPolicy(bad); err == nil {
			t.Errorf("rule %q accepted", bad)
		}
	}
	var nilPolicy *EndpointPolicy
	f(nilPolicy, "tcp://169.254.169.254:80", true)
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
		own     = "conductor's own listener"
		meta    = "link-local and cloud-metadata addresses are never allowed"
		numeric = "not a dotted-quad IPv4 address"
		zone    = "zone"
		iface   = "network interface of this host"
	)
	dns := map[string][]netip.Addr{
		"engine-0.svc":        {netip.MustParseAddr("10.1.2.3")},
		"nat64.example":       {netip.MustParseAddr("64:ff9b::a9fe:a9fe")},
		"sixtofour.example":   {netip.MustParseAddr("2002:a9fe:a9fe::1")},
		"mapped-loop.example": {netip.MustParseAddr("::ffff:127.0.0.1")},
		"v6-engine.example":   {netip.MustParseAddr("fd00::5"), netip.MustParseAddr("10.1.2.4")},
		"zoned.example":       {netip.MustParseAddr("fe80::1%eth0")},
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
		{"tcp://unresolvable.example:5557", true, ""},
		{"tcp://1e100.example:5557", true, ""}, // a digit first, but a DNS name
		{"tcp://deadbeef:5557", true, ""},      // hex digits, but a DNS name
		{"tcp://127.0.0.1:13334", true, ""},    // loopback, not an own port
		{"tcp://[::1]:13334", true, ""},
		{"tcp://localhost:13334", true, ""},
		{"tcp://[64:ff9b::a00:5]:5557", true, ""}, // NAT64 of 10.0.0.5
		{"tcp://[2002:a00:5::1]:5557", true, ""},  // 6to4 of 10.0.0.5
		{"tcp://127.1;10.0.0.5:5557", true, ""},   // the source address is bound, not connected to

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
		{"tcp://[::]:13333", false, own},
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
		{"tcp://[not:an:address]:5557", false, "not an IPv6 address"},
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

// TestEndpointInetAton: numeric IPv4 hosts read as glibc's getaddrinfo reads
// them (the expected column is its output on Debian 12, glibc 2.36).
func TestEndpointInetAton(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		a, ok := inetAton(in)
		got := "-"
		if ok {
			got = a.String()
		}
		if got != want {
			t.Fatalf("inetAton(%q) = %s, want %s", in, got, want)
		}
		if ok && !numericHost(in) {
			t.Fatalf("%q is an address but not a numeric host", in)
		}
	}
	f("127.0.0.1", "127.0.0.1")
	f("127.1", "127.0.0.1")
	f("2130706433", "127.0.0.1")
	f("0x7f000001", "127.0.0.1")
	f("0X7F.0.0.1", "127.0.0.1")
	f("127.000.000.001", "127.0.0.1")
	f("0177.0.0.1", "127.0.0.1")
	f("0", "0.0.0.0")
	f("0xA9FEA9FE", "169.254.169.254")
	f("0251.0376.0251.0376", "169.254.169.254")
	f("169.254.43518", "169.254.169.254")
	f("169.16689662", "169.254.169.254")
	f("1.2.3.04", "1.2.3.4")
	f("0377.1", "255.0.0.1")
	f("4294967295", "255.255.255.255")
	f("1.16777215", "1.255.255.255")
	f("1.2.65535", "1.2.255.255")
	f("00000000000000000000001", "0.0.0.1")
	f("0x00000000000000000001", "0.0.0.1")
	for _, bad := range []string{"", "08", "09", "0x", "0x.1", "0xg", "1.2.3.4.", "1..2", ".1", "1 ", " 1", "1e",
		"4294967296", "1.16777216", "1.2.65536", "1.2.3.256", "256.1", "0x100.1", "0400.1", "1.2.3.4.5", "localhost"} {
		f(bad, "-")
	}
}

// FuzzEndpointInetAton: every string getaddrinfo could read as an IPv4
// address is a numeric host (so Check never takes it for a DNS name), and
// every canonical dotted quad reads as itself.
func FuzzEndpointInetAton(f *testing.F) {
	for _, s := range []string{"127.1", "0x7f000001", "0251.0376.0251.0376", "10.0.0.5", "1e100.example", "0x", "1.2.3.4."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 64 {
			return
		}
		a, ok := inetAton(s)
		if ok && !numericHost(s) {
			t.Fatalf("%q reads as %s but is not a numeric host", s, a)
		}
		if p, err := netip.ParseAddr(s); err == nil && p.Is4() && (!ok || a != p) {
			t.Fatalf("canonical %q reads as %v, %v", s, a, ok)
		}
	})
}

// TestEndpointEmbeddedIPv4: the IPv4 addresses an IPv6 address carries.
func TestEndpointEmbeddedIPv4(t *testing.T) {
	var scratch []netip.Addr
	f := func(in string, want ...string) {
		t.Helper()
		got := appendEmbeddedIPv4(scratch[:0], netip.MustParseAddr(in))
		if len(got) > 0 && &got[0] != &scratch[:1][0] {
			t.Fatalf("%s: did not append to dst", in)
		}
		var s []string
		for _, a := range got {
			s = append(s, a.String())
		}
		if strings.Join(s, " ") != strings.Join(want, " ") {
			t.Fatalf("%s embeds %v, want %v", in, s, want)
		}
	}
	scratch = make([]netip.Addr, 0, 4)
	f("169.254.169.254")
	f("fd00::5")
	f("fe80::1")
	f("::ffff:169.254.169.254", "169.254.169.254")
	f("::a9fe:a9fe", "169.254.169.254")
	f("::ffff:0:a9fe:a9fe", "169.254.169.254")
	f("64:ff9b::a9fe:a9fe", "169.254.169.254")
	f("64:ff9b:1:a9fe:a9:fe00::", "169.254.169.254", "254.169.254.0", "169.254.0.0", "0.0.0.0")
	f("64:ff9b:1::a9fe:a9fe", "0.0.0.0", "0.0.0.0", "0.0.0.169", "169.254.169.254")
	f("2002:a9fe:a9fe::1", "169.254.169.254")
	f("2001:0:4136:e378:8000:63bf:5601:5601", "169.254.169.254")
	f("2001:db8::1")
}
