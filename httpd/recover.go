package httpd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/seed-c7a81618/conductor/core"
)

// Peer recovery: a starting replica fetches GET /dump from the first
// reachable peer (either port, either form) and restores it into its index.
// The caller holds the index's apply gate (core.Index.HoldApplies) from
// before its listeners subscribe until Recover returns, so the listeners
// buffer meanwhile; each restored stream then skips its buffered batches up to
// the dumped watermark (core.RestoreStream).

// ErrDumpFormat wraps a dump that cannot be parsed.
var ErrDumpFormat = errors.New("conductor: malformed dump")

// RecoverOptions configure Recover. The zero value is valid.
type RecoverOptions struct {
	// Timeout bounds connecting to a peer and receiving its response headers
	// (the body may take longer). Default 10s (Dynamo's).
	Timeout time.Duration
	// Dynamo, when set, records the indexers (and block sizes) of a Dynamo
	// form dump.
	Dynamo *Dynamo
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// RecoverStats describe one restore.
type RecoverStats struct {
	Peer          string
	Bytes         int64
	Streams       int // sections restored
	MissingStream int // sections without a matching registration here (skipped)
	Holdings      int
	Engine        int
	Skipped       int // holdings or engine entries not applied
	Duration      time.Duration
}

// Recover tries each peer in order and restores the first dump it receives.
// No reachable peer is not an error (ok=false: start empty). A dump that
// fails part-way is not retried from another peer (what was restored stays;
// live events converge the rest) and is returned as an error.
func Recover(ctx context.Context, ix *core.Index, peers []string, opts RecoverOptions) (st RecoverStats, ok bool, err error) {
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext:           (&net.Dialer{Timeout: opts.Timeout}).DialContext,
		ResponseHeaderTimeout: opts.Timeout,
		DisableCompression:    true,
	}}
	defer client.CloseIdleConnections()
	for _, p := range peers {
		url := strings.TrimRight(p, "/") + "/dump"
		req, rerr := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if rerr != nil {
			opts.Logger.Warn("peer recovery: bad peer URL", "peer", p, "err", rerr)
			continue
		}
		resp, rerr := client.Do(req)
		if rerr != nil {
			opts.Logger.Warn("peer recovery: peer unreachable", "peer", p, "err", rerr)
			continue
		}
		if resp.StatusCode != http.StatusOK {
			_ = resp.Body.Close()
			opts.Logger.Warn("peer recovery: peer refused", "peer", p, "status", resp.StatusCode)
			continue
		}
		start := time.Now()
		st, err = RestoreDump(ix, resp.Body, opts.Dynamo)
		_ = resp.Body.Close()
		st.Peer, st.Duration = p, time.Since(start)
		if err != nil {
			return st, true, fmt.Errorf("recover from %s: %w", p, err)
		}
		opts.Logger.Info("peer recovery done", "peer", p, "streams", st.Streams, "holdings", st.Holdings,
			"engine_entries", st.Engine, "missing_streams", st.MissingStream, "skipped", st.Skipped,
			"bytes", st.Bytes, "duration", st.Duration)
		return st, true, nil
	}
	opts.Logger.Info("peer recovery: no peer answered; starting empty", "peers", len(peers))
	return st, false, nil
}

// countingReader counts bytes read.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// RestoreDump parses a dump in either form from r and restores it into ix.
func RestoreDump(ix *core.Index, r io.Reader, dyn *Dynamo) (RecoverStats, error) {
	cr := &countingReader{r: r}
	rs := &restoreState{ix: ix, dyn: dyn, dec: json.NewDecoder(bufio.NewReaderSize(cr, 256<<10))}
	err := rs.run()
	rs.st.Bytes = cr.n
	return rs.st, err
}

type restoreState struct {
	ix  *core.Index
	dyn *Dynamo
	dec *json.Decoder
	st  RecoverStats
	cur *core.StreamRestorer
}

func (rs *restoreState) delim(want json.Delim) error {
	t, err := rs.dec.Token()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDumpFormat, err)
	}
	if d, ok := t.(json.Delim); !ok || d != want {
		return fmt.Errorf("%w: want %q, got %v", ErrDumpFormat, want, t)
	}
	return nil
}

func (rs *restoreState) key() (string, error) {
	t, err := rs.dec.Token()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrDumpFormat, err)
	}
	k, ok := t.(string)
	if !ok {
		return "", fmt.Errorf("%w: want a key, got %v", ErrDumpFormat, t)
	}
	return k, nil
}

func (rs *restoreState) skip() error {
	var raw json.RawMessage
	if err := rs.dec.Decode(&raw); err != nil {
		return fmt.Errorf("%w: %w", ErrDumpFormat, err)
	}
	return nil
}

