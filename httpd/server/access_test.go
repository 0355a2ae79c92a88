package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/core"
)

const (
	adminTok = "admin-token-0123456789"
	queryTok = "query-token-0123456789"
	teamATok = "team-a-token-0123456789"
	teamBTok = "team-b-token-0123456789"
)

func TestNewAccessValidates(t *testing.T) {
	for _, o := range []AccessOptions{
		{AdminToken: "short"},
		{AdminToken: adminTok, QueryToken: adminTok},
		{AdminToken: "with space in the token 0123"},
		{ClientTokens: map[string]string{"a": teamATok}},
		{AdminToken: adminTok, ClientTokens: map[string]string{"admin": teamATok}},
		{AdminToken: adminTok, ClientTokens: map[string]string{"config": teamATok}},
		{AdminToken: adminTok, ClientTokens: map[string]string{"kubernetes": teamATok}},
	} {
		if _, err := NewAccess(o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("NewAccess(%+v) = %v", o, err)
		}
	}
	if _, err := NewAccess(AccessOptions{AdminToken: adminTok, ClientTokens: map[string]string{"team-a": teamATok}}); err != nil {
		t.Fatal(err)
	}
	toks, err := ParseClientTokens(strings.NewReader("# comment\n\nteam-a " + teamATok + "\n team-b  " + teamBTok + " \n"))
	if err != nil || len(toks) != 2 || toks["team-a"] != teamATok || toks["team-b"] != teamBTok {
		t.Fatalf("%v %v", toks, err)
	}
	if _, err := ParseClientTokens(strings.NewReader("x\n")); err == nil {
		t.Fatal("one field accepted")
	}
}

// TestSourceOf: where /services says a registration came from, by owner.
func TestSourceOf(t *testing.T) {
	for owner, want := range map[string]string{"config": "config", "kubernetes": "kubernetes", "admin": "api", "team-a": "api", "": "api"} {
		if got := SourceOf(&core.Registration{Owner: owner}); got != want {
			t.Errorf("owner %q: source %q, want %q", owner, got, want)
		}
	}
}
