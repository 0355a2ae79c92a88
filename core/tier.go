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
// PR #19737 and SGLang send none from the GPU pool).
func DefaultEngineMedia() MediumMap {
	return MediumMap{
		"gpu": {TierDevice, false}, "device": {TierDevice, false},
		"npu": {TierDevice, false}, "hbm": {TierDevice, false},
		"cpu": {TierCPULocal, false}, "cpu_pinned": {TierCPULocal, false},
		"cpu_tier1": {TierCPULocal, false}, "host": {TierCPULocal, false},
		"host_pinned": {TierCPULocal, false},
		"disk":        {TierDisk, false}, "ssd": {TierDisk, false}, "nvme": {TierDisk, false},
		"storage": {TierDisk, false}, "fs": {TierDisk, false}, "3fs": {TierDisk, false},
		"nfs": {TierDisk, false}, "obj": {TierDisk, false}, "cpu_tier2": {TierDisk, false},
		"external": {TierCPUShare, true}, "shared": {TierCPUShare, true},
		"remote": {TierCPUShare, true}, "network": {TierCPUShare, true},
	}
}

// DefaultPoolMedia is how media from a shared pool publisher (Mooncake store
// master) are filed: everything it holds is shared; it never holds device blocks.
func DefaultPoolMedia() MediumMap {
	return MediumMap{
		"cpu": {TierCPUShare, true}, "cpu_pinned": {TierCPUShare, true},
		"host": {TierCPUShare, true}, "external": {TierCPUShare, true},
		"disk": {TierDisk, true}, "ssd": {TierDisk, true}, "nvme": {TierDisk, true},
		"storage": {TierDisk, true}, "fs": {TierDisk, true}, "3fs": {TierDisk, true},
		"nfs": {TierDisk, true},
	}
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
