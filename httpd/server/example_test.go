package server_test

import (
	"fmt"

	"github.com/seed-c7a81618/conductor/httpd/server"
)

// The seed's /register body; hash_profile is optional (xxh3 standard default).
func ExampleDecodeRegistration() {
	reg, err := server.DecodeRegistration([]byte(`{"endpoint": "tcp://1.1.1.1:5557", "type": "vLLM", "modelname": "deepseek",
		"instance_id": "vllm-prefill-node1", "block_size": 128, "dp_rank": 0, "additionalsalt": "w8a8"}`), true, server.DecodeOptions{})
	fmt.Println(err, reg.Type, reg.TenantID, reg.Profile.Spec.Strategy, reg.ProfileExplicit, reg.AdditionalSalt)
	_, err = server.DecodeRegistration([]byte(`{"endpoint": "tcp://x:1", "block_size": 16.5}`), true, server.DecodeOptions{})
	fmt.Println(err)
	// Output:
	// <nil> vLLM default xxh3 false w8a8
	// field="type": type is required: conductor: missing field
}
