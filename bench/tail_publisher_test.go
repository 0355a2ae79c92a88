package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// engine-b of the tail harness (tail_test.go), the flat-out publisher. By
// default it runs in its own process (publisher, conductor and query client
// apart, as in a deployment): the test binary re-executes itself with
// tailPublisherEnv set, and TestMain hands the process to tailPublisherMain,
// which binds the sockets, prints them as one JSON line and then obeys one
// command per stdin line, answering each on stdout:
//
//	prime      publish empty batches until conductor has applied one → "ok SEQ"
//	publish N  publish N batches (flow control below), wait until all are applied → "ok SEQ"
//
// Anything that goes wrong is answered "err REASON" and ends the process; EOF
// on stdin ends it too. TAIL_PUBLISHER=inproc runs the same publisher inside
// the test process instead, to see what sharing the client's process costs
// the client's own measurement.

const (
	tailPublisherEnv = "BENCH_TAIL_PUBLISHER" // conductor's HTTP host:port; set in the child only
	tailEvictEnv     = "BENCH_TAIL_EVICT"     // "1": the steady template (store + evict)
	tailPoll         = 10 * time.Millisecond  // between reads of the applied sequence
)

// tailStream is the publishing loop shared by both placements: it stamps
// fresh hashes into the template and keeps at most tailWindow batches
// published but unapplied, so the run is lossless. It learns what the server
// applied in one of two ways:
//   - counted (fresh blocks only, the grow case): from the server's block
//     count on GET /global_view, which conductor and the C++ conductor both
//     serve; every batch adds its blocks.
//   - sequenced (the steady case, whose count stays flat): from conductor's
//     conductor_ingest_last_seq on /metrics.
type tailStream struct {
	addr    string // server HTTP host:port
	pub     *Publisher
	tmpl    *StoredTemplate
	hs      []uint64
	rm      []uint64
	next    int // batch index: block hashes derive from it
	seq     uint64
	counted bool
	base    int // counted: the block count once the priming batch landed
	sent    int // counted: batches published since
}

func newTailStream(addr string, evict bool) (*tailStream, error) {
	pub, err := NewPublisher(PublisherOptions{})
	if err != nil {
		return nil, err
	}
	n := tailBatch()
	return &tailStream{addr: addr, pub: pub, tmpl: NewStoredTemplate(n, 16, 0, evict),
		hs: make([]uint64, n), rm: make([]uint64, n), counted: !evict}, nil
}

var lastSeqBRE = regexp.MustCompile(`(?m)^conductor_ingest_last_seq\{instance="engine-b"[^}]*\} (\S+)$`)

// lastSeq is engine-b's last applied sequence on conductor (false: none yet).
func (p *tailStream) lastSeq() (uint64, bool, error) {
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false, err
	}
	m := lastSeqBRE.FindSubmatch(page)
	if m == nil {
		return 0, false, nil
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	return uint64(v), err == nil, nil
}

// prime gets past ZMQ's slow-joiner window and waits until what was
// published is applied. Sequenced, it publishes empty batches until one is
// applied; counted, it publishes the first batch of fresh blocks until the
// count shows it.
func (p *tailStream) prime() error {
	msg, landed := AppendVLLMBatch(nil, EraMap, 1.7e9, 0), p.lastSeqPast0
	if p.counted {
		base, err := globalViewCount(p.addr)
		if err != nil {
			return err
		}
		fillHashes(p.hs, p.next+1<<30)
		msg = p.tmpl.Fill(make([]byte, 0, p.tmpl.Size()), p.hs, p.rm)
		landed = func() (bool, error) {
			n, err := globalViewCount(p.addr)
			if err != nil || n < base+len(p.hs) {
				return false, err
			}
			p.base, p.next = n, p.next+1
			return true, nil
		}
	}
	for deadline := time.Now().Add(waitBound); ; {
		seq, err := p.pub.Publish(msg)
		if err != nil {
			return err
		}
		p.seq = seq
		time.Sleep(20 * time.Millisecond)
		ok, err := landed()
		if err != nil {
			return err
		}
		if ok {
			return p.waitApplied(0)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("engine-b never reached the server")
		}
	}
}

// lastSeqPast0 reports whether conductor applied a batch of engine-b's.
func (p *tailStream) lastSeqPast0() (bool, error) {
	last, ok, err := p.lastSeq()
	return ok && last > 0, err
}

// publish streams n batches of fresh blocks (each evicting the blocks of the
// batch steadyWindow earlier when the template evicts), keeping at most
// tailWindow batches in flight, and waits until all are applied.
func (p *tailStream) publish(n int) error {
	for i := 0; i < n; i++ {
		// Offset so engine-b's hashes never meet the fixture's or the bench's.
		fillHashes(p.hs, p.next+1<<30)
		fillHashes(p.rm, p.next+1<<30-steadyWindow)
		p.next++
		seq, err := p.pub.Publish(p.tmpl.Fill(make([]byte, 0, p.tmpl.Size()), p.hs, p.rm))
		if err != nil {
			return err
		}
		p.seq = seq
		p.sent++
		if i%512 == 511 {
			if err := p.waitApplied(tailWindow); err != nil {
				return err
			}
		}
	}
	return p.waitApplied(0)
}

// unapplied is the number of published batches the server has not applied.
func (p *tailStream) unapplied() (int, error) {
	if p.counted {
		n, err := globalViewCount(p.addr)
		return p.sent - (n-p.base)/len(p.hs), err
	}
	last, _, err := p.lastSeq()
	return int(p.seq) - int(last), err
}

