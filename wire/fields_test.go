package wire

import (
	"testing"

	"github.com/seed-c7a81618/conductor/codec"
)

// TestMapKeys checks walkMap's switch against mapKeyNames: every name is
// found as its own key, and nothing else is.
func TestMapKeys(t *testing.T) {
	var all fieldTable
	for k := mkNone + 1; k < numMapKeys; k++ {
		all[k] = uint32(k)
	}
	seen := map[string]bool{}
	var d Decoder
	var r codec.EitherReader
	f := func(key string, want mapKey) {
		t.Helper()
		r.ResetMsgpack(mp(nil).mapn(1).kv(key).null())
		var id uint32
		_, err := d.walkMap(&r, &all, "p", func(f uint32) error { id = f; return nil })
		ok := id != 0
		if err != nil || ok != (want != mkNone) || id != uint32(want) {
			t.Fatalf("%q: id %d err %v, want %d", key, id, err, want)
		}
		if ok && d.field != key {
			t.Fatalf("%q: field %q", key, d.field)
		}
	}
	for k := mkNone + 1; k < numMapKeys; k++ {
		name := mapKeyNames[k]
		if name == "" || seen[name] {
			t.Fatalf("mapKey %d: name %q missing or repeated", k, name)
		}
		seen[name] = true
		f(name, k)
	}
	for _, other := range []string{"", "Type", "types", "event_id ", "kv_cache_spec_sliding_windows", "x"} {
		f(other, mkNone)
	}
}
