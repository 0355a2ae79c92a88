package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/seed-c7a81618/conductor/hash"
	"github.com/seed-c7a81618/conductor/internal/syncbuf"
)

// The flat-out publishers of the separate-process harnesses: engine-b of
// the tail harness (tail_test.go, and the fleet's ingest), and the K streams
// of the streams harness (streams_test.go). By default they run in processes
// of their own (publishers, conductor and query client apart, as in a
// deployment): the test binary re-executes itself with tailPublisherEnv set,
// and TestMain hands the process to tailPublisherMain, which binds the
// sockets, prints their endpoints as one JSON line (an array, one object per
// stream) and then obeys one command per stdin line, answering each on
// stdout:
//
//	prime      engine-b: publish its first batch until the server has it (publish
//	           N's flow control); streams: publish primeTokens from every stream
//	           until a /query lists each stream as holding it → "ok SEQ"
//	publish N  engine-b: publish N batches (flow control below), wait until all are applied → "ok SEQ"
//	send N     every stream publishes N batches of fresh blocks, without waiting → "ok SEQ"
//
// Anything that goes wrong is answered "err REASON" and ends the process; EOF
// on stdin ends it too. TAIL_PUBLISHER=inproc runs engine-b inside the test
// process instead, to see what sharing the client's process costs the
// client's own measurement.

const (
	tailPublisherEnv = "BENCH_TAIL_PUBLISHER" // conductor's HTTP host:port; set in the child only
	tailEvictEnv     = "BENCH_TAIL_EVICT"     // "1": the steady template (store + evict)
	// streamsEnv is "FIRST N" in a streams harness child: it runs streams
	// stream-FIRST … stream-(FIRST+N-1), registered without replay, their
	// publishers sharing one libzmq context.
	streamsEnv = "BENCH_STREAMS"
	tailPoll   = 10 * time.Millisecond // between reads of the applied sequence
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
	addr      string // server HTTP host:port
	name      string // the instance it is registered as
	pub       *Publisher
	tmpl      *StoredTemplate
	hs        []uint64
	rm        []uint64
	next      int // batch index: block hashes derive from it
	hashBase  int // added to next: where this stream's hashes start
	seq       uint64
	counted   bool
	base      int // counted: the block count once the priming batch landed
	sent      int // counted: batches published since
	lastSeqRE *regexp.Regexp
}

// newTailStream is engine-b: a publisher with replay, hashes from batch 2^30
// on (never the fixture's or the bench's).
func newTailStream(addr string, evict bool) (*tailStream, error) {
	pub, err := NewPublisher(PublisherOptions{})
	if err != nil {
		return nil, err
	}
	return newStream(addr, "engine-b", 1<<30, pub, NewStoredTemplate(tailBatch(), 16, 0, evict)), nil
}

// newStream is a stream named name publishing tmpl's batches on pub, its
// block hashes those of batches hashBase, hashBase+1, … (fillHashes).
func newStream(addr, name string, hashBase int, pub *Publisher, tmpl *StoredTemplate) *tailStream {
	n := tmpl.Blocks()
	return &tailStream{addr: addr, name: name, pub: pub, tmpl: tmpl, hashBase: hashBase,
		hs: make([]uint64, n), rm: make([]uint64, n), counted: len(tmpl.rmOffs) == 0,
		lastSeqRE: regexp.MustCompile(`(?m)^conductor_ingest_last_seq\{instance="` + regexp.QuoteMeta(name) + `"[^}]*\} (\S+)$`)}
}

// lastSeq is the stream's last applied sequence on conductor (false: none yet).
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
	m := p.lastSeqRE.FindSubmatch(page)
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
		fillHashes(p.hs, p.next+p.hashBase)
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
			return fmt.Errorf("%s never reached the server", p.name)
		}
	}
}

// lastSeqPast0 reports whether conductor applied a batch of the stream's.
func (p *tailStream) lastSeqPast0() (bool, error) {
	last, ok, err := p.lastSeq()
	return ok && last > 0, err
}

// publish streams n batches of fresh blocks (each evicting the blocks of the
// batch steadyWindow earlier when the template evicts), keeping at most
// tailWindow batches in flight, and waits until all are applied.
func (p *tailStream) publish(n int) error {
	for i := 0; i < n; i++ {
		if err := p.publishNext(); err != nil {
			return err
		}
		if i%512 == 511 {
			if err := p.waitApplied(tailWindow); err != nil {
				return err
			}
		}
	}
	return p.waitApplied(0)
}

