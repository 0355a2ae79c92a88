package server

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/core"
)

// Principal is who made a request, from its bearer token.
type Principal struct {
	// Name is the token's identity ("admin" for the admin token; "" when no
	// token is configured and the surface is open).
	Name string
	// Admin may do everything: register, unregister or replace any
	// registration, and read the introspection endpoints.
	Admin bool
	// queryOnly marks the query token: it may query and nothing else.
	queryOnly bool
}

// AdminPrincipal is the principal of every request while no admin token is
// configured, and of the admin token's.
var AdminPrincipal = Principal{Name: "admin", Admin: true}

// The principals of registrations the process makes itself: the
// configuration file's and Kubernetes discovery's (package discovery).
// Client identities may not take their names, nor "admin".
var (
	ConfigPrincipal    = Principal{Name: "config", Admin: true}
	DiscoveryPrincipal = Principal{Name: "kubernetes", Admin: true}
)

// SourceOf names where a registration came from, by its owner: "config",
// "kubernetes", or "api" (a /register or RPC request, any identity).
func SourceOf(r *core.Registration) string {
	switch r.Owner {
	case ConfigPrincipal.Name, DiscoveryPrincipal.Name:
		return r.Owner
	}
	return "api"
}

// AccessOptions configure Access. Tokens are secrets: they are compared in
// constant time and never logged.
type AccessOptions struct {
	// AdminToken is required (Authorization: Bearer …) on mutating and
	// introspection endpoints of every surface: /register, /unregister,
	// /services, /global_view, /dump, the peer endpoints, the RPC Register and
	// Unregister. Default "": no token, every surface open (the startup log
	// says so).
	AdminToken string
	// QueryToken, when set, is required on /query and /query_by_hash (the
	// admin and client tokens are accepted there too). Default "": queries open.
	QueryToken string
	// ClientTokens are non-admin identities (identity → token) that may
	// register, and unregister or replace only what they registered; they may
	// also query. Default none.
	ClientTokens map[string]string
	// ProtectMetrics requires the admin token on /metrics too (its labels name
	// instances and models). Default false: /metrics and /health stay open
	// for scrapers and probes.
	ProtectMetrics bool
}

// Access decides who may call what. The zero value and a nil *Access are open.
type Access struct {
	admin, query   []byte
	clients        []clientToken
	protectMetrics bool
}

type clientToken struct {
	name  string
	token []byte
}

// NewAccess validates opts: tokens must be at least 16 bytes, have no
// whitespace, and be distinct; identities non-empty and none of the
// process's own principals' names (admin, config, kubernetes).
func NewAccess(opts AccessOptions) (*Access, error) {
	var errs []error
	seen := map[string]string{}
	check := func(who, tok string) {
		switch {
		case len(tok) < 16:
			errs = append(errs, fmt.Errorf("%s token: shorter than 16 bytes", who))
		case strings.ContainsAny(tok, " \t\r\n"):
			errs = append(errs, fmt.Errorf("%s token: contains whitespace", who))
		case seen[tok] != "":
			errs = append(errs, fmt.Errorf("%s token: same as the %s token", who, seen[tok]))
		}
		seen[tok] = who
	}
	a := &Access{protectMetrics: opts.ProtectMetrics}
	if opts.AdminToken != "" {
		check("admin", opts.AdminToken)
		a.admin = []byte(opts.AdminToken)
	}
	if opts.QueryToken != "" {
		check("query", opts.QueryToken)
		a.query = []byte(opts.QueryToken)
	}
	for name, tok := range opts.ClientTokens {
		if name == "" || name == AdminPrincipal.Name || name == ConfigPrincipal.Name || name == DiscoveryPrincipal.Name || strings.ContainsAny(name, " \t\r\n") {
			errs = append(errs, fmt.Errorf("client identity %q: must be a non-empty word other than admin, config and kubernetes", name))
			continue
		}
		check("client "+name, tok)
		a.clients = append(a.clients, clientToken{name: name, token: []byte(tok)})
	}
	if len(a.clients) > 0 && a.admin == nil {
		errs = append(errs, errors.New("client tokens need an admin token"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return a, nil
}

// Clients is the number of client identities.
func (a *Access) Clients() int {
	if a == nil {
		return 0
	}
	return len(a.clients)
}

// ParseClientTokens reads "identity token" lines (# comments and blank lines
// skipped) from r.
func ParseClientTokens(r io.Reader) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want \"identity token\"", n)
		}
		if _, dup := out[f[0]]; dup {
			return nil, fmt.Errorf("line %d: identity %q repeated", n, f[0])
		}
		out[f[0]] = f[1]
	}
	return out, sc.Err()
}

