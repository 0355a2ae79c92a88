package sim

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/seed-c7a81618/conductor/bench"
)

// Query is one prompt in one context (tenant "default", no LoRA, no salt).
type Query struct {
	Model     string
	BlockSize int
	Tokens    []int32
}

// Client asks one indexer surface for tiered prefix hits. A Client is used by
// one goroutine; make one per worker with a ClientFactory. New surfaces (the
// Python RPC surface, Dynamo's) plug in by implementing it and adding a case
// to NewClient.
type Client interface {
	// Query fills a with the answer to q: one row per instance that has a
	// registered rank, the cumulative tier boundaries per rank. Any transport
	// error, non-2xx status or malformed / inconsistent answer is an error.
	Query(q *Query, a *Answer) error
	Close()
}

// ClientFactory makes a Client.
type ClientFactory func() (Client, error)

// Surfaces NewClient knows.
var Surfaces = []string{"msgpack", "json", "rpc", "dynamo"}

// NewClient returns a factory for a surface of the indexer at addr (host:port):
//
//	msgpack  Mooncake indexer API, msgpack dialect (the C++ conductor's), token_ids as an int32 LE bin
//	json     Mooncake indexer API, JSON dialect (RFC #1403)
//	rpc      the Python ConductorClient's RPC surface (POST /rpc/Query on the
//	         rpc_server_port; addr is that port), msgpack request with an
//	         int32 LE token bin as the Python client sends it, JSON answer
//	         {"ret", "hits"}
//	dynamo   the Dynamo standalone indexer's POST /query (its port; addr is
//	         that port): per instance gpu, cpu, disk and the device boundary
//	         per rank, so answers are Coarse; the group registers through the
//	         Dynamo port (numeric instance ids, xxh3 profile)
//
// Both compare the cumulative lowercase fields (device, cpu_local, cpu_share,
// disk, dp, rank_matches, longest_matched), which every Mooncake-compatible
// indexer reports with the same meaning.
func NewClient(surface, addr string, timeout time.Duration) (ClientFactory, error) {
	switch surface {
	case "msgpack":
		return func() (Client, error) { return &mooncakeClient{h: bench.NewConn(addr, timeout)}, nil }, nil
	case "json":
		return func() (Client, error) { return &mooncakeClient{h: bench.NewConn(addr, timeout), json: true}, nil }, nil
	case "rpc":
		return func() (Client, error) { return &rpcClient{h: bench.NewConn(addr, timeout)}, nil }, nil
	case "dynamo":
		return func() (Client, error) { return &dynamoClient{h: bench.NewConn(addr, timeout)}, nil }, nil
	}
	return nil, fmt.Errorf("sim: unknown query surface %q (want %s)", surface, strings.Join(Surfaces, ", "))
}

type mooncakeClient struct {
	h    *bench.Conn
	json bool
	body []byte
}

func (c *mooncakeClient) Close() { c.h.Close() }

func (c *mooncakeClient) Query(q *Query, a *Answer) error {
	a.Reset()
	if c.json {
		c.body = appendJSONQuery(c.body[:0], q)
		resp, err := c.h.Post("/query", "application/json", c.body)
		if err != nil {
			return err
		}
		return parseJSONAnswer(resp, a)
	}
	c.body = appendMsgpackQuery(c.body[:0], q, "model")
	resp, err := c.h.Post("/query", "application/msgpack", c.body)
	if err != nil {
		return err
	}
	return parseMsgpackAnswer(resp, a)
}

// dynamoClient queries the Dynamo dialect's /query.
type dynamoClient struct {
	h    *bench.Conn
	body []byte
}

func (c *dynamoClient) Close() { c.h.Close() }

func (c *dynamoClient) Query(q *Query, a *Answer) error {
	a.Reset()
	c.body = append(c.body[:0], `{"model_name":`...)
	c.body = strconv.AppendQuote(c.body, q.Model)
	c.body = append(c.body, `,"token_ids":[`...)
	for i, t := range q.Tokens {
		if i > 0 {
			c.body = append(c.body, ',')
		}
		c.body = strconv.AppendInt(c.body, int64(t), 10)
	}
	c.body = append(c.body, "]}"...)
	resp, err := c.h.Post("/query", "application/json", c.body)
	if err != nil {
		return err
	}
	return parseDynamoAnswer(resp, a)
}

