package ingest

import (
	"context"
	"fmt"
	"time"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/endpoint"
)

// checkConnectEndpoint reports whether ep is an address a SUB or DEALER socket can
// connect to (endpoint.Parse): tcp://host:port (host a name, an IPv4 address or a
// bracketed IPv6 address; libzmq's "source;destination" form is accepted), ipc://path
// or inproc://name. Bind-only forms (a "*" host or port, port 0, an unspecified
// address) are refused here because libzmq would only refuse them later, or not at
// all (an ipc wildcard), and a subscription that can never connect should fail its
// registration, not sit pending forever. field names the registration field in the
// error.
//
// TestCheckConnectEndpoint lists the accepted and refused forms.
func checkConnectEndpoint(field, ep string) error {
	_, err := parseConnectEndpoint(field, ep)
	return err
}

func parseConnectEndpoint(field, ep string) (endpoint.Endpoint, error) {
	e, err := endpoint.Parse(ep)
	if err != nil {
		return e, &core.FieldError{Field: field, Err: fmt.Errorf("%s=%q: %w: %w", field, ep, err, ErrBadEndpoint)}
	}
	return e, nil
}

// resolveTimeout bounds the lookup of a registration's host name.
const resolveTimeout = 2 * time.Second

// canonicalEndpoint is ep in the form a registration connects to: its
// canonical form (endpoint.Endpoint.String), a tcp host name resolved once to
// the address the sockets connect to (endpoint.Resolve), so that the
// registry's check that no other registration reaches the same publisher
// judges the address libzmq connects to, not a name libzmq resolves again
// at every attempt. Refusals are *core.FieldError naming field and wrapping
// ErrBadEndpoint.
func (g *Ingester) canonicalEndpoint(field, ep string) (string, error) {
	e, err := parseConnectEndpoint(field, ep)
	if err != nil {
		return "", err
	}
	if e.IsName() {
		ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
		e, _, err = endpoint.Resolve(ctx, e, g.opts.Lookup)
		cancel()
		if err != nil {
			return "", &core.FieldError{Field: field, Err: fmt.Errorf("%s=%q: %w: %w", field, ep, err, ErrBadEndpoint)}
		}
	}
	return e.String(), nil
}
