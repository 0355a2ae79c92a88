package endpoint

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestParse: every spelling of one publisher on 127.0.0.1:5557 that libzmq
// connects to is either its canonical form or refused with the reason, and
// the other forms a registration may name read as libzmq reads them.
func TestParse(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		e, err := Parse(in)
		if err != nil {
			t.Errorf("Parse(%q): %v, want %s", in, err, want)
			return
		}
		if got := e.String(); got != want {
			t.Errorf("Parse(%q) = %s, want %s", in, got, want)
		}
		// The canonical form is a fixed point.
		if e2, err := Parse(want); err != nil || e2 != e {
			t.Errorf("Parse(%q) = %+v, %v; Parse(%q) = %+v", want, e2, err, in, e)
		}
	}
	refused := func(in, why string) {
		t.Helper()
		_, err := Parse(in)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), why) {
			t.Errorf("Parse(%q): %v, want ErrInvalid saying %q", in, err, why)
		}
	}
	f("tcp://127.0.0.1:5557", "tcp://127.0.0.1:5557")
	f("tcp://127.0.0.1:05557", "tcp://127.0.0.1:5557") // atoi reads the port as decimal
	f("tcp://127.0.0.1:00000005557", "tcp://127.0.0.1:5557")
	f("tcp://[::ffff:127.0.0.1]:5557", "tcp://127.0.0.1:5557")
	f("tcp://[::FFFF:7f00:1]:5557", "tcp://127.0.0.1:5557")
	f("tcp://[127.0.0.1]:5557", "tcp://127.0.0.1:5557") // libzmq strips the brackets
	f("tcp://[0:0:0:0:0:0:0:1]:5557", "tcp://[::1]:5557")
	f("tcp://[::1]:5557", "tcp://[::1]:5557")
	f("tcp://127.0.0.2:5557", "tcp://127.0.0.2:5557")
	f("tcp://localhost:5557", "tcp://localhost:5557") // a name: Resolve gives its address
	f("tcp://LocalHost.:5557", "tcp://localhost.:5557")
	f("tcp://Engine-0.svc_x.example:65535", "tcp://engine-0.svc_x.example:65535")
	f("tcp://deadbeef:1", "tcp://deadbeef:1")           // hex digits, but a DNS name
	f("tcp://1e100.example:1", "tcp://1e100.example:1") // a digit first, but a DNS name
	f("tcp://[FD00:0::5]:5557", "tcp://[fd00::5]:5557")
	f("tcp://127.0.0.1:0;127.0.0.1:5557", "tcp://127.0.0.1:0;127.0.0.1:5557") // kept: the policy decides
	f("tcp://eth0;[::ffff:10.0.0.1]:05557", "tcp://eth0;10.0.0.1:5557")
	f("ipc:///tmp/kv.sock", "ipc:///tmp/kv.sock")
	f("inproc://kv", "inproc://kv")

	const unspec = "the unspecified address"
	refused("tcp://0.0.0.0:5557", unspec)
	refused("tcp://[::]:5557", unspec)
	refused("tcp://[::ffff:0.0.0.0]:5557", unspec)
	refused("tcp://[0:0:0:0:0:0:0:0]:5557", unspec)
	refused("tcp://0:5557", "libzmq would read it as 0.0.0.0")
	refused("tcp://*:5557", "needs a host")
	refused("tcp://:5557", "needs a host")
	refused("tcp://127.0.0.1:0", "want 1..65535")
	refused("tcp://127.0.0.1:65536", "want 1..65535")
	refused("tcp://127.0.0.1:+5557", "want 1..65535")
	refused("tcp://127.0.0.1:5557 ", "want 1..65535")
	refused("tcp://127.0.0.1:port", "want 1..65535")
	refused("tcp://127.0.0.1", "lacks a port")
	refused("tcp://127.1:5557", "libzmq would read it as 127.0.0.1")
	refused("tcp://2130706433:5557", "libzmq would read it as 127.0.0.1")
	refused("tcp://0x7f000001:5557", "libzmq would read it as 127.0.0.1")
	refused("tcp://0177.0.0.1:5557", "libzmq would read it as 127.0.0.1")
	refused("tcp://127.000.000.001:5557", "libzmq would read it as 127.0.0.1")
	refused("tcp://[127.1]:5557", "libzmq would read it as 127.0.0.1")
	refused("tcp://127.0.0.1.:5557", "not a dotted-quad IPv4 address")
	refused("tcp://127.0.0.1%lo:5557", "zone id")
	refused("tcp://[::1%lo]:5557", "zone id")
	refused("tcp://::1:5557", "must be bracketed")
	refused("tcp://[::1:5557", "unbalanced brackets")
	refused("tcp://[not:an:address]:5557", "not an IPv6 address")
	refused("tcp://[engine]:5557", "not an IP address")
	refused("tcp://host name:5557", "not allowed in a DNS name")
	refused("tcp://a..b:5557", "empty label")
	refused("tcp://"+strings.Repeat("a.", 127)+"a:1", "longer than 253 bytes")
	refused("tcp://;127.0.0.1:5557", "source address")
	refused("tcp://engine\x1b[31m:5557", "control character 0x1b")
	refused("ipc:///tmp/\x00x", "control character 0x00")
	refused("tcp://\xff:1", "not valid UTF-8")
	refused("127.0.0.1:5557", "want transport://address")
	refused("udp://127.0.0.1:5557", "want tcp, ipc or inproc")
	refused("pgm://eth0;239.192.1.1:5555", "want tcp, ipc or inproc")
	refused("ipc://", "empty or a wildcard")
	refused("ipc://*", "empty or a wildcard")
	refused("inproc://", "empty or a wildcard")
	refused("", "want transport://address")

	long := "tcp://" + strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61) + ":1"
	f(long, long) // 253 bytes
}