// parseDynamoAnswer reads {"instances": {id: {longest_matched, gpu, dp, cpu,
// disk}}} into a Coarse answer: device = gpu, cpu_local = cpu, cpu_share =
// disk = disk (Dynamo folds the shared tier into disk), ranks with their
// device boundary only. Rows with nothing matched are dropped, as the
// Mooncake dialects report every registered instance but the truth compares
// by instance.
func parseDynamoAnswer(b []byte, a *Answer) error {
	var top struct {
		Instances map[string]struct {
			Longest int64            `json:"longest_matched"`
			GPU     int64            `json:"gpu"`
			CPU     int64            `json:"cpu"`
			Disk    int64            `json:"disk"`
			DP      map[string]int64 `json:"dp"`
		} `json:"instances"`
	}
	if err := json.Unmarshal(b, &top); err != nil {
		return fmt.Errorf("sim: dynamo answer: %w", err)
	}
	a.Coarse = true
	for id, r := range top.Instances {
		if !(r.GPU <= r.CPU && r.CPU <= r.Disk) || r.Longest != max(r.GPU, r.CPU, r.Disk) {
			return fmt.Errorf("sim: dynamo answer: instance %s: gpu %d cpu %d disk %d longest %d not cumulative", id, r.GPU, r.CPU, r.Disk, r.Longest)
		}
		row := Row{Instance: id, Longest: r.Longest, Tiers: [numTiers]int64{r.GPU, r.CPU, r.Disk, r.Disk}}
		for rk, dev := range r.DP {
			n, err := strconv.ParseInt(rk, 10, 32)
			if err != nil {
				return fmt.Errorf("sim: dynamo answer: rank %q: %w", rk, err)
			}
			rr := RankRow{Rank: int32(n)}
			rr.Tiers[tierDevice] = dev
			row.Ranks = append(row.Ranks, rr)
		}
		slices.SortFunc(row.Ranks, func(x, y RankRow) int { return int(x.Rank) - int(y.Rank) })
		a.Rows = append(a.Rows, row)
	}
	sortRows(a)
	return nil
}

// rpcClient queries the Python client's RPC surface.
type rpcClient struct {
	h    *bench.Conn
	body []byte
}

func (c *rpcClient) Close() { c.h.Close() }

func (c *rpcClient) Query(q *Query, a *Answer) error {
	a.Reset()
	c.body = appendMsgpackQuery(c.body[:0], q, "model_name") // the Python argument name
	resp, err := c.h.Post("/rpc/Query", "application/msgpack", c.body)
	if err != nil {
		return err
	}
	return parseRPCAnswer(resp, a)
}

// parseRPCAnswer reads {"ret": 0, "hits": {id: row}}; a non-zero ret is an
// error carrying the server's message.
func parseRPCAnswer(b []byte, a *Answer) error {
	var top struct {
		Ret   *int               `json:"ret"`
		Error string             `json:"error"`
		Hits  map[string]jsonRow `json:"hits"`
	}
	if err := json.Unmarshal(b, &top); err != nil {
		return fmt.Errorf("sim: rpc answer: %w", err)
	}
	if top.Ret == nil || *top.Ret != 0 {
		return fmt.Errorf("sim: rpc answer: ret %v: %s", top.Ret, top.Error)
	}
	wrapped, err := json.Marshal(map[string]map[string]jsonRow{"default": top.Hits})
	if err != nil {
		return err
	}
	return parseJSONAnswer(wrapped, a)
}

// appendMsgpackQuery is a msgpack query body with the token ids as an int32
// LE bin; modelKey is "model" (Mooncake) or "model_name" (the RPC surface).
func appendMsgpackQuery(dst []byte, q *Query, modelKey string) []byte {
	dst = msgp.AppendMapHeader(dst, 3)
	dst = msgp.AppendString(dst, modelKey)
	dst = msgp.AppendString(dst, q.Model)
	dst = msgp.AppendString(dst, "block_size")
	dst = msgp.AppendInt(dst, q.BlockSize)
	dst = msgp.AppendString(dst, "token_ids")
	dst = msgp.AppendBytesHeader(dst, uint32(4*len(q.Tokens)))
	for _, t := range q.Tokens {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(t))
	}
	return dst
}

func appendJSONQuery(dst []byte, q *Query) []byte {
	dst = append(dst, `{"model":`...)
	dst = strconv.AppendQuote(dst, q.Model)
	dst = append(dst, `,"block_size":`...)
	dst = strconv.AppendInt(dst, int64(q.BlockSize), 10)
	dst = append(dst, `,"token_ids":[`...)
	for i, t := range q.Tokens {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(t), 10)
	}
	return append(dst, "]}"...)
}

