package core

import (
	"fmt"
	"strconv"
)

// LoRA ids. The seed's /query still lists the deprecated numeric `lora_id`.
// Numeric ids are engine-internal, but vLLM's BlockStored carries both its
// lora_id and lora_name, so conductor learns the pairs engines publish (per
// tenant and model) and resolves a query's lora_id through them. An id never
// published, or published with two different names, is refused.

type loraKey struct {
	tenant, model string
	id            int64
}

// loraEntry is the name learned for an id; conflict is set once two names
// were seen for it.
type loraEntry struct {
	name     string
	conflict bool
}

// MaxLoraIDs bounds the learned (tenant, model, lora_id) pairs; pairs beyond
// it are not learned (queries naming them get "unknown").
const MaxLoraIDs = 1 << 16

// learnLoraID records a (lora_id, lora_name) pair an engine published for
// context c. Steady state (a known, consistent pair) is one lock-free lookup.
func (ix *Index) learnLoraID(c *context, id int64, name []byte) {
	k := loraKey{tenant: c.key.TenantID, model: c.key.ModelName, id: id}
	if e, ok := ix.loras.Load(k); ok && (e.conflict || e.name == string(name)) {
		return
	}
	if ix.loras.Size() >= MaxLoraIDs {
		return
	}
	n := string(name)
	ix.loras.Compute(k, func(old loraEntry, loaded bool) (loraEntry, bool) {
		if !loaded {
			return loraEntry{name: n}, false
		}
		if old.name != n && !old.conflict {
			old.conflict = true
			ix.opts.Logger.Warn("lora_id published with two lora_names; queries by this lora_id are refused",
				"tenant", k.tenant, "model", clip([]byte(k.model)), "lora_id", id, "names", []string{clip([]byte(old.name)), clip(name)})
		}
		return old, false
	})
}

// LoraNameForID resolves a query's deprecated lora_id to the adapter name
// engines published with it for (tenant, model). It fails with ErrNotFound
// when no engine published the id and ErrConflict when engines published it
// with different names.
func (ix *Index) LoraNameForID(tenant, model string, id int64) (string, error) {
	if tenant == "" {
		tenant = "default"
	}
	e, ok := ix.loras.Load(loraKey{tenant: tenant, model: model, id: id})
	switch {
	case !ok:
		return "", fmt.Errorf("lora_id %s: no engine of model %q published it with a lora_name: %w", strconv.FormatInt(id, 10), model, ErrNotFound)
	case e.conflict:
		return "", fmt.Errorf("lora_id %s: engines published it with different lora_names: %w", strconv.FormatInt(id, 10), ErrConflict)
	}
	return e.name, nil
}