// Open reports whether no admin token is configured.
func (a *Access) Open() bool { return a == nil || a.admin == nil }

// AccessClass is who may call a route (Route.Class).
type AccessClass uint8

const (
	AccessPublic  AccessClass = iota // /health: anyone
	AccessQuery                      // /query, /query_by_hash: the query token when one is set
	AccessMutate                     // /register, /unregister: the admin or a client
	AccessInspect                    // /services, /global_view, /dump, peers: the admin only
	AccessMetrics                    // /metrics: public, or the admin only with ProtectMetrics
)

var bearerPrefix = []byte("Bearer ")

// authorize returns the request's principal for an endpoint of class c, or
// the 401/403 to answer. Every configured token is compared, in constant
// time, whichever matches.
func (a *Access) authorize(ctx *fasthttp.RequestCtx, c AccessClass) (Principal, *RequestError) {
	if a.Open() {
		return AdminPrincipal, nil
	}
	if c == AccessMetrics {
		c = AccessPublic
		if a.protectMetrics {
			c = AccessInspect
		}
	}
	if c == AccessPublic {
		return Principal{}, nil
	}
	tok := ctx.Request.Header.Peek("Authorization")
	if len(tok) > len(bearerPrefix) && bytes.EqualFold(tok[:len(bearerPrefix)], bearerPrefix) {
		tok = bytes.TrimSpace(tok[len(bearerPrefix):])
	} else {
		tok = nil
	}
	p, known := a.identify(tok)
	switch {
	case c == AccessQuery && (a.query == nil || known):
		return p, nil
	case !known:
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="conductor"`)
		msg := "a valid bearer token is required"
		if tok == nil {
			msg = "missing bearer token (Authorization: Bearer <token>)"
		}
		return Principal{}, &RequestError{Err: ErrUnauthorized, Index: noIndex, Status: 401, Msg: msg}
	case p.Admin || (c == AccessMutate && !p.queryOnly):
		return p, nil
	case c == AccessMutate:
		return Principal{}, &RequestError{Err: ErrForbidden, Index: noIndex, Status: 403,
			Msg: "the query token may only query"}
	}
	return Principal{}, &RequestError{Err: ErrForbidden, Index: noIndex, Status: 403,
		Msg: "this endpoint needs the admin token"}
}

// identify matches tok against every token in constant time per token.
func (a *Access) identify(tok []byte) (Principal, bool) {
	var p Principal
	found := 0
	if tok == nil {
		return p, false
	}
	if subtle.ConstantTimeCompare(tok, a.admin) == 1 {
		p, found = AdminPrincipal, 1
	}
	if a.query != nil && subtle.ConstantTimeCompare(tok, a.query) == 1 {
		p, found = Principal{Name: "query", queryOnly: true}, 1
	}
	for i := range a.clients {
		if subtle.ConstantTimeCompare(tok, a.clients[i].token) == 1 {
			p, found = Principal{Name: a.clients[i].name}, 1
		}
	}
	return p, found == 1
}

// Gate is the one door every surface's registrations go through: the
// endpoint policy, then ownership, then the registrar. It serialises
// registrations and unregistrations (one mutex; they are rare next to
// queries), so an ownership check and the change it guards cannot interleave
// with another change.
type Gate struct {
	reg       Registrar
	ix        *core.Index
	endpoints *EndpointPolicy
	// OnChange, when set, is called (under the gate's lock, after a
	// successful change) with the registrations now in force; an error undoes
	// the change and fails the request with a 500 (a durable state file that
	// cannot be written). Default nil.
	OnChange func(regs []core.Registration) error
	// Explain, when set, says where the registration holding a refused one's
	// service key, instance_id or endpoint came from and how to remove it
	// ("" when there is nothing to add); the refusal carries the sentence.
	// Called under the gate's lock. Default nil.
	Explain func(holder core.ServiceKey) string
	// ClientQuota bounds the registrations one client identity (a principal
	// that is not an admin) holds at once, so that one client token cannot
	// take the whole registry: a new registration past it is refused
	// (core.ErrLimit: 400 limit_exceeded), counted (QuotaRefusals,
	// conductor_registrations_refused_total{reason="client_quota"}) and
	// logged. Default 0: no bound beyond the index's MaxRegistrations.
	ClientQuota int
	// Logger logs quota refusals. Default nil: slog.Default().
	Logger *slog.Logger

	mu sync.Mutex
	// quotaRefused counts ClientQuota refusals.
	quotaRefused atomic.Uint64
	// gen counts the changes made through the Gate (a registration created
	// or removed), so the Core's miss reasons reread the contexts after
	// each (missKeys).
	gen atomic.Uint64
}

// NewGate returns a Gate over reg and ix; endpoints nil allows every endpoint
// the registrar accepts.
func NewGate(reg Registrar, ix *core.Index, endpoints *EndpointPolicy) *Gate {
	return &Gate{reg: reg, ix: ix, endpoints: endpoints}
}

// Register registers r on behalf of p: r.Owner is set to p's identity, and
// its endpoints are checked and registered in the form they are connected
// to (EndpointPolicy.Resolve: canonical, a host name resolved once). An
// identity other than the admin may not take an instance id, or a
// publisher (core.Index.EndpointHolder: any spelling of its endpoint), that
// another identity holds. Errors wrap ErrForbidden (endpoint policy,
// ownership), core's sentinels, or the registrar's.
func (g *Gate) Register(p Principal, r core.Registration) (bool, error) {
	if err := g.Resolve(&r); err != nil {
		return false, err
	}
	r.Owner = p.Name
	g.mu.Lock()
	defer g.mu.Unlock()
	if !p.Admin {
		held, exists := 0, false
		for _, o := range g.ix.Services() {
			if o.InstanceID == r.InstanceID && o.Owner != p.Name {
				return false, g.explain(o.Key(), fmt.Errorf("register: instance_id %q is held by another identity: %w", r.InstanceID, ErrForbidden))
			}
			if o.Owner == p.Name {
				held++
				exists = exists || tenantKey(o.Key()) == tenantKey(r.Key())
			}
		}
		if !exists && g.ClientQuota > 0 && held >= g.ClientQuota {
			g.quotaRefused.Add(1)
			err := fmt.Errorf("register %s: identity %q holds %d registrations, its quota (--max-registrations-per-client): %w",
				r.Key(), p.Name, held, core.ErrLimit)
			log := g.Logger
			if log == nil {
				log = slog.Default()
			}
			log.Warn("registration refused: client quota reached; unregister one of its registrations or raise --max-registrations-per-client",
				"identity", p.Name, "service", r.Key().String(), "held", held, "quota", g.ClientQuota)
			return false, err
		}
		if o, ok := g.ix.EndpointHolder(r.Endpoint); ok && o.Owner != p.Name {
			return false, &core.FieldError{Field: "endpoint", Err: fmt.Errorf(
				"register: endpoint %s reaches a publisher another identity has registered: %w", r.Endpoint, ErrForbidden)}
		}
		// A replay socket belongs to the engine whose PUB it serves: one
		// aimed at another identity's engine would file that engine's
		// batches under this registration (TestGateReplayEndpointOfAnother).
		if r.ReplayEndpoint != "" {
			for _, o := range g.ix.SocketHolders(r.ReplayEndpoint) {
				if o.Owner != p.Name {
					return false, &core.FieldError{Field: "replay_endpoint", Err: fmt.Errorf(
						"register: replay_endpoint %s reaches a socket another identity has registered: %w", r.ReplayEndpoint, ErrForbidden)}
				}
			}
		}
	}
	created, err := g.reg.Register(r)
	if ce := (*core.ConflictError)(nil); errors.As(err, &ce) {
		err = g.explain(ce.Holder, err)
	}
	if created {
		defer g.gen.Add(1) // on return, after any undo below
	}
	if err != nil || !created || g.OnChange == nil {
		return created, err
	}
	if serr := g.OnChange(g.ix.Services()); serr != nil {
		if _, uerr := g.reg.Unregister(r.Key()); uerr != nil {
			serr = errors.Join(serr, fmt.Errorf("undoing the registration: %w", uerr))
		}
		return false, fmt.Errorf("register: %w: %w", ErrStateWrite, serr)
	}
	return true, nil
}

// Resolve checks r's endpoints against the endpoint policy and rewrites
// them in their canonical form (a name as the address it resolved to,
// within the policy's DNS bound): Register's first step, taken under no
// lock. A caller that serializes its registrations under a lock of its own
// resolves before taking it, so that a slow name holds up nothing else
// (Register then finds the canonical forms and resolves no name again).
func (g *Gate) Resolve(r *core.Registration) error {
	var err error
	if r.Endpoint, err = g.endpoints.Resolve("endpoint", r.Endpoint); err != nil {
		return err
	}
	if r.ReplayEndpoint != "" {
		if r.ReplayEndpoint, err = g.endpoints.Resolve("replay_endpoint", r.ReplayEndpoint); err != nil {
			return err
		}
	}
	return nil
}

// explain adds Explain's sentence about holder to err.
func (g *Gate) explain(holder core.ServiceKey, err error) error {
	if g.Explain == nil {
		return err
	}
	if note := g.Explain(holder); note != "" {
		return fmt.Errorf("%w; %s", err, note)
	}
	return err
}

// Unregister removes k on behalf of p: only its owner or the admin may.
func (g *Gate) Unregister(p Principal, k core.ServiceKey) (core.Registration, error) {
	return g.unregister(p, k, false)
}

// UnregisterOwn is Unregister for a principal that removes only what it
// registered itself, whatever its rights: an automated owner (Kubernetes
// discovery) must not remove what an operator registered under the same
// key since. k held by another owner is answered as not found.
func (g *Gate) UnregisterOwn(p Principal, k core.ServiceKey) (core.Registration, error) {
	return g.unregister(p, k, true)
}

// tenantKey is k with the default tenant named ("" is "default").
func tenantKey(k core.ServiceKey) core.ServiceKey {
	if k.TenantID == "" {
		k.TenantID = "default"
	}
	return k
}

// QuotaRefusals is how many registrations ClientQuota refused.
func (g *Gate) QuotaRefusals() uint64 { return g.quotaRefused.Load() }

// Owns reports whether k is registered by p.
func (g *Gate) Owns(p Principal, k core.ServiceKey) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	sub, ok := g.ix.Lookup(k)
	return ok && sub.Registration().Owner == p.Name
}

func (g *Gate) unregister(p Principal, k core.ServiceKey, own bool) (core.Registration, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if sub, ok := g.ix.Lookup(k); ok && own && sub.Registration().Owner != p.Name {
		return core.Registration{}, fmt.Errorf("unregister %s: registered by %q since: %w", k, sub.Registration().Owner, core.ErrNotFound)
	}
	if sub, ok := g.ix.Lookup(k); ok && !p.Admin {
		if owner := sub.Registration().Owner; owner != p.Name {
			return core.Registration{}, fmt.Errorf("unregister %s: registered by another identity: %w", k, ErrForbidden)
		}
	}
	old, err := g.reg.Unregister(k)
	if err == nil {
		defer g.gen.Add(1) // on return, after any undo below
	}
	if err != nil || g.OnChange == nil {
		return old, err
	}
	if serr := g.OnChange(g.ix.Services()); serr != nil {
		// Undo, so that a failed request changed nothing: resubscribe (the
		// index refills from the engine's replay ring).
		if _, rerr := g.reg.Register(old); rerr != nil {
			serr = errors.Join(serr, fmt.Errorf("undoing the unregistration: %w", rerr))
		}
		return old, fmt.Errorf("unregister: %w: %w", ErrStateWrite, serr)
	}
	return old, nil
}
