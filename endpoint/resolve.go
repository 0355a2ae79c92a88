package endpoint

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// Lookup resolves a DNS name to its addresses.
type Lookup func(ctx context.Context, host string) ([]netip.Addr, error)

// DefaultLookup asks the system resolver (net.DefaultResolver).
func DefaultLookup(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// Resolve gives a tcp endpoint whose host is a name (IsName) the address it
// is connected to: the first IPv4 address lookup returns, else the first
// IPv6 address. It returns that endpoint, whose String is then the literal,
// and every address the name resolved to (IPv4-mapped ones unmapped, zones
// dropped), for a policy to judge. Any other endpoint comes back unchanged
// with its address (none for ipc and inproc).
//
// Connecting to the literal, instead of handing libzmq the name to resolve
// again at every connection attempt, is what keeps the address a policy and
// the registry checked the one the socket reaches: DNS may answer
// differently later. A name that resolves to nothing is refused
// (ErrUnresolved), as is one that resolves to an unspecified address
// (ErrInvalid; a hosts file that blocks a name does that).
func Resolve(ctx context.Context, e Endpoint, lookup Lookup) (Endpoint, []netip.Addr, error) {
	switch {
	case e.Scheme != "tcp":
		return e, nil, nil
	case !e.IsName():
		return e, []netip.Addr{e.Addr}, nil
	}
	if lookup == nil {
		lookup = DefaultLookup
	}
	res, err := lookup(ctx, e.Host)
	if err != nil {
		return Endpoint{}, nil, fmt.Errorf("host %q: %v: %w", e.Host, err, ErrUnresolved)
	}
	addrs := make([]netip.Addr, 0, len(res))
	for _, a := range res {
		a = a.Unmap().WithZone("")
		if !a.IsValid() || containsAddr(addrs, a) {
			continue
		}
		if a.IsUnspecified() {
			return Endpoint{}, nil, fmt.Errorf("host %q resolves to the unspecified address %s: %w", e.Host, a, ErrInvalid)
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return Endpoint{}, nil, fmt.Errorf("host %q has no address: %w", e.Host, ErrUnresolved)
	}
	pick := addrs[0]
	for _, a := range addrs {
		if a.Is4() {
			pick = a
			break
		}
	}
	e.Addr, e.Host = pick, pick.String()
	return e, addrs, nil
}

func containsAddr(as []netip.Addr, a netip.Addr) bool {
	for _, b := range as {
		if a == b {
			return true
		}
	}
	return false
}
