package dynamo

import (
	"encoding/json"
	"testing"

	"github.com/seed-c7a81618/conductor/httpd/server"
)

// TestProfileSquattingDynamo: a Mooncake-API registration by team-a with a
// vLLM profile in the context a Dynamo indexer uses (xxh3) does not deny
// team-b's Dynamo worker, whose blocks /query then finds.
func TestProfileSquattingDynamo(t *testing.T) {
	a, err := server.NewAccess(server.AccessOptions{AdminToken: adminTok,
		ClientTokens: map[string]string{"team-a": teamATok, "team-b": teamBTok}})
	if err != nil {
		t.Fatal(err)
	}
	e := startDynWith(t, server.Options{Access: a}, Options{})
	de := &testEnv{addr: e.addr, client: e.client}
	squat := jsonEnc(with(baseReg(), "instance_id", "a1", "endpoint", "tcp://10.0.0.1:1", "block_size", 4))
	if r := e.main.doAuth(t, "POST", "/register", teamATok, squat); r.status != 200 {
		t.Fatalf("team-a: %d %s", r.status, r.body)
	}
	if r := de.doAuth(t, "POST", "/register", teamBTok, `{"instance_id":1,"endpoint":"tcp://127.0.0.1:20001","model_name":"m","block_size":4}`); r.status != 201 {
		t.Fatalf("team-b's Dynamo worker after the squat: %d %s", r.status, r.body)
	}
	tokens := []int32{1, 2, 3, 4, 5, 6, 7, 8}
	apply(t, e.reg.sub(t, "1", "default", 0), storeBatch("GPU", 4, []uint64{11, 12}, tokens))
	r := de.doAuth(t, "POST", "/query", teamBTok, `{"model_name":"m","token_ids":[1,2,3,4,5,6,7,8]}`)
	var m struct {
		Scores map[string]map[string]int64 `json:"scores"`
	}
	if err := json.Unmarshal(r.body, &m); r.status != 200 || err != nil || m.Scores["1"]["0"] != 8 {
		t.Fatalf("Dynamo query: %d %v %s", r.status, err, r.body)
	}
}
