package discovery

import (
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
)

// want is a registration's expected fields, written by hand from the
// annotation contract (pod.go's constants).
type want struct {
	endpoint, replay, typ, model, instance, tenant, lora, salt string
	blockSize                                                  int
	rank                                                       int32
	strategy, algorithm, seed                                  string // "" strategy: the xxh3 default profile; seed as hash.Resolve fills it
}

func checkReg(t *testing.T, got core.Registration, w want) {
	t.Helper()
	if got.Endpoint != w.endpoint || got.ReplayEndpoint != w.replay || got.Type.String() != w.typ || got.ModelName != w.model ||
		got.InstanceID != w.instance || got.TenantID != w.tenant || got.LoraName != w.lora || got.AdditionalSalt != w.salt ||
		got.BlockSize != w.blockSize || got.DPRank != w.rank {
		t.Errorf("registration %+v\nwant %+v", got, w)
	}
	if w.strategy == "" {
		if got.ProfileExplicit {
			t.Errorf("profile %+v, want the default", got.Profile.Spec)
		}
		return
	}
	sp := got.Profile.Spec
	if !got.ProfileExplicit || sp.Strategy != w.strategy || sp.Algorithm != w.algorithm || sp.PythonHashSeed != w.seed {
		t.Errorf("profile %+v, want %s/%s/%q", sp, w.strategy, w.algorithm, w.seed)
	}
}

func TestRegistrations(t *testing.T) {
	base := func(ann map[string]string) *Pod {
		return &Pod{Namespace: "llm", Name: "vllm-0", UID: "u1", IP: "10.1.2.3", Ready: true, Annotations: ann}
	}
	cases := []struct {
		name string
		pod  *Pod
		want []want
	}{
		{"vLLM defaults", base(map[string]string{AnnModel: "qwen3-8b"}), []want{{
			endpoint: "tcp://10.1.2.3:5557", typ: "vLLM", model: "qwen3-8b", instance: "llm/vllm-0", tenant: "default",
			blockSize: 16, strategy: "vllm_v1", algorithm: "sha256", seed: "0"}}},
		{"vLLM data parallel with replay", base(map[string]string{AnnModel: "m", AnnDPSize: "2", AnnReplayPort: "5600",
			AnnHashAlgo: "xxhash_cbor", AnnPythonSeed: "42", AnnBlockSize: "32", AnnInstanceID: "node-a", AnnTenant: "t1", AnnLora: "sql"}), []want{
			{endpoint: "tcp://10.1.2.3:5557", replay: "tcp://10.1.2.3:5600", typ: "vLLM", model: "m", instance: "node-a", tenant: "t1", lora: "sql",
				blockSize: 32, rank: 0, strategy: "vllm_v1", algorithm: "xxhash_cbor", seed: "42"},
			{endpoint: "tcp://10.1.2.3:5558", replay: "tcp://10.1.2.3:5601", typ: "vLLM", model: "m", instance: "node-a", tenant: "t1", lora: "sql",
				blockSize: 32, rank: 1, strategy: "vllm_v1", algorithm: "xxhash_cbor", seed: "42"}}},
		{"ranks of a multi-pod instance", base(map[string]string{AnnModel: "m", AnnDPRanks: "6, 4-5", AnnEventsPort: "6000"}), []want{
			{endpoint: "tcp://10.1.2.3:6004", typ: "vLLM", model: "m", instance: "llm/vllm-0", tenant: "default", blockSize: 16, rank: 4, strategy: "vllm_v1", algorithm: "sha256", seed: "0"},
			{endpoint: "tcp://10.1.2.3:6005", typ: "vLLM", model: "m", instance: "llm/vllm-0", tenant: "default", blockSize: 16, rank: 5, strategy: "vllm_v1", algorithm: "sha256", seed: "0"},
			{endpoint: "tcp://10.1.2.3:6006", typ: "vLLM", model: "m", instance: "llm/vllm-0", tenant: "default", blockSize: 16, rank: 6, strategy: "vllm_v1", algorithm: "sha256", seed: "0"}}},
		{"SGLang defaults", base(map[string]string{AnnModel: "m", AnnType: "SGLang"}), []want{{
			endpoint: "tcp://10.1.2.3:5557", typ: "SGLang", model: "m", instance: "llm/vllm-0", tenant: "default",
			blockSize: 1, strategy: "sglang", algorithm: "sha256_raw", seed: "0"}}},
		{"explicit profile wins", base(map[string]string{AnnModel: "m", AnnType: "SGLang", AnnBlockSize: "16", AnnHashAlgo: "xxhash",
			AnnHashProfile: `{"strategy":"sglang_bigram","algorithm":"sha256_raw","index_projection":"first64_be"}`}), []want{{
			endpoint: "tcp://10.1.2.3:5557", typ: "SGLang", model: "m", instance: "llm/vllm-0", tenant: "default",
			blockSize: 16, strategy: "sglang_bigram", algorithm: "sha256_raw", seed: "0"}}},
		{"standard publisher, xxh3 default with salt", base(map[string]string{AnnModel: "m", AnnType: "standard", AnnBlockSize: "64", AnnSalt: "s1"}), []want{{
			endpoint: "tcp://10.1.2.3:5557", typ: "standard", model: "m", instance: "llm/vllm-0", tenant: "default", salt: "s1", blockSize: 64}}},
		{"IPv6", &Pod{Namespace: "n", Name: "p", IP: "fd00::7", Ready: true, Annotations: map[string]string{AnnModel: "m"}}, []want{{
			endpoint: "tcp://[fd00::7]:5557", typ: "vLLM", model: "m", instance: "n/p", tenant: "default", blockSize: 16,
			strategy: "vllm_v1", algorithm: "sha256", seed: "0"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Registrations(c.pod)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("%d registrations, want %d", len(got), len(c.want))
			}
			for i := range got {
				checkReg(t, got[i].Reg, c.want[i])
			}
		})
	}
}

