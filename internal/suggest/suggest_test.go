package suggest

import "testing"

func TestDistance(t *testing.T) {
	f := func(a, b string, want int) {
		t.Helper()
		if got := Distance(a, b); got != want {
			t.Errorf("Distance(%q, %q) = %d, want %d", a, b, got, want)
		}
	}
	f("", "", 0)
	f("a", "", 1)
	f("", "abc", 3)
	f("kitten", "sitting", 3)
	f("http-port", "htp-port", 1)
	f("port", "port", 0)
	f("replay_endpont", "replay_endpoint", 1)
}

// TestNearest: the typos the issue tracker and the docs name, each to the
// key it meant; names too far from every key get no suggestion.
func TestNearest(t *testing.T) {
	reg := []string{"endpoint", "replay_endpoint", "type", "modelname", "instance_id", "block_size", "dp_rank", "hash_profile"}
	cfg := []string{"http_server_port", "rpc_server_port", "kvevent_instance", "services", "media"}
	f := func(name string, known []string, want string) {
		t.Helper()
		if got := Nearest(name, known); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", name, got, want)
		}
	}
	f("replay_endpont", reg, "replay_endpoint")
	f("model_name", reg, "modelname")
	f("blocksize", reg, "block_size")
	f("hash_profil", reg, "hash_profile")
	f("http_srver_port", cfg, "http_server_port")
	f("http_port", cfg, "")       // 7 edits from http_server_port
	f("service", cfg, "services") // a prefix
	f("xyz", cfg, "")             // nothing near
	f("", cfg, "")                // nothing to go by
	f("services", cfg, "")        // a known name is no typo
	f("snapshot", []string{"snapshot-interval", "state-dir"}, "snapshot-interval")
}
