package wire_test

import (
	"encoding/hex"
	"fmt"

	"github.com/seed-c7a81618/conductor/core"
	"github.com/seed-c7a81618/conductor/wire"
)

// A live vLLM message: split the ZMQ frames, then decode the payload into a batch
// that is reused for every message of the subscription.
func ExampleDecoder_Decode() {
	// [1700000000.5, [["BlockStored", [2164874634404590027], null, [1,2,3,4], 4, null, "GPU"],
	//                 ["Nope"]], 0] — the second event has an unknown tag.
	payload, _ := hex.DecodeString("93cb41d954fc40200000" + "92" +
		"97ab426c6f636b53746f72656491cf1e0b2e028ef071cbc09401020304" + "04c0a3475055" +
		"91a44e6f7065" + "00")
	frames := [][]byte{[]byte("kv-events"), {0, 0, 0, 0, 0, 0, 0, 7}, payload}

	var d wire.Decoder
	var b core.Batch
	_, seq, p, err := wire.ParseLive(frames)
	if err != nil {
		panic(err)
	}
	if err := d.Decode(wire.DialectVLLM, p, &b); err != nil {
		panic(err)
	}
	fmt.Println("seq", seq, "dp", b.DPRank, "events", len(b.Events), "skipped", b.Skipped)
	e := &b.Events[0]
	fmt.Println(e.Kind, e.Hashes, e.Tokens, e.BlockSize, string(e.Medium))
	fmt.Println(b.Errors[0])
	// Output:
	// seq 7 dp 0 events 1 skipped 1
	// stored [2164874634404590027] [1 2 3 4] 4 GPU
	// wire: vLLM event 1 field="type": conductor: unknown event type
}
