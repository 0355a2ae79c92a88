package bench

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/seed-c7a81618/conductor/internal/syncbuf"
	"github.com/tinylib/msgp/msgp"
)

// The C++ Mooncake conductor as a second server under the same harness, for
// side-by-side figures in one run. It is never built here: BENCH_CPP_CONDUCTOR
// names a `mooncake_conductor` binary built from the public Mooncake sources
// (branch dev/conductor, CMake target mooncake_conductor), and without it the
// harness measures conductor alone.
//
// Everything the harness does to both servers goes through their common
// surface: msgpack POST /register and /query, and GET /global_view for the
// number of indexed blocks (prefix_count). Their CPU and RSS come from /proc.
// conductor's /metrics (GC, memo, handler histograms) is read only when the
// server is conductor.

const cppEnv = "BENCH_CPP_CONDUCTOR"

// Server names, as tables print them.
const (
	serverConductor = "conductor"
	serverCpp       = "C++"
)

// servers is the list the side-by-side harnesses run: conductor, then the C++
// conductor when BENCH_CPP_CONDUCTOR names one.
func servers() []string {
	if os.Getenv(cppEnv) != "" {
		return []string{serverConductor, serverCpp}
	}
	return []string{serverConductor}
}

// startNamed starts the server name (args are conductor flags; the C++
// conductor takes none).
func startNamed(tb testing.TB, name string, args ...string) *serverProc {
	return startNamedOn(tb, name, nil, args...)
}

// startNamedOn is startNamed with the server pinned to cpus (taskset; nil:
// anywhere).
func startNamedOn(tb testing.TB, name string, cpus []int, args ...string) *serverProc {
	tb.Helper()
	if name == serverCpp {
		return startCpp(tb, cpus)
	}
	return startServerOn(tb, cpus, args...)
}

// startCpp runs the C++ conductor, pinned to cpus when not nil, on a free
// loopback port: a config file with http_server_port and no static services
// (CONDUCTOR_CONFIG_PATH), logging at WARN, and waits until the port accepts
// connections.
func startCpp(tb testing.TB, cpus []int) *serverProc {
	tb.Helper()
	bin := os.Getenv(cppEnv)
	port := freePort(tb)
	cfg := filepath.Join(tb.TempDir(), "conductor_config.json")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `{"http_server_port": %d}`, port), 0o644); err != nil {
		tb.Fatal(err)
	}
	cmd := pinnedCommand(cpus, bin)
	cmd.Env = append(os.Environ(), "CONDUCTOR_CONFIG_PATH="+cfg, "CONDUCTOR_LOG_LEVEL=WARN", "GLOG_logtostderr=1")
	logs := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	s := &serverProc{cmd: cmd, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), logs: logs, cpp: true}
	for deadline := time.Now().Add(waitBound); ; {
		select {
		case <-done:
			tb.Fatalf("%s exited before listening:\n%s", bin, logs)
		default:
		}
		if c, err := net.DialTimeout("tcp", s.addr, time.Second); err == nil {
			c.Close()
			return s
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s did not listen on %s:\n%s", bin, s.addr, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// register subscribes a vLLM sha256_cbor engine (seed "0", B=16, model "m",
// dp rank 0) publishing on pub; replay may be empty.
func (s *serverProc) register(tb testing.TB, instance, pub, replay string) {
	tb.Helper()
	b := msgp.AppendMapHeader(nil, 8)
	for _, kv := range [][2]string{{"endpoint", pub}, {"replay_endpoint", replay}, {"type", "vLLM"},
		{"modelname", "m"}, {"instance_id", instance}} {
		b = msgp.AppendString(b, kv[0])
		b = msgp.AppendString(b, kv[1])
	}
	b = msgp.AppendString(b, "block_size")
	b = msgp.AppendInt(b, 16)
	b = msgp.AppendString(b, "dp_rank")
	b = msgp.AppendInt(b, 0)
	b = msgp.AppendString(b, "hash_profile")
	b = msgp.AppendMapHeader(b, 4)
	for _, kv := range [][2]string{{"strategy", "vllm_v1"}, {"algorithm", "sha256_cbor"},
		{"python_hash_seed", "0"}, {"index_projection", "low64_be"}} {
		b = msgp.AppendString(b, kv[0])
		b = msgp.AppendString(b, kv[1])
	}
	if code, body := s.post(tb, "/register", "application/msgpack", b); code != 200 {
		tb.Fatalf("register %s: %d %q", instance, code, body)
	}
}

// prefixCount is the sum of /global_view's prefix_count over every context:
// the distinct blocks the server indexes.
func (s *serverProc) prefixCount(tb testing.TB) int {
	tb.Helper()
	n, err := globalViewCount(s.addr)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// globalViewCount reads /global_view (msgpack) at addr and sums prefix_count.
func globalViewCount(addr string) (int, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/global_view", nil)
	req.Header.Set("Accept", "application/msgpack")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("/global_view: %d %q", resp.StatusCode, b)
	}
	return sumPrefixCounts(b)
}

// sumPrefixCounts decodes {"context_count", "contexts": [{…, "prefix_count": n, …}]}.
func sumPrefixCounts(b []byte) (int, error) {
	n, b, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return 0, err
	}
	total, seen := 0, false
	for ; n > 0; n-- {
		var k []byte
		if k, b, err = msgp.ReadStringZC(b); err != nil {
			return 0, err
		}
		if string(k) != "contexts" {
			if b, err = msgp.Skip(b); err != nil {
				return 0, err
			}
			continue
		}
		seen = true
		var cs uint32
		if cs, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return 0, err
		}
		for ; cs > 0; cs-- {
			var fields uint32
			if fields, b, err = msgp.ReadMapHeaderBytes(b); err != nil {
				return 0, err
			}
			for ; fields > 0; fields-- {
				if k, b, err = msgp.ReadStringZC(b); err != nil {
					return 0, err
				}
				if string(k) != "prefix_count" {
					if b, err = msgp.Skip(b); err != nil {
						return 0, err
					}
					continue
				}
				var c uint64
				if c, b, err = msgp.ReadUint64Bytes(b); err != nil {
					return 0, err
				}
				total += int(c)
			}
		}
	}
	if !seen {
		return 0, errors.New("/global_view: no contexts")
	}
	return total, nil
}