// TestKeys: the spellings of one publisher share a key; other publishers do
// not.
func TestKeys(t *testing.T) {
	keys := func(s string) []string {
		t.Helper()
		e, err := Parse(s)
		if err != nil {
			t.Fatalf("Parse(%q): %v", s, err)
		}
		return e.Keys(nil)
	}
	f := func(in string, want ...string) {
		t.Helper()
		if got := keys(in); !slices.Equal(got, want) {
			t.Errorf("Keys(%q) = %q, want %q", in, got, want)
		}
	}
	const local = "tcp://this-host:5557"
	for _, s := range []string{"tcp://127.0.0.1:5557", "tcp://127.0.0.1:05557", "tcp://[::ffff:127.0.0.1]:5557", "tcp://127.0.0.2:5557",
		"tcp://127.255.255.254:5557", "tcp://[::1]:5557", "tcp://localhost:5557", "tcp://LOCALHOST.:5557", "tcp://engine.localhost:5557",
		"tcp://127.0.0.1:0;127.0.0.1:5557"} {
		f(s, local)
	}
	f("tcp://[::127.0.0.1]:5557", "tcp://[::7f00:1]:5557", local)            // IPv4-compatible: it and its IPv4 address
	f("tcp://[::ffff:0:7f00:1]:5557", "tcp://[::ffff:0:7f00:1]:5557", local) // IPv4-translated
	f("tcp://[64:ff9b::7f00:1]:5557", "tcp://[64:ff9b::7f00:1]:5557", local)
	f("tcp://127.0.0.1:5558", "tcp://this-host:5558")
	f("tcp://192.0.2.7:5557", "tcp://192.0.2.7:5557")
	f("tcp://[::ffff:192.0.2.7]:5557", "tcp://192.0.2.7:5557")
	f("tcp://192.0.2.8;192.0.2.7:5557", "tcp://192.0.2.7:5557")
	f("tcp://[64:ff9b::c000:207]:5557", "tcp://[64:ff9b::c000:207]:5557", "tcp://192.0.2.7:5557") // NAT64
	f("tcp://[2002:c000:207::1]:5557", "tcp://[2002:c000:207::1]:5557", "tcp://192.0.2.7:5557")   // 6to4
	f("tcp://[64:ff9b:1::c000:207]:5557", "tcp://[64:ff9b:1::c000:207]:5557")                     // local-use NAT64: no fixed IPv4
	f("tcp://[2001:db8::7]:5557", "tcp://[2001:db8::7]:5557")
	f("tcp://Engine.Example:5557", "tcp://engine.example:5557")
	f("tcp://engine.example.:5557", "tcp://engine.example:5557")
	f("inproc://kv", "inproc://kv")
	f("ipc://@abstract", "ipc://@abstract")
	f("ipc:///tmp//a/../kv.sock", "ipc:///tmp/kv.sock")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	f("ipc://./kv.sock", "ipc://"+filepath.Join(wd, "kv.sock"))

	// This host's own interface addresses are this host too.
	ifas, _ := net.InterfaceAddrs()
	for _, ia := range ifas {
		p, err := netip.ParsePrefix(ia.String())
		if err != nil || p.Addr().IsLoopback() || p.Addr().IsLinkLocalUnicast() {
			continue
		}
		a := p.Addr().Unmap()
		ep := "tcp://" + netip.AddrPortFrom(a, 5557).String()
		if !IsThisHost(a) {
			t.Errorf("%s is an interface address but not this host", a)
		}
		f(ep, local)
	}

	if !Shared(keys("tcp://localhost:5557"), keys("tcp://[::1]:5557")) || Shared(keys("tcp://127.0.0.1:5557"), keys("tcp://127.0.0.1:5558")) ||
		!Shared(keys("tcp://[2002:c000:207::1]:5557"), keys("tcp://[64:ff9b::c000:207]:5557")) ||
		Shared(keys("tcp://192.0.2.7:5557"), keys("tcp://192.0.2.8:5557")) {
		t.Error("Shared")
	}
	if got := Keys("tcp://*:1"); !slices.Equal(got, []string{"tcp://*:1"}) {
		t.Errorf("Keys of an unparsable endpoint: %q", got)
	}
}