// ParseAnswer decodes a /query response body of a surface ("msgpack" or
// "json") into a.
func ParseAnswer(surface string, body []byte, a *Answer) error {
	a.Reset()
	switch surface {
	case "msgpack":
		return parseMsgpackAnswer(body, a)
	case "json":
		return parseJSONAnswer(body, a)
	}
	return fmt.Errorf("sim: unknown query surface %q", surface)
}

// AppendMsgpackAnswer encodes a as the msgpack dialect's /query response
// (the reference encoder for tests and fuzzing of ParseAnswer).
func AppendMsgpackAnswer(dst []byte, a *Answer) []byte {
	dst = msgp.AppendMapHeader(dst, 1)
	dst = msgp.AppendString(dst, "instances")
	dst = msgp.AppendMapHeader(dst, uint32(len(a.Rows)))
	for _, r := range a.Rows {
		dst = msgp.AppendString(dst, r.Instance)
		dst = msgp.AppendMapHeader(dst, 7)
		dst = msgp.AppendString(dst, "longest_matched")
		dst = msgp.AppendInt64(dst, r.Longest)
		dst = msgp.AppendString(dst, "dp")
		dst = msgp.AppendMapHeader(dst, uint32(len(r.Ranks)))
		for _, rr := range r.Ranks {
			dst = msgp.AppendString(dst, strconv.Itoa(int(rr.Rank)))
			dst = msgp.AppendInt64(dst, rr.Tiers[tierDevice])
		}
		dst = msgp.AppendString(dst, "rank_matches")
		dst = msgp.AppendMapHeader(dst, uint32(len(r.Ranks)))
		for _, rr := range r.Ranks {
			dst = msgp.AppendString(dst, strconv.Itoa(int(rr.Rank)))
			dst = msgp.AppendMapHeader(dst, numTiers)
			for t, n := range TierNames {
				dst = msgp.AppendString(dst, n)
				dst = msgp.AppendInt64(dst, rr.Tiers[t])
			}
		}
		for t, n := range TierNames {
			dst = msgp.AppendString(dst, n)
			dst = msgp.AppendInt64(dst, r.Tiers[t])
		}
	}
	return dst
}

// tierKey maps a cumulative field name to its tier, or -1.
func tierKey(k string) int {
	for i, n := range TierNames {
		if k == n {
			return i
		}
	}
	return -1
}

// finishRow sorts ranks and checks dp against rank_matches: the same ranks,
// each once, with dp's value the rank's device count.
func finishRow(r *Row, dp map[int32]int64) error {
	slices.SortFunc(r.Ranks, func(x, y RankRow) int { return int(x.Rank) - int(y.Rank) })
	for i := 1; i < len(r.Ranks); i++ {
		if r.Ranks[i].Rank == r.Ranks[i-1].Rank {
			return fmt.Errorf("sim: instance %s: rank %d twice in rank_matches", r.Instance, r.Ranks[i].Rank)
		}
	}
	if len(dp) != len(r.Ranks) {
		return fmt.Errorf("sim: instance %s: dp has %d ranks, rank_matches %d", r.Instance, len(dp), len(r.Ranks))
	}
	for _, rr := range r.Ranks {
		if v, ok := dp[rr.Rank]; !ok || v != rr.Tiers[tierDevice] {
			return fmt.Errorf("sim: instance %s: dp[%d]=%d, rank_matches device %d", r.Instance, rr.Rank, v, rr.Tiers[tierDevice])
		}
	}
	return nil
}

func sortRows(a *Answer) {
	slices.SortFunc(a.Rows, func(x, y Row) int { return strings.Compare(x.Instance, y.Instance) })
}

// parseMsgpackAnswer reads {"instances": {id: {longest_matched, dp,
// rank_matches, device, cpu_local, cpu_share, disk}}}; unknown keys are skipped.
func parseMsgpackAnswer(b []byte, a *Answer) (err error) {
	fail := func(what string, err error) error { return fmt.Errorf("sim: msgpack answer: %s: %w", what, err) }
	n, b, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return fail("top", err)
	}
	for ; n > 0; n-- {
		var k []byte
		if k, b, err = msgp.ReadStringZC(b); err != nil {
			return fail("top key", err)
		}
		if string(k) != "instances" {
			if b, err = msgp.Skip(b); err != nil {
				return fail(string(k), err)
			}
			continue
		}
		var rows uint32
		if rows, b, err = msgp.ReadMapHeaderBytes(b); err != nil {
			return fail("instances", err)
		}
		for ; rows > 0; rows-- {
			var id string
			if id, b, err = msgp.ReadStringBytes(b); err != nil {
				return fail("instance id", err)
			}
			row := Row{Instance: id}
			dp := map[int32]int64{}
			if b, err = readMsgpackRow(b, &row, dp); err != nil {
				return fail(id, err)
			}
			if err := finishRow(&row, dp); err != nil {
				return err
			}
			a.Rows = append(a.Rows, row)
		}
	}
	if len(b) != 0 {
		return fail("trailing bytes", msgp.ErrShortBytes)
	}
	sortRows(a)
	return nil
}