// publishNext publishes the next batch of fresh blocks (evicting the blocks
// of the batch steadyWindow earlier when the template evicts).
func (p *tailStream) publishNext() error {
	fillHashes(p.hs, p.next+p.hashBase)
	fillHashes(p.rm, p.next+p.hashBase-steadyWindow)
	p.next++
	seq, err := p.pub.Publish(p.tmpl.Fill(make([]byte, 0, p.tmpl.Size()), p.hs, p.rm))
	if err != nil {
		return err
	}
	p.seq = seq
	p.sent++
	return nil
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
	var (
		streams []*tailStream
		multi   = os.Getenv(streamsEnv) != ""
		err     error
	)
	if multi {
		var closeAll func()
		if streams, closeAll, err = newStreamSet(addr, os.Getenv(streamsEnv)); err != nil {
			return fail(err)
		}
		defer closeAll()
	} else {
		p, err := newTailStream(addr, os.Getenv(tailEvictEnv) == "1")
		if err != nil {
			return fail(err)
		}
		defer p.pub.Close()
		streams = []*tailStream{p}
	}
	eps := make([]publisherEndpoints, len(streams))
	for i, st := range streams {
		eps[i] = publisherEndpoints{Endpoint: st.pub.Endpoint(), ReplayEndpoint: st.pub.ReplayEndpoint()}
	}
	line, _ := json.Marshal(eps)
	fmt.Println(string(line))
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		n, nerr := strconv.Atoi(arg)
		if (cmd == "publish" || cmd == "send") && (nerr != nil || n < 0) {
			return fail(fmt.Errorf("%s %q: want a count", cmd, arg))
		}
		switch {
		case cmd == "prime" && multi:
			err = primeHolders(addr, streams)
		case cmd == "prime":
			err = streams[0].prime()
		case cmd == "publish" && !multi:
			err = streams[0].publish(n)
		case cmd == "send":
			err = sendRounds(streams, n)
		default:
			return fail(fmt.Errorf("unknown command %q", sc.Text()))
		}
		if err != nil {
			return fail(err)
		}
		fmt.Printf("ok %d\n", streams[len(streams)-1].seq)
	}
	return 0
}

// sendRounds has every stream publish n batches of fresh blocks, one batch
// per stream in turn.
func sendRounds(streams []*tailStream, n int) error {
	for range n {
		for _, st := range streams {
			if err := st.publishNext(); err != nil {
				return fmt.Errorf("%s: %w", st.name, err)
			}
		}
	}
	return nil
}

// publisherEndpoints is one stream's line item in a publisher process's
// first line of output.
type publisherEndpoints struct {
	Endpoint       string `json:"endpoint"`
	ReplayEndpoint string `json:"replay_endpoint"`
}

// streamName is the instance the streams harness registers stream i as.
func streamName(i int) string { return fmt.Sprintf("stream-%04d", i) }

// newStreamSet makes the streams of spec ("FIRST N", streamsEnv): N
// publishers without replay, keeping one batch each (the runs are lossless,
// replay is never asked for), in one libzmq context, stream i's hashes from
// batch 2^32 + i·2^24 on. closeAll closes them and the context.
func newStreamSet(addr, spec string) (streams []*tailStream, closeAll func(), err error) {
	var first, n int
	if _, err := fmt.Sscanf(spec, "%d %d", &first, &n); err != nil || first < 0 || n < 1 {
		return nil, nil, fmt.Errorf("%s=%q: want FIRST N", streamsEnv, spec)
	}
	ctx, err := zmq.NewContext()
	if err != nil {
		return nil, nil, err
	}
	closeAll = func() {
		for _, st := range streams {
			_ = st.pub.Close()
		}
		_ = ctx.Term()
	}
	// A PUB socket per stream, and room for libzmq's own.
	if err := ctx.SetMaxSockets(n + 64); err != nil {
		closeAll()
		return nil, nil, err
	}
	tmpl := NewStoredTemplate(tailBatch(), 16, 0, false)
	for i := first; i < first+n; i++ {
		pub, err := NewPublisher(PublisherOptions{Context: ctx, NoReplay: true, Ring: 1})
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("%s: %w", streamName(i), err)
		}
		streams = append(streams, newStream(addr, streamName(i), 1<<32+i<<24, pub, tmpl))
	}
	return streams, closeAll, nil
}

// primeTokens is the one block every stream of the streams harness stores
// first, to learn when it reaches the server; no other block of the
// harnesses has these tokens.
func primeTokens() []int32 {
	toks := make([]int32, 16)
	for i := range toks {
		toks[i] = int32(7000 + i)
	}
	return toks
}

