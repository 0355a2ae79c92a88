package ingest

/*
#cgo !windows pkg-config: libzmq
#include <zmq.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define CD_MAXF 5

// cd_rx holds the frames of one received message between cd_recv and cd_copy.
typedef struct {
	zmq_msg_t msg[CD_MAXF];
	int kept;
} cd_rx;

static void cd_release(cd_rx *rx) {
	for (int i = 0; i < rx->kept; i++) zmq_msg_close(&rx->msg[i]);
	rx->kept = 0;
}

// cd_copy copies the kept frames back to back into buf and releases them.
static void cd_copy(cd_rx *rx, char *buf) {
	for (int i = 0; i < rx->kept; i++) {
		size_t n = zmq_msg_size(&rx->msg[i]);
		if (n > 0) memcpy(buf, zmq_msg_data(&rx->msg[i]), n);
		buf += n;
		zmq_msg_close(&rx->msg[i]);
	}
	rx->kept = 0;
}

// cd_recv receives one whole multipart message from s (flags apply to the first
// frame; the others are already there, multipart delivery being atomic). The first
// CD_MAXF frames are kept, later ones received and dropped. lens gets the kept
// frames' sizes, *nframes the number of frames. When the kept frames fit in cap
// bytes they are copied to buf and released: returns 0. Otherwise they stay in rx
// for cd_copy: returns 1. On failure returns -1 with errno set (EAGAIN: nothing to
// receive) and nothing is kept.
static int cd_recv(void *s, cd_rx *rx, char *buf, size_t cap, size_t *lens, int *nframes, int flags) {
	size_t total = 0;
	int n = 0, more = 1;
	rx->kept = 0;
	while (more) {
		zmq_msg_t tmp;
		zmq_msg_t *m = n < CD_MAXF ? &rx->msg[n] : &tmp;
		zmq_msg_init(m);
		int rc;
		do {
			rc = zmq_msg_recv(m, s, n == 0 ? flags : 0);
		} while (rc < 0 && errno == EINTR);
		if (rc < 0) {
			int e = errno;
			zmq_msg_close(m);
			cd_release(rx);
			errno = e;
			return -1;
		}
		more = zmq_msg_more(m);
		if (n < CD_MAXF) {
			lens[n] = zmq_msg_size(m);
			total += lens[n];
			rx->kept = n + 1;
		} else {
			zmq_msg_close(m);
		}
		n++;
	}
	*nframes = n;
	if (total > cap) return 1;
	cd_copy(rx, buf);
	return 0;
}

// cd_copy_small copies the kept frames of at most small bytes back to back
// into buf, sets big (bit i) for each larger frame, which it skips, and
// releases them all.
static void cd_copy_small(cd_rx *rx, char *buf, size_t small, int *big) {
	*big = 0;
	for (int i = 0; i < rx->kept; i++) {
		size_t n = zmq_msg_size(&rx->msg[i]);
		if (n <= small) {
			if (n > 0) memcpy(buf, zmq_msg_data(&rx->msg[i]), n);
			buf += n;
		} else {
			*big |= 1 << i;
		}
		zmq_msg_close(&rx->msg[i]);
	}
	rx->kept = 0;
}

*/
import "C"

import (
	"unsafe"
)

// frameReader receives whole multipart messages in one cgo call each, into a
// reused buffer: the receive loop's hot path allocates nothing per message.
// pebbe/zmq4's RecvBytes makes five cgo calls and one allocation per frame, plus a
// getsockopt per frame for RCVMORE, which cost more than decoding the payload
// (measured end to end: BENCHMARKS.md, "ingest: receive path").
//
// The frames read returns alias the reader's buffer: they are valid until the
// next read or free. A frameReader belongs to the goroutine owning the socket.
type frameReader struct {
	rx     *C.cd_rx // C memory: holds zmq_msg_t between cd_recv and cd_copy
	buf    []byte
	lens   [maxKeptFrames]C.size_t
	nf     C.int // frame count of the last message (a field: a local would escape)
	frames [][]byte
	init   int // the buffer's initial size
	// max refuses messages whose kept frames exceed it with ErrMessageTooBig,
	// before they are copied (so the buffer never grows for them). 0: no limit.
	max int
	// size is the total of the kept frames of the last message read, refused
	// or not, and last the size of its last kept frame (a message's payload).
	size, last int
	// elided has bit i set when frame i of the last message read was
	// refused with ErrMessageTooBig and was larger than smallFrame: it is not
	// copied, and read returns elidedFrame in its place.
	elided int
	small  [maxKeptFrames * smallFrame]byte
}

