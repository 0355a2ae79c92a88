package wire

import (
	"encoding/binary"
	"fmt"
	"math"
)

// ZMQ multipart framing of KV-event publishers (vLLM, SGLang and the Mooncake master
// share it), as pure functions over frames so the transport only moves bytes:
//
//	live (SUB):          [topic, seq (8 bytes BE), payload]
//	replay request:      [""   , start_seq (8 bytes BE)]          (DEALER side)
//	replay reply:        ["", seq, payload]          vLLM before PR #45177, SGLang
//	                     ["", topic, seq, payload]   vLLM after PR #45177
//	replay end:          the same shapes with an empty payload and seq 2^64-1
//
// Returned slices alias the frames.

// ReplayEndSeq is the sequence number publishers put on the end-of-replay marker
// (-1 as a signed 64-bit value).
const ReplayEndSeq = math.MaxUint64

// ParseLive splits a live PUB message into topic, sequence and payload. It must have
// exactly 3 frames and an 8-byte big-endian sequence; the topic may be empty and is
// returned for logging only (the registration, not the topic, selects the dialect).
func ParseLive(frames [][]byte) (topic []byte, seq uint64, payload []byte, err error) {
	if len(frames) != 3 {
		return nil, 0, nil, fmt.Errorf("live message has %d frames, want 3: %w", len(frames), ErrFrameCount)
	}
	if len(frames[1]) != 8 {
		return nil, 0, nil, fmt.Errorf("frame 1 has %d bytes: %w", len(frames[1]), ErrSeqLength)
	}
	return frames[0], binary.BigEndian.Uint64(frames[1]), frames[2], nil
}

// AppendReplayRequest appends the frames a DEALER socket sends to ask a publisher's
// ROUTER to replay from startSeq: the empty delimiter frame the ROUTER expects after
// the identity it adds (without it vLLM drops the request silently), then the
// sequence as 8 bytes big-endian.
func AppendReplayRequest(dst [][]byte, startSeq uint64) [][]byte {
	return append(dst, []byte{}, binary.BigEndian.AppendUint64(make([]byte, 0, 8), startSeq))
}

// ParseReplayReply parses one reply to a replay request as a DEALER receives it:
// ["", seq, payload] or ["", topic, seq, payload]. end reports the end-of-replay
// marker, recognised by its empty last frame (the rule that holds for both
// generations) or by seq ReplayEndSeq, which no real batch carries.
func ParseReplayReply(frames [][]byte) (seq uint64, payload []byte, end bool, err error) {
	if len(frames) != 3 && len(frames) != 4 {
		return 0, nil, false, fmt.Errorf("replay reply has %d frames, want 3 or 4: %w", len(frames), ErrFrameCount)
	}
	if len(frames[0]) != 0 {
		return 0, nil, false, fmt.Errorf("frame 0 has %d bytes: %w", len(frames[0]), ErrNoDelimiter)
	}
	s := frames[len(frames)-2]
	if len(s) != 8 {
		return 0, nil, false, fmt.Errorf("frame %d has %d bytes: %w", len(frames)-2, len(s), ErrSeqLength)
	}
	seq, payload = binary.BigEndian.Uint64(s), frames[len(frames)-1]
	return seq, payload, len(payload) == 0 || seq == ReplayEndSeq, nil
}