// primeHolders gets every stream past ZMQ's slow-joiner window at once: each
// stream that a /query of primeTokens does not list as holding them
// publishes them (vLLM sha256_cbor, as registered) again, until the query
// lists every stream.
func primeHolders(addr string, streams []*tailStream) error {
	p, err := hash.Resolve(hash.Spec{Strategy: "vllm_v1", Algorithm: "sha256_cbor", PythonHashSeed: "0", IndexProjection: "low64_be"})
	if err != nil {
		return err
	}
	toks := primeTokens()
	keys, err := hash.AppendChain(nil, &p, toks, 16, nil, nil)
	if err != nil {
		return err
	}
	msg := AppendVLLMBatch(nil, EraMap, 1.7e9, 0, EngineStored{Hashes: keys, Tokens: toks, BlockSize: 16, Medium: "GPU"})
	body, ct := queryBody("bin", toks)
	pending := slices.Clone(streams)
	for deadline := time.Now().Add(waitBound); ; {
		for _, st := range pending {
			if st.seq, err = st.pub.Publish(msg); err != nil {
				return err
			}
		}
		time.Sleep(50 * time.Millisecond)
		resp, err := http.Post("http://"+addr+"/query", ct, bytes.NewReader(body))
		if err != nil {
			return err
		}
		page, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != 200 {
			return fmt.Errorf("/query: %d %.200q", resp.StatusCode, page)
		}
		full, err := fullRows(page, int64(len(toks)))
		if err != nil {
			return err
		}
		pending = slices.DeleteFunc(pending, func(st *tailStream) bool { return full[st.name] })
		if len(pending) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d streams never reached the server (%s first)", len(pending), len(streams), pending[0].name)
		}
	}
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

// procPublisher is a child process.
type procPublisher struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	eps    []publisherEndpoints // one per stream
	stderr *syncbuf.Buffer
}

// startProcPublisher starts engine-b's process (TAIL_PUBLISHER_NICE: at that
// nice value).
func startProcPublisher(tb testing.TB, addr string, evict bool) *procPublisher {
	tb.Helper()
	// The publisher stands for engines that run on other hosts in a
	// deployment; niced, it stops competing with the query client and
	// conductor for this machine's cores (every thread inherits it).
	return startPublisherProc(tb, addr, []string{fmt.Sprintf("%s=%d", tailEvictEnv, map[bool]int{false: 0, true: 1}[evict])},
		nil, os.Getenv("TAIL_PUBLISHER_NICE"))
}

// startPublisherProc starts a publisher process with env added to this
// process's, pinned to cpus (nil: not pinned), at nice value nice ("": not
// niced), and reads its endpoints. Cleanup closes its stdin and waits for it.
func startPublisherProc(tb testing.TB, addr string, env []string, cpus []int, nice string) *procPublisher {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	argv := []string{exe, "-test.run=^$"}
	if nice != "" {
		argv = append([]string{"nice", "-n", nice}, argv...)
	}
	cmd := pinnedCommand(cpus, argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), tailPublisherEnv+"="+addr), env...)
	p := &procPublisher{cmd: cmd, stderr: &syncbuf.Buffer{}}
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
	if !p.out.Scan() || json.Unmarshal(p.out.Bytes(), &p.eps) != nil || len(p.eps) == 0 {
		tb.Fatalf("publisher process: %q %s", p.out.Text(), p.stderr)
	}
	return p
}

func (p *procPublisher) endpoints() (string, string) {
	return p.eps[0].Endpoint, p.eps[0].ReplayEndpoint
}

// pid is the process's id (taskset and nice exec what they run).
func (p *procPublisher) pid() int { return p.cmd.Process.Pid }

// send writes a command without waiting for its answer.
func (p *procPublisher) send(tb testing.TB, cmd string) {
	tb.Helper()
	if _, err := fmt.Fprintln(p.in, cmd); err != nil {
		tb.Fatalf("publisher process, %s: %v %s", cmd, err, p.stderr)
	}
}

// answer reads the answer to cmd, which must be "ok SEQ".
func (p *procPublisher) answer(tb testing.TB, cmd string) {
	tb.Helper()
	if !p.out.Scan() || !strings.HasPrefix(p.out.Text(), "ok ") {
		tb.Fatalf("publisher process, %s: %q %s", cmd, p.out.Text(), p.stderr)
	}
}

func (p *procPublisher) do(tb testing.TB, cmd string) {
	tb.Helper()
	p.send(tb, cmd)
	p.answer(tb, cmd)
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
