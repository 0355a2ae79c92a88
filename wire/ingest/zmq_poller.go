package ingest

/*
#cgo !windows pkg-config: libzmq
#include <zmq.h>
#include <errno.h>
#include <stddef.h>

// cd_fd returns the socket's ZMQ_FD, or -1.
static int cd_fd(void *s) {
	int fd = -1;
	size_t sz = sizeof fd;
	if (zmq_getsockopt(s, ZMQ_FD, &fd, &sz) != 0) return -1;
	return fd;
}

// cd_pollin sets bit i of *ready for every socket s[i] (i < n, bit i of mask
// set; NULL: skipped) whose ZMQ_EVENTS has ZMQ_POLLIN: what zmq_poll checks
// before it waits. A signal can interrupt the poll libzmq makes on the
// socket's mailbox (EINTR: the Go runtime preempts threads with SIGURG),
// which is tried again. It returns -1 with errno set when a getsockopt fails
// otherwise.
static int cd_pollin(void **s, int n, int mask, int *ready) {
	*ready = 0;
	for (int i = 0; i < n; i++) {
		if (s[i] == NULL || !(mask & (1 << i))) continue;
		int ev = 0, rc;
		size_t sz;
		do {
			sz = sizeof ev;
			rc = zmq_getsockopt(s[i], ZMQ_EVENTS, &ev, &sz);
		} while (rc != 0 && errno == EINTR);
		if (rc != 0) return -1;
		if (ev & ZMQ_POLLIN) *ready |= 1 << i;
	}
	return 0;
}
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"github.com/puzpuzpuz/xsync/v3"
)

// poller waits for every listener of an Ingester at once: one goroutine
// blocked in epoll_wait on the ZMQ_FD of every socket the listeners hold (a
// listener costs no OS thread while it waits; TestZMQThreadsBounded).
//
// # Protocol
//
// libzmq signals a socket's ZMQ_FD (its mailbox's eventfd) when commands
// arrive for it — a message ready to read among them — and reads the fd
// itself whenever the socket processes its commands, in zmq_recv and in
// getsockopt(ZMQ_EVENTS). The fd is therefore edge-like, and the poller
// registers it edge-triggered (EPOLLET): every signal is one event. An
// event carries the listener's id and the socket's position in its wait
// sets (id<<posBits | position); the poller sets the position's bit in the
// listener's fired mask, then sends on its notify channel without blocking
// (a channel of one: signals that arrive while one is pending coalesce).
//
// A listener waits in waitSet.poll, which is zmq_poll's contract narrowed to
// the sockets that may have something: receiver.check holds the positions
// to ask. Each poll first moves the fired mask into check (an atomic swap),
// then asks each socket in check for ZMQ_EVENTS (which processes its
// pending commands) and returns what is readable; a socket found empty
// leaves check, one found readable stays until it is found empty or its
// receive loop ends in EAGAIN (which processed its commands as the check
// does: drainSub). Only when nothing is readable does poll wait on
// notify. A socket out of check was found empty with its commands
// processed, so anything that arrives for it later signals its fd: an
// event, hence its fired bit and a notification, and the next poll asks it.
// A signal before the swap is in the mask the swap takes; one after it sets
// the bit again and notifies, so at worst a notification is spurious and
// the next check finds nothing. Sockets opened or replaced enter check
// (rebuildPollers). Commands from the controller take the notify channel
// only: the controller queues on cmds, then notifies (listener.kick).
//
// Sockets are registered when opened and deregistered before they are
// closed (listener.watch, unwatch), on the listener's goroutine; the
// listener is in the id map from before its goroutine starts until after it
// ended. An event for an fd deregistered meanwhile, or for an id no longer
// in the map, is a spurious notification or none.
type poller struct {
	epfd int
	// stop is an eventfd registered under id 0: writing it ends the loop.
	stop int
	ls   *xsync.MapOf[uint64, *listener]
	done chan struct{}
}

const (
	// pollerEvents is how many events one epoll_wait returns at most.
	pollerEvents = 256
	// epollET is EPOLLET as the event mask's bit (syscall declares it
	// negative).
	epollET = 1 << 31
)

func newPoller() (*poller, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	stop, err := newEventFD()
	if err != nil {
		_ = syscall.Close(epfd)
		return nil, err
	}
	p := &poller{epfd: epfd, stop: stop, ls: xsync.NewMapOf[uint64, *listener](), done: make(chan struct{})}
	if err := p.add(stop, 0); err != nil {
		_ = syscall.Close(stop)
		_ = syscall.Close(epfd)
		return nil, err
	}
	go p.loop()
	return p, nil
}

// add registers fd, edge-triggered, with the event data tag: a listener's
// id<<posBits | the socket's position (0: the stop eventfd).
func (p *poller) add(fd int, tag uint64) error {
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | epollET}
	*(*uint64)(unsafe.Pointer(&ev.Fd)) = tag
	if err := syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("epoll_ctl add fd %d: %w", fd, err)
	}
	return nil
}

// del deregisters fd.
func (p *poller) del(fd int) {
	_ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
}

func (p *poller) loop() {
	defer close(p.done)
	var evs [pollerEvents]syscall.EpollEvent
	for {
		// Events already pending are taken without blocking, in a raw
		// system call that keeps the P; only an empty set waits in a
		// blocking one. After a set, the listeners it woke run on this P
		// before the next wait (Gosched): a blocking wait entered with
		// runnable listeners would hold the P in the system call until the
		// runtime's monitor hands it to another thread.
		n, err := epollPoll(p.epfd, evs[:])
		if err == nil && n == 0 {
			n, err = syscall.EpollWait(p.epfd, evs[:], -1)
		}
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			// Cannot happen with a valid epfd and buffer; do not spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		for i := 0; i < n; i++ {
			tag := *(*uint64)(unsafe.Pointer(&evs[i].Fd))
			if tag == 0 {
				return
			}
			if l, ok := p.ls.Load(tag >> posBits); ok {
				l.fired.Or(1 << (tag & (1<<posBits - 1)))
				l.kick()
			}
		}
		runtime.Gosched()
	}
}

// epollPoll returns the events pending on epfd without waiting (epoll_wait
// with a zero timeout, which never blocks: a raw system call).
func epollPoll(epfd int, evs []syscall.EpollEvent) (int, error) {
	n, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&evs[0])), uintptr(len(evs)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// close ends the loop and releases the descriptors; every listener has
// stopped.
func (p *poller) close() {
	_, _ = syscall.Write(p.stop, binary.NativeEndian.AppendUint64(nil, 1))
	<-p.done
	_ = syscall.Close(p.stop)
	_ = syscall.Close(p.epfd)
}

// newEventFD returns a non-blocking eventfd.
func newEventFD() (int, error) {
	fd, _, errno := syscall.RawSyscall(syscall.SYS_EVENTFD2, 0, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errno != 0 {
		return -1, fmt.Errorf("eventfd: %w", errno)
	}
	return int(fd), nil
}

// socketFD returns s's ZMQ_FD.
func socketFD(s *zsocket) (int, error) {
	fd := int(C.cd_fd(s.h))
	if fd < 0 {
		return -1, fmt.Errorf("ZMQ_FD: %w", zmqErrno(syscall.EINVAL))
	}
	return fd, nil
}

// waitSet is the sockets one of a listener's waits covers, by their
// positions pollMon, pollSub and pollDealer (pollWake is the listener's
// command queue). It is owned by the listener's goroutine.
type waitSet struct {
	socks   [4]unsafe.Pointer // libzmq handles (C memory); nil: absent
	n       int               // 0: nothing to wait on (no SUB)
	present uint32            // bit i: socks[i] is set
	rdy     C.int
}

// Positions in a listener's wait sets (see rebuildPollers).
const (
	pollWake = iota
	pollMon
	pollSub
	pollDealer
)

// posBits is the low bits of an epoll tag that hold the socket's position
// (poller.add); the listener's id is above them.
const posBits = 2

// reset empties the set; set adds s at position i.
func (w *waitSet) reset() { *w = waitSet{} }

func (w *waitSet) set(i int, s *zsocket) {
	w.socks[i] = s.h
	w.n = max(w.n, i+1)
	w.present |= 1 << i
}

// poll waits up to timeout (negative: until something is ready) for a
// command for l or a readable socket of w, and returns how many are ready
// (0 on timeout); ready tells which. See poller for why this cannot miss a
// message.
func (w *waitSet) poll(l *listener, timeout time.Duration) (int, error) {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	rx := &l.rx
	for {
		rx.check |= l.fired.Swap(0)
		w.rdy = 0
		if ask := rx.check & w.present; ask != 0 {
			if rc, err := C.cd_pollin(&w.socks[0], C.int(w.n), C.int(ask), &w.rdy); rc < 0 {
				return 0, zerr(err)
			}
			rx.check &^= ask &^ uint32(w.rdy) // found empty: asked again once fired
		}
		if len(l.cmds) > 0 || l.expiryWake.Swap(false) {
			w.rdy |= 1 << pollWake
		}
		if w.rdy != 0 {
			n := 0
			for r := w.rdy; r != 0; r &= r - 1 {
				n++
			}
			return n, nil
		}
		if timeout == 0 {
			return 0, nil
		}
		if timeout < 0 {
			<-l.notify
			continue
		}
		d := time.Until(deadline)
		if d <= 0 {
			return 0, nil
		}
		if !l.sleep(d) {
			return 0, nil
		}
	}
}

// ready reports whether position i was ready at the last poll.
func (w *waitSet) ready(i int) bool { return w.rdy&(1<<i) != 0 }

// sleep waits for a notification (true) or d (false), on the listener's one
// timer.
func (l *listener) sleep(d time.Duration) bool {
	t := l.rx.timer
	if t == nil {
		t = time.NewTimer(d)
		l.rx.timer = t
	} else {
		t.Reset(d)
	}
	select {
	case <-l.notify:
		t.Stop()
		return true
	case <-t.C:
		return false
	}
}

// kick notifies the listener without blocking (see poller).
func (l *listener) kick() {
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

// watch registers s, at position pos of the wait sets, with the Ingester's
// poller for this listener.
func (l *listener) watch(s *zsocket, pos int) error {
	fd, err := socketFD(s)
	if err != nil {
		return err
	}
	return l.g.poller.add(fd, l.id<<posBits|uint64(pos))
}

// unwatch deregisters s (before it is closed).
func (l *listener) unwatch(s *zsocket) {
	if s == nil || s.h == nil {
		return
	}
	if fd, err := socketFD(s); err == nil {
		l.g.poller.del(fd)
	}
}