// rss is the server's resident set in bytes.
func (s *serverProc) rss(tb testing.TB) float64 {
	tb.Helper()
	n, err := ProcRSS(s.cmd.Process.Pid)
	if err != nil {
		tb.Fatal(err)
	}
	return float64(n)
}

// TestSumPrefixCounts: the /global_view reader against a hand-built page of
// two contexts, and its refusals.
func TestSumPrefixCounts(t *testing.T) {
	page := msgp.AppendMapHeader(nil, 2)
	page = msgp.AppendString(page, "context_count")
	page = msgp.AppendUint(page, 2)
	page = msgp.AppendString(page, "contexts")
	page = msgp.AppendArrayHeader(page, 2)
	for _, n := range []uint64{7, 1 << 33} {
		page = msgp.AppendMapHeader(page, 3)
		page = msgp.AppendString(page, "model_name")
		page = msgp.AppendString(page, "m")
		page = msgp.AppendString(page, "prefix_count")
		page = msgp.AppendUint64(page, n)
		page = msgp.AppendString(page, "instances")
		page = msgp.AppendMapHeader(page, 1)
		page = msgp.AppendString(page, "engine-a")
		page = msgp.AppendArrayHeader(page, 1)
		page = msgp.AppendInt(page, 0)
	}
	if got, err := sumPrefixCounts(page); err != nil || got != 7+1<<33 {
		t.Fatalf("got %d, %v; want %d", got, err, 7+1<<33)
	}
	if _, err := sumPrefixCounts(page[:len(page)-3]); err == nil {
		t.Fatal("a truncated page was read")
	}
	if _, err := sumPrefixCounts(msgp.AppendMapHeader(nil, 0)); err == nil {
		t.Fatal("a page without contexts was read")
	}
	if _, err := sumPrefixCounts(bytes.Repeat([]byte{0xc1}, 3)); err == nil {
		t.Fatal("garbage was read")
	}
}
