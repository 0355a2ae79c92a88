package wire

import (
	"fmt"
	"strings"
)

// Dialect selects the payload grammar of a publisher. The zero value is invalid so a
// forgotten registration field fails loudly instead of decoding as some default.
type Dialect uint8

const (
	// DialectVLLM: vLLM KVEventBatch, array-era and map-era events.
	DialectVLLM Dialect = iota + 1
	// DialectSGLang: SGLang KVEventBatch, array, array+metadata and map-era events.
	DialectSGLang
	// DialectMooncake: Mooncake store master, RFC #1527 maps in `[ts_ms, events, dp]`.
	DialectMooncake
	// DialectStandard: RFC #1527 standardized events (msgpack; JSON via DecodeStandardJSON).
	DialectStandard
)

// String returns the publisher type name ParseDialect accepts.
func (d Dialect) String() string {
	switch d {
	case DialectVLLM:
		return "vLLM"
	case DialectSGLang:
		return "SGLang"
	case DialectMooncake:
		return "Mooncake"
	case DialectStandard:
		return "standard"
	}
	return "unknown"
}

// ParseDialect maps a /register publisher type to its Dialect. The names are the
// seed's ("vLLM", "SGLang", "Mooncake") plus "standard" for RFC #1527 publishers;
// they match case-insensitively because clients in the wild send "vllm" and "sglang"
// and nothing is gained by rejecting them.
func ParseDialect(publisherType string) (Dialect, error) {
	for d := DialectVLLM; d <= DialectStandard; d++ {
		if strings.EqualFold(publisherType, d.String()) {
			return d, nil
		}
	}
	return 0, fmt.Errorf("publisher type %q: %w", publisherType, ErrUnknownDialect)
}
