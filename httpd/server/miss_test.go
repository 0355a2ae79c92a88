package server

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/httpd/internal/apitest"
)

// TestMissReason: the first field, in the order tenant, model, block size,
// LoRA, for which no key equals the query in it and every field before it.
func TestMissReason(t *testing.T) {
	keys := []core.ContextKey{
		{TenantID: "default", ModelName: "m", LoraName: "", BlockSize: 16},
		{TenantID: "default", ModelName: "m", LoraName: "a", BlockSize: 32},
		{TenantID: "acme", ModelName: "other", LoraName: "", BlockSize: 16},
	}
	f := func(tenant, model string, bs int, lora string, want MissReason) {
		t.Helper()
		q := &core.QueryRequest{TenantID: tenant, Model: model, BlockSize: bs, LoraName: lora}
		if got := missReason(keys, q); got != want {
			t.Errorf("(%q, %q, %d, %q): %v, want %v", tenant, model, bs, lora, got, want)
		}
	}
	f("t9", "m", 16, "", MissUnknownTenant)
	f("t9", "zz", 7, "x", MissUnknownTenant)
	f("default", "other", 16, "", MissUnknownModel) // other is acme's
	f("acme", "m", 16, "", MissUnknownModel)
	f("", "zz", 16, "", MissUnknownModel) // "" is the default tenant
	f("default", "m", 64, "", MissUnknownBlockSize)
	f("default", "m", 64, "a", MissUnknownBlockSize) // block size before LoRA
	f("acme", "other", 32, "", MissUnknownBlockSize)
	f("default", "m", 16, "a", MissUnknownLora)
	f("default", "m", 32, "", MissUnknownLora) // the base model at a LoRA-only block size
	f("", "m", 16, "", MissUnknownLora)        // a key equal in every field: created after the miss
	if got := missReason(nil, &core.QueryRequest{Model: "m", BlockSize: 16}); got != MissUnknownTenant {
		t.Errorf("no contexts: %v", got)
	}
}

