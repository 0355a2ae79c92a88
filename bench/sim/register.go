package sim

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/seed-c7a81618/conductor/bench"
)

// Register posts every registration to the indexer at addr (JSON /register).
// An already existing identical registration is success.
func Register(addr string, regs []Registration) error {
	h := bench.NewConn(addr, 10*time.Second)
	defer h.Close()
	for _, r := range regs {
		body, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if _, err := h.Post("/register", "application/json", body); err != nil {
			return fmt.Errorf("sim: register %s rank %d: %w", r.InstanceID, r.DPRank, err)
		}
	}
	return nil
}

// Unregister removes the registrations (JSON /unregister); errors are
// returned joined after trying all of them.
func Unregister(addr string, regs []Registration) error {
	h := bench.NewConn(addr, 10*time.Second)
	defer h.Close()
	var first error
	for _, r := range regs {
		body, _ := json.Marshal(struct {
			InstanceID string `json:"instance_id"`
			DPRank     int    `json:"dp_rank"`
		}{r.InstanceID, r.DPRank})
		if _, err := h.Post("/unregister", "application/json", body); err != nil && first == nil {
			first = fmt.Errorf("sim: unregister %s rank %d: %w", r.InstanceID, r.DPRank, err)
		}
	}
	return first
}

// RegisterDynamo registers every registration through the Dynamo dialect's
// POST /register at addr (the Dynamo port): instance ids must be decimal
// numbers there, and the profile is Dynamo's (xxh3, seed 1337), so the group
// must use the xxh3 profile. 201 and an identical existing worker (409 is a
// conflict) decide.
func RegisterDynamo(addr string, regs []Registration) error {
	h := bench.NewConn(addr, 10*time.Second)
	defer h.Close()
	for _, r := range regs {
		id, err := strconv.ParseUint(r.InstanceID, 10, 64)
		if err != nil {
			return fmt.Errorf("sim: dynamo register: instance_id %q is not a number", r.InstanceID)
		}
		if r.HashProfile != nil && r.HashProfile.Strategy != "xxh3" {
			return fmt.Errorf("sim: dynamo register: Dynamo workers use the xxh3 profile, not %s", r.HashProfile.Strategy)
		}
		body, err := json.Marshal(map[string]any{"instance_id": id, "endpoint": r.Endpoint, "replay_endpoint": r.ReplayEndpoint,
			"model_name": r.ModelName, "block_size": r.BlockSize, "dp_rank": r.DPRank, "type": r.Type})
		if err != nil {
			return err
		}
		if _, err := h.Post("/register", "application/json", body); err != nil {
			return fmt.Errorf("sim: dynamo register %s rank %d: %w", r.InstanceID, r.DPRank, err)
		}
	}
	return nil
}
