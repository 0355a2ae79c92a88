package ingest

import (
	"context"
	"net"
	"strings"
	"time"
)

// Endpoint hosts that do not resolve. libzmq resolves a tcp endpoint's host
// name in its I/O thread at every connection attempt and, when the name
// does not resolve, retries in silence: its monitor has no event for it, so
// the listener would only say it is not connected yet. Register therefore
// looks the name up itself (a host that is an IP literal needs no lookup),
// at once and then every hostRecheck while it does not resolve and the
// listener runs: the first failure is logged at WARN and, while the
// listener is pending, is its LastError (Listeners); the first success
// after it is logged at INFO. Nothing else changes: libzmq keeps retrying,
// and a name that comes to resolve connects. Proved by
// TestZMQUnresolvableHost.
const (
	hostLookupTimeout = 5 * time.Second
	hostRecheck       = 15 * time.Second
)

// endpointHostName is the host name of a tcp endpoint ("" for an IP
// literal, another transport, or a malformed endpoint).
func endpointHostName(ep string) string {
	rest, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return ""
	}
	if i := strings.LastIndexByte(rest, ';'); i >= 0 {
		rest = rest[i+1:]
	}
	host, _, err := net.SplitHostPort(rest)
	if err != nil || host == "" || net.ParseIP(host) != nil {
		return ""
	}
	return host
}

// watchHost starts the lookups of l's endpoint host, when it is a name.
func (g *Ingester) watchHost(l *listener) {
	host := endpointHostName(l.reg.Endpoint)
	if host == "" {
		return
	}
	go func() {
		defer g.hostErrs.Delete(l)
		warned := false
		for {
			ctx, cancel := context.WithTimeout(context.Background(), hostLookupTimeout)
			_, err := net.DefaultResolver.LookupHost(ctx, host)
			cancel()
			select {
			case <-l.done:
				return
			default:
			}
			if err == nil {
				if warned {
					l.log.Info("the endpoint's host resolves now", "host", host)
				}
				return
			}
			msg := "the endpoint's host " + host + " does not resolve (" + err.Error() + "); libzmq keeps retrying the connection"
			g.hostErrs.Store(l, msg)
			if !warned {
				l.log.Warn("the endpoint's host does not resolve; the registration stays pending until it does", "host", host, "err", err)
				warned = true
			}
			select {
			case <-l.done:
				return
			case <-time.After(hostRecheck):
			}
		}
	}()
}

// hostError is l's unresolved host, for a pending listener's LastError.
func (g *Ingester) hostError(l *listener) (string, bool) {
	v, ok := g.hostErrs.Load(l)
	if !ok {
		return "", false
	}
	return v.(string), true
}
