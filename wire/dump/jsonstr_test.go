package dump

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "abc", "\"\\", "\u2028", "\x7f", "\x01\x1f", "日本", "\xff\xfe", "a\xc3", "\U0001F600"} {
		got := AppendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q → %s: %v", s, got, err)
		}
		want := s
		if !utf8.ValidString(s) {
			want = string([]rune(s)) // invalid bytes → U+FFFD each
		}
		if back != want {
			t.Fatalf("%q → %s → %q", s, got, back)
		}
	}
	// dst == src[:0] style reuse
	buf := make([]byte, 0, 64)
	out := AppendJSONString(buf[:0], "x")
	if &out[0] != &buf[:1][0] {
		t.Fatal("did not append in place")
	}
}