func readMsgpackRow(b []byte, row *Row, dp map[int32]int64) ([]byte, error) {
	n, b, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return b, err
	}
	for ; n > 0; n-- {
		var k []byte
		if k, b, err = msgp.ReadStringZC(b); err != nil {
			return b, err
		}
		switch key := string(k); {
		case key == "longest_matched":
			row.Longest, b, err = msgp.ReadInt64Bytes(b)
		case tierKey(key) >= 0:
			row.Tiers[tierKey(key)], b, err = msgp.ReadInt64Bytes(b)
		case key == "dp" || key == "rank_matches":
			var m uint32
			if m, b, err = msgp.ReadMapHeaderBytes(b); err != nil {
				return b, err
			}
			for ; m > 0 && err == nil; m-- {
				var rk string
				if rk, b, err = msgp.ReadStringBytes(b); err != nil {
					return b, err
				}
				r, perr := strconv.ParseInt(rk, 10, 32)
				if perr != nil {
					return b, perr
				}
				if key == "dp" {
					dp[int32(r)], b, err = msgp.ReadInt64Bytes(b)
					continue
				}
				rr := RankRow{Rank: int32(r)}
				var fields uint32
				if fields, b, err = msgp.ReadMapHeaderBytes(b); err != nil {
					return b, err
				}
				for ; fields > 0 && err == nil; fields-- {
					var fk []byte
					if fk, b, err = msgp.ReadStringZC(b); err != nil {
						return b, err
					}
					if t := tierKey(string(fk)); t >= 0 {
						rr.Tiers[t], b, err = msgp.ReadInt64Bytes(b)
					} else {
						b, err = msgp.Skip(b)
					}
				}
				row.Ranks = append(row.Ranks, rr)
			}
		default:
			b, err = msgp.Skip(b)
		}
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

type jsonRow struct {
	Longest     int64                       `json:"longest_matched"`
	Device      int64                       `json:"device"`
	CPULocal    int64                       `json:"cpu_local"`
	CPUShare    int64                       `json:"cpu_share"`
	Disk        int64                       `json:"disk"`
	DP          map[string]int64            `json:"dp"`
	RankMatches map[string]map[string]int64 `json:"rank_matches"`
}

// parseJSONAnswer reads {tenant: {id: {...}}} (or {}), using only the
// cumulative lowercase fields: the seed API's GPU / CPU / DISK / DP keys are
// being redefined and are not compared. The per-rank device boundary comes
// from rank_matches (JSON's DP is the seed's per-rank longest).
func parseJSONAnswer(b []byte, a *Answer) error {
	var top map[string]map[string]jsonRow
	if err := json.Unmarshal(b, &top); err != nil {
		return fmt.Errorf("sim: json answer: %w", err)
	}
	if len(top) > 1 {
		return fmt.Errorf("sim: json answer: %d tenants, want at most 1", len(top))
	}
	for _, rows := range top {
		for id, jr := range rows {
			row := Row{Instance: id, Longest: jr.Longest, Tiers: [numTiers]int64{jr.Device, jr.CPULocal, jr.CPUShare, jr.Disk}}
			dp := map[int32]int64{}
			for rk, m := range jr.RankMatches {
				r, err := strconv.ParseInt(rk, 10, 32)
				if err != nil {
					return fmt.Errorf("sim: json answer: rank %q: %w", rk, err)
				}
				rr := RankRow{Rank: int32(r)}
				for t, n := range TierNames {
					rr.Tiers[t] = m[n]
				}
				row.Ranks = append(row.Ranks, rr)
				dp[int32(r)] = rr.Tiers[tierDevice]
			}
			if err := finishRow(&row, dp); err != nil {
				return err
			}
			a.Rows = append(a.Rows, row)
		}
	}
	sortRows(a)
	return nil
}