// run reads the root object: the main form starts with "format", anything
// else is the Dynamo form (indexer keys).
func (rs *restoreState) run() error {
	if err := rs.delim('{'); err != nil {
		return err
	}
	main := false
	for rs.dec.More() {
		k, err := rs.key()
		if err != nil {
			return err
		}
		switch {
		case k == "format":
			var f string
			if err := rs.dec.Decode(&f); err != nil || f != "conductor-dump/1" {
				return fmt.Errorf("%w: format %q", ErrDumpFormat, f)
			}
			main = true
		case main && k == "streams":
			if err := rs.mainStreams(); err != nil {
				return err
			}
		case main:
			if err := rs.skip(); err != nil {
				return err
			}
		default:
			if err := rs.dynamoIndexer(k); err != nil {
				return err
			}
		}
	}
	return rs.delim('}')
}

// ---- main form --------------------------------------------------------------

type dumpStreamHead struct {
	InstanceID string  `json:"instance_id"`
	DPRank     int32   `json:"dp_rank"`
	TenantID   string  `json:"tenant_id"`
	ModelName  string  `json:"model_name"`
	LoraName   string  `json:"lora_name"`
	BlockSize  int     `json:"block_size"`
	EventID    *uint64 `json:"event_id"`
}

type dumpEventJSON struct {
	EventType  string      `json:"event_type"`
	TenantID   string      `json:"tenant_id"`
	ModelName  string      `json:"model_name"`
	LoraName   string      `json:"lora_name"`
	BlockSize  int         `json:"block_size"`
	InstanceID *string     `json:"instance_id"`
	BackendID  *string     `json:"backend_id"`
	DPRank     int32       `json:"dp_rank"`
	Medium     string      `json:"medium"`
	SeqHashes  []uint64    `json:"seq_hashes"`
	Copies     uint32      `json:"copies"`
	Entries    [][3]uint64 `json:"entries"`
}

func (rs *restoreState) mainStreams() error {
	if err := rs.delim('['); err != nil {
		return err
	}
	for rs.dec.More() {
		if err := rs.delim('{'); err != nil {
			return err
		}
		rs.cur = nil
		for rs.dec.More() {
			k, err := rs.key()
			if err != nil {
				return err
			}
			switch k {
			case "stream":
				var h dumpStreamHead
				if err := rs.dec.Decode(&h); err != nil {
					return fmt.Errorf("%w: stream: %w", ErrDumpFormat, err)
				}
				info := core.StreamInfo{Reg: core.Registration{InstanceID: h.InstanceID, DPRank: h.DPRank,
					TenantID: h.TenantID, ModelName: h.ModelName, LoraName: h.LoraName, BlockSize: h.BlockSize}}
				if h.EventID != nil {
					info.Seq, info.HasSeq = *h.EventID, true
				}
				rs.begin(&info)
			case "events":
				if err := rs.mainEvents(); err != nil {
					return err
				}
			default:
				if err := rs.skip(); err != nil {
					return err
				}
			}
		}
		if err := rs.delim('}'); err != nil {
			return err
		}
	}
	return rs.delim(']')
}

func (rs *restoreState) begin(info *core.StreamInfo) {
	r, err := rs.ix.RestoreStream(info)
	if err != nil {
		rs.st.MissingStream++
		rs.cur = nil
		return
	}
	rs.st.Streams++
	rs.cur = r
}

func (rs *restoreState) mainEvents() error {
	if err := rs.delim('['); err != nil {
		return err
	}
	var ev dumpEventJSON
	for rs.dec.More() {
		ev = dumpEventJSON{SeqHashes: ev.SeqHashes[:0], Entries: ev.Entries[:0]}
		if err := rs.dec.Decode(&ev); err != nil {
			return fmt.Errorf("%w: event: %w", ErrDumpFormat, err)
		}
		if rs.cur == nil {
			rs.st.Skipped += len(ev.SeqHashes) + len(ev.Entries)
			continue
		}
		ck := core.ContextKey{TenantID: ev.TenantID, ModelName: ev.ModelName, LoraName: ev.LoraName, BlockSize: ev.BlockSize}
		switch ev.EventType {
		case "stored":
			t, err := core.ParseTier(ev.Medium)
			if err != nil {
				rs.st.Skipped += len(ev.SeqHashes)
				continue
			}
			h := core.Holding{Context: ck, Tier: t, Copies: ev.Copies, Rank: ev.DPRank}
			if ev.BackendID != nil {
				h.Shared, h.Name = true, *ev.BackendID
			}
			rs.holdings(&h, ev.SeqHashes)
		case "engine_hashes":
			rs.engine(ck, ev.Entries)
		default:
			rs.st.Skipped++
		}
	}
	return rs.delim(']')
}

func (rs *restoreState) holdings(h *core.Holding, keys []uint64) {
	for _, k := range keys {
		h.Key = k
		if rs.cur.Holding(h) {
			rs.st.Holdings++
		} else {
			rs.st.Skipped++
		}
	}
}

func (rs *restoreState) engine(ck core.ContextKey, entries [][3]uint64) {
	for _, e := range entries {
		if e[2] > 1<<32-1 {
			rs.st.Skipped++
			continue
		}
		if rs.cur.Engine(&core.EngineEntry{Context: ck, Hash: e[0], Key: e[1], Count: uint32(e[2])}) {
			rs.st.Engine++
		} else {
			rs.st.Skipped++
		}
	}
}

