package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/httpd/server"
)

// Prefix starts every annotation and label discovery reads.
const Prefix = "conductor.kvcache.io/"

// The pod annotations a registration is made from (Prefix + name). Only
// model is required; the defaults are vLLM's and SGLang's own.
const (
	AnnType         = Prefix + "type"           // vLLM (default), SGLang, Mooncake or standard
	AnnModel        = Prefix + "model"          // the model name queries name (required)
	AnnBlockSize    = Prefix + "block-size"     // default 16 for vLLM, 1 for SGLang (their default page sizes); required otherwise
	AnnEventsPort   = Prefix + "events-port"    // the PUB port of rank 0; default 5557
	AnnReplayPort   = Prefix + "replay-port"    // the replay (ROUTER) port of rank 0; default none
	AnnDPRanks      = Prefix + "dp-ranks"       // the data-parallel ranks this pod publishes: "0-3", "0,1,5"; default "0"
	AnnDPSize       = Prefix + "dp-size"        // shorthand for dp-ranks 0..N-1
	AnnInstanceID   = Prefix + "instance-id"    // default NAMESPACE/POD
	AnnTenant       = Prefix + "tenant"         // default "default"
	AnnLora         = Prefix + "lora"           // default none
	AnnSalt         = Prefix + "salt"           // additional salt (xxh3 profile); default none
	AnnHashProfile  = Prefix + "hash-profile"   // a /register hash_profile object as JSON; overrides the two below
	AnnHashAlgo     = Prefix + "hash-algorithm" // vLLM's --prefix-caching-hash-algo; default sha256
	AnnPythonSeed   = Prefix + "python-hash-seed"
	DefaultSelector = Prefix + "engine" // pods carrying this label, whatever its value
)

// DefaultEventsPort is vLLM's and SGLang's default --kv-events-config endpoint port.
const DefaultEventsPort = 5557

// maxRanks bounds the ranks one pod may name.
const maxRanks = 1024

// Pod is what discovery reads of a pod.
type Pod struct {
	Namespace, Name, UID string
	// IP is status.podIP.
	IP string
	// Ready: phase Running, condition Ready true, not being deleted.
	Ready       bool
	Annotations map[string]string
}

// Key is the pod's namespace/name.
func (p *Pod) Key() string { return p.Namespace + "/" + p.Name }

// Desired is one registration discovery wants for a pod, with the
// /register body it was decoded from (two Desired with equal bodies are the
// same registration).
type Desired struct {
	Reg  core.Registration
	Body string
}

// Registrations returns the registrations a pod's annotations describe, one
// per data-parallel rank: rank r at tcp://IP:(events-port+r), replaying at
// tcp://IP:(replay-port+r) (vLLM and SGLang offset both ports by the rank).
// Each is validated exactly as a POST /register body is
// (server.DecodeRegistration). The pod's readiness is not looked at.
func Registrations(p *Pod) ([]Desired, error) {
	a := p.Annotations
	if p.IP == "" {
		return nil, errors.New("the pod has no IP")
	}
	typ := a[AnnType]
	if typ == "" {
		typ = "vLLM"
	}
	model := a[AnnModel]
	if model == "" {
		return nil, fmt.Errorf("annotation %s is required", AnnModel)
	}
	blockSize, err := intAnn(a, AnnBlockSize, defaultBlockSize(typ), 1, 1<<20)
	if err != nil {
		return nil, err
	}
	if blockSize == 0 {
		return nil, fmt.Errorf("annotation %s is required for type %s", AnnBlockSize, typ)
	}
	events, err := intAnn(a, AnnEventsPort, DefaultEventsPort, 1, 65535)
	if err != nil {
		return nil, err
	}
	replay, err := intAnn(a, AnnReplayPort, 0, 1, 65535)
	if err != nil {
		return nil, err
	}
	ranks, err := ranksOf(a)
	if err != nil {
		return nil, err
	}
	if last := ranks[len(ranks)-1]; events+last > 65535 || (replay != 0 && replay+last > 65535) {
		return nil, fmt.Errorf("rank %d's port is past 65535", last)
	}
	profile, err := profileOf(a, typ)
	if err != nil {
		return nil, err
	}
	instance := a[AnnInstanceID]
	if instance == "" {
		instance = p.Namespace + "/" + p.Name
	}
	host := p.IP
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	out := make([]Desired, 0, len(ranks))
	for _, r := range ranks {
		body := map[string]any{
			"endpoint": "tcp://" + host + ":" + strconv.Itoa(events+r), "type": typ, "modelname": model,
			"instance_id": instance, "block_size": blockSize, "dp_rank": r,
		}
		if replay != 0 {
			body["replay_endpoint"] = "tcp://" + host + ":" + strconv.Itoa(replay+r)
		}
		for k, ann := range map[string]string{"tenant_id": AnnTenant, "lora_name": AnnLora, "additionalsalt": AnnSalt} {
			if v := a[ann]; v != "" {
				body[k] = v
			}
		}
		if profile != nil {
			body["hash_profile"] = profile
		}
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		reg, err := server.DecodeRegistration(b, true, server.DecodeOptions{})
		if err != nil {
			return nil, fmt.Errorf("the registration is refused: %w", err)
		}
		// The index's own checks too (an identity too long, a salt under an
		// engine profile): refused here, the pod is counted invalid once,
		// instead of failing at every resync's Register.
		c := reg
		c.Normalize()
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("the registration is refused: %w", err)
		}
		out = append(out, Desired{Reg: reg, Body: string(b)})
	}
	return out, nil
}