// missCore is a Core over an index fed directly (apitest's registrar), its
// miss keys on a clock the test moves.
func missCore(t testing.TB) (*Core, *core.Index, *time.Time) {
	ix := core.New(core.Options{Logger: quietLogger()})
	c, err := New(ix, apitest.NewRegistrar(ix), Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	c.missKeys.clock = func() time.Time { return now }
	return c, ix, &now
}

func missReg(model, instance string, bs int) core.Registration {
	return core.Registration{Endpoint: "tcp://" + model + "-" + instance + ".local:5557", Type: core.PublisherVLLM,
		ModelName: model, TenantID: "default", InstanceID: instance, BlockSize: bs, Profile: hash.DefaultProfile()}
}

// TestQueryMissKeysRefresh: QueryMiss reads the contexts again after every
// change through the Gate, and after missKeysTTL for changes that bypass it;
// it counts every miss by reason.
func TestQueryMissKeysRefresh(t *testing.T) {
	c, ix, now := missCore(t)
	q := func(model string, bs int, lora string) MissReason {
		return c.QueryMiss(&core.QueryRequest{TenantID: "default", Model: model, BlockSize: bs, LoraName: lora})
	}
	want := func(got, want MissReason) {
		t.Helper()
		if got != want {
			t.Fatalf("%v, want %v", got, want)
		}
	}
	want(q("m", 16, ""), MissUnknownTenant) // no contexts yet
	if _, err := c.Gate().Register(AdminPrincipal, missReg("m", "e0", 16)); err != nil {
		t.Fatal(err)
	}
	want(q("m", 32, ""), MissUnknownBlockSize) // the Gate's change is seen at once
	// A registration that bypasses the Gate (as a restored state file's
	// would) is seen once the keys are missKeysTTL old.
	if _, _, err := ix.Register(missReg("yy", "e1", 16)); err != nil {
		t.Fatal(err)
	}
	*now = now.Add(missKeysTTL - time.Nanosecond)
	want(q("yy", 16, "x"), MissUnknownModel)
	*now = now.Add(time.Nanosecond)
	want(q("yy", 16, "x"), MissUnknownLora)
	// An unregistration through the Gate too.
	m0 := missReg("m", "e0", 16)
	if _, err := c.Gate().Unregister(AdminPrincipal, m0.Key()); err != nil {
		t.Fatal(err)
	}
	want(q("m", 32, ""), MissUnknownModel)

	var text strings.Builder
	c.Metrics().WritePrometheus(&text)
	got := apitest.MissCounts(t, text.String())
	if w := map[string]int{"unknown_tenant": 1, "unknown_model": 2, "unknown_block_size": 1, "unknown_lora": 1}; !apitest.DeepEqual(got, w) {
		t.Fatalf("misses %v, want %v", got, w)
	}
	var dyn strings.Builder
	c.WriteQueryMissMetrics(&dyn)
	if got2 := apitest.MissCounts(t, dyn.String()); !apitest.DeepEqual(got2, got) {
		t.Fatalf("WriteQueryMissMetrics %v, the Core's set %v", got2, got)
	}
}

// TestQueryMissConcurrent: misses from many goroutines while registrations
// come and go through the Gate name a reason each and are all counted (run
// it under -race).
func TestQueryMissConcurrent(t *testing.T) {
	c, _, _ := missCore(t)
	c.missKeys.clock = nil
	const workers, each = 4, 200
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r := missReg("m", "e"+strconv.Itoa(i%3), 16)
			if _, err := c.Gate().Register(AdminPrincipal, r); err != nil {
				t.Error(err)
				return
			}
			if _, err := c.Gate().Unregister(AdminPrincipal, r.Key()); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var qs sync.WaitGroup
	for w := 0; w < workers; w++ {
		qs.Add(1)
		go func() {
			defer qs.Done()
			for i := 0; i < each; i++ {
				// Model m exists now and then, at block size 16 only.
				r := c.QueryMiss(&core.QueryRequest{Model: "m", BlockSize: 32})
				if r != MissUnknownTenant && r != MissUnknownBlockSize {
					t.Errorf("reason %v", r)
					return
				}
			}
		}()
	}
	qs.Wait()
	close(stop)
	wg.Wait()
	var text strings.Builder
	c.WriteQueryMissMetrics(&text)
	got := apitest.MissCounts(t, text.String())
	if n := got["unknown_tenant"] + got["unknown_block_size"]; n != workers*each || got["unknown_model"] != 0 || got["unknown_lora"] != 0 {
		t.Fatalf("misses %v, want %d in all, tenant or block size", got, workers*each)
	}
}

// TestMissReasonsDocumented: the X-Conductor-Miss table of docs/http-api.md
// names every MissReason token, in precedence order, and no other.
func TestMissReasonsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/http-api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Queries no context serves\n")
	if !ok {
		t.Fatal("docs/http-api.md has no ## Queries no context serves section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	token := regexp.MustCompile("^ `([a-z_]+)` $")
	var documented []string
	for _, line := range strings.Split(section, "\n") {
		if cells := strings.Split(line, "|"); len(cells) >= 3 {
			if m := token.FindStringSubmatch(cells[1]); m != nil {
				documented = append(documented, m[1])
			}
		}
	}
	var code []string
	for r := MissNone + 1; r < NumMissReasons; r++ {
		code = append(code, r.String())
	}
	if !slices.Equal(documented, code) || !slices.Equal(apitest.MissReasons, code) {
		t.Fatalf("docs/http-api.md's miss table lists %v, apitest %v; the reasons are %v", documented, apitest.MissReasons, code)
	}
	if MissNone.String() != "" || NumMissReasons.String() != "" {
		t.Fatalf("MissNone %q, NumMissReasons %q: want no token", MissNone, NumMissReasons)
	}
}