// ---- Dynamo form ------------------------------------------------------------

type routerEventJSON struct {
	WorkerID    json.RawMessage `json:"worker_id"`
	StorageTier string          `json:"storage_tier"`
	Event       struct {
		EventID uint64          `json:"event_id"`
		Data    json.RawMessage `json:"data"`
		DPRank  int32           `json:"dp_rank"`
	} `json:"event"`
	Stream *struct {
		InstanceID string `json:"instance_id"`
		DPRank     int32  `json:"dp_rank"`
		HasSeq     bool   `json:"has_seq"`
	} `json:"conductor_stream"`
	Backend *string     `json:"conductor_backend"`
	Engine  [][3]uint64 `json:"conductor_engine_hashes"`
}

type storedData struct {
	Stored *struct {
		Blocks []struct {
			BlockHash  uint64 `json:"block_hash"`
			TokensHash uint64 `json:"tokens_hash"`
		} `json:"blocks"`
	} `json:"stored"`
}

func (rs *restoreState) dynamoIndexer(name string) error {
	i := strings.LastIndexByte(name, ':')
	if i < 0 {
		return fmt.Errorf("%w: indexer key %q is not model:group", ErrDumpFormat, name)
	}
	k := dynKey{model: name[:i], group: name[i+1:]}
	if err := rs.delim('{'); err != nil {
		return err
	}
	bs := 0
	rs.cur = nil
	for rs.dec.More() {
		key, err := rs.key()
		if err != nil {
			return err
		}
		switch key {
		case "block_size":
			if err := rs.dec.Decode(&bs); err != nil || bs <= 0 {
				return fmt.Errorf("%w: %s: block_size", ErrDumpFormat, name)
			}
			if rs.dyn != nil {
				if err := rs.dyn.AddIndexer(k.model, k.group, bs); err != nil {
					return err
				}
			}
		case "events":
			if bs <= 0 {
				return fmt.Errorf("%w: %s: events before block_size", ErrDumpFormat, name)
			}
			if err := rs.routerEvents(dynamoContext(k, bs)); err != nil {
				return err
			}
		case "error":
			if err := rs.skip(); err != nil {
				return err
			}
		default:
			if err := rs.skip(); err != nil {
				return err
			}
		}
	}
	return rs.delim('}')
}

func (rs *restoreState) routerEvents(ck core.ContextKey) error {
	if err := rs.delim('['); err != nil {
		return err
	}
	var ev routerEventJSON
	var data storedData
	for rs.dec.More() {
		ev = routerEventJSON{Engine: ev.Engine[:0]}
		if err := rs.dec.Decode(&ev); err != nil {
			return fmt.Errorf("%w: RouterEvent: %w", ErrDumpFormat, err)
		}
		if ev.Stream != nil {
			info := core.StreamInfo{Reg: core.Registration{InstanceID: ev.Stream.InstanceID, DPRank: ev.Stream.DPRank,
				TenantID: ck.TenantID, ModelName: ck.ModelName, LoraName: ck.LoraName, BlockSize: ck.BlockSize},
				Seq: ev.Event.EventID, HasSeq: ev.Stream.HasSeq}
			rs.begin(&info)
			continue
		}
		if rs.cur == nil {
			// A RouterEvent of a stream without a conductor_stream header
			// (e.g. from a Dynamo process: its tokens_hash is a local block
			// hash, not a conductor prefix key) cannot be attributed.
			rs.st.Skipped++
			continue
		}
		if len(ev.Engine) > 0 {
			rs.engine(ck, ev.Engine)
			continue
		}
		data = storedData{}
		if len(ev.Event.Data) == 0 || ev.Event.Data[0] != '{' {
			rs.st.Skipped++
			continue
		}
		if err := json.Unmarshal(ev.Event.Data, &data); err != nil {
			return fmt.Errorf("%w: RouterEvent data: %w", ErrDumpFormat, err)
		}
		if data.Stored == nil {
			rs.st.Skipped++
			continue
		}
		t, ok := parseDynamoTier(ev.StorageTier)
		if !ok {
			rs.st.Skipped += len(data.Stored.Blocks)
			continue
		}
		h := core.Holding{Context: ck, Tier: t, Rank: ev.Event.DPRank, Copies: 1}
		if ev.Backend != nil {
			h.Shared, h.Name = true, *ev.Backend
		}
		// One block per copy: consecutive repeats of a key add up.
		blocks := data.Stored.Blocks
		for i := 0; i < len(blocks); {
			j := i + 1
			for j < len(blocks) && blocks[j].TokensHash == blocks[i].TokensHash {
				j++
			}
			h.Key, h.Copies = blocks[i].TokensHash, uint32(min(j-i, 1<<16-1))
			if rs.cur.Holding(&h) {
				rs.st.Holdings++
			} else {
				rs.st.Skipped++
			}
			i = j
		}
	}
	return rs.delim(']')
}
