package endpoint

import "net/netip"

// What libzmq connects to for a tcp host: it resolves the host with
// getaddrinfo, which reads a numeric host as inet_aton does (inetAton) before
// it tries DNS, and the kernel or the network may carry an IPv6 destination
// to an IPv4 address the IPv6 one embeds (AppendEmbeddedIPv4).

// inetAton parses s as glibc's getaddrinfo parses a numeric IPv4 host
// (__inet_aton_exact): one to four parts separated by dots, each decimal,
// octal (a leading 0) or hex (0x or 0X), every part but the last at most 255
// and the last filling the bytes left: a.b.c.d, a.b.c (c 16 bits), a.b
// (b 24 bits) or a (32 bits). ok is false for anything else, a trailing dot
// or character included. TestInetAton lists the forms.
func inetAton(s string) (a netip.Addr, ok bool) {
	var b [4]byte
	dots := 0
	for {
		v, n, ok := atonPart(s)
		if !ok {
			return netip.Addr{}, false
		}
		s = s[n:]
		if s == "" {
			if v > 0xffffffff>>(8*dots) {
				return netip.Addr{}, false
			}
			for i := 3; i >= dots; i-- {
				b[i] = byte(v)
				v >>= 8
			}
			return netip.AddrFrom4(b), true
		}
		if s[0] != '.' || dots == 3 || v > 0xff {
			return netip.Addr{}, false
		}
		b[dots] = byte(v)
		dots++
		s = s[1:]
	}
}

// atonPart parses the number at the start of s as strtoul(s, &end, 0) does,
// requiring a leading digit and at most 32 bits; n is how many bytes it read.
func atonPart(s string) (v uint64, n int, ok bool) {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, 0, false
	}
	base := uint64(10)
	switch {
	case len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && hexDigit(s[2]) >= 0:
		base, n = 16, 2
	case s[0] == '0':
		base = 8
	}
	for ; n < len(s); n++ {
		d := hexDigit(s[n])
		if d < 0 || uint64(d) >= base {
			break
		}
		if v = v*base + uint64(d); v > 0xffffffff {
			return 0, 0, false
		}
	}
	return v, n, true
}

// hexDigit is c's value as a hex digit, or -1.
func hexDigit(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// numericHost reports whether host is one getaddrinfo may read as an IPv4
// address: a digit first, then only hex digits, x, X and dots. Every string
// inetAton accepts is one; DNS names that are (no letter past f, no dash) are
// not in use.
func numericHost(host string) bool {
	if host == "" || host[0] < '0' || host[0] > '9' {
		return false
	}
	for i := 1; i < len(host); i++ {
		if c := host[i]; c != '.' && c != 'x' && c != 'X' && hexDigit(c) < 0 {
			return false
		}
	}
	return true
}

var (
	v4Compatible = netip.MustParsePrefix("::/96")           // ::a.b.c.d (RFC 4291, deprecated)
	v4Mapped     = netip.MustParsePrefix("::ffff:0:0/96")   // ::ffff:a.b.c.d
	v4Translated = netip.MustParsePrefix("::ffff:0:0:0/96") // SIIT (RFC 2765)
	nat64WKP     = netip.MustParsePrefix("64:ff9b::/96")    // NAT64 well-known prefix (RFC 6052)
	nat64Local   = netip.MustParsePrefix("64:ff9b:1::/48")  // NAT64 local-use prefixes (RFC 8215)
	sixToFour    = netip.MustParsePrefix("2002::/16")       // 6to4 (RFC 3056)
	teredo       = netip.MustParsePrefix("2001::/32")       // Teredo (RFC 4380)
)

// AppendEmbeddedIPv4 appends to dst the IPv4 addresses a carries, if a is an
// IPv6 address in one of the ranges that embed one: IPv4-mapped,
// IPv4-compatible, IPv4-translated, NAT64 (64:ff9b::/96, and 64:ff9b:1::/48 at
// each RFC 6052 prefix length a local-use prefix may have: /48, /56, /64,
// /96), 6to4 (2002::/16) and Teredo's client address (2001::/32). It appends
// at most four. TestEmbeddedIPv4 lists the cases.
func AppendEmbeddedIPv4(dst []netip.Addr, a netip.Addr) []netip.Addr {
	if !a.Is6() {
		return dst
	}
	b := a.As16()
	v4 := func(i, j, k, l int) netip.Addr { return netip.AddrFrom4([4]byte{b[i], b[j], b[k], b[l]}) }
	a = a.WithZone("")
	switch {
	case v4Compatible.Contains(a), v4Mapped.Contains(a), v4Translated.Contains(a), nat64WKP.Contains(a):
		dst = append(dst, v4(12, 13, 14, 15))
	case nat64Local.Contains(a): // byte 8 is RFC 6052's reserved u octet
		dst = append(dst, v4(6, 7, 9, 10), v4(7, 9, 10, 11), v4(9, 10, 11, 12), v4(12, 13, 14, 15))
	case sixToFour.Contains(a):
		dst = append(dst, v4(2, 3, 4, 5))
	case teredo.Contains(a): // the client's address, inverted
		dst = append(dst, netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}))
	}
	return dst
}
