package core

import (
	"errors"
	"testing"
)

// TestSeedMediaMapped: every medium of the three-tier model (DefaultEngineMedia)
// files in its tier, case-insensitively, for engines and pools; unknown media
// are not guessed.
func TestSeedMediaMapped(t *testing.T) {
	engine := map[string]Tier{
		"gpu": TierDevice, "GPU": TierDevice, "NPU": TierDevice, "hbm": TierDevice, "accelerator": TierDevice,
		"cpu": TierCPULocal, "DRAM": TierCPULocal, "dram": TierCPULocal, "CPU_PINNED": TierCPULocal,
		"disk": TierDisk, "SSD": TierDisk, "3FS": TierDisk, "dfs": TierDisk, "DFS": TierDisk, "NFS": TierDisk,
		"EXTERNAL": TierCPUShare,
	}
	em := DefaultEngineMedia()
	for name, want := range engine {
		p, ok := em.lookup([]byte(name))
		if !ok || p.Tier != want {
			t.Errorf("engine medium %q: %+v %v, want tier %v", name, p, ok, want)
		}
	}
	pm := DefaultPoolMedia()
	for name, want := range map[string]Tier{"cpu": TierCPUShare, "DRAM": TierCPUShare, "disk": TierDisk, "dfs": TierDisk, "3fs": TierDisk} {
		p, ok := pm.lookup([]byte(name))
		if !ok || p.Tier != want || !p.Shared {
			t.Errorf("pool medium %q: %+v %v", name, p, ok)
		}
	}
	for _, name := range []string{"tape", "", "gpu0"} {
		if _, ok := em.lookup([]byte(name)); ok {
			t.Errorf("unknown medium %q mapped", name)
		}
	}
}

// TestMediaOverrides: the mapping is configurable.
func TestMediaOverrides(t *testing.T) {
	m, err := DefaultEngineMedia().WithOverrides(map[string]string{"Tape": "disk", "cxl": "cpu_share", "gpu": "cpu_local"}, false)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]Placement{"TAPE": {TierDisk, false}, "cxl": {TierCPUShare, true}, "gpu": {TierCPULocal, false}, "npu": {TierDevice, false}} {
		if p, ok := m.lookup([]byte(name)); !ok || p != want {
			t.Errorf("%q: %+v %v want %+v", name, p, ok, want)
		}
	}
	if _, ok := DefaultEngineMedia().lookup([]byte("tape")); ok {
		t.Fatal("override leaked into the defaults")
	}
	if _, err := DefaultPoolMedia().WithOverrides(map[string]string{"hbm": "device"}, true); !errors.Is(err, ErrInvalid) {
		t.Fatalf("pool device: %v", err)
	}
	if _, err := DefaultEngineMedia().WithOverrides(map[string]string{"x": "warp"}, false); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad tier: %v", err)
	}
}