// TestResolve: a name becomes one literal address, chosen from its
// addresses (IPv4 first), which all come back for a policy; a literal is not
// looked up.
func TestResolve(t *testing.T) {
	dns := map[string][]netip.Addr{
		"localhost":      {netip.MustParseAddr("::1"), netip.MustParseAddr("127.0.0.1")},
		"v6.example":     {netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")},
		"mapped.example": {netip.MustParseAddr("::ffff:192.0.2.7"), netip.MustParseAddr("192.0.2.7")},
		"zoned.example":  {netip.MustParseAddr("fe80::1%eth0")},
		"blocked.test":   {netip.MustParseAddr("0.0.0.0")},
		"empty.test":     {},
	}
	lookups := 0
	lookup := func(_ context.Context, h string) ([]netip.Addr, error) {
		lookups++
		if a, ok := dns[h]; ok {
			return a, nil
		}
		return nil, errors.New("no such host")
	}
	f := func(in, want, all string) {
		t.Helper()
		e, err := Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		r, addrs, err := Resolve(context.Background(), e, lookup)
		if err != nil {
			t.Errorf("Resolve(%s): %v", in, err)
			return
		}
		var s []string
		for _, a := range addrs {
			s = append(s, a.String())
		}
		if r.String() != want || strings.Join(s, " ") != all || r.IsName() {
			t.Errorf("Resolve(%s) = %s %v, want %s [%s]", in, r, s, want, all)
		}
	}
	f("tcp://localhost:5557", "tcp://127.0.0.1:5557", "::1 127.0.0.1")
	f("tcp://127.0.0.1:0;LOCALHOST:5557", "tcp://127.0.0.1:0;127.0.0.1:5557", "::1 127.0.0.1")
	f("tcp://v6.example:1", "tcp://[2001:db8::1]:1", "2001:db8::1 2001:db8::2")
	f("tcp://mapped.example:1", "tcp://192.0.2.7:1", "192.0.2.7")
	f("tcp://zoned.example:1", "tcp://[fe80::1]:1", "fe80::1")
	n := lookups
	f("tcp://[::ffff:192.0.2.7]:1", "tcp://192.0.2.7:1", "192.0.2.7")
	if e, _ := Parse("ipc:///x"); true {
		if r, addrs, err := Resolve(context.Background(), e, lookup); err != nil || r != e || addrs != nil {
			t.Errorf("ipc: %v %v %v", r, addrs, err)
		}
	}
	if lookups != n {
		t.Error("a literal or ipc endpoint was looked up")
	}
	for in, want := range map[string]error{"tcp://nowhere.test:1": ErrUnresolved, "tcp://empty.test:1": ErrUnresolved,
		"tcp://blocked.test:1": ErrInvalid} {
		e, err := Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := Resolve(context.Background(), e, lookup); !errors.Is(err, want) || !strings.Contains(err.Error(), e.Host) {
			t.Errorf("Resolve(%s): %v, want %v naming the host", in, err, want)
		}
	}
}
