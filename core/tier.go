package core

import (
	"fmt"
	"strings"
)

// Tier is a storage tier, ordered fastest first. Queries walk tiers in this
// order with cumulative acceptance.
type Tier uint8

const (
	// TierDevice is accelerator memory (GPU/NPU/HBM) owned by one engine rank.
	TierDevice Tier = iota
	// TierCPULocal is the engine host's own memory (CPU, CPU_PINNED).
	TierCPULocal
	// TierCPUShare is a shared host pool (Mooncake store cpu, SGLang EXTERNAL).
	TierCPUShare
	// TierDisk is disk-backed storage, rank-owned or shared.
	TierDisk
	NumTiers // number of tiers
)

var tierNames = [NumTiers]string{"device", "cpu_local", "cpu_share", "disk"}

func (t Tier) String() string {
	if t < NumTiers {
		return tierNames[t]
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// ParseTier parses a tier name as String returns it.
func ParseTier(s string) (Tier, error) {
	for i, n := range tierNames {
		if strings.EqualFold(s, n) {
			return Tier(i), nil
		}
	}
	return 0, fmt.Errorf("tier %q: %w", s, ErrInvalid)
}

// Placement says where an event's medium files a block: the tier and whether
// the holder is the publishing rank (false) or a shared pool (true).
type Placement struct {
	Tier   Tier
	Shared bool
}

// MediumMap maps lower-case medium names to placements. Lookups are
// case-insensitive and allocation-free for names up to 32 bytes.
type MediumMap map[string]Placement

// DefaultEngineMedia is how media from engines (vLLM, SGLang, RFC #1527
// standard publishers) are filed. A nil medium means device (vLLM before
// PR #19737 and SGLang send none from the GPU pool). It holds every medium
// name of the three tiers (G1 GPU/NPU/HBM/accelerator, G2 CPU / host DRAM /
// Mooncake pools, G3 SSD/3FS/DFS/NFS/disk) plus the engines' own names
// (SGLang's CPU_PINNED and EXTERNAL, LMCache's cpu_tier1/2).
func DefaultEngineMedia() MediumMap {
	return MediumMap{
		// G1: device.
		"gpu": {TierDevice, false}, "device": {TierDevice, false},
		"npu": {TierDevice, false}, "hbm": {TierDevice, false},
		"accelerator": {TierDevice, false}, "xpu": {TierDevice, false},
		// G2: the engine host's memory.
		"cpu": {TierCPULocal, false}, "cpu_pinned": {TierCPULocal, false},
		"cpu_tier1": {TierCPULocal, false}, "host": {TierCPULocal, false},
		"host_pinned": {TierCPULocal, false}, "dram": {TierCPULocal, false},
		"host_dram": {TierCPULocal, false}, "memory": {TierCPULocal, false},
		// G3: disk.
		"disk": {TierDisk, false}, "ssd": {TierDisk, false}, "nvme": {TierDisk, false},
		"storage": {TierDisk, false}, "fs": {TierDisk, false}, "3fs": {TierDisk, false},
		"dfs": {TierDisk, false}, "nfs": {TierDisk, false}, "obj": {TierDisk, false},
		"cpu_tier2": {TierDisk, false},
		// G2, shared: pools visible to every rank.
		"external": {TierCPUShare, true}, "shared": {TierCPUShare, true},
		"remote": {TierCPUShare, true}, "network": {TierCPUShare, true},
		"mooncake": {TierCPUShare, true},
	}
}

// DefaultPoolMedia is how media from a shared pool publisher (Mooncake store
// master) are filed: everything it holds is shared; it never holds device blocks.
func DefaultPoolMedia() MediumMap {
	return MediumMap{
		"cpu": {TierCPUShare, true}, "cpu_pinned": {TierCPUShare, true},
		"host": {TierCPUShare, true}, "external": {TierCPUShare, true},
		"dram": {TierCPUShare, true}, "host_dram": {TierCPUShare, true},
		"memory": {TierCPUShare, true}, "mooncake": {TierCPUShare, true},
		"disk": {TierDisk, true}, "ssd": {TierDisk, true}, "nvme": {TierDisk, true},
		"storage": {TierDisk, true}, "fs": {TierDisk, true}, "3fs": {TierDisk, true},
		"dfs": {TierDisk, true}, "nfs": {TierDisk, true},
	}
}

// WithOverrides returns a copy of m with each medium name (any case) filed
// under the named tier (device, cpu_local, cpu_share, disk). Under engine
// publishers cpu_share is a shared pool and the other tiers the publishing
// rank's; under pool publishers (pool=true) everything is shared and device
// is refused. It is how the media mapping is configured.
func (m MediumMap) WithOverrides(over map[string]string, pool bool) (MediumMap, error) {
	out := make(MediumMap, len(m)+len(over))
	for k, v := range m {
		out[k] = v
	}
	for name, tier := range over {
		if name == "" {
			return nil, fmt.Errorf("media: empty medium name: %w", ErrInvalid)
		}
		t, err := ParseTier(tier)
		if err != nil {
			return nil, fmt.Errorf("media %q: %w", name, err)
		}
		if pool && t == TierDevice {
			return nil, fmt.Errorf("media %q: a pool never holds device blocks: %w", name, ErrInvalid)
		}
		out[strings.ToLower(name)] = Placement{Tier: t, Shared: pool || t == TierCPUShare}
	}
	return out, nil
}

// lookup finds medium case-insensitively without allocating.
func (m MediumMap) lookup(medium []byte) (Placement, bool) {
	var buf [32]byte
	if len(medium) > len(buf) {
		p, ok := m[strings.ToLower(string(medium))]
		return p, ok
	}
	for i, c := range medium {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	p, ok := m[string(buf[:len(medium)])]
	return p, ok
}