func TestRegistrationsRefused(t *testing.T) {
	cases := []struct {
		name string
		ann  map[string]string
		ip   string
		err  string // a fragment of the error
	}{
		{"no model", map[string]string{}, "10.0.0.1", AnnModel + " is required"},
		{"no IP", map[string]string{AnnModel: "m"}, "", "no IP"},
		{"port out of range", map[string]string{AnnModel: "m", AnnEventsPort: "70000"}, "10.0.0.1", AnnEventsPort},
		{"port not a number", map[string]string{AnnModel: "m", AnnReplayPort: "x"}, "10.0.0.1", AnnReplayPort},
		{"rank past the last port", map[string]string{AnnModel: "m", AnnEventsPort: "65535", AnnDPSize: "2"}, "10.0.0.1", "past 65535"},
		{"ranks and size", map[string]string{AnnModel: "m", AnnDPSize: "2", AnnDPRanks: "0"}, "10.0.0.1", "exclude each other"},
		{"bad range", map[string]string{AnnModel: "m", AnnDPRanks: "3-1"}, "10.0.0.1", AnnDPRanks},
		{"Mooncake needs a block size", map[string]string{AnnModel: "m", AnnType: "Mooncake"}, "10.0.0.1", AnnBlockSize},
		{"unknown type", map[string]string{AnnModel: "m", AnnType: "TensorRT", AnnBlockSize: "16"}, "10.0.0.1", "type must be"},
		{"profile not JSON", map[string]string{AnnModel: "m", AnnHashProfile: "vllm_v1"}, "10.0.0.1", "JSON object"},
		{"profile refused like /register", map[string]string{AnnModel: "m", AnnHashAlgo: "md5"}, "10.0.0.1", "algorithm"},
		// The index's checks as well: a salt has no namespace under vLLM's profile.
		{"salt under an engine profile", map[string]string{AnnModel: "m", AnnSalt: "w8a8"}, "10.0.0.1", "additionalsalt"},
		{"instance id too long", map[string]string{AnnModel: "m", AnnInstanceID: strings.Repeat("i", 300)}, "10.0.0.1", "instance_id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Registrations(&Pod{Namespace: "n", Name: "p", IP: c.ip, Ready: true, Annotations: c.ann})
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("error %v, want one containing %q", err, c.err)
			}
		})
	}
}
