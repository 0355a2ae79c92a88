package endpoint

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// ThisHost is the host part of the key of every tcp endpoint that reaches
// this host (Keys).
const ThisHost = "this-host"

// Keys returns the keys of the publisher sockets e may reach; two endpoints
// that share a key may reach the same socket. Appended to dst.
//
//   - tcp: one key per address the destination is or embeds (an IPv6
//     address that carries an IPv4 address by a fixed rule: IPv4-compatible,
//     IPv4-translated, NAT64's well-known prefix, 6to4, Teredo), with the
//     port. Every address of this host (loopback, unspecified, an address of
//     one of its interfaces) is the one key tcp://this-host:PORT: a
//     publisher bound to a wildcard address answers on all of them, so
//     tcp://127.0.0.1:P, tcp://127.0.0.2:P, tcp://[::1]:P and the host's
//     own address on port P are one publisher. A name not resolved yet is
//     its lowercased text (localhost and *.localhost are this host, RFC
//     6761). The source address plays no part.
//   - ipc: the cleaned absolute path (relative to the working directory);
//     an abstract socket (@name) as written.
//   - inproc: the name.
//
// TestKeys lists the cases.
func (e Endpoint) Keys(dst []string) []string {
	switch e.Scheme {
	case "ipc":
		p := e.Path
		if !strings.HasPrefix(p, "@") {
			if !filepath.IsAbs(p) {
				if wd, err := os.Getwd(); err == nil {
					p = filepath.Join(wd, p)
				}
			}
			p = filepath.Clean(p)
		}
		return append(dst, "ipc://"+p)
	case "inproc":
		return append(dst, "inproc://"+e.Path)
	case "tcp":
	default:
		return dst
	}
	port := strconv.Itoa(int(e.Port))
	if e.IsName() {
		name := strings.TrimSuffix(e.Host, ".")
		if name == "localhost" || strings.HasSuffix(name, ".localhost") {
			return append(dst, "tcp://"+ThisHost+":"+port)
		}
		return append(dst, "tcp://"+name+":"+port)
	}
	var buf [5]netip.Addr
	addrs := append(buf[:0], e.Addr)
	if !nat64Local.Contains(e.Addr) { // its IPv4 address depends on a prefix length the address does not carry
		addrs = AppendEmbeddedIPv4(addrs, e.Addr)
	}
	local := localAddrs()
	start := len(dst)
	for i, a := range addrs {
		if i > 0 && thisNetwork.Contains(a) {
			continue // ::1 and its kin are not IPv4-compatible addresses of 0.0.0.0/8
		}
		k := "tcp://" + ThisHost + ":" + port
		if !isThisHost(a, local) {
			k = "tcp://" + netip.AddrPortFrom(a, e.Port).String()
		}
		dup := false
		for _, have := range dst[start:] {
			dup = dup || have == k
		}
		if !dup {
			dst = append(dst, k)
		}
	}
	return dst
}

// Keys is Parse(s).Keys(nil), or s itself when s does not parse.
func Keys(s string) []string {
	e, err := Parse(s)
	if err != nil {
		return []string{s}
	}
	return e.Keys(nil)
}

// Shared reports whether endpoints a and b may reach the same publisher
// socket (a key in common).
func Shared(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// thisNetwork is 0.0.0.0/8, which is no destination (RFC 1122).
var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")

// IsThisHost reports whether a is an address of this host: loopback,
// unspecified, or an address of one of its network interfaces.
func IsThisHost(a netip.Addr) bool { return isThisHost(a, localAddrs()) }

func isThisHost(a netip.Addr, local []netip.Addr) bool {
	a = a.Unmap().WithZone("")
	if a.IsLoopback() || a.IsUnspecified() {
		return true
	}
	return containsAddr(local, a)
}

// localAddrs lists the addresses of this host's interfaces, read again
// when the last reading is older than localAddrsFresh: interfaces come and
// go rarely, and a registration storm would otherwise read them (a netlink
// dump) once per registration.
func localAddrs() []netip.Addr {
	if r := localRead.Load(); r != nil && time.Since(r.at) < localAddrsFresh {
		return r.addrs
	}
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	out := make([]netip.Addr, 0, len(ifas))
	for _, ia := range ifas {
		if p, err := netip.ParsePrefix(ia.String()); err == nil {
			out = append(out, p.Addr().Unmap().WithZone(""))
		}
	}
	localRead.Store(&localReading{addrs: out, at: time.Now()})
	return out
}

// localAddrsFresh is how long a reading of the interfaces' addresses serves.
const localAddrsFresh = time.Second

// localReading is the last reading of the interfaces' addresses (never
// modified once stored).
type localReading struct {
	addrs []netip.Addr
	at    time.Time
}

var localRead atomic.Pointer[localReading]