// waitApplied waits until at most window published batches are unapplied.
// It asks the server every tailPoll: one /metrics scrape costs conductor
// about 2 ms of CPU (the process and Go runtime figures), so polling every
// millisecond would bill the harness's flow control to the CPU per block.
func (p *tailStream) waitApplied(window int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		behind, err := p.unapplied()
		if err != nil {
			return err
		}
		if behind <= window {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server stuck %d batches behind", behind)
		}
		time.Sleep(tailPoll)
	}
}

// tailPublisherMain is the child process's main (see the top of the file).
func tailPublisherMain(addr string) int {
	fail := func(err error) int {
		fmt.Printf("err %v\n", err)
		return 1
	}
	p, err := newTailStream(addr, os.Getenv(tailEvictEnv) == "1")
	if err != nil {
		return fail(err)
	}
	defer p.pub.Close()
	line, _ := json.Marshal(map[string]string{"endpoint": p.pub.Endpoint(), "replay_endpoint": p.pub.ReplayEndpoint()})
	fmt.Println(string(line))
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		switch cmd {
		case "prime":
			err = p.prime()
		case "publish":
			n, perr := strconv.Atoi(arg)
			if perr != nil || n < 0 {
				return fail(fmt.Errorf("publish %q: want a count", arg))
			}
			err = p.publish(n)
		default:
			return fail(fmt.Errorf("unknown command %q", sc.Text()))
		}
		if err != nil {
			return fail(err)
		}
		fmt.Printf("ok %d\n", p.seq)
	}
	return 0
}

// tailPublisher is engine-b as the benchmark drives it, in either placement.
type tailPublisher interface {
	endpoints() (pub, replay string)
	prime(tb testing.TB)
	publish(tb testing.TB, n int) // returns when every batch is applied
}

// inprocPublisher runs the stream in the test process (TAIL_PUBLISHER=inproc).
type inprocPublisher struct{ st *tailStream }

func (p inprocPublisher) endpoints() (string, string) {
	return p.st.pub.Endpoint(), p.st.pub.ReplayEndpoint()
}

func (p inprocPublisher) prime(tb testing.TB) {
	tb.Helper()
	if err := p.st.prime(); err != nil {
		tb.Fatal(err)
	}
}

func (p inprocPublisher) publish(tb testing.TB, n int) {
	tb.Helper()
	if err := p.st.publish(n); err != nil {
		tb.Fatal(err)
	}
}

// procPublisher is the child process.
type procPublisher struct {
	cmd         *exec.Cmd
	in          io.WriteCloser
	out         *bufio.Scanner
	pub, replay string
	stderr      *lockedBuffer
}

func startProcPublisher(tb testing.TB, addr string, evict bool) *procPublisher {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	if n := os.Getenv("TAIL_PUBLISHER_NICE"); n != "" {
		// The publisher stands for engines that run on other hosts in a
		// deployment; niced, it stops competing with the query client and
		// conductor for this machine's cores (every thread inherits it).
		cmd = exec.Command("nice", "-n", n, exe, "-test.run=^$")
	}
	cmd.Env = append(os.Environ(), tailPublisherEnv+"="+addr, fmt.Sprintf("%s=%d", tailEvictEnv, map[bool]int{false: 0, true: 1}[evict]))
	p := &procPublisher{cmd: cmd, stderr: &lockedBuffer{}}
	cmd.Stderr = p.stderr
	if p.in, err = cmd.StdinPipe(); err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	p.out = bufio.NewScanner(out)
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		p.in.Close() // EOF: the child closes its sockets and exits
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	var eps struct {
		Endpoint       string `json:"endpoint"`
		ReplayEndpoint string `json:"replay_endpoint"`
	}
	if !p.out.Scan() || json.Unmarshal(p.out.Bytes(), &eps) != nil {
		tb.Fatalf("publisher process: %q %s", p.out.Text(), p.stderr)
	}
	p.pub, p.replay = eps.Endpoint, eps.ReplayEndpoint
	return p
}

func (p *procPublisher) endpoints() (string, string) { return p.pub, p.replay }

func (p *procPublisher) do(tb testing.TB, cmd string) {
	tb.Helper()
	if _, err := fmt.Fprintln(p.in, cmd); err != nil {
		tb.Fatal(err)
	}
	if !p.out.Scan() || !strings.HasPrefix(p.out.Text(), "ok ") {
		tb.Fatalf("publisher process, %s: %q %s", cmd, p.out.Text(), p.stderr)
	}
}

func (p *procPublisher) prime(tb testing.TB) { tb.Helper(); p.do(tb, "prime") }

func (p *procPublisher) publish(tb testing.TB, n int) {
	tb.Helper()
	p.do(tb, fmt.Sprintf("publish %d", n))
}

// newTailPublisher starts engine-b in the placement TAIL_PUBLISHER names
// ("process", the default, or "inproc"), registers it with conductor and
// primes it.
func newTailPublisher(tb testing.TB, s *serverProc, evict bool) tailPublisher {
	tb.Helper()
	var p tailPublisher
	switch mode := os.Getenv("TAIL_PUBLISHER"); mode {
	case "", "process":
		p = startProcPublisher(tb, s.addr, evict)
	case "inproc":
		st, err := newTailStream(s.addr, evict)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { st.pub.Close() })
		p = inprocPublisher{st}
	default:
		tb.Fatalf("TAIL_PUBLISHER=%q: want process or inproc", mode)
	}
	pub, replay := p.endpoints()
	s.register(tb, "engine-b", pub, replay)
	p.prime(tb)
	return p
}
