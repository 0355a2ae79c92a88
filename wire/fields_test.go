package wire

import (
	"testing"

	"github.com/seed-c7a81618/conductor/codec"
)

// TestMapKeys checks nextField's switch against mapKeyNames: every name is
// found as its own key, and nothing else is.
func TestMapKeys(t *testing.T) {
	var all fieldTable
	for k := mkNone + 1; k < numMapKeys; k++ {
		all[k] = uint32(k)
	}
	seen := map[string]bool{}
	var d Decoder
	var r codec.MsgpackReader
	f := func(key string, want mapKey) {
		t.Helper()
		r.Reset(mp(nil).mapn(1).kv(key).null())
		w := d.walkMap(&r, &all, "p")
		ok := w.next()
		if w.err != nil || ok != (want != mkNone) || w.id != uint32(want) {
			t.Fatalf("%q: id %d ok %v err %v, want %d", key, w.id, ok, w.err, want)
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
