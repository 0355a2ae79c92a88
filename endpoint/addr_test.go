package endpoint

import (
	"net/netip"
	"strings"
	"testing"
)

// TestInetAton: numeric IPv4 hosts read as glibc's getaddrinfo reads
// them (the expected column is its output on Debian 12, glibc 2.36).
func TestInetAton(t *testing.T) {
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

// FuzzInetAton: every string getaddrinfo could read as an IPv4
// address is a numeric host (so Parse never takes it for a DNS name), and
// every canonical dotted quad reads as itself.
func FuzzInetAton(f *testing.F) {
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

// TestEmbeddedIPv4: the IPv4 addresses an IPv6 address carries.
func TestEmbeddedIPv4(t *testing.T) {
	var scratch []netip.Addr
	f := func(in string, want ...string) {
		t.Helper()
		got := AppendEmbeddedIPv4(scratch[:0], netip.MustParseAddr(in))
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