// defaultBlockSize is the engine's default block (page) size, 0 where there
// is none to assume.
func defaultBlockSize(typ string) int {
	switch typ {
	case "vLLM":
		return 16
	case "SGLang":
		return 1
	}
	return 0
}

// profileOf is the hash_profile to register: the hash-profile annotation
// as given; else, for vLLM, vllm_v1 with hash-algorithm (default sha256)
// and python-hash-seed (default "0"); for SGLang, sglang over sha256_raw;
// else none (conductor's xxh3 default).
func profileOf(a map[string]string, typ string) (json.RawMessage, error) {
	if s := a[AnnHashProfile]; s != "" {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil || m == nil {
			return nil, fmt.Errorf("annotation %s must be a JSON object", AnnHashProfile)
		}
		return json.RawMessage(s), nil
	}
	var m map[string]string
	switch typ {
	case "vLLM":
		algo, seed := a[AnnHashAlgo], a[AnnPythonSeed]
		if algo == "" {
			algo = "sha256"
		}
		if seed == "" {
			seed = "0"
		}
		m = map[string]string{"strategy": "vllm_v1", "algorithm": algo, "python_hash_seed": seed, "index_projection": "low64_be"}
	case "SGLang":
		m = map[string]string{"strategy": "sglang", "algorithm": "sha256_raw", "index_projection": "first64_be"}
	default:
		return nil, nil
	}
	return json.Marshal(m)
}

// intAnn reads an integer annotation in [lo, hi]; def when absent.
func intAnn(a map[string]string, name string, def, lo, hi int) (int, error) {
	s, ok := a[name]
	if !ok || s == "" {
		return def, nil
	}
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("annotation %s: want an integer in %d..%d, got %q", name, lo, hi, s)
	}
	return v, nil
}

// ranksOf reads dp-ranks ("0-3,6": ranges and single ranks) or dp-size N
// (ranks 0..N-1); default rank 0. The ranks come back sorted and distinct.
func ranksOf(a map[string]string) ([]int, error) {
	spec, size := a[AnnDPRanks], a[AnnDPSize]
	switch {
	case spec != "" && size != "":
		return nil, fmt.Errorf("annotations %s and %s exclude each other", AnnDPRanks, AnnDPSize)
	case size != "":
		n, err := intAnn(a, AnnDPSize, 1, 1, maxRanks)
		if err != nil {
			return nil, err
		}
		spec = "0-" + strconv.Itoa(n-1)
	case spec == "":
		return []int{0}, nil
	}
	seen := map[int]bool{}
	bad := fmt.Errorf("annotation %s: want ranks and ranges such as \"0-3,6\", got %q", AnnDPRanks, spec)
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a || b > 65535 {
			return nil, bad
		}
		for r := a; r <= b; r++ {
			if len(seen) >= maxRanks {
				return nil, fmt.Errorf("annotation %s: more than %d ranks", AnnDPRanks, maxRanks)
			}
			seen[r] = true
		}
	}
	ranks := make([]int, 0, len(seen))
	for r := range seen {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	return ranks, nil
}