// smallFrame is the largest frame of a refused message that read still
// copies, so that the caller can read the sequence (8 bytes) and topic of a
// message it drops.
const smallFrame = 256

// elidedFrame stands for a frame read did not copy (frameReader.elided): it
// is not empty, so that a replay reply whose payload was elided does not
// read as the end marker.
var elidedFrame = []byte{0}

const (
	// initialFrameBuf is small: a listener that never receives (a publisher
	// that is down) should cost little; the buffer grows to the messages seen.
	initialFrameBuf = 4 << 10
	// monitorFrameBuf holds a monitor event (6 bytes and an endpoint).
	monitorFrameBuf = 256
	// maxKeptFrameBuf: a buffer grown past this for one huge message is dropped
	// at the next read, so one outlier does not pin its size per listener.
	maxKeptFrameBuf = 4 << 20
)

// newFrameReader returns a reader whose buffer starts at initial bytes
// (initialFrameBuf for live and replay messages, monitorFrameBuf for monitor
// events).
func newFrameReader(initial int) *frameReader {
	return &frameReader{
		rx:     (*C.cd_rx)(C.calloc(1, C.sizeof_cd_rx)),
		buf:    make([]byte, initial),
		init:   initial,
		frames: make([][]byte, 0, maxKeptFrames),
	}
}

// free releases the C state. The reader must not be used afterwards.
func (r *frameReader) free() {
	if r.rx != nil {
		C.cd_release(r.rx)
		C.free(unsafe.Pointer(r.rx))
		r.rx = nil
	}
}

// read receives one whole message from s without blocking. Frames beyond
// maxKeptFrames are received and dropped (the caller then sees maxKeptFrames
// frames and refuses the message), so the stream never desynchronises. An empty
// socket returns an error for which isEAGAIN is true. A message whose kept
// frames exceed max returns ErrMessageTooBig with its frames of at most
// smallFrame bytes (topic, sequence) and elidedFrame for each larger one
// (see elided), valid until the next read: the caller can still place the
// message in its stream.
func (r *frameReader) read(s *zsocket) ([][]byte, error) {
	if len(r.buf) > maxKeptFrameBuf {
		r.buf = make([]byte, r.init) // the previous frames are no longer in use
	}
	rc, err := C.cd_recv(s.h, r.rx, (*C.char)(unsafe.Pointer(&r.buf[0])), C.size_t(len(r.buf)),
		&r.lens[0], &r.nf, C.int(zDONTWAIT))
	if rc < 0 {
		return nil, zerr(err)
	}
	kept := min(int(r.nf), maxKeptFrames)
	total := 0
	for i := 0; i < kept; i++ {
		total += int(r.lens[i])
	}
	r.size, r.elided = total, 0
	r.last = 0
	if kept > 0 {
		r.last = int(r.lens[kept-1])
	}
	if r.max > 0 && total > r.max {
		return r.refuse(rc, kept), ErrMessageTooBig
	}
	if rc == 1 { // did not fit: grow (next power of two) and copy
		n := len(r.buf)
		for n < total {
			n *= 2
		}
		r.buf = make([]byte, n)
		C.cd_copy(r.rx, (*C.char)(unsafe.Pointer(&r.buf[0])))
	}
	r.frames = r.frames[:0]
	off := 0
	for i := 0; i < kept; i++ {
		n := int(r.lens[i])
		r.frames = append(r.frames, r.buf[off:off+n:off+n])
		off += n
	}
	return r.frames, nil
}

// refusal describes the last message read, refused with ErrMessageTooBig.
func (r *frameReader) refusal() refusal { return refusal{size: r.size, payload: r.last} }

// refuse returns the frames of a message above max: those of at most
// smallFrame bytes copied into r.small, elidedFrame for the others. rc is
// cd_recv's result (1: the frames are still held in r.rx).
func (r *frameReader) refuse(rc C.int, kept int) [][]byte {
	small := r.buf
	if rc == 1 {
		var big C.int
		C.cd_copy_small(r.rx, (*C.char)(unsafe.Pointer(&r.small[0])), smallFrame, &big)
		r.elided, small = int(big), r.small[:]
	} else {
		for i := 0; i < kept; i++ { // copied already: elide by size alike
			if int(r.lens[i]) > smallFrame {
				r.elided |= 1 << i
			}
		}
	}
	r.frames = r.frames[:0]
	off := 0
	for i := 0; i < kept; i++ {
		n := int(r.lens[i])
		if r.elided&(1<<i) != 0 {
			r.frames = append(r.frames, elidedFrame)
			if rc == 0 {
				off += n
			}
			continue
		}
		r.frames = append(r.frames, small[off:off+n:off+n])
		off += n
	}
	return r.frames
}
