package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/seed-c7a81618/conductor/bench"
)

// netnsEnv marks the test binary re-run inside a network namespace of its
// own (runInNetns).
const netnsEnv = "CONDUCTOR_TEST_NETNS"

// runInNetns re-runs test name of this binary in a new network namespace
// (CLONE_NEWNET), where the only interface is a loopback that is down, and
// reports its result as the test's. It skips, saying why, only when the
// namespace cannot be created (no CAP_SYS_ADMIN: not root).
func runInNetns(t *testing.T, name string) {
	t.Helper()
	out, startErr, err := rerunTest(name, append(os.Environ(), netnsEnv+"=1"), &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET})
	if startErr != nil {
		if errors.Is(startErr, syscall.EPERM) || errors.Is(startErr, syscall.EINVAL) || errors.Is(startErr, syscall.ENOSPC) {
			t.Skipf("cannot create a network namespace for this test (it needs root or CAP_SYS_ADMIN): %v", startErr)
		}
		t.Fatal(startErr)
	}
	t.Logf("in a network namespace of its own:\n%s", out)
	if err != nil {
		t.Fatalf("%s in its network namespace: %v", name, err)
	}
}

// loopbackOnly brings up the loopback interface of a new network namespace
// and asserts that it is the namespace's only interface.
func loopbackOnly(t *testing.T) {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	if len(ifs) != 1 || ifs[0].Flags&net.FlagLoopback == 0 {
		t.Fatalf("the namespace has interfaces %v, want its loopback alone", ifs)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	var ifr [40]byte // struct ifreq: the name, then ifr_flags (a short) at offset 16
	copy(ifr[:16], ifs[0].Name)
	ioctl := func(req uintptr) {
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), req, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
			t.Fatalf("ioctl %#x on %s: %v", req, ifs[0].Name, e)
		}
	}
	ioctl(syscall.SIOCGIFFLAGS)
	*(*uint16)(unsafe.Pointer(&ifr[16])) |= syscall.IFF_UP
	ioctl(syscall.SIOCSIFFLAGS)
}

// TestEndpointAliasBattery: the spellings of one publisher that once let
// several registrations subscribe to it, each under its own identity, run
// against a conductor process in a network namespace that has nothing but
// loopback, with the source-address form allowed and client tokens on. The
// publisher binds a wildcard on IPv6 and IPv4 (as vLLM's tcp://*:5557 does),
// so every alias would reach it. Each alias is refused, naming the field and
// the holder, by the registrant that holds the publisher and by another
// client alike; the holder's own registration in another spelling is the
// same registration; and one BlockStored is then reported for exactly one
// instance.
func TestEndpointAliasBattery(t *testing.T) {
	if os.Getenv(netnsEnv) != "1" {
		runInNetns(t, t.Name())
		return
	}
	loopbackOnly(t)
	const (
		admin = "alias-admin-token-0123456789"
		teamA = "alias-team-a-token-0123456789"
		teamB = "alias-team-b-token-0123456789"
	)
	adminFile, clientsFile := tokenFiles(t, admin, "team-a", teamA, "team-b", teamB)
	prompts := makePrompts(t, 1, 40)
	e := newEngine(t, "real", prompts, bench.PublisherOptions{Endpoint: "tcp://*:*", ReplayEndpoint: "tcp://*:*", IPv6: true})
	port := e.pub.Endpoint()[strings.LastIndexByte(e.pub.Endpoint(), ':')+1:]
	replayPort := e.pub.ReplayEndpoint()[strings.LastIndexByte(e.pub.ReplayEndpoint(), ':')+1:]
	p := startFaultProc(t, "--admin-token-file", adminFile, "--client-tokens-file", clientsFile, "--allow-source-endpoints")

	register := func(tok, inst, ep, replay string) (int, string) {
		t.Helper()
		return p.authDo(tok, "POST", "/register", fmt.Sprintf(`{"endpoint":%q,"replay_endpoint":%q,"type":"vLLM","modelname":"m","instance_id":%q,"block_size":16,"dp_rank":0,
		  "hash_profile":{"strategy":"vllm_v1","algorithm":"sha256_cbor","python_hash_seed":"0","index_projection":"low64_be"}}`, ep, replay, inst))
	}
	holder := "tcp://127.0.0.1:" + port
	if code, body := register(teamA, "real", holder, "tcp://127.0.0.1:"+replayPort); code != 200 {
		t.Fatalf("register the real instance: %d %s", code, body)
	}
	aliases := []struct{ ep, status, reason, why string }{
		{"tcp://0.0.0.0:" + port, "400", "invalid_value", "unspecified"},
		{"tcp://[::]:" + port, "400", "invalid_value", "unspecified"},
		{"tcp://localhost:" + port, "400", "invalid_registration", "real|default|0"},
		{"tcp://[::ffff:127.0.0.1]:" + port, "400", "invalid_registration", "real|default|0"},
		{"tcp://127.0.0.1:0" + port, "400", "invalid_registration", "real|default|0"},
		{"tcp://127.0.0.1:0;127.0.0.1:" + port, "400", "invalid_registration", "real|default|0"},
		{"tcp://127.0.0.2:" + port, "400", "invalid_registration", "real|default|0"},
		{"tcp://[::1]:" + port, "400", "invalid_registration", "real|default|0"},
	}
	for i, a := range aliases {
		inst := fmt.Sprintf("alias-%d", i)
		code, body := register(teamA, inst, a.ep, "")
		if got := fmt.Sprint(code); got != a.status || !strings.Contains(body, `"reason":"`+a.reason+`"`) ||
			!strings.Contains(body, `"field":"endpoint"`) || !strings.Contains(body, a.why) {
			t.Errorf("team-a's %s at %s: %d %s; want %s %s naming the field and %q", inst, a.ep, code, body, a.status, a.reason, a.why)
		}
		// Another client gets no further, and learns nothing of team-a's.
		code, body = register(teamB, "b-"+inst, a.ep, "")
		if code < 400 || code >= 500 || !strings.Contains(body, `"field":"endpoint"`) || strings.Contains(body, "real|default|0") {
			t.Errorf("team-b's %s at %s: %d %s; want a 4xx naming the field, not team-a's instance", inst, a.ep, code, body)
		}
	}
	// The holder's own registration, spelled otherwise, is the same one
	// (/services below still lists one).
	if code, body := register(teamA, "real", "tcp://localhost:0"+port, "tcp://[::ffff:127.0.0.1]:"+replayPort); code != 200 {
		t.Errorf("the holder's registration in other spellings: %d %s", code, body)
	}

	p.prime(e)
	e.store(0)
	deadline := time.Now().Add(waitBound)
	for {
		got, err := p.matched(prompts[0].tokens)
		if err != nil {
			t.Fatal(err)
		}
		if got["real"] == 64 {
			if len(got) != 1 {
				t.Fatalf("one BlockStored is reported for %d instances: %v", len(got), got)
			}
			t.Logf("one BlockStored, reported for %v", got)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the real instance never reported its block: %v\n%s", got, tail(p.logs.String()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	req, _ := http.NewRequest("GET", p.url("/services"), nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := boundedClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"count":1`) || !strings.Contains(string(b), holder) {
		t.Fatalf("services: %s", b)
	}
}
