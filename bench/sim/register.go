package sim

import (
	"encoding/json"
	"fmt"
	"time"
)

// Register posts every registration to the indexer at addr (JSON /register).
// An already existing identical registration is success.
func Register(addr string, regs []Registration) error {
	h := newHTTPConn(addr, 10*time.Second)
	defer h.close()
	for _, r := range regs {
		body, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if _, err := h.post("/register", "application/json", body); err != nil {
			return fmt.Errorf("sim: register %s rank %d: %w", r.InstanceID, r.DPRank, err)
		}
	}
	return nil
}

// Unregister removes the registrations (JSON /unregister); errors are
// returned joined after trying all of them.
func Unregister(addr string, regs []Registration) error {
	h := newHTTPConn(addr, 10*time.Second)
	defer h.close()
	var first error
	for _, r := range regs {
		body, _ := json.Marshal(struct {
			InstanceID string `json:"instance_id"`
			DPRank     int    `json:"dp_rank"`
		}{r.InstanceID, r.DPRank})
		if _, err := h.post("/unregister", "application/json", body); err != nil && first == nil {
			first = fmt.Errorf("sim: unregister %s rank %d: %w", r.InstanceID, r.DPRank, err)
		}
	}
	return first
}
