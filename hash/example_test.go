package hash_test

import (
	"fmt"

	"github.com/seed-c7a81618/conductor/hash"
)

// A query hashes lazily: only the blocks a prefix walk reaches are computed. The
// keys are the ints vLLM (sha256_cbor, PYTHONHASHSEED=0) publishes for tokens 1..8.
func ExampleChain() {
	p, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"})
	if err != nil {
		panic(err)
	}
	var c hash.Chain // reuse across queries: Reset keeps its scratch
	if err := c.Reset(&p, []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}, 4, nil, nil); err != nil {
		panic(err)
	}
	fmt.Println(c.Blocks(), c.Computed())
	fmt.Println(c.At(0), c.Computed())
	fmt.Println(c.At(1), c.MatchedTokens(2))
	// Output:
	// 2 0
	// 2164874634404590027 1
	// 17270480062156288726 8
}

func ExampleResolve() {
	_, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256", PythonHashSeed: " 0", IndexProjection: "low64_be"})
	fmt.Println(err)
	p, _ := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256", PythonHashSeed: "0", IndexProjection: "low64_be"})
	fmt.Println(p.RootHex())
	// Output:
	// hash_profile.python_hash_seed=" 0": want "random" or ASCII decimal digits with value <= 4294967295: conductor: invalid python_hash_seed
	// 1973e23848344dc43a988a9b478663803cfffe1243480253f9a3cf004b14aa7c
}

func ExampleAppendXXH3Chain() {
	keys := hash.AppendXXH3Chain(nil, hash.DefaultXXH3Seed, 0, false, []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 4)
	fmt.Println(keys)
	// Output:
	// [14643705804678351452 4945711292740353085 12583592247330656132]
}
